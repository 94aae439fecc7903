"""The command line of the reversal study: ``report`` writes the outcome page of a study's run
records; ``trajectories`` how its long runs trained.

    python -m attn_lightning.studies.reversal report --runs docs/results/polynomial_len50/runs \\
        --out docs/results/polynomial_len50 [--variants LABEL ...] [--threshold 0.99] \\
        [--control LABEL]

    python -m attn_lightning.studies.reversal trajectories \\
        --runs docs/results/polynomial_len50_10k/runs \\
        --out docs/results/polynomial_len50_10k_traces [--every 250] [--tail 500]

``--runs``: folders of run records, any depth (``docs/results/<page>/runs/`` committed,
``logs/<experiment>/`` of a live sweep); the files written: ``report.py``, ``trajectories.py``.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attn_lightning.studies.reversal.report import DEFAULT_THRESHOLD, PROG, report
from attn_lightning.studies.reversal.trajectories import write_trajectories

log = logging.getLogger("attn_lightning.studies.reversal")


def build_parser() -> argparse.ArgumentParser:
    """The reversal study's CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{report,trajectories}")
    rep = commands.add_parser(
        "report", help="a study's outcome page: outcomes over seeds, steps to the threshold, spikes"
    )
    traj = commands.add_parser(
        "trajectories", help="long runs' training traces: final loss, spikes, learned coefficients"
    )
    for sub in (rep, traj):
        sub.add_argument("--runs", nargs="+", required=True, type=Path, help="record folders")
        sub.add_argument("--out", required=True, type=Path, help="output path without extension")
        sub.add_argument("--variants", nargs="+", help="labels in table order (default: all)")
    rep.add_argument(
        "--threshold", type=float, default=DEFAULT_THRESHOLD, help="converged / steps-to token acc"
    )
    rep.add_argument("--control", help="label or spec: paired differences vs this variant")
    traj.add_argument("--every", type=int, default=250, help="steps between CSV coefficients")
    traj.add_argument("--tail", type=int, default=500, help="final loss: mean of the last N steps")
    traj.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=[0, 600, 2500, 5000],
        help="coefficient table columns",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run the reversal study's CLI; returns the summary rows (``trajectories``: per-run rows)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    options = vars(parser.parse_args(argv))  # the flags are the writers' keyword arguments
    write: Callable[..., list[dict[str, Any]]]
    write = write_trajectories if options.pop("command") == "trajectories" else report
    out = options.pop("out")
    try:
        rows = write(options.pop("runs"), out, command=f"{PROG} {shlex.join(argv)}", **options)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    log.info("wrote %s.md and its CSVs", out)
    return rows
