"""Sweep CLI: repeat a config over variants (backends, overlays) and seeds; mean ± std tables.

    python -m attn_lightning.studies.sweep --config configs/reversal/base.yaml \\
        --backends softmax linear performer:num_features=64 polynomial:form=sketch \\
        --seeds 0 1 2 --set trainer.max_steps=3000 --out docs/results/reversal_len50 \\
        --metric test/token_acc --threshold 0.99

A variant is a name plus configs stacked on ``--config`` and/or ``key=value`` overrides:
``--backends`` gives attention specs ``name[:key=value,...]`` (values parsed as YAML, e.g.
``polynomial:form=sketch,sketch_size=64``), ``--variants`` config overlays (named by file stem).
Each (variant, seed) is a ``train.py fit`` run, spawned as ``python -m attn_lightning.cli fit``
(``--jobs`` at once; ``--train-script`` runs a script instead) with ``--test_after_fit``; its
``RunResult`` is read from the run's ``record.json`` (``logs/<experiment>/<run>/``).
``--seeds`` sets ``seed_everything`` (init, batch order, random features); the data seed stays
the config's.

Writes ``<out>.md`` (summary + per-run tables + the command), ``<out>.csv`` (summary) and
``<out>_runs.csv`` (one row per run), rewritten after every run. The columns are ``--metrics``
(default: every ``test/`` metric the runs report). With ``--metric`` and ``--threshold`` a run
"fails to converge" when the metric is below the threshold (above it with ``--direction min``);
a run that crashes or times out is counted apart. ``--pair VARIANT CONTROL`` (repeatable) adds the
columns "control" and the paired-by-seed Δ of the variant vs that control on ``--metric`` (else
the first ``--metrics``) with its 95 % interval (``results.paired``); ``--curve TAG`` writes
``<out>_curves.csv`` with every logged value of TAG per run and a table of it
(``results.curves``). Studies (``detection``, ``lora``) use ``studies.runner.Runner`` and
``results.tables.write_tables`` from Python.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from attn_lightning.results.curves import append_curves
from attn_lightning.results.environment import command_line
from attn_lightning.results.paired import comparisons
from attn_lightning.results.records import RunResult
from attn_lightning.results.tables import Convergence, summarize, write_tables
from attn_lightning.studies.arguments import (
    add_run_arguments,
    check_overrides,
    log_to_stderr,
    study_parser,
)
from attn_lightning.studies.runner import Runner, Variant, run_label

__all__ = ["RunResult", "Runner", "Variant", "main", "run_label", "summarize"]

log = logging.getLogger("attn_lightning.studies.sweep")
PROG = "python -m attn_lightning.studies.sweep"
PAIRED_NOTE = (
    "Δ vs control: per seed, the variant's value minus its control's (same seed: same "
    "initialisation stream, batch order and data), mean [95 % Student-t interval] over the n "
    "seeds both finished; one seed has no interval."
)


def build_parser() -> argparse.ArgumentParser:
    """The sweep CLI (see the module docstring)."""
    parser = study_parser(PROG, __doc__)
    add = parser.add_argument
    add("--config", action="append", required=True, help="base train.py config (repeatable)")
    add("--backends", nargs="+", default=[], help="attention variants: name[:key=value,...]")
    add("--variants", nargs="+", default=[], help="config overlay variants (YAML files)")
    add_run_arguments(
        parser, experiment=None, experiment_help="log/checkpoint folder (default: sweep-<out name>)"
    )
    add("--metrics", nargs="+", default=None, help="table columns (default: test/ metrics)")
    add("--metric", default=None, help="convergence metric (needs --threshold)")
    add("--threshold", type=float, default=None, help="convergence threshold of --metric")
    add("--direction", choices=("max", "min"), default="max", help="max: converged if >=")
    add("--timeout", type=float, default=None, help="seconds per run")
    add("--python", default=sys.executable, help="interpreter of the runs")
    add(
        "--train-script",
        "--train_script",
        default=None,
        type=Path,
        help="a script to run instead of python -m attn_lightning.cli (e.g. a stand-in)",
    )
    add("--dry-run", "--dry_run", action="store_true", help="print the commands only")
    add(
        "--curve",
        default=None,
        metavar="TAG",
        help="also write <out>_curves.csv and a table of this logged scalar per run (e.g. val/acc)",
    )
    add(
        "--pair",
        nargs=2,
        action="append",
        default=[],
        metavar=("VARIANT", "CONTROL"),
        help="add the paired-by-seed Δ of VARIANT vs CONTROL on --metric (else the first of "
        "--metrics) with its 95%% interval (repeatable)",
    )
    return parser


def main(argv: list[str] | None = None) -> list[RunResult]:
    """Run the sweep CLI; returns the runs (in the order of the tables)."""
    log_to_stderr()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.backends and not args.variants:
        parser.error("give --backends and/or --variants")
    if (args.metric is None) != (args.threshold is None):
        parser.error("--metric and --threshold go together")
    check_overrides(parser, args.set)
    try:  # fail before the first run on a malformed spec
        variants = [Variant.from_attention(s) for s in args.backends]
    except ValueError as error:
        parser.error(str(error))
    variants += [Variant.from_config(p) for p in args.variants]
    names = [v.name for v in variants]
    unknown = [n for pair in args.pair for n in pair if n not in names]
    if unknown:
        parser.error(f"--pair names {unknown}, not variants of this sweep; they are {names}")
    compared = args.metric or (args.metrics[0] if args.metrics else None)
    if args.pair and compared is None:
        parser.error("--pair needs the metric to compare: give --metric or --metrics")
    controls = dict(map(tuple, args.pair))
    experiment = args.experiment or f"sweep-{args.out.name}"
    runner = Runner(
        configs=tuple(args.config),
        overrides=tuple(args.set),
        experiment=experiment,
        python=args.python,
        train_script=args.train_script,
        timeout=args.timeout,
        resume=args.resume,
        skip_runs=args.skip_runs,
    )
    jobs = [(v, s) for v in variants for s in args.seeds]
    if args.dry_run:
        for variant, seed in jobs:
            log.info("%s", shlex.join(runner.command(variant, seed)))
        return []
    convergence = (
        None if args.metric is None else Convergence(args.metric, args.threshold, args.direction)
    )

    def tables(_: RunResult, finished: list[RunResult]) -> None:
        extra = comparisons(finished, controls, compared) if compared else {}
        titles = list(dict.fromkeys(t for row in extra.values() for t in row))
        write_tables(
            args.out,
            finished,
            command=command_line(PROG, argv),
            metrics=args.metrics,
            convergence=convergence,
            label="variant" if args.variants else "backend",
            jobs=args.jobs,
            # Every variant gets every column ("–" where it has no control): one CSV header.
            extra={n: {t: extra.get(n, {}).get(t) for t in titles} for n in names},
            notes=[PAIRED_NOTE] if extra else [],
        )

    results = runner.run_all(jobs, parallel=args.jobs, on_result=tables)
    if args.curve:  # once, at the end: it reads every run's TensorBoard folder
        append_curves(args.out, results, args.curve)
    log.info("wrote %s.md, %s.csv, %s_runs.csv", args.out, args.out, args.out)
    return results


if __name__ == "__main__":
    main()
