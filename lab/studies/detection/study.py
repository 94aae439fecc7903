"""The detection study's runs: variants (or a grid's points) over seeds, then costs and tables.

``run_study`` is what ``run``, ``sensitivity`` and ``ablation`` share. The tables are rewritten
after every run without the cost columns, so a long study can be inspected part-way; the costs
(``detection.costs``) come once, at the end.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch

from lab.results.records import RunResult, publish_run, study_runs_dir
from lab.studies.detection.costs import (
    costs_file,
    measure,
    site_costs,
    write_costs,
    write_sites,
)
from lab.studies.detection.sensitivity import (
    ABLATIONS,
    GRID,
    GridPoint,
    sensitivity_grid,
)
from lab.studies.detection.tables import write
from lab.studies.detection.variants import CONFIGS, CONTROLS
from lab.studies.runner import Runner, Variant

# The runs' study tag; their committed records are docs/results/detection/runs/<experiment>/<run>/
STUDY = "detection"
HEADINGS = {
    "sensitivity": "Sensitivity of optimization attention",
    "ablation": "Ablation of optimization attention: one ingredient of the paper's form "
    "swapped at a time",
}


def grid_runs(mode: str, centre: str, *, full: bool = False) -> tuple[list[GridPoint], list[str]]:
    """The points of ``mode``'s grid (``sensitivity``: ``GRID``, ``ablation``: ``ABLATIONS``)
    around ``centre`` and the variants its table shows after them: an ablation's control at
    the same budget (the ladder's floor and ceiling). ValueError naming the variants a grid can
    centre on."""
    points = sensitivity_grid(centre, full=full, grid=GRID if mode == "sensitivity" else ABLATIONS)
    return points, [CONTROLS[centre]] if mode == "ablation" and centre in CONTROLS else []


def run_study(
    args: argparse.Namespace,
    chosen: list[Variant],
    *,
    command: str,
    grid: Sequence[GridPoint] = (),
    heading: str = "",
) -> list[RunResult]:
    """Train (or reuse) ``chosen`` over ``args.seeds``, measure their costs and write the tables
    (a grid's tables, headed ``heading``, when ``grid`` is given); returns the runs in table
    order. ``args`` holds the flags of ``arguments.add_run_arguments`` plus ``--no-costs``,
    ``--publish``, ``--batch`` and ``--repeats``."""
    tables = partial(write, args.out, command=command, jobs=args.jobs, grid=grid, heading=heading)
    runner = Runner(
        configs=(str(CONFIGS / "base.yaml"),),
        overrides=tuple(args.set),
        experiment=args.experiment,
        study=STUDY,
        record_roots=(study_runs_dir(STUDY) / args.experiment,),
        publish=partial(publish_run, study=STUDY, group=args.experiment) if args.publish else None,
        resume=args.resume,
        skip_runs=args.skip_runs,
    )
    results = runner.run_all(
        [(v, s) for v in chosen for s in args.seeds],
        parallel=args.jobs,
        on_result=lambda _, done: tables(done, {}),
    )
    costs: dict[str, dict[str, Any]] = {}
    if not args.no_costs:
        torch.set_num_threads(1)
        for v in chosen:
            costs[v.name] = measure(v, overrides=args.set, batch=args.batch, repeats=args.repeats)
        write_costs(costs_file(args.out.parent), costs, command=command)
        write_sites(args.out, site_costs(chosen, overrides=args.set), command=command)
    tables(results, costs)
    return results
