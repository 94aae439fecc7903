"""Sweep CLI: repeat a config over variants (backends, overlays) and seeds; mean ± std tables.

    python -m attn_lightning.studies.sweep --config configs/reversal/base.yaml \\
        --backends softmax linear performer:num_features=64 polynomial:form=sketch \\
        --seeds 0 1 2 --set trainer.max_steps=3000 --out docs/results/reversal_len50 \\
        --metric test/token_acc --threshold 0.99
    python -m attn_lightning.studies.sweep --plan configs/studies/sequence_reversal_len50.yaml

Each (variant, seed) is a ``train.py fit --test_after_fit`` run of ``studies.runner.Runner``;
``--seeds`` sets ``seed_everything``, the data seed stays the config's. A (variant, seed) with an
``ok`` record in the study's ``<out>/runs/`` is taken, not trained, and each run that finishes
``ok`` is published there, so a sweep continued on another machine trains only the rest;
``--report-only`` trains nothing. ``--plan configs/studies/<page>.yaml`` gives the options by
their long names (``--out`` by default ``docs/results/<plan name>``); options given with it
override it. Writes ``<out>.md``, ``<out>.csv`` (summary) and ``<out>_runs.csv`` after every run.
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
from attn_lightning.results.records import (
    NOT_RUN,
    RunResult,
    load_runs,
    publish_run,
    study_runs_dir,
)
from attn_lightning.results.tables import Convergence, records_machine_line, write_tables
from attn_lightning.studies.arguments import (
    add_run_arguments,
    check_overrides,
    log_to_stderr,
    plan_argv,
    study_parser,
)
from attn_lightning.studies.runner import Runner, Variant

log = logging.getLogger("attn_lightning.studies.sweep")
PROG = "python -m attn_lightning.studies.sweep"
PLANS = Path("configs/studies")
# Options of one call, not of the study: a plan cannot set them, and the page's command omits
# the two that change only where and how its files are made.
CALL_ONLY = ("plan", "report-only", "into", "dry-run")
PAIRED_NOTE = (
    "Δ vs control: per seed, the variant's value minus its control's (same seed: same "
    "initialisation stream, batch order and data), mean [95 % Student-t interval] over the n "
    "seeds both finished; one seed has no interval."
)


def build_parser() -> argparse.ArgumentParser:
    """The sweep CLI (see the module docstring)."""
    parser = study_parser(PROG, __doc__)
    add = parser.add_argument
    add("--config", action="append", help="base train.py config (repeatable; required)")
    add("--backends", nargs="+", default=[], help="attention variants: name[:key=value,...]")
    add("--variants", nargs="+", default=[], help="config overlay variants (YAML files)")
    add_run_arguments(
        parser,
        experiment=None,
        experiment_help="log/checkpoint folder (default: sweep-<out name>)",
        out_required=False,  # a --plan gives it
    )
    add("--metrics", nargs="+", default=None, help="table columns (default: test/ metrics)")
    add("--metric", default=None, help="convergence metric (needs --threshold)")
    add("--threshold", type=float, default=None, help="convergence threshold of --metric")
    add("--direction", choices=("max", "min"), default="max", help="max: converged if >=")
    add("--train-script", type=Path, help="a script to run instead of attn_lightning.cli")
    add("--dry-run", action="store_true", help="print the commands only")
    add("--curve", metavar="TAG", help="also write <out>_curves.csv of this logged scalar")
    add(
        "--pair",
        nargs=2,
        action="append",
        default=[],
        metavar=("VARIANT", "CONTROL"),
        help="paired-by-seed Δ of VARIANT vs CONTROL, 95%% interval (repeatable)",
    )
    add("--plan", type=Path, default=None, help="a plan file of these options (YAML)")
    add("--report-only", action="store_true", help="train nothing: the page from <out>/runs/")
    add("--into", type=Path, default=None, help="write the files here instead of beside --out")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[Variant], str]:
    """The sweep's options (a plan's, then ``argv``'s), its variants and the page's command."""
    parser = build_parser()
    path = parser.parse_args(argv).plan
    planned = []
    if path is not None:
        try:
            planned = plan_argv(parser, path, exclude=CALL_ONLY)
        except ValueError as error:
            parser.error(str(error))
        if "--out" not in planned:
            planned += ["--out", str(Path("docs/results") / path.stem)]
    args = parser.parse_args([*planned, *argv])
    if args.out is None:
        parser.error("give --out (or a --plan)")
    if not args.config:
        parser.error("give --config (or a --plan that names it)")
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
    args.compared = args.metric or (args.metrics[0] if args.metrics else None)
    if args.pair and not args.compared:
        parser.error("--pair needs the metric to compare: give --metric or --metrics")
    # --report-only and --into change no number: the page's command leaves them out.
    after = ["", *argv]
    own = [a for a, b in zip(argv, after) if a != "--report-only" and "--into" not in (a[:6], b)]
    return args, variants, command_line(PROG, own)


def main(argv: list[str] | None = None) -> list[RunResult]:
    """Run the sweep CLI; returns the runs (in the order of the tables)."""
    log_to_stderr()
    args, variants, command = parse(sys.argv[1:] if argv is None else argv)
    study, results_dir = args.out.name, args.out.parent
    records = study_runs_dir(study, results_dir)
    runner = Runner(
        configs=tuple(args.config),
        overrides=tuple(args.set),
        experiment=args.experiment or f"sweep-{study}",
        study=study,
        record_roots=(records,),
        publish=lambda folder: publish_run(folder, study, results_dir),
        train_script=args.train_script,
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
    out = args.out if args.into is None else args.into / study

    def tables(_: RunResult | None, finished: list[RunResult]) -> None:
        extra = comparisons(finished, dict(args.pair), args.compared) if args.compared else {}
        titles = list(dict.fromkeys(t for row in extra.values() for t in row))
        write_tables(
            out,
            finished,
            command=command,
            metrics=args.metrics,
            convergence=convergence,
            label="variant" if args.variants else "backend",
            jobs=args.jobs,
            # Every variant gets every column ("–" where it has no control): one CSV header.
            extra={v.name: {t: extra.get(v.name, {}).get(t) for t in titles} for v in variants},
            notes=[PAIRED_NOTE] if extra else [],
            machine=records_machine_line(finished, jobs=args.jobs),
        )

    if args.report_only:
        results = report(records, [(v.name, s) for v, s in jobs])
        tables(None, results)
    else:
        results = runner.run_all(jobs, parallel=args.jobs, on_result=tables)
    if args.curve:  # once, at the end: it reads every run's curves
        append_curves(out, results, args.curve)
    log.info("wrote %s.md, %s.csv, %s_runs.csv", out, out, out)
    return results


def report(records: Path, jobs: list[tuple[str, int]]) -> list[RunResult]:
    """The runs of ``jobs`` (variant name, seed) from the records under ``records`` alone, in
    job order; a job without a record is ``NOT_RUN``."""
    found: dict[tuple[str, int], RunResult] = {(r.variant, r.seed): r for r in load_runs(records)}
    return [found.get(job) or RunResult(job[0], job[1], None, NOT_RUN) for job in jobs]


if __name__ == "__main__":
    main()
