"""``kernels``: each similarity against the angle θ between two vectors; ``learned``: what the
trained polynomial kernels learned, one row per layer and checkpoint.

``kernels``: for x, y of norm ``norm`` (1: unit vectors) at angle θ, ``d = xᵀy = norm²·cos θ``:

* softmax:              exp(d)
* linear (elu+1):       φ(x)ᵀφ(y), φ = elu + 1, element-wise: depends on the vectors, not only
  on θ, so it is averaged over random pairs in D dimensions (band: 10–90% over pairs)
* power kernel:         d^p for p = 2, 4, 8 (even: anti-parallel vectors score as parallel ones)
* learned polynomial:   max(0, Σ_i a_i d^i), a_i read from a checkpoint (``coefficient_logits``
  of ``PolynomialAttention(learned_coefficients=True)``, a = softplus; ``even_coefficient_logits``
  of the linear-time ``PolySketchAttention(learned_coefficients=True)``, degrees 0, 2, 4, whose
  d⁴ term is the sketch's expectation), else the 1/i! initialisation (the Taylor polynomial of exp)
* Performer (positive features, m random projections): the unbiased estimate of exp(d),
  averaged over pairs, one projection draw per pair (band: 10–90% over pairs)

Every curve is divided by its own value at θ = 0 (the exact exp(norm²) for the Performer
estimate, so its bias shows), so the figure compares shapes: how fast each kernel decays.

``learned`` reads a = softplus(logits) and the learnable LayerNorm scale γ of q' and k' beside it
(``qk_norm.weight``: its norm, range and starting norm D^{-1/4}·√D). Scaling q', k' by c scales
d by c², which sharpens the kernel as a temperature would, so each row also gives
``c = (‖γ‖ / ‖γ₀‖)²`` and ``b_i = a_i · c^i``, the polynomial of the same kernel on q', k' at
their initial scale (exact when γ is a multiple of its start; ``γ min … max`` shows how far).
The run is the checkpoint's folder (``<variant>-s<seed>``). Writes ``<tag>.csv`` (a row per
layer and checkpoint), ``<tag>_ranges.csv`` (per variant and layer, min – max over its runs) and
``<tag>.md`` with both.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.performer import draw_projection
from attn_lightning.cli.checkpoints import read_weights
from attn_lightning.records import files
from lab.benchmarks import report
from lab.benchmarks.measure import UsageError, add_output

SUFFIX = "coefficient_logits"
EVEN_SUFFIX = "even_coefficient_logits"


def _state_dict(path: Path, flag: str) -> dict[str, Any]:
    """The state dict of a Lightning checkpoint or of a bare state dict at ``path``.

    Raises:
        UsageError: the file is missing, unreadable or holds no state dict (named with ``flag``).
    """
    obj, problem = read_weights(path)
    if problem:  # a missing, truncated or foreign file: say which, and what it was
        raise UsageError(f"{flag} {path} {problem}")
    state = obj.get("state_dict", obj) if isinstance(obj, dict) else None
    if not isinstance(state, dict):
        raise UsageError(f"{flag} {path} holds no state dict (a Lightning checkpoint or one)")
    return state


def load_learned_coefficients(path: Path) -> dict[str, Tensor]:
    """``{module path: a_0..a_p}`` for every ``*coefficient_logits`` tensor in a checkpoint
    (Lightning's or a bare state dict); UsageError when there is none."""
    state = _state_dict(path, "--checkpoint")
    found = {}
    for key, value in state.items():
        if not key.endswith(SUFFIX) or not isinstance(value, Tensor):
            continue
        a = F.softplus(value.double())
        if key.endswith(EVEN_SUFFIX):  # a_0, a_2, a_4 -> a_0, 0, a_2, 0, a_4
            full = torch.zeros(2 * len(a) - 1, dtype=a.dtype)
            full[::2] = a
            name = key[: -len(EVEN_SUFFIX)].rstrip(".") + " (linear-time, even)"
            found[name] = full
        else:
            found[key[: -len(SUFFIX)].rstrip(".") or "coefficients"] = a
    if not found:
        sample = ", ".join(list(state)[:5]) or "none"
        raise UsageError(
            f"no state_dict key ending in {SUFFIX!r} in {path} (a PolynomialAttention built "
            f"with learned_coefficients=True); first keys: {sample}"
        )
    return found


def taylor_coefficients(degree: int) -> Tensor:
    """a_i = 1/i!, i = 0..p: the learned polynomial's initialisation."""
    return torch.tensor([1.0 / math.factorial(i) for i in range(degree + 1)], dtype=torch.float64)


def polynomial(coefficients: Tensor, d: Tensor) -> Tensor:
    """``max(0, Σ_i a_i d^i)``, as in ``PolynomialAttention.kernel``."""
    powers = torch.stack([d**i for i in range(len(coefficients))], dim=-1)
    return (powers @ coefficients.to(d.dtype)).clamp_min(0.0)


def random_pairs(
    theta: Tensor, *, dim: int, pairs: int, norm: float, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """x: ``(P, D)`` and y: ``(T, P, D)`` of norm ``norm`` with angle θ_t between x_p and y_tp."""
    x = F.normalize(torch.randn(pairs, dim, generator=generator, dtype=torch.float64), dim=-1)
    u = torch.randn(pairs, dim, generator=generator, dtype=torch.float64)
    u = F.normalize(u - (u * x).sum(-1, keepdim=True) * x, dim=-1)  # ⟂ x
    y = theta.cos()[:, None, None] * x + theta.sin()[:, None, None] * u  # (T, P, D)
    return x * norm, y * norm


def _band(values: Tensor) -> dict[str, list[float]]:
    """``values: (T, P)`` -> mean and the 10–90% quantile band over P."""
    lo, hi = values.quantile(torch.tensor([0.1, 0.9], dtype=values.dtype), dim=1)
    return {"y": values.mean(1).tolist(), "lo": lo.tolist(), "hi": hi.tolist()}


def kernel_curves(
    *,
    degrees: Sequence[int] = (2, 4, 8),
    learned: dict[str, Tensor] | None = None,
    learned_degree: int = 4,
    dim: int = 64,
    pairs: int = 256,
    norm: float = 1.0,
    num_features: int = 64,
    points: int = 91,
    seed: int = 0,
) -> list[dict]:
    """The curves of the figure: dicts with ``label``, ``x`` (θ in degrees), ``y`` and optional
    ``lo``/``hi`` bands, each normalised at θ = 0 (see the module docstring)."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.linspace(0.0, math.pi, points, dtype=torch.float64)
    deg = torch.rad2deg(theta).tolist()
    d = norm**2 * theta.cos()
    d = d.masked_fill(d.abs() < 1e-12, 0.0)  # cos(π/2) is 6e-17 in floating point, not 0
    curves = [{"label": "exp(xᵀy)  (softmax)", "y": ((d - norm**2).exp()).tolist()}]

    x, y = random_pairs(theta, dim=dim, pairs=pairs, norm=norm, generator=g)
    elu = (F.elu(x) + 1)[None] * (F.elu(y) + 1)  # (T, P, D)
    elu = elu.sum(-1) / (F.elu(x) + 1).square().sum(-1)  # (T, P), 1 at θ = 0
    curves.append({"label": f"elu+1 features  (linear, D={dim})", **_band(elu)})

    for p in degrees:
        curves.append({"label": f"(xᵀy)^{p}  (power kernel)", "y": (d / norm**2).pow(p).tolist()})

    if learned is None:
        learned = {
            f"1/i! initialisation, p={learned_degree} (no checkpoint)": taylor_coefficients(
                learned_degree
            )
        }
    for name, a in learned.items():
        values = polynomial(a, d) / polynomial(a, torch.tensor([norm**2], dtype=torch.float64))
        label = "learned polynomial: " + name if "no checkpoint" not in name else name
        curves.append({"label": label, "y": values.tolist(), "ls": "--"})

    estimates = []
    for i in range(pairs):
        w = draw_projection(num_features, dim, projection="orthogonal", generator=g).double()
        half = norm**2 / 2  # ‖x‖²/2 = ‖y‖²/2
        phi_x = (w @ x[i] - half).exp() / math.sqrt(num_features)  # (m,)
        phi_y = (y[:, i] @ w.T - half).exp() / math.sqrt(num_features)  # (T, m)
        estimates.append(phi_y @ phi_x)  # (T,)
    perf = torch.stack(estimates, dim=1) / math.exp(norm**2)  # (T, P)
    curves.append(
        {"label": f"Performer positive, m={num_features} (estimate of exp)", **_band(perf)}
    )
    for c in curves:
        c["x"] = deg
        c["marker"] = ""
    return curves


def curves_to_rows(curves: Sequence[dict]) -> list[dict[str, float]]:
    """One CSV row per θ: the mean of each curve (and its band bounds where it has one)."""
    rows = []
    for t, theta in enumerate(curves[0]["x"]):
        row = {"theta_deg": theta}
        for c in curves:
            row[c["label"]] = c["y"][t]
            if "lo" in c:
                row[c["label"] + " [min]"] = c["lo"][t]
                row[c["label"] + " [max]"] = c["hi"][t]
        rows.append(row)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``kernels``."""
    add_output(parser)
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="Lightning checkpoint or state dict with *coefficient_logits",
    )
    parser.add_argument("--degrees", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument(
        "--learned-degree",
        type=int,
        default=4,
        help="degree of the 1/i! curve drawn without a checkpoint",
    )
    parser.add_argument("--head-dim", type=int, default=64, help="D of the elu+1 / Performer pairs")
    parser.add_argument("--pairs", type=int, default=256, help="random pairs per angle")
    parser.add_argument("--norm", type=float, default=1.0, help="‖x‖ = ‖y‖ (1: unit vectors)")
    parser.add_argument("--num-features", type=int, default=64, help="Performer m")


def run(args: argparse.Namespace) -> str:
    """The curves (and learned coefficients); write ``<out>/<tag>.{csv,md,png}``."""
    learned = load_learned_coefficients(args.checkpoint) if args.checkpoint else None
    curves = kernel_curves(
        degrees=args.degrees,
        learned=learned,
        learned_degree=args.learned_degree,
        dim=args.head_dim,
        pairs=args.pairs,
        norm=args.norm,
        num_features=args.num_features,
    )
    source = str(args.checkpoint) if args.checkpoint else "none: 1/i! initialisation plotted"
    meta = report.environment(
        torch.device("cpu"),
        command=args.command_line,
        checkpoint=source,
        norm=args.norm,
        head_dim=args.head_dim,
        pairs=args.pairs,
        performer_features=args.num_features,
    )
    rows = curves_to_rows(curves)
    coarse = rows[:: max(1, len(rows) // 6)]
    body = [[c["label"], *(f"{r[c['label']]:.3g}" for r in coarse)] for c in curves]
    text = "## similarity / similarity at θ = 0\n\n" + report.markdown_table(
        ["kernel", *(f"θ={r['theta_deg']:.0f}°" for r in coarse)], body
    )
    if learned:
        width = max(len(a) for a in learned.values())
        table = [
            [name, *(f"{a[i]:.4g}" if i < len(a) else "" for i in range(width))]
            for name, a in learned.items()
        ]
        text += "\n\n## learned coefficients a_i (1/i! at initialisation)\n\n"
        text += report.markdown_table(["layer", *(f"a{i}" for i in range(width))], table)
    tag = args.tag or "kernel_shapes"
    report.write_report(args.out, tag, meta, rows, text)
    floor = 1e-8  # log panel: the power kernels reach 0 at 90°
    log_curves = [{**c, "y": [max(v, floor) for v in c["y"]], "lo": None} for c in curves]
    panel = {"xlabel": "angle θ between x and y (degrees)", "ylabel": "k(θ) / k(0)"}
    report.band_figure(
        [
            {**panel, "title": "normalised similarity", "curves": curves},
            {**panel, "title": "same, log scale", "ylog": True, "curves": log_curves},
        ],
        args.out / f"{tag}.png",
        title=f"kernel shapes, ‖x‖ = ‖y‖ = {args.norm:g}",
        caption=f"learned polynomial: {source}",
    )
    return text + "\n"


GAMMA = "qk_norm.weight"
SEED_SUFFIX = re.compile(r"-s\d+$")  # a study's run folder: <variant>-s<seed>
DEGREE = 4  # columns a0 … a4: the thesis's learned polynomial and the even linear-time form


def learned_rows(path: Path) -> list[dict[str, Any]]:
    """One row per attention with learned coefficients in the checkpoint at ``path``.

    Raises:
        UsageError: the file is missing or unreadable, or holds no ``*coefficient_logits``.
    """
    state = _state_dict(path, "--checkpoints")
    rows = []
    for key, logits in state.items():
        if not key.endswith(SUFFIX) or not isinstance(logits, torch.Tensor):
            continue
        even = key.endswith(EVEN_SUFFIX)
        prefix = key[: -len(EVEN_SUFFIX if even else SUFFIX)]
        a = F.softplus(logits.double()).tolist()
        degrees = [2 * i for i in range(len(a))] if even else list(range(len(a)))
        row: dict[str, Any] = {
            "run": path.parent.name,
            "checkpoint": path.name,
            "layer": prefix.rstrip("."),
            "form": "linear-time, even" if even else "exact",
        }
        for i in range(DEGREE + 1):
            row[f"a{i}"] = a[degrees.index(i)] if i in degrees else None
        gamma = state.get(prefix + GAMMA)
        if isinstance(gamma, torch.Tensor):
            g = gamma.double()
            dim = g.numel()
            row.update(
                gamma_norm=g.norm().item(),
                gamma_min=g.min().item(),
                gamma_max=g.max().item(),
                gamma_norm_init=dim**-0.25 * math.sqrt(dim),
            )
            c = (row["gamma_norm"] / row["gamma_norm_init"]) ** 2
            row["scale_c"] = c
            for i in range(DEGREE + 1):
                a_i = row[f"a{i}"]
                row[f"b{i}"] = None if a_i is None else a_i * c**i
        rows.append(row)
    if not rows:
        sample = ", ".join(list(state)[:5]) or "none"
        raise UsageError(
            f"no state_dict key ending in {SUFFIX!r} in {path} (an attention built with "
            f"learned_coefficients=True); first keys: {sample}"
        )
    return rows


def add_learned_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``learned``."""
    add_output(parser)
    parser.add_argument(
        "--checkpoints",
        type=Path,
        nargs="+",
        required=True,
        help="Lightning checkpoints (or state dicts) of models with learned coefficients",
    )


def _cell(value: float | None, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as markdown: run, layer, form, a0 … a4, ‖γ‖ (start), γ range."""
    body = [
        [
            r["run"],
            r["layer"],
            r["form"],
            *(_cell(r[f"a{i}"]) for i in range(DEGREE + 1)),
            f"{_cell(r.get('gamma_norm'), 3)} ({_cell(r.get('gamma_norm_init'), 3)})",
            f"{_cell(r.get('gamma_min'), 3)} … {_cell(r.get('gamma_max'), 3)}",
            _cell(r.get("scale_c"), 3),
            *(_cell(r.get(f"b{i}")) for i in range(DEGREE + 1)),
        ]
        for r in rows
    ]
    header = ["run", "layer", "form", *(f"a{i}" for i in range(DEGREE + 1))]
    header += ["‖γ‖ (at start)", "γ min … max", "c", *(f"b{i}" for i in range(DEGREE + 1))]
    return report.markdown_table(header, body)


def ranges(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (variant, layer, form) over its runs (the run name less ``-s<seed>``): how many,
    which seeds, and ``min – max`` of every coefficient and of ‖γ‖."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(SEED_SUFFIX.sub("", row["run"]), row["layer"], row["form"])].append(row)
    out = []
    for (variant, layer, form), members in groups.items():
        entry: dict[str, Any] = {"variant": variant, "layer": layer, "form": form}
        entry["runs"] = len(members)
        keys = [f"{k}{i}" for k in "ab" for i in range(DEGREE + 1)]
        for key in [*keys, "gamma_norm", "scale_c"]:
            values = [m[key] for m in members if m.get(key) is not None]
            entry[key] = f"{min(values):.3g} – {max(values):.3g}" if values else "–"
        out.append(entry)
    return out


def run_learned(args: argparse.Namespace) -> str:
    """Read every checkpoint (all before writing: one bad file writes nothing)."""
    rows = [row for path in args.checkpoints for row in learned_rows(path)]
    meta = report.environment(torch.device("cpu"), command=args.command_line)
    spread = ranges(rows)
    text = (
        "## learned coefficients a = softplus(logits) (1/i! at initialisation), the q'/k' "
        "LayerNorm scale γ, c = (‖γ‖/‖γ₀‖)² and b_i = a_i c^i, the coefficients at γ's "
        "starting scale\n\n" + table(rows) + "\n\n## range over runs (min – max), per "
        "variant and layer; ‖γ‖ starts at D^{1/4}\n\n" + files.markdown_records(spread)
    )
    tag = args.tag or "learned_kernels"
    report.write_report(args.out, tag, meta, rows, text)
    report.write_csv(args.out / f"{tag}_ranges.csv", spread, meta)
    return text + "\n"
