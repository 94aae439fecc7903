"""Sweep CLI: repeat a config over variants (backends, overlays) and seeds; mean ± std tables.

    python -m lab.studies.sweep --config configs/reversal/base.yaml \\
        --backends softmax linear performer:num_features=64 polynomial:form=sketch \\
        --seeds 0 1 2 --set trainer.max_steps=3000 --out docs/results/reversal_len50 \\
        --metric test/token_acc --threshold 0.99
    python -m lab.studies.sweep --plan configs/studies/sequence_reversal_len50.yaml

Each (variant, seed) is a ``train.py fit --test_after_fit`` run of ``studies.runner.Runner``;
``--seeds`` sets ``seed_everything``, the data seed stays the config's. A (variant, seed) with an
``ok`` record in the study's ``<out>/runs/`` is taken, not trained, and each run that finishes
``ok`` is published there, so a sweep continued on another machine trains only the rest;
``--report-only`` trains nothing. ``--plan configs/studies/<page>.yaml`` gives the options by
their long names (``--out`` by default ``docs/results/<plan name>``); options given with it
override it. Writes ``<out>.md``, ``<out>.csv`` (summary) and ``<out>_runs.csv`` after every run.

A plan's ``pages:`` section adds the pages that a study's own question needs, each a report over
run records (``REPORTS``), written once the runs are done (or with ``--report-only``)::

    pages:
      polynomial_len50_norm_p4:          # docs/results/<page>.md and its CSVs
        report: reversal                 # a kind of REPORTS
        runs: [docs/results/polynomial_len50/runs]  # record folders (default: <out>/runs)
        variants: [polynomial:degree=4,normalize=false, polynomial:degree=4]  # its options
        control: polynomial:degree=4,normalize=false

A page named as the plan's own (``<out>``) replaces its sweep table.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import command_line
from lab.results.curves import append_curves
from lab.results.paired import comparisons
from lab.results.records import (
    NOT_RUN,
    RunResult,
    load_runs,
    publish_run,
    study_runs_dir,
)
from lab.results.tables import Convergence, write_tables
from lab.studies.arguments import (
    add_run_arguments,
    check_overrides,
    log_to_stderr,
    plan_argv,
    study_parser,
)
from lab.studies.runner import Runner, Variant

log = logging.getLogger("lab.studies.sweep")
PROG = "python -m lab.studies.sweep"
PLANS = Path("configs/studies")
# Options of one call, not of the study: a plan cannot set them, and the page's command omits
# the two that change only where and how its files are made.
CALL_ONLY = ("plan", "report-only", "into", "dry-run")
PAIRED_NOTE = (
    "Δ vs control: per seed, the variant's value minus its control's (same seed: same "
    "initialisation stream, batch order and data), mean [95 % Student-t interval] over the n "
    "seeds both finished; one seed has no interval."
)
# A plan page's report kinds: writer(record folders, out, *, command, **the page's options).
REPORTS = {
    "lora": "lab.studies.lora.report:report",
    "paired": "lab.studies.image.tables:write_paired",  # unimodal: mean ± std, Δ
    "reversal": "lab.studies.reversal.report:report",
    "trajectories": "lab.studies.reversal.trajectories:write_trajectories",
}


@dataclass(frozen=True)
class Page:
    """A page of a plan's ``pages:`` section: its name, writer, record folders and options."""

    name: str
    write: Callable[..., object]
    runs: list[Path]
    options: dict[str, Any]


def plan_pages(pages: object, out: Path) -> list[Page]:
    """A plan's ``pages:`` section, checked (module docstring); ``out``: the sweep's ``--out``.

    Raises:
        ValueError: naming the page and key when a report kind or option is not one there is.
    """
    if not isinstance(pages, dict) or not all(isinstance(s, dict) for s in pages.values()):
        raise ValueError("pages: give a mapping of page names to {report: KIND, option: value}")
    checked = []
    for name, spec in pages.items():
        options = dict(spec)
        kind = options.pop("report", None)
        if kind not in REPORTS:
            raise ValueError(f"pages: {name}: report {kind!r}; the reports are {list(REPORTS)}")
        module, function = REPORTS[kind].split(":")
        write = getattr(importlib.import_module(module), function)
        runs = options.pop("runs", [out / "runs"])
        runs = [runs] if isinstance(runs, str) else runs  # one folder, not its characters
        keys = inspect.signature(write).parameters.values()
        allowed = [k.name for k in keys if k.kind == k.KEYWORD_ONLY and k.name != "command"]
        unknown = [key for key in options if key not in allowed]
        if unknown:
            raise ValueError(
                f"pages: {name}: unknown key {unknown[0]!r}; the keys of a {kind} page are "
                f"report, runs, {', '.join(allowed)}"
            )
        checked.append(Page(str(name), write, [Path(r) for r in runs], options))
    return checked


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
    add(
        "--records-also",
        nargs="+",
        type=Path,
        default=[],
        help="more folders of this study's committed records (its ok runs are not trained again)",
    )
    add("--report-only", action="store_true", help="train nothing: the page from <out>/runs/")
    add("--into", type=Path, default=None, help="write the files here instead of beside --out")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[Variant], str]:
    """The sweep's options (a plan's, then ``argv``'s; its pages in ``args.pages``), its variants
    and the page's command."""
    parser = build_parser()
    path = parser.parse_args(argv).plan
    planned: list[str] = []
    sections: dict[str, Any] = {}
    if path is not None:
        try:
            planned, sections = plan_argv(parser, path, exclude=CALL_ONLY, sections=["pages"])
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
    try:  # fail before the first run on a malformed spec or page
        variants = [Variant.from_attention(s) for s in args.backends]
        args.pages = plan_pages(sections.get("pages", {}), args.out)
    except ValueError as error:
        parser.error(f"plan {path}: {error}" if "pages:" in str(error) else str(error))
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
        record_roots=(records, *args.records_also),
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
        )

    sweep_page = all(page.name != study for page in args.pages)  # else a page replaces it
    if args.report_only:
        results = report([records, *args.records_also], [(v.name, s) for v, s in jobs])
        if sweep_page:
            tables(None, results)
    else:
        results = runner.run_all(jobs, parallel=args.jobs, on_result=tables if sweep_page else None)
    if args.curve and sweep_page:  # once, at the end: it reads every run's curves
        append_curves(out, results, args.curve)
    if sweep_page:
        log.info("wrote %s.md, %s.csv, %s_runs.csv", out, out, out)
    for page in args.pages:
        try:
            page.write(page.runs, out.with_name(page.name), command=command, **page.options)
        except (FileNotFoundError, ValueError) as error:
            build_parser().error(f"page {page.name}: {error}")
        log.info("wrote %s.md and its CSVs", out.with_name(page.name))
    return results


def report(records: Sequence[Path], jobs: list[tuple[str, int]]) -> list[RunResult]:
    """The runs of ``jobs`` (variant name, seed) from the records under ``records`` alone (the
    first folder's where two hold one), in job order; a job without a record is ``NOT_RUN``."""
    found = {(r.variant, r.seed): r for root in reversed(records) for r in load_runs(root)}
    return [found.get(job) or RunResult(job[0], job[1], None, NOT_RUN) for job in jobs]


if __name__ == "__main__":
    main()
