"""The command line of the reversal study: ``report`` writes a sweep's report; ``tables``
rebuilds its outcome tables from committed per-run CSVs (``committed``).

    python -m attn_lightning.studies.reversal tables \\
        --runs docs/results/polynomial_len256_runs.csv --control softmax \\
        --out docs/results/polynomial_len256_outcomes

    python -m attn_lightning.studies.reversal report --experiment polynomial-len50 \\
        --out docs/results/polynomial_len50 [--variants LABEL ...] [--threshold 0.99] \\
        [--root .] [--control LABEL]

    python -m attn_lightning.studies.reversal trajectories --experiment polynomial-len50-10k \
        --out docs/results/polynomial_len50_10k_traces [--every 250] [--tail 500]

Reads the metrics files ``sweeps/<experiment>/<label>-s<seed>.json`` that
``attn_lightning.studies.sweep`` wrote and each run's TensorBoard folder, and writes ``<out>.md``,
``<out>.csv`` (summary), ``<out>_runs.csv`` (one row per run), ``<out>_curves.csv`` (validation
token accuracy per run and validation) and, with ``--control``, ``<out>_paired.csv``. Outcomes
over seeds are bimodal (a run converges or not), so the summary gives converged k/n and
``median [25th, 75th percentile]`` rather than mean ± std; besides the test metrics it counts
the steps to the threshold, the loss spikes and the gradients logged at them. Folders under
``logs/<experiment>/`` without a metrics file (running, crashed or timed out) are counted as
"unfinished" and left out of everything else. ``trajectories`` reads the same runs' logs for
how they trained: final training loss, every loss spike with its size and gradient, and the
learned coefficients over the steps (``trajectories``).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.studies.reversal.committed import tables
from attn_lightning.studies.reversal.report import DEFAULT_THRESHOLD, PROG, report
from attn_lightning.studies.reversal.trajectories import write_trajectories

log = logging.getLogger("attn_lightning.studies.reversal")


def build_parser() -> argparse.ArgumentParser:
    """The reversal study's CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{report,tables,trajectories}"
    )
    sub = commands.add_parser(
        "report",
        help="a sweep's report: outcomes over seeds, steps to the threshold, loss spikes",
        description="Write the report of a reversal sweep (see the study's help).",
    )
    add = sub.add_argument
    add("--experiment", required=True, help="sweep experiment: reads sweeps/<experiment>/*.json")
    add("--out", required=True, type=Path, help="output path without extension")
    add("--variants", nargs="+", default=None, help="labels in table order (default: all)")
    add(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="converged / steps-to token accuracy",
    )
    add("--root", type=Path, default=Path(), help="folder holding sweeps/ and logs/")
    add("--control", default=None, help="label or spec: paired differences vs this variant")
    tab = commands.add_parser(
        "tables",
        help="outcome tables (k/n, median [IQR], paired Δ) from committed per-run CSVs",
        description="Rebuild a reversal study's outcome tables from its committed "
        "<name>_runs.csv files (see attn_lightning.studies.reversal.committed).",
    )
    tab.add_argument("--runs", nargs="+", required=True, type=Path, help="<name>_runs.csv files")
    tab.add_argument("--out", required=True, type=Path, help="output path without extension")
    tab.add_argument("--variants", nargs="+", default=None, help="labels in table order")
    tab.add_argument("--control", default=None, help="label or spec of the paired control")
    tab.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    tab.add_argument(
        "--paired-only",
        action="store_true",
        help="only <out>_paired.csv and the paired section of the existing <out>.md",
    )
    traj = commands.add_parser(
        "trajectories",
        help="long runs' training traces: final loss, loss spikes, learned coefficients",
        description="Read a reversal sweep's TensorBoard logs for how its runs trained "
        "(see attn_lightning.studies.reversal.trajectories).",
    )
    traj.add_argument("--experiment", required=True, help="reads sweeps/<experiment>/*.json")
    traj.add_argument("--out", required=True, type=Path, help="output path without extension")
    traj.add_argument("--variants", nargs="+", default=None, help="labels in table order")
    traj.add_argument("--root", type=Path, default=Path(), help="folder with sweeps/ and logs/")
    traj.add_argument(
        "--committed",
        nargs="+",
        type=Path,
        default=[],
        metavar="PREFIX",
        help="earlier trajectories output (<PREFIX>_runs.csv, _spikes.csv, _coefficients.csv) "
        "of runs whose logs are gone: their rows join the tables; a run read from logs replaces "
        "its own",
    )
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
    # EventAccumulator logs each event file it moves on to (runs resumed or tested have two).
    logging.getLogger("tensorboard").setLevel(logging.WARNING)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "tables":
        try:
            return tables(
                args.runs,
                args.out,
                command=f"{PROG} {shlex.join(argv)}",
                variants=args.variants,
                control=args.control,
                threshold=args.threshold,
                paired_only=args.paired_only,
            )
        except (FileNotFoundError, ValueError) as error:
            parser.error(str(error))
    if args.command == "trajectories":
        try:
            return write_trajectories(
                args.experiment,
                args.out,
                root=args.root,
                variants=args.variants,
                every=args.every,
                tail=args.tail,
                steps=args.steps,
                command=f"{PROG} {shlex.join(argv)}",
                committed=args.committed,
            )
        except (FileNotFoundError, ValueError) as error:
            parser.error(str(error))
    try:
        summary = report(
            args.experiment,
            args.out,
            variants=args.variants,
            threshold=args.threshold,
            root=args.root,
            command=f"{PROG} {shlex.join(argv)}",
            control=args.control,
        )
    except FileNotFoundError as error:
        parser.error(str(error))
    log.info("wrote %s.md, %s.csv, %s_runs.csv", args.out, args.out, args.out)
    return summary
