"""The command line of the warm-start study (``plan`` says what runs, ``tables`` what is written).

    python -m attn_lightning.studies.warm_start run --task reversal --seeds 0 1 2 \\
        --base-steps 1500 --finetune-steps 300 --set trainer.val_check_interval=100 \\
        --out docs/results/warm_start_reversal
    python -m attn_lightning.studies.warm_start tables --task reversal \\
        --out docs/results/warm_start_reversal

Every run's record is committed under ``docs/results/warm_start/runs/<task>/`` (``run`` copies
each finished one there, ``results.records.publish_run``), tagged with the task and its budgets;
``run`` trains only the (variant, seed) pairs without an ``ok`` record there of the same tags, so
a study continues on another machine. ``tables`` rewrites the tables from those records alone
(``results.records.load_runs``), training nothing.

Each task's base config is stacked with ``configs/presets/cpu.yaml`` (``--preset`` to change);
every run is a ``train.py`` run through ``studies.runner`` (``--jobs`` at once, ``--resume`` reuses
the ok records in ``logs/``). Runs are ordered so every seed's softmax base trains before the runs
that start from it; with ``--jobs`` > 1 the bases run first, alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from attn_lightning.results.records import RunResult, load_runs, publish_run, study_runs_dir
from attn_lightning.studies.arguments import (
    add_run_arguments,
    check_overrides,
    log_to_stderr,
    study_parser,
)
from attn_lightning.studies.runner import Runner
from attn_lightning.studies.warm_start import tables
from attn_lightning.studies.warm_start.plan import (
    BACKENDS,
    CONVERGED,
    TASKS,
    Plan,
    config,
    in_run_order,
)

PROG = "python -m attn_lightning.studies.warm_start"
STUDY = "warm_start"  # its records: docs/results/warm_start/runs/<task>/
log = logging.getLogger("attn_lightning.studies.warm_start")


def build_parser() -> argparse.ArgumentParser:
    """The study's parser: ``run`` and ``tables``."""
    parser = study_parser(PROG, __doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,tables}")
    run = commands.add_parser("run", help="train and tabulate one task's warm-start study")
    run.add_argument("--task", choices=sorted(TASKS), required=True)
    run.add_argument("--base-steps", type=int, required=True, help="softmax base's steps")
    run.add_argument("--finetune-steps", type=int, required=True, help="fine-tune's steps")
    run.add_argument("--redraw-every", type=int, default=100, help="Performer redraw interval")
    run.add_argument("--preset", default="configs/presets/cpu.yaml", help="stacked last")
    add_run_arguments(run, experiment=None, experiment_help="default: warm-start-<task>")
    rebuild = commands.add_parser("tables", help="rewrite the tables from the committed records")
    rebuild.add_argument("--task", choices=sorted(TASKS), required=True)
    rebuild.add_argument(
        "--records",
        type=Path,
        default=study_runs_dir(STUDY),
        help="the run records (default: docs/results/warm_start/runs)",
    )
    rebuild.add_argument("--out", type=Path, required=True, help="output path, no extension")
    return parser


def _write(out: Path, runs: list[RunResult], task: str, command: str, notes: list[str]) -> None:
    tables.write(
        out,
        runs,
        backends=["softmax", *BACKENDS],
        metrics=TASKS[task][1],
        command=command,
        heading=f"Warm start from softmax: {task}",
        notes=notes,
        converged=CONVERGED.get(task),
    )


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    """Run the study's CLI; returns the runs."""
    log_to_stderr()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    command = f"{PROG} {shlex.join(argv)}"
    if args.command == "tables":
        runs = in_run_order(load_runs(args.records, study=STUDY, task=args.task))
        if not runs:
            parser.error(f"no {args.task} run records under {args.records}")
        note = (
            f"Rebuilt from the committed run records `{STUDY}/runs/{args.task}/` (nothing "
            "trained); the runs were made by this study's `run` command "
            "(`docs/results/warm_start.md`).\n"
        )
        _write(args.out, runs, args.task, command, [note])
        log.info("wrote %s.md, %s.csv, %s_paired.csv, %s_runs.csv", *(args.out,) * 4)
        return runs
    check_overrides(parser, args.set)
    experiment = args.experiment or f"warm-start-{args.task}"
    plan = Plan(args.task, args.base_steps, args.finetune_steps, args.redraw_every, experiment)
    # The facts a row of the tables needs ride on the run as tags (RunResult.info).
    chosen = [
        dataclasses.replace(v, info={"backend": backend, "condition": condition})
        for v, backend, condition in plan.variants()
    ]
    runner = Runner(
        configs=(str(config(args.task)), args.preset),
        # Step budgets, not the config's epochs (digits trains by epochs).
        overrides=("trainer.max_epochs=-1", *args.set),
        experiment=experiment,
        study=STUDY,
        tags=plan.tags(),
        record_roots=(study_runs_dir(STUDY),),
        publish=lambda folder: publish_run(folder, STUDY, group=args.task),
        resume=args.resume,
        skip_runs=args.skip_runs,
    )

    def write(_: RunResult | None, done: list[RunResult]) -> None:
        _write(args.out, in_run_order(done), args.task, command, [])

    bases = runner.run_all(
        [(chosen[0], s) for s in args.seeds], parallel=args.jobs, on_result=write
    )
    rest = [(v, s) for s in args.seeds for v in chosen[1:]]
    others = runner.run_all(
        rest, parallel=args.jobs, on_result=lambda r, done: write(r, [*bases, *done])
    )
    runs = [*bases, *others]
    write(None, runs)
    log.info("wrote %s.md, %s.csv, %s_paired.csv, %s_runs.csv", *(args.out,) * 4)
    return runs
