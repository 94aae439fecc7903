"""Sweep CLI: one command runs any study from its plan; mean ± std tables and the plan's pages.

    python -m lab.studies.sweep --plan configs/studies/sequence_reversal_len50.yaml
    python -m lab.studies.sweep --config configs/reversal/base.yaml \\
        --backends softmax linear performer:num_features=64 polysketch \\
        --seeds 0 1 2 --set trainer.max_steps=3000 --out docs/results/reversal_len50 \\
        --metric test/token_acc --threshold 0.99

The plan grammar (``configs/studies/<page>.yaml``; every key but ``grid``, ``stages``, ``pages``,
``select`` is an option of this command by its long name, overridden by those given beside it)::

    config: [configs/reversal/base.yaml]     # train.py's config stack
    backends: [softmax, performer:num_features=64]   # attention variants
    variants: [configs/image/linear.yaml]    # config-overlay variants (named by file stem)
    seeds: [0, 1, 2]                          # every stage runs every seed
    set: [trainer.max_steps=600]              # train.py KEY=VALUE arguments of every run
    grid:                                     # each combination crossed with every variant;
      model.init_args.width: [64, 128]        # its values join the label and the runs' tags:
      data.init_args.num_kv_pairs: [4, 8]     # "softmax,width=64,num_kv_pairs=4"
      model.init_args.lora_r: {tag: rank, values: [1, 8]}        # tagged "rank", not "lora_r"
      model.init_args.target_modules: {tag: head, values: {all: [fc1, fc2, fc3], hidden: [fc1]}}
    select: {keys: [model.init_args.lr], metric: val/query_acc, seeds: [0]}  # (studies.select)
    stages:                                   # ordered; absent: one stage, the plan's variants
      base: {backends: [softmax]}
      zero_shot: {from: base, subcommand: test, backends: [linear]}
      finetune: {from: base, backends: [linear], set: [trainer.max_steps=200]}
      pick: {from: {stage: base, variant: softmax}, backends: [linear]}
      one_base: {from: {stage: base, seed: 0}, backends: [linear]}   # every seed from seed 0's
      adapt: {from: base, checkpoint: best, start: model.init_args.base_checkpoint,
              variants: [configs/lora/lora.yaml], tags: {adaptation: lora}}
    pages:                                    # the study's own pages (below)
      polynomial_len50_norm_p4:               # docs/results/<page>.md and its CSVs
        report: reversal                      # a kind of REPORTS
        runs: [docs/results/polynomial_len50/runs]  # record folders (default: <out>/runs)
        control: polynomial:degree=4          # the page's other keys: its report's options

A grid's ``{tag: NAME, values: ...}`` tags its values NAME; ``values`` as a mapping shows each value
by its label (no brackets in run folders' names). A stage's ``backends``/``variants`` (either
replaces both), ``grid``, ``config`` and ``seeds`` replace the plan's; its ``set`` comes after the
plan's; ``subcommand`` is ``fit`` or ``test``; ``tags`` are added to its runs' (not ``study``,
``variant``, ``seed``, ``stage`` or a grid's). ``from: STAGE`` starts each run from STAGE's run of
the same seed and variant label (else of the same grid values, else its only one); ``{stage,
variant, seed}`` names the variant or pins the seed. ``checkpoint:`` ``last`` (default) or ``best``
(STAGE names it with a plain ``checkpoint.filename=NAME``); ``start:`` ``init_from`` (a fit's
default: weights only, ``cli.warm_start``), ``ckpt_path`` (a test's: scored with its backend as
``attention_override``) or a dotted config option (``model.init_args.base_checkpoint``; a test then
scores the model as built). Without an ``ok`` source run: ``NOT_RUN``.

Each (stage, variant, seed) is a ``train.py`` run of ``runner.Runner``. A run with an ``ok``
record in ``<out>/runs/[<stage>/]<variant>-s<seed>/`` is taken, not trained, and each run that
finishes ``ok`` is published there, so a sweep continued elsewhere trains only the rest. A page
of ``pages:`` is a report kind (``REPORTS``: ``write(record folders, out, *, command, **the
page's other keys)``); one named as the plan's own (``<out>``) replaces its sweep table.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import command_line
from lab.results.paired import comparisons, write_paired
from lab.results.records import (
    NOT_RUN,
    OK,
    RunResult,
    publish_run,
    run_folder,
    runs_of,
    study_runs_dir,
)
from lab.results.tables import Convergence, append_curves, write_tables
from lab.studies.detection.report import write_page as write_detection
from lab.studies.detection.report import write_probe, write_sites
from lab.studies.lora.report import report as lora_report
from lab.studies.plan import SECTIONS, plan_argv, plan_pages
from lab.studies.recall import write_recall, write_recall_widths
from lab.studies.reversal import report as reversal_report
from lab.studies.runner import Runner, Variant
from lab.studies.select import check_select, run_selected
from lab.studies.stages import Stage, plan_stages, source_checkpoint
from lab.studies.trajectories import write_trajectories
from lab.studies.warm_start.tables import write as write_warm_start

log = logging.getLogger("lab.studies.sweep")
PROG = "python -m lab.studies.sweep"
PLANS = Path("configs/studies")
PAIRED_NOTE = (
    "Δ vs control: per seed, the variant's value minus its control's (same seed: same "
    "initialisation stream, batch order and data), mean [95 % Student-t interval] over the n "
    "seeds both finished; one seed has no interval."
)
REPORTS: dict[str, Callable[..., object]] = {
    "detection": write_detection,  # table, controls, costs, grids
    "detection_probe": write_probe,
    "detection_sites": write_sites,
    "lora": lora_report,  # the student's table, learning rates chosen on validation
    "paired": write_paired,  # unimodal: mean ± std, Δ
    "recall": write_recall,  # recall against recurrent state, lr chosen on validation
    "recall_widths": write_recall_widths,  # the same, a line per variant through its widths
    "reversal": reversal_report,
    "trajectories": write_trajectories,
    "warm_start": write_warm_start,  # its conditions per backend, warm start vs scratch
}


def build_parser() -> argparse.ArgumentParser:
    """The sweep CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--config", action="append", help="base train.py config (repeatable; required)")
    add("--backends", nargs="+", default=[], help="attention variants: name[:key=value,...]")
    add("--variants", nargs="+", default=[], help="config overlay variants (YAML files)")
    add("--seeds", nargs="+", type=int, default=[0, 1, 2], help="each run's seed_everything")
    add("--set", action="append", default=[], metavar="KEY=VALUE", help="train.py argument")
    add("--jobs", type=int, default=1, help="training runs at once")
    add("--resume", action="store_true", help="reuse ok records, continue stopped runs")
    add("--skip-runs", action="store_true", help="train nothing: tables from the records there")
    add("--experiment", help="log/checkpoint folder (default: sweep-<out name>)")
    add("--out", type=Path, help="output path without extension (default: a --plan's)")
    add("--metrics", nargs="+", default=None, help="table columns (default: test/ metrics)")
    add("--metric", default=None, help="convergence metric (needs --threshold)")
    add("--threshold", type=float, default=None, help="convergence threshold of --metric")
    add("--direction", choices=("max", "min"), default="max", help="max: converged if >=")
    add("--train-script", type=Path, help="a script to run instead of attn_lightning.cli")
    add("--dry-run", action="store_true", help="print the commands only")
    add("--curve", metavar="TAG", help="also write <out>_curves.csv of this logged scalar")
    add("--pair", nargs=2, action="append", default=[], metavar=("VARIANT", "CONTROL"), help="Δ")
    add("--plan", type=Path, default=None, help="a plan file of these options (YAML)")
    add("--records-also", nargs="+", type=Path, default=[], help="more committed records")
    add("--report-only", action="store_true", help="train nothing: the page from <out>/runs/")
    add("--into", type=Path, default=None, help="write the files here instead of beside --out")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[Stage], str]:
    """The options (a plan's, then ``argv``'s), its stages in run order and the page's command."""
    parser = build_parser()
    path = parser.parse_args(argv).plan
    planned: list[str] = []
    sections: dict[str, Any] = {}
    if path is not None:
        try:
            planned, sections = plan_argv(parser, path)
        except ValueError as error:
            parser.error(str(error))
        if "--out" not in planned:
            planned += ["--out", str(Path("docs/results") / path.stem)]
    args = parser.parse_args([*planned, *argv])
    if args.out is None:
        parser.error("give --out (or a --plan)")
    if not args.backends and not args.variants and "stages" not in sections:
        parser.error("give --backends and/or --variants")
    if (args.metric is None) != (args.threshold is None):
        parser.error("--metric and --threshold go together")
    if bad := [o for o in args.set if "=" not in o]:
        parser.error(f"--set expects KEY=VALUE, got {bad}")
    args.experiment = args.experiment or f"sweep-{args.out.name}"
    try:  # fail before the first run on a malformed spec, stage, page or select
        stages = plan_stages(
            sections.get("stages"),
            configs=args.config or [],
            overrides=args.set,
            backends=args.backends,
            variants=args.variants,
            grid=sections.get("grid"),
            experiment=args.experiment,
        )
        args.pages = plan_pages(sections.get("pages", {}), args.out, REPORTS)
        specs = (sections.get("stages") or {}).values()  # checked by plan_stages
        grids = [sections.get("grid") or {}, *(s.get("grid") or {} for s in specs)]
        args.select = check_select(
            sections.get("select"), [k for g in grids for k in g], args.seeds
        )
    except ValueError as error:
        section = str(error).startswith(SECTIONS)
        parser.error(f"plan {path}: {error}" if path and section else str(error))
    if not all(stage.configs for stage in stages):
        parser.error("give --config (or a --plan that names it)")
    seeds = {stage.name: list(stage.seeds or args.seeds) for stage in stages}
    for stage in stages:  # a started stage's source runs the seeds it starts from
        needed = [stage.source_seed] if stage.source_seed is not None else seeds[stage.name]
        ran = seeds.get(stage.source or "", needed)
        if missing := [seed for seed in needed if seed not in ran]:
            parser.error(
                f"plan {path}: stages: {stage.name}: from seed {missing[0]}: its source stage "
                f"{stage.source} runs the seeds {ran}"
            )
    names = [_label(stage, v) for stage in stages for v in stage.variants]
    unknown = [n for pair in args.pair for n in pair if n not in names]
    if unknown:
        parser.error(f"--pair names {unknown}, not variants of this sweep; they are {names}")
    args.compared = args.metric or (args.metrics[0] if args.metrics else None)
    if args.pair and not args.compared:
        parser.error("--pair needs the metric to compare: give --metric or --metrics")
    # --report-only, --into and --jobs change no number: the page's command leaves them out.
    valued = ("--into", "--jobs")
    own = [
        a
        for a, before in zip(argv, ["", *argv])
        if a != "--report-only" and before not in valued and a.split("=")[0] not in valued
    ]
    return args, stages, command_line(PROG, own)


def _label(stage: Stage, variant: Variant | str) -> str:
    """A run's row label: its variant's, ``<stage>/`` before it in a staged plan."""
    name = variant if isinstance(variant, str) else variant.name
    return f"{stage.name}/{name}" if stage.name else name


def _blocked(
    stages: dict[str, Stage],
    done: dict[str, dict[tuple[str, int], RunResult]],
    experiment: str,
    stage: Stage,
    variant: Variant,
    seed: int,
) -> str | None:
    """Why a run of ``stage`` cannot start yet (``Runner.blocked``); None when it can."""
    assert stage.source is not None  # only started stages are asked
    name = stage.sources[variant.name]
    ckpt, of = source_checkpoint(stage, stages[stage.source], experiment, variant.name, seed)
    run = f"{stage.source}/{run_folder(name, of)}"
    source = done.get(stage.source, {}).get((name, int(of)))
    if source is None or source.status != OK:
        return f"its source run {run} is {source.status if source else NOT_RUN}"
    if not ckpt.is_file():
        # A committed record keeps no checkpoint: the source must be trained on this machine.
        return f"its source run {run} is ok but its checkpoint {ckpt} is not on this machine"
    return None


def main(argv: list[str] | None = None) -> list[RunResult]:
    """Run the sweep CLI; returns the runs (in the order of the tables)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args, stages, command = parse(sys.argv[1:] if argv is None else argv)
    study, results_dir = args.out.name, args.out.parent
    records = study_runs_dir(study, results_dir)
    by_name = {stage.name: stage for stage in stages}
    done: dict[str, dict[tuple[str, int], RunResult]] = {}

    def start(stage: Stage, variant: str, seed: int) -> Path:  # its source run's checkpoint
        source = by_name[str(stage.source)]
        return source_checkpoint(stage, source, args.experiment, variant, seed)[0]

    def runner(stage: Stage) -> Runner:
        return Runner(
            configs=stage.configs,
            overrides=stage.overrides,
            experiment=stage.experiment(args.experiment),
            study=study,
            tags={"stage": stage.name, **stage.tags} if stage.name else {},
            # Path("runs") / "" is "runs": a plan without stages keeps its records' layout.
            record_roots=tuple(root / stage.name for root in (records, *args.records_also)),
            publish=partial(
                publish_run, study=study, results=results_dir, group=stage.name or None
            ),
            train_script=args.train_script,
            resume=args.resume,
            skip_runs=args.skip_runs,
            blocked=None
            if stage.source is None
            else partial(_blocked, by_name, done, args.experiment, stage),
        )

    if args.dry_run:
        # The runs left to train; a committed record is taken (and with select: chooses, so the
        # other seeds' runs show once their tuning seeds' records are in).
        for stage in stages:

            def show(jobs: list[tuple[Variant, int]], stage: Stage = stage) -> list[RunResult]:
                shown = []
                for variant, seed in jobs:  # stage, variant, seed, source, command
                    if (done := runner(stage).committed(variant, seed)) is not None:
                        log.info("stage %s | %s | seed %d | taken from %s", stage.name or "-",
                                 variant.name, seed, done.log_dir)  # fmt: skip
                        shown.append(done)
                        continue
                    ckpt = "-" if stage.source is None else str(start(stage, variant.name, seed))
                    command = shlex.join(runner(stage).command(variant, seed))
                    log.info("stage %s | %s | seed %d | from %s | %s", stage.name or "-",
                             variant.name, seed, ckpt, command)  # fmt: skip
                    shown.append(RunResult(variant.name, seed, None, NOT_RUN))
                return shown

            run_selected(stage.variants, stage.seeds or args.seeds, args.select, show)
        return []
    rule = (args.metric, args.threshold, args.direction)
    convergence = None if args.metric is None else Convergence(*rule)
    out = args.out if args.into is None else args.into / study
    labels = [_label(stage, v) for stage in stages for v in stage.variants]

    def tables(_: RunResult | None, finished: list[RunResult]) -> None:
        extra = comparisons(finished, dict(args.pair), args.compared) if args.compared else {}
        titles = list(dict.fromkeys(t for row in extra.values() for t in row))
        write_tables(
            out,
            finished,
            command=command,
            metrics=args.metrics,
            convergence=convergence,
            label="variant" if args.variants or stages[0].name else "backend",
            jobs=args.jobs,
            # Every variant gets every column ("–" where it has no control): one CSV header.
            extra={n: {t: extra.get(n, {}).get(t) for t in titles} for n in labels},
            notes=[PAIRED_NOTE] if extra else [],
        )

    sweep_page = all(page.name != study for page in args.pages)  # else a page replaces it
    results: list[RunResult] = []
    for stage in stages:
        earlier, ran = list(results), list[RunResult]()  # ran: this stage's (select: 2 rounds)

        def rows(
            finished: Sequence[RunResult], stage: Stage = stage, earlier: list[RunResult] = earlier
        ) -> list[RunResult]:
            return [*earlier, *(replace(r, variant=_label(stage, r.variant)) for r in finished)]

        def run(
            jobs: list[tuple[Variant, int]],
            stage: Stage = stage,
            ran: list[RunResult] = ran,
            rows=rows,
        ) -> list[RunResult]:
            if args.report_only:
                roots = [root / stage.name for root in (records, *args.records_also)]
                got = runs_of(roots, [(v.name, s) for v, s in jobs])
            else:
                on_result = (
                    (lambda _, now: tables(None, rows([*ran, *now]))) if sweep_page else None
                )
                got = runner(stage).run_all(jobs, parallel=args.jobs, on_result=on_result)
            ran += got
            return got

        runs = run_selected(stage.variants, stage.seeds or args.seeds, args.select, run)
        done[stage.name] = {(r.variant, r.seed): r for r in runs}
        results = rows(runs)
    if args.report_only and sweep_page:
        tables(None, results)
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


if __name__ == "__main__":
    main()
