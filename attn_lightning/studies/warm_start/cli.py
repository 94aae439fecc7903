"""The command line of the warm-start study (``plan`` says what runs, ``tables`` what is written).

    python -m attn_lightning.studies.warm_start run --task reversal --seeds 0 1 2 \\
        --base-steps 1500 --finetune-steps 300 --set trainer.val_check_interval=100 \\
        --out docs/results/warm_start_reversal

Each task's base config is stacked with ``configs/presets/cpu.yaml`` (``--preset`` to change);
every run is a ``train.py`` run through ``studies.runner`` (``--jobs`` at once, ``--resume`` reuses
metrics files). Runs are ordered so every seed's softmax base trains before the runs that start
from it; with ``--jobs`` > 1 the bases run first, alone.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from attn_lightning.results.records import RunResult
from attn_lightning.studies.arguments import (
    add_run_arguments,
    check_overrides,
    log_to_stderr,
    study_parser,
)
from attn_lightning.studies.runner import Runner
from attn_lightning.studies.warm_start import tables
from attn_lightning.studies.warm_start.plan import BACKENDS, CONVERGED, TASKS, Plan, config

PROG = "python -m attn_lightning.studies.warm_start"
log = logging.getLogger("attn_lightning.studies.warm_start")


def build_parser() -> argparse.ArgumentParser:
    """The study's parser: ``run``."""
    parser = study_parser(PROG, __doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run}")
    run = commands.add_parser("run", help="train and tabulate one task's warm-start study")
    run.add_argument("--task", choices=sorted(TASKS), required=True)
    run.add_argument("--base-steps", type=int, required=True, help="softmax base's steps")
    run.add_argument("--finetune-steps", type=int, required=True, help="fine-tune's steps")
    run.add_argument("--redraw-every", type=int, default=100, help="Performer redraw interval")
    run.add_argument("--preset", default="configs/presets/cpu.yaml", help="stacked last")
    add_run_arguments(run, experiment=None, experiment_help="default: warm-start-<task>")
    return parser


def main(argv: Sequence[str] | None = None) -> list[RunResult]:
    """Run the study's CLI; returns the runs."""
    log_to_stderr()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    check_overrides(parser, args.set)
    experiment = args.experiment or f"warm-start-{args.task}"
    plan = Plan(args.task, args.base_steps, args.finetune_steps, args.redraw_every, experiment)
    chosen = plan.variants()
    runner = Runner(
        configs=(str(config(args.task)), args.preset),
        # Step budgets, not the config's epochs (digits trains by epochs).
        overrides=("trainer.max_epochs=-1", *args.set),
        experiment=experiment,
        runs_dir=Path("sweeps") / experiment,
        resume=args.resume,
        skip_runs=args.skip_runs,
    )
    facts = {v.name: (backend, condition) for v, backend, condition in chosen}
    command = f"{PROG} {shlex.join(argv)}"

    def write(done: list[RunResult]) -> None:
        for run in done:
            run.info["backend"], run.info["condition"] = facts[run.variant]
        tables.write(
            args.out,
            done,
            backends=["softmax", *BACKENDS],
            metrics=TASKS[args.task][1],
            command=command,
            heading=f"Warm start from softmax: {args.task}",
            converged=CONVERGED.get(args.task),
        )

    bases = runner.run_all([(chosen[0][0], s) for s in args.seeds], parallel=args.jobs)
    rest = [(v, s) for s in args.seeds for v, _, _ in chosen[1:]]
    others = runner.run_all(
        rest, parallel=args.jobs, on_result=lambda _, done: write([*bases, *done])
    )
    runs = [*bases, *others]
    write(runs)
    log.info("wrote %s.md, %s.csv, %s_paired.csv, %s_runs.csv", *(args.out,) * 4)
    return runs
