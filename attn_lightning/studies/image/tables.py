"""The image study's ``tables``: per-seed and paired-by-seed tables from a folder of run records.

One row per backend (``mean ± std``, every seed's value, fit time per seed) and one per backend
other than ``--control`` (its Δ on every seed both ran, the sign count, a bootstrap interval
from five seeds up): ``results.paired``. For unimodal outcomes (bits/dim); the reversal
study's bimodal ones have their own tables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attn_lightning.results.environment import command_line
from attn_lightning.results.files import markdown_records, write_csv
from attn_lightning.results.paired import MIN_BOOTSTRAP_SEEDS, delta_rows, seed_rows
from attn_lightning.results.records import load_runs

DEFAULT_METRICS = ("test/bits_per_dim", "test/completion_bpd")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``tables`` flags."""
    add = parser.add_argument
    add("--runs", type=Path, required=True, help="a folder of run records (<page>/runs/)")
    add("--out", type=Path, required=True, help="output path without extension")
    add("--control", default=None, help="the variant every other is paired against (by seed)")
    add("--metrics", nargs="+", default=list(DEFAULT_METRICS), help="metric keys")
    add("--variants", nargs="+", default=None, help="variants in table order (default: all)")


def tables(args: argparse.Namespace, *, prog: str, argv: list[str]) -> list[Path]:
    """Write ``<out>.md``, ``<out>.csv`` and (with a control) ``<out>_deltas.csv``; returns them.

    Raises:
        FileNotFoundError: no run record under ``--runs``.
        ValueError: a variant or metric the records do not have, naming what they have.
    """
    runs = load_runs(args.runs)
    if not runs:
        raise FileNotFoundError(f"no run records (record.json) under {args.runs}")
    present = list(dict.fromkeys(r.variant for r in runs))
    names = list(args.variants) if args.variants else present
    wanted = names + ([args.control] if args.control else [])
    unknown = [n for n in wanted if n not in present]
    if unknown:
        raise ValueError(f"{args.runs} has no runs of {unknown}; it has {present}")
    reported = {k for r in runs for k in r.metrics}
    missing = [m for m in args.metrics if m not in reported]
    if missing:
        raise ValueError(f"{args.runs} has no metric {missing}; it has {sorted(reported)}")
    per_variant = seed_rows(runs, names, args.metrics, label="backend")
    paired = (
        delta_rows(runs, names, args.control, args.metrics, label="backend") if args.control else []
    )
    lines = [
        f"Regenerate with:\n\n```bash\n{command_line(prog, argv)}\n```\n",
        f"From the run records in `{args.runs.as_posix()}/` (finished runs only), no training. "
        "Mean ± std over seeds, every seed's value beside it; fit time is `train.py`'s own.\n",
        markdown_records(per_variant),
    ]
    if paired:
        lines += [
            "",
            f"Paired by seed (the same seed: the same data order and initialisation stream): "
            f"each backend's value minus `{args.control}`'s on every seed both finished, how many "
            "Δ are positive / negative, and the mean Δ with a 95 % percentile-bootstrap interval "
            f"from {MIN_BOOTSTRAP_SEEDS} seeds up (below that the sign count is the evidence).\n",
            markdown_records(paired),
        ]
    out = args.out
    written = [write_csv(out.with_name(out.name + ".csv"), per_variant)]  # makes the folder
    if paired:
        written.append(write_csv(out.with_name(out.name + "_deltas.csv"), paired))
    page = out.with_name(out.name + ".md")
    page.write_text("\n".join(lines) + "\n")
    return [page, *written]
