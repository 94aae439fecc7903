"""How well the approximate backends reproduce exact softmax attention.

Error of a backend on inputs q, k, v (B = 1, H heads, N tokens, D = Dv), all float64:

    err = ‖out − ref‖_F / ‖ref‖_F,   ref = softmax(q kᵀ / √D) v   (or exact ``polynomial``)

with q, k ~ N(0, σ²) (σ = "input scale"; softmax's logits then have std σ²) and v ~ N(0, 1);
the softmax reference is ``attention.naive.naive_softmax``.
Each point is ``draws`` draws: draw i uses inputs from seed i and redraws the backend's random
features (``redraw_features``) from a generator seeded 10_000 + i, so the spread covers both the
features and the inputs. Deterministic backends vary only through the inputs.

Experiments (``--experiments``):

* ``performer``: error vs m (num_features) for positive / hyperbolic / trigonometric kernels,
  orthogonal vs i.i.d. projections.
* ``scale``: error vs σ for Performer, linear (elu+1), exact polynomial and PolySketch.
* ``sketch``: PolySketch (degree 4) error vs its size r, against softmax and against the exact
  degree-4 polynomial attention it estimates.
* ``degree``: polynomial exact attention vs softmax for p = 2 … 16: the power kernel ``d^p`` and
  the truncated exponential ``Σ_{i≤p} d^i / i!`` (the learned polynomial at initialisation).
"""

from __future__ import annotations

import logging
import statistics
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attn_lightning.attention.naive import naive_softmax
from lab.benchmarks.specs import BackendSpec, parse_backend

log = logging.getLogger(__name__)

EXPERIMENTS = ("performer", "scale", "sketch", "degree")
PERFORMER_KERNELS = ("positive", "hyperbolic", "trigonometric")
PROJECTIONS = ("orthogonal", "iid")
SCALE_BACKENDS = (
    "performer:num_features=256",
    "performer:num_features=256,kernel=hyperbolic",
    "linear",
    "polynomial",
    "polysketch:sketch_size=32",
    "mean",  # uniform weights: the error any method gets for free where softmax is flat
)


@dataclass
class ApproxRow:
    """Summary of ``draws`` relative errors of ``backend`` against ``reference`` at x.

    ``series`` names the curve the point belongs to (constant along x, unlike ``backend``, the
    exact spec of the point).
    """

    experiment: str
    series: str
    backend: str
    reference: str
    x_name: str
    x: float
    mean: float
    std: float
    min: float
    max: float
    draws: int


@dataclass(frozen=True)
class ApproxSettings:
    length: int = 256
    heads: int = 4
    head_dim: int = 64
    draws: int = 10
    std: float = 1.0  # σ of q and k where the experiment does not vary it
    causal: bool = False


def make_inputs(seed: int, settings: ApproxSettings, std: float) -> tuple[Tensor, Tensor, Tensor]:
    """q, k ~ N(0, std²), v ~ N(0, 1); float64 ``(1, H, N, D)``."""
    g = torch.Generator().manual_seed(seed)
    shape = (1, settings.heads, settings.length, settings.head_dim)
    q, k, v = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3))
    return q * std, k * std, v


def relative_error(out: Tensor, ref: Tensor) -> float:
    return ((out - ref).norm() / ref.norm()).item()


def error_row(
    experiment: str,
    series: str,
    spec: BackendSpec,
    *,
    reference: str,
    x_name: str,
    x: float,
    settings: ApproxSettings,
    std: float | None = None,
) -> ApproxRow:
    """Relative error of ``spec`` over ``settings.draws`` draws at input scale ``std``."""
    std = settings.std if std is None else std
    with warnings.catch_warnings():  # the trigonometric kernel warns on purpose at build time
        warnings.simplefilter("ignore", UserWarning)
        attn = spec.build(head_dim=settings.head_dim)
    ref_attn = None
    if reference != "softmax":
        ref_attn = parse_backend(reference).build(head_dim=settings.head_dim)
    errors = []
    with torch.no_grad():
        for draw in range(settings.draws):
            q, k, v = make_inputs(draw, settings, std)
            redraw = getattr(attn, "redraw_features", None)  # random-feature backends only
            if redraw is not None:
                redraw(torch.Generator().manual_seed(10_000 + draw))
            out = attn(q, k, v, causal=settings.causal)
            if ref_attn is None:
                ref = naive_softmax(q, k, v, causal=settings.causal)
            else:
                ref = ref_attn(q, k, v, causal=settings.causal)
            errors.append(relative_error(out, ref))
    spread = statistics.pstdev(errors) if len(errors) > 1 else 0.0
    row = ApproxRow(
        experiment,
        series,
        spec.label,
        reference,
        x_name,
        x,
        statistics.fmean(errors),
        spread,
        min(errors),
        max(errors),
        len(errors),
    )
    log.info(
        "%-10s %-48s vs %-20s %s=%-6g err %.4g ± %.2g",
        experiment,
        spec.label,
        reference,
        x_name,
        x,
        row.mean,
        row.std,
    )
    return row


def performer_rows(
    settings: ApproxSettings,
    features: Sequence[int],
    kernels: Sequence[str] = PERFORMER_KERNELS,
    suffix: str = "",
) -> list[ApproxRow]:
    rows = []
    for kernel in kernels:
        for projection in PROJECTIONS:
            for m in features:
                spec = parse_backend(
                    f"performer:num_features={m},kernel={kernel},projection={projection}"
                )
                rows.append(
                    error_row(
                        "performer",
                        f"{kernel}/{projection}{suffix}",
                        spec,
                        reference="softmax",
                        x_name="num_features",
                        x=m,
                        settings=settings,
                    )
                )
    return rows


def scale_rows(
    settings: ApproxSettings, stds: Sequence[float], backends: Sequence[str] = SCALE_BACKENDS
) -> list[ApproxRow]:
    return [
        error_row(
            "scale",
            spec,
            parse_backend(spec),
            reference="softmax",
            x_name="std",
            x=std,
            settings=settings,
            std=std,
        )
        for spec in backends
        for std in stds
    ]


def sketch_rows(
    settings: ApproxSettings, sizes: Sequence[int], suffix: str = ""
) -> list[ApproxRow]:
    rows = []
    for reference in ("softmax", "polynomial:degree=4"):
        for r in sizes:
            spec = parse_backend(f"polysketch:degree=4,sketch_size={r}")
            rows.append(
                error_row(
                    "sketch",
                    f"PolySketch p=4{suffix}",
                    spec,
                    reference=reference,
                    x_name="sketch_size",
                    x=r,
                    settings=settings,
                )
            )
    return rows


DEGREE_SERIES = {
    "polynomial:degree={p}": "power kernel d^p",
    "polynomial:degree={p},learned_coefficients=true": "truncated exp Σ d^i/i! (learned, at init)",
}


def degree_rows(
    settings: ApproxSettings, degrees: Sequence[int], suffix: str = ""
) -> list[ApproxRow]:
    return [
        error_row(
            "degree",
            series + suffix,
            parse_backend(template.format(p=p)),
            reference="softmax",
            x_name="degree",
            x=p,
            settings=settings,
        )
        for template, series in DEGREE_SERIES.items()
        for p in degrees
    ]
