"""The command line of the reversal study: ``report`` writes the outcome page of a study's run
records; ``trajectories`` how its long runs trained.

    python -m attn_lightning.studies.reversal report --runs docs/results/polynomial_len50/runs \\
        --out docs/results/polynomial_len50 [--variants LABEL ...] [--threshold 0.99] \\
        [--control LABEL]

    python -m attn_lightning.studies.reversal trajectories \
        --runs docs/results/polynomial_len50_10k/runs \
        --out docs/results/polynomial_len50_10k_traces [--every 250] [--tail 500]

``report`` reads every run record under the ``--runs`` folders (``docs/results/<page>/runs/``
committed, ``logs/<experiment>/`` of a live sweep) and writes the page and its CSVs
(``report``); ``trajectories`` reads them for how the runs trained (``trajectories``).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
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
    sub = commands.add_parser(
        "report",
        help="a study's outcome page: outcomes over seeds, steps to the threshold, loss spikes",
        description="Write the outcome page of a reversal study's run records (see the "
        "study's help).",
    )
    add = sub.add_argument
    add("--runs", nargs="+", required=True, type=Path, help="folders of run records (any depth)")
    add("--out", required=True, type=Path, help="output path without extension")
    add("--variants", nargs="+", default=None, help="labels in table order (default: all)")
    add(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="converged / steps-to token accuracy",
    )
    add("--control", default=None, help="label or spec: paired differences vs this variant")
    traj = commands.add_parser(
        "trajectories",
        help="long runs' training traces: final loss, loss spikes, learned coefficients",
        description="Read a reversal study's run records for how its runs trained "
        "(see attn_lightning.studies.reversal.trajectories).",
    )
    traj.add_argument(
        "--runs", nargs="+", required=True, type=Path, help="folders of run records (any depth)"
    )
    traj.add_argument("--out", required=True, type=Path, help="output path without extension")
    traj.add_argument("--variants", nargs="+", default=None, help="labels in table order")
    traj.add_argument(
        "--every", type=int, default=250, help="steps between coefficient points in the CSV"
    )
    traj.add_argument(
        "--tail", type=int, default=500, help="final training loss: mean over the last N steps"
    )
    traj.add_argument(
        "--steps",
        type=int,
        nargs="+",
        default=[0, 600, 2500, 5000],
        help="steps at which the coefficient table shows each coefficient (and at the end)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run the reversal study's CLI; returns the summary rows of the report."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "trajectories":
        try:
            return write_trajectories(
                args.runs,
                args.out,
                variants=args.variants,
                every=args.every,
                tail=args.tail,
                steps=args.steps,
                command=f"{PROG} {shlex.join(argv)}",
            )
        except (FileNotFoundError, ValueError) as error:
            parser.error(str(error))
    try:
        summary = report(
            args.runs,
            args.out,
            command=f"{PROG} {shlex.join(argv)}",
            variants=args.variants,
            threshold=args.threshold,
            control=args.control,
        )
    except FileNotFoundError as error:
        parser.error(str(error))
    log.info("wrote %s.md, %s.csv, %s_runs.csv", args.out, args.out, args.out)
    return summary
