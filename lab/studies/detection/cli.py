"""The DETR attention-site study: ``python -m lab.studies.detection <subcommand>``.

``run``: config-overlay variants (``configs/detection/<name>.yaml`` on its ``base.yaml``; ``all``
is the study, ``detection.variants``) over seeds, then each variant's model costs::

    python -m lab.studies.detection run --variants all --seeds 0 1 2 --jobs 2 \\
        --out docs/results/detection_runs

A variant with a control (the variant it differs from in one thing only) gets the Δ test mAP vs
that control, paired by seed, with its 95 % Student-t interval. A (variant, seed) with an ``ok``
record (committed under ``docs/results/detection/runs/<experiment>/``, or in ``logs/``) is not
trained again: that is how the study continues on another machine; ``--publish`` copies the
records of the runs it finished there, to be committed. Writes ``<out>.md``, ``<out>.csv``
(summary), ``<out>_runs.csv``, ``<out>_curves.csv`` (val mAP at every validation) and, with the
costs (kept in ``docs/results/detection/costs.json``), ``<out>_sites.{md,csv}``: each site's
backend, projections, attention parameters and forward FLOPs, which ``sites`` writes alone (no
training, no timing)::

    python -m lab.studies.detection sites --out docs/results/detection_sites

``sensitivity [VARIANT]``: the λ / K / random-tokens grid around an optimization variant's own
point (default ``optimization_decoder_cross``), one option changed at a time or, with
``--full-grid``, every combination; a point is named ``<variant>@<option>=<value>,...`` after
the options it changes (``detection.sensitivity``), and its runs' experiment defaults to
``detection_sensitivity``, so the own point never replaces the study's run of that name::

    python -m lab.studies.detection sensitivity --seeds 0 1 2 \\
        --set trainer.max_steps=2000 --set trainer.val_check_interval=500 \\
        --out docs/results/detection_sensitivity

``ablation [VARIANT]``: the paper's form at the variant's site(s) with one ingredient swapped at
a time, beside the variant's control at the same budget (experiment ``detection_ablation``):
which ingredient decides whether a site learns.

``probe``: statistics of the decoder cross-attention weights of trained runs (``detection.probe``).

``report [PAGE ...]``: rebuild the study's pages (``docs/results/<PAGE>.md`` and its CSVs; all
of them without a name) from the committed run records alone (``detection.report``)::

    python -m lab.studies.detection report detection_runs
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from attn_lightning.records.environment import command_line
from lab.studies.arguments import (
    add_out,
    add_overrides,
    add_run_arguments,
    check_overrides,
    log_to_stderr,
    study_parser,
)
from lab.studies.detection import probe
from lab.studies.detection.costs import site_costs, write_sites
from lab.studies.detection.report import PAGES, write_page
from lab.studies.detection.sensitivity import SENSITIVITY_DEFAULT
from lab.studies.detection.study import HEADINGS, grid_runs, run_study
from lab.studies.detection.variants import variants

log = logging.getLogger("lab.studies.detection")
PROG = "python -m lab.studies.detection"
SUBCOMMANDS = ("run", "sensitivity", "ablation", "sites", "probe", "report")


def _study_arguments(parser: argparse.ArgumentParser, experiment: str) -> None:
    # What run, sensitivity and ablation share: the runs and the costs.
    add_run_arguments(
        parser,
        experiment=experiment,
        experiment_help=f"train.py --experiment of the runs (default {experiment})",
    )
    parser.add_argument("--batch", type=int, default=8, help="batch of the cost measurement")
    parser.add_argument("--repeats", type=int, default=20, help="timed forward calls")
    parser.add_argument("--no-costs", action="store_true", help="skip the cost measurement")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="copy each finished run's record to docs/results/detection/runs/<experiment>/, "
        "where its pages and a study continued elsewhere find it",
    )


def build_parser() -> argparse.ArgumentParser:
    """The detection study's CLI (see the module docstring)."""
    parser = study_parser(PROG, __doc__)
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="|".join(SUBCOMMANDS))
    run = sub.add_parser("run", help="train the variants, measure their costs, write the tables")
    run.add_argument(
        "--variants",
        nargs="+",
        required=True,
        help="configs/detection/<name>.yaml names, or all (the study)",
    )
    _study_arguments(run, "detection_report")
    for mode, what in (
        ("sensitivity", "the λ/K/random-tokens grid, one option changed at a time"),
        ("ablation", "one ingredient of the paper's form swapped at a time, plus the control"),
    ):
        grid = sub.add_parser(mode, help=f"around an optimization variant: {what}")
        grid.add_argument(
            "variant",
            nargs="?",
            default=SENSITIVITY_DEFAULT,
            metavar="VARIANT",
            help="an overlay with optimization attention at a site "
            f"(default {SENSITIVITY_DEFAULT})",
        )
        if mode == "sensitivity":
            grid.add_argument(
                "--full-grid",
                action="store_true",
                help="every combination (3×3×2), not one option at a time",
            )
        _study_arguments(grid, f"detection_{mode}")
    sites = sub.add_parser("sites", help="only <out>_sites.{md,csv}: parameters and FLOPs per site")
    sites.add_argument("--variants", nargs="+", default=["all"], help="names, or all (default)")
    add_overrides(sites)
    add_out(sites)
    probe.add_arguments(sub.add_parser("probe", help="the cross-attention weights of trained runs"))
    pages = sub.add_parser("report", help="rebuild the study's pages from its committed records")
    pages.add_argument(
        "pages",
        nargs="*",
        metavar="PAGE",
        help=f"pages to rebuild (default all: {', '.join(PAGES)})",
    )
    return parser


def main(argv: list[str] | None = None) -> list[Any]:
    """Run the detection study's subcommand; returns its rows (runs in table order, the probe's
    rows, or none for ``sites``)."""
    log_to_stderr()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    command = command_line(PROG, argv)
    if args.subcommand == "report":
        unknown = [name for name in args.pages if name not in PAGES]
        if unknown:
            parser.error(f"report: no page {', '.join(unknown)}; allowed: {', '.join(PAGES)}")
        for name in args.pages or PAGES:
            write_page(name)
        return []
    if args.subcommand == "probe":
        if args.batches < 1:
            parser.error(f"--batches must be >= 1, got {args.batches}")
        try:
            return probe.probe_runs(args, command=command)
        except FileNotFoundError as error:
            parser.error(str(error))
    check_overrides(parser, args.set)
    try:  # a variant or grid centre that is no overlay: a usage error naming those there are
        if args.subcommand in HEADINGS:  # a grid's points, then its control
            full = getattr(args, "full_grid", False)  # sensitivity's flag
            points, control = grid_runs(args.subcommand, args.variant, full=full)
            chosen = [point.variant for point in points] + variants(control)
        else:
            points, chosen = [], variants(args.variants)
    except ValueError as error:
        parser.error(f"{args.subcommand}: {error}")
    if args.subcommand == "sites":
        write_sites(args.out, site_costs(chosen, overrides=args.set), command=command)
        log.info("wrote %s_sites.md and %s_sites.csv", args.out, args.out)
        return []
    heading = HEADINGS.get(args.subcommand, "")
    return run_study(args, chosen, command=command, grid=points, heading=heading)
