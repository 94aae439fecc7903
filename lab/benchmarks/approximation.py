"""``approx``: how well the approximate backends reproduce exact softmax attention.

Error of a backend on inputs q, k, v (B = 1, H heads, N tokens, D = Dv), all float64:

    err = ‖out − ref‖_F / ‖ref‖_F,   ref = softmax(q kᵀ / √D) v   (or exact ``polynomial``)

with q, k ~ N(0, σ²) (σ = "input scale"; softmax's logits then have std σ²) and v ~ N(0, 1);
the softmax reference is ``attention.naive.naive_softmax``. Each point is ``draws`` draws: draw
i uses inputs from seed i and redraws the backend's random features (``redraw_features``) from a
generator seeded 10_000 + i, so the spread covers both the features and the inputs.

Experiments (``--experiments``), one table and one figure each:

* ``performer``: error vs m (num_features) for positive / hyperbolic / trigonometric kernels,
  orthogonal vs i.i.d. projections.
* ``scale``: error vs σ for Performer, linear (elu+1), exact polynomial and PolySketch.
* ``sketch``: PolySketch (degree 4) error vs its size r, against softmax and against the exact
  degree-4 polynomial attention it estimates.
* ``degree``: polynomial exact attention vs softmax for p = 2 … 16: the power kernel ``d^p`` and
  the truncated exponential ``Σ_{i≤p} d^i / i!`` (the learned polynomial at initialisation).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from attn_lightning.attention.naive import naive_softmax
from lab.benchmarks import report
from lab.benchmarks.measure import add_output, parse_backend
from lab.benchmarks.report import markdown_table

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
    spec: str,
    reference: str,
    x_name: str,
    x: float,
    settings: ApproxSettings,
    std: float | None = None,
) -> ApproxRow:
    """Relative error of backend ``spec`` against ``reference`` over ``settings.draws`` draws at
    input scale ``std`` (default ``settings.std``); the point is ``x`` of curve ``series``."""
    std = settings.std if std is None else std
    with warnings.catch_warnings():  # the trigonometric kernel warns on purpose at build time
        warnings.simplefilter("ignore", UserWarning)
        attn = parse_backend(spec).build(head_dim=settings.head_dim)
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
    mean, low, high = statistics.fmean(errors), min(errors), max(errors)
    row = ApproxRow(
        experiment, series, spec, reference, x_name, x, mean, spread, low, high, len(errors)
    )
    log.info(
        "%-10s %-48s vs %-20s %s=%-6g err %.4g ± %.2g",
        experiment,
        spec,
        reference,
        x_name,
        x,
        mean,
        spread,
    )
    return row


def performer_rows(
    settings: ApproxSettings, features: Sequence[int], suffix: str = ""
) -> list[ApproxRow]:
    return [
        error_row(
            "performer",
            f"{kernel}/{projection}{suffix}",
            f"performer:num_features={m},kernel={kernel},projection={projection}",
            "softmax",
            "num_features",
            m,
            settings,
        )
        for kernel in PERFORMER_KERNELS
        for projection in PROJECTIONS
        for m in features
    ]


def scale_rows(settings: ApproxSettings, stds: Sequence[float]) -> list[ApproxRow]:
    return [
        error_row("scale", spec, spec, "softmax", "std", std, settings, std=std)
        for spec in SCALE_BACKENDS
        for std in stds
    ]


def sketch_rows(
    settings: ApproxSettings, sizes: Sequence[int], suffix: str = ""
) -> list[ApproxRow]:
    return [
        error_row(
            "sketch",
            f"PolySketch p=4{suffix}",
            f"polysketch:degree=4,sketch_size={r}",
            reference,
            "sketch_size",
            r,
            settings,
        )
        for reference in ("softmax", "polynomial:degree=4")
        for r in sizes
    ]


DEGREE_SERIES = {
    "polynomial:degree={p}": "power kernel d^p",
    "polynomial:degree={p},learned_coefficients=true": "truncated exp Σ d^i/i! (learned, at init)",
}


def degree_rows(
    settings: ApproxSettings, degrees: Sequence[int], suffix: str = ""
) -> list[ApproxRow]:
    return [
        error_row("degree", series + suffix, template.format(p=p), "softmax", "degree", p, settings)
        for template, series in DEGREE_SERIES.items()
        for p in degrees
    ]


def _curve(label: str, points: Sequence[ApproxRow]) -> dict:
    return {
        "label": label,
        "x": [r.x for r in points],
        "y": [r.mean for r in points],
        "lo": [r.min for r in points],
        "hi": [r.max for r in points],
    }


def _by(rows: Sequence[ApproxRow], key) -> dict[str, list[ApproxRow]]:
    out: dict[str, list[ApproxRow]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def _label(r: ApproxRow) -> str:
    both = r.experiment == "sketch"  # the one experiment with two references
    return f"{r.series} vs {r.reference}" if both or r.reference != "softmax" else r.series


def figure_panels(rows: Sequence[ApproxRow], experiment: str) -> list[dict]:
    """The panels of one experiment's figure, in ``report.band_figure``'s format."""
    rows = [r for r in rows if r.experiment == experiment]
    base = {"ylabel": "relative error ‖out − ref‖ / ‖ref‖", "ylog": True}
    if experiment != "performer":
        xlabel = {
            "scale": "input std σ of q and k",
            "sketch": "sketch size r",
            "degree": "polynomial degree p",
        }[experiment]
        curves = [_curve(label, pts) for label, pts in _by(rows, _label).items()]
        return [
            {
                **base,
                "title": f"{experiment}: error against exact attention",
                "xlabel": xlabel,
                "xlog": experiment == "sketch",
                "curves": curves,
            }
        ]
    panels = []
    by_kernel = _by(rows, lambda r: r.series.split("/")[0])
    for kernel, mine in by_kernel.items():
        curves = [
            _curve(s.split("/", 1)[1], pts) for s, pts in _by(mine, lambda r: r.series).items()
        ]
        panels.append(
            {
                **base,
                "title": f"Performer, {kernel} features vs softmax",
                "xlabel": "num_features m",
                "xlog": True,
                "curves": curves,
            }
        )
    orth = [r for r in rows if "/orthogonal" in r.series]
    curves = [_curve(s, pts) for s, pts in _by(orth, lambda r: r.series).items()]
    panels.append(
        {
            **base,
            "title": "orthogonal projections: kernels compared",
            "xlabel": "num_features m",
            "xlog": True,
            "curves": curves,
        }
    )
    return panels


def markdown_tables(rows: Sequence[ApproxRow]) -> str:
    """One table per experiment: rows = (series, reference), columns = x, cells mean ± std."""
    parts = []
    for experiment, mine in _by(rows, lambda r: r.experiment).items():
        xs = sorted({r.x for r in mine})
        index = {(r.series, r.reference, r.x): r for r in mine}
        body = []
        for series, reference in dict.fromkeys((r.series, r.reference) for r in mine):
            cells = [index.get((series, reference, x)) for x in xs]
            body.append(
                [
                    series,
                    reference,
                    *("" if c is None else f"{c.mean:.3g} ± {c.std:.2g}" for c in cells),
                ]
            )
        header = ["series", "reference", *(f"{mine[0].x_name}={x:g}" for x in xs)]
        parts.append(f"### {experiment}\n\n" + markdown_table(header, body))
    return "\n\n".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``approx``."""
    add_output(parser)
    parser.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    parser.add_argument(
        "--features", nargs="+", type=int, default=[16, 32, 64, 128, 256, 512, 1024]
    )
    parser.add_argument(
        "--stds", nargs="+", type=float, default=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
    )
    parser.add_argument("--sketch-sizes", nargs="+", type=int, default=[4, 8, 16, 32, 64, 128])
    parser.add_argument("--degrees", nargs="+", type=int, default=[2, 4, 6, 8, 10, 12, 16])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument(
        "--std",
        nargs="+",
        type=float,
        default=[0.5, 1.0],
        help="σ of q, k in the performer/sketch/degree sweeps (one curve each)",
    )
    parser.add_argument("--causal", action="store_true")


def run(args: argparse.Namespace) -> str:
    """Run the experiments; write ``<out>/<tag>.{csv,md}`` and a figure per experiment."""
    settings = ApproxSettings(
        length=args.length,
        heads=args.heads,
        head_dim=args.head_dim,
        draws=args.draws,
        causal=args.causal,
    )
    rows: list[ApproxRow] = []
    # experiment -> (rows(settings, values, suffix=...), the values swept)
    sweeps: dict[str, tuple[Callable[..., list[ApproxRow]], Sequence[int]]] = {
        "performer": (performer_rows, args.features),
        "sketch": (sketch_rows, args.sketch_sizes),
        "degree": (degree_rows, args.degrees),
    }
    for experiment in args.experiments:
        if experiment == "scale":
            rows += scale_rows(settings, args.stds)
            continue
        sweep, values = sweeps[experiment]
        for std in args.std:  # one curve per σ, named by it when there are several
            suffix = f" σ={std:g}" if len(args.std) > 1 else ""
            rows += sweep(replace(settings, std=std), values, suffix=suffix)
    shape = (
        f"B=1, H={settings.heads}, N={settings.length}, D=Dv={settings.head_dim}, "
        f"causal={settings.causal}, draws={settings.draws}"
    )
    meta = report.environment(
        torch.device("cpu"),
        command=args.command_line,
        inputs=shape,
        sweep_stds=args.std,
        dtype="float64",
        seeds="inputs: draw i; features: 10000 + i",
        spread="std over draws in tables; min-max band in figures",
    )
    text = markdown_tables(rows)
    tag = args.tag or "approximation"
    report.write_report(args.out, tag, meta, rows, text)
    caption = (
        f"N={settings.length}, H={settings.heads}, D={settings.head_dim}, "
        f"{settings.draws} draws, σ of q, k = {', '.join(map(str, args.std))} unless "
        f"varied, float64, lines = mean, bands = min-max over draws"
    )
    for experiment in dict.fromkeys(r.experiment for r in rows):
        report.band_figure(
            figure_panels(rows, experiment),
            args.out / f"{tag}_{experiment}.png",
            title=f"approximation error: {experiment}",
            caption=caption,
            ncols=2 if experiment == "performer" else 1,
        )
    return text + "\n"
