"""The command line of the warm-start study (``plan`` says what runs, ``tables`` what is written).

    python -m attn_lightning.studies.warm_start run --task reversal --seeds 0 1 2 \\
        --base-steps 1500 --finetune-steps 300 --set trainer.val_check_interval=100 \\
        --out docs/results/warm_start_reversal
    python -m attn_lightning.studies.warm_start tables --task reversal \\
        --runs docs/results/warm_start_reversal_runs.csv --out docs/results/warm_start_reversal

``tables`` rewrites the tables from a committed ``<out>_runs.csv`` (``committed``), training
nothing: for a change in how the runs are summarised once their metrics files are gone.

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
from attn_lightning.studies.warm_start.committed import read_runs
from attn_lightning.studies.warm_start.plan import BACKENDS, CONVERGED, TASKS, Plan, config

PROG = "python -m attn_lightning.studies.warm_start"
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
    rebuild = commands.add_parser("tables", help="rewrite the tables from a committed runs CSV")
    rebuild.add_argument("--task", choices=sorted(TASKS), required=True)
    rebuild.add_argument("--runs", type=Path, required=True, help="the study's <out>_runs.csv")
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
        runs = read_runs(args.runs)
        note = (
            f"Rebuilt from the committed `{args.runs.name}` (nothing trained); the runs were made "
            "by this study's `run` command (`docs/results/warm_start.md`).\n"
        )
        _write(args.out, runs, args.task, command, [note])
        log.info("wrote %s.md, %s.csv, %s_paired.csv, %s_runs.csv", *(args.out,) * 4)
        return runs
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

    def write(done: list[RunResult]) -> None:
        for run in done:
            run.info["backend"], run.info["condition"] = facts[run.variant]
        _write(args.out, done, args.task, command, [])

    bases = runner.run_all([(chosen[0][0], s) for s in args.seeds], parallel=args.jobs)
    rest = [(v, s) for s in args.seeds for v, _, _ in chosen[1:]]
    others = runner.run_all(
        rest, parallel=args.jobs, on_result=lambda _, done: write([*bases, *done])
    )
    runs = [*bases, *others]
    write(runs)
    log.info("wrote %s.md, %s.csv, %s_paired.csv, %s_runs.csv", *(args.out,) * 4)
    return runs
