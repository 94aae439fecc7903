"""``learned``: what a trained polynomial kernel learned, one row per layer and checkpoint.

    python -m lab.benchmark learned --checkpoints \\
        checkpoints/polynomial-len50/*learned_coefficients-true-s*/best-step=600.ckpt \\
        --out docs/results --tag polynomial_len50_learned

For every attention with learned coefficients (``PolynomialAttention(learned_coefficients=True)``:
``coefficient_logits``, a_0 … a_p; ``PolySketchAttention(learned_coefficients=True)``:
``even_coefficient_logits``, a_0, a_2, a_4) it reads a = softplus(logits), and the learnable
LayerNorm scale γ of q' and k' beside it (``qk_norm.weight``): its L2 norm, smallest and largest
entry, and the norm it started from (``init_scale`` · √D; D^{-1/4} · √D = D^{1/4} for the learned
polynomials, whose LN starts at D^{-1/4}). The coefficients alone miss what the layer learns
through γ: scaling q' and k' by c scales the similarity d = q'ᵀk' by c², which sharpens the
kernel as a larger temperature would. So each row also gives ``c = (‖γ‖ / ‖γ₀‖)²`` and the
**coefficients at γ's starting scale**, ``b_i = a_i · c^i``: the polynomial that gives the same
kernel on q', k' normalised as at initialisation — what a parametrisation without a learnable
scale (the thesis's) would have to learn. Exact when γ is a multiple of its start (every entry
scaled alike; ``γ min … max`` shows how far from that), an average scale otherwise. The run's
name is the checkpoint's folder (a study's ``<variant>-s<seed>``), so per-seed tables come
straight from the CSV.

Writes ``<out>/<tag>.csv`` (one row per layer and checkpoint), ``<out>/<tag>_ranges.csv`` (per
variant and layer, the min – max over its runs) and ``<out>/<tag>.md`` with both.
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

from attn_lightning.cli.checkpoints import read_weights
from attn_lightning.records import files
from lab.benchmarks import report
from lab.benchmarks.arguments import UsageError, add_output
from lab.benchmarks.kernel_shapes import EVEN_SUFFIX, SUFFIX

GAMMA = "qk_norm.weight"
SEED_SUFFIX = re.compile(r"-s\d+$")  # a study's run folder: <variant>-s<seed>
DEGREE = 4  # columns a0 … a4: the thesis's learned polynomial and the even linear-time form


def _state_dict(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UsageError(f"--checkpoints {path}: no such file")
    obj, problem = read_weights(path)
    if problem:  # a truncated or foreign file: say which, and what it was
        raise UsageError(f"--checkpoints {path} {problem}")
    state = obj.get("state_dict", obj) if isinstance(obj, dict) else None
    if not isinstance(state, dict):
        raise UsageError(f"{path} holds no state dict (a Lightning checkpoint or a state dict)")
    return state


def learned_rows(path: Path) -> list[dict[str, Any]]:
    """One row per attention with learned coefficients in the checkpoint at ``path``.

    Raises:
        UsageError: the file is missing or unreadable, or holds no ``*coefficient_logits``.
    """
    state = _state_dict(path)
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> str:
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
