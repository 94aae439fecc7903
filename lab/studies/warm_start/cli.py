"""The command line of the warm-start study (``plan`` says what runs, ``tables`` what is written).

    python -m lab.studies.warm_start run --task reversal --seeds 0 1 2 \\
        --base-steps 1500 --finetune-steps 300 --set trainer.val_check_interval=100 \\
        --out docs/results/warm_start_reversal
    python -m lab.studies.warm_start tables --task reversal \\
        --out docs/results/warm_start_reversal

``run`` trains, through ``studies.runner``, the (variant, seed) pairs without an ``ok`` record of
the same task and budgets under ``docs/results/warm_start/runs/<task>/`` and commits each
finished one there; every seed's softmax base trains first (the others start from it), alone
with ``--jobs`` > 1. Each task's base config is stacked with ``--preset`` (the CPU preset).
``tables`` rewrites the tables from those records alone, training nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial

from attn_lightning.records.environment import command_line
from lab.results.records import RunResult, load_runs, publish_run, study_runs_dir
from lab.studies.arguments import (
    add_out,
    add_run_arguments,
    check_overrides,
    log_to_stderr,
    study_parser,
)
from lab.studies.runner import Runner
from lab.studies.warm_start import tables
from lab.studies.warm_start.plan import TASKS, Plan

PROG = "python -m lab.studies.warm_start"
STUDY = "warm_start"  # its records: docs/results/warm_start/runs/<task>/


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
    add_out(rebuild)
    return parser


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    """Run the study's CLI; returns the runs."""
    log_to_stderr()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    write = partial(tables.write, args.out, task=args.task, command=command_line(PROG, argv))
    if args.command == "tables":
        runs = load_runs(study_runs_dir(STUDY), study=STUDY, task=args.task)
        if not runs:
            parser.error(f"no {args.task} run records under {study_runs_dir(STUDY)}")
        write(runs, notes=[
            f"Rebuilt from the committed run records `{STUDY}/runs/{args.task}/` (nothing "
            "trained); the runs were made by this study's `run` command "
            "(`docs/results/warm_start.md`).\n"
        ])  # fmt: skip
        return runs
    check_overrides(parser, args.set)
    experiment = args.experiment or f"warm-start-{args.task}"
    plan = Plan(args.task, args.base_steps, args.finetune_steps, args.redraw_every, experiment)
    base, *chosen = plan.variants()
    runner = Runner(
        configs=(TASKS[args.task][0], args.preset),
        # Step budgets, not the config's epochs (digits trains by epochs).
        overrides=("trainer.max_epochs=-1", *args.set),
        experiment=experiment,
        study=STUDY,
        tags=plan.tags(),
        record_roots=(study_runs_dir(STUDY),),
        publish=partial(publish_run, study=STUDY, group=args.task),
        resume=args.resume,
        skip_runs=args.skip_runs,
    )
    jobs = [(base, s) for s in args.seeds]
    bases = runner.run_all(jobs, parallel=args.jobs, on_result=lambda _, done: write(done))
    rest = [(v, s) for s in args.seeds for v in chosen]
    others = runner.run_all(rest, parallel=args.jobs, on_result=lambda _, d: write([*bases, *d]))
    return [*bases, *others]
