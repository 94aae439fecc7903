"""Sweep CLI: one command runs any study from its plan; mean ± std tables and the plan's pages.

    python -m lab.studies.sweep --plan configs/studies/sequence_reversal_len50.yaml
    python -m lab.studies.sweep --config configs/reversal/base.yaml \\
        --backends softmax linear performer:num_features=64 polysketch \\
        --seeds 0 1 2 --set trainer.max_steps=3000 --out docs/results/reversal_len50 \\
        --metric test/token_acc --threshold 0.99

The plan grammar (``configs/studies/<page>.yaml``; every key but ``grid``, ``stages``, ``pages``
is an option of this command by its long name, overridden by those given beside it)::

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
import inspect
import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import yaml

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
from lab.studies.recall import write_recall
from lab.studies.reversal import report as reversal_report
from lab.studies.runner import Runner, Variant
from lab.studies.stages import Stage, plan_stages, source_checkpoint
from lab.studies.trajectories import write_trajectories
from lab.studies.warm_start.tables import write as write_warm_start

log = logging.getLogger("lab.studies.sweep")
PROG = "python -m lab.studies.sweep"
PLANS = Path("configs/studies")
# A call's own options: no plan sets them, and the page's command omits report-only and into.
CALL_ONLY = ("plan", "report-only", "into", "dry-run")
SECTIONS = ("grid", "stages", "pages")  # a plan's keys that are no option
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


def plan_argv(parser: argparse.ArgumentParser, path: Path) -> tuple[list[str], dict[str, Any]]:
    """The arguments a plan file stands for (its keys: ``parser``'s long options but
    ``CALL_ONLY``; a list for an option that takes several or repeats, true/false for a flag), so
    a plan is checked as its command line is, and its ``SECTIONS`` as they are. ValueError: a
    plan that is not a mapping, a key that is no option (naming the keys), a flag not a bool."""
    plan = yaml.safe_load(path.read_text()) if path.is_file() else None
    if not isinstance(plan, dict):
        raise ValueError(f"plan {path} is not a YAML mapping of option names to values")
    options: dict[str, argparse.Action] = {}
    for action in parser._actions:
        names = [o for o in action.option_strings if o.startswith("--")]
        if names and names[0][2:] not in ("help", *CALL_ONLY):
            options[names[0][2:]] = action
    argv: list[str] = []
    found = {key: plan.pop(key) for key in SECTIONS if key in plan}
    for key, value in plan.items():
        if key not in options:
            allowed = ", ".join(sorted([*options, *SECTIONS]))
            raise ValueError(f"plan {path}: unknown key {key!r}; the keys are {allowed}")
        flag, action = f"--{key}", options[key]
        if action.nargs == 0:  # store_true
            if not isinstance(value, bool):
                raise ValueError(f"plan {path}: {key} is a flag, give true or false, not {value!r}")
            argv += [flag] if value else []
        elif isinstance(action, argparse._AppendAction):
            for item in value if isinstance(value, list) else [value]:
                argv += [flag, *map(str, item if isinstance(item, list) else [item])]
        else:
            argv += [flag, *map(str, value if isinstance(value, list) else [value])]
    return argv, found


@dataclass(frozen=True)
class Page:
    """A page of a plan's ``pages:`` section: its name, writer, record folders and options."""

    name: str
    write: Callable[..., object]
    runs: list[Path]
    options: dict[str, Any]


def plan_pages(pages: object, out: Path) -> list[Page]:
    """A plan's ``pages:`` section, checked (default records: ``<out>/runs``); a ValueError
    names the page and the report kind or option that is not one there is."""
    if not isinstance(pages, dict) or not all(isinstance(s, dict) for s in pages.values()):
        raise ValueError("pages: give a mapping of page names to {report: KIND, option: value}")
    checked = []
    for name, spec in pages.items():
        options = dict(spec)
        kind = options.pop("report", None)
        if kind not in REPORTS:
            raise ValueError(f"pages: {name}: report {kind!r}; the reports are {list(REPORTS)}")
        write = REPORTS[kind]
        runs = options.pop("runs", [out / "runs"])
        runs = [runs] if isinstance(runs, str) else runs  # one folder, not its characters
        keys = inspect.signature(write).parameters.values()  # its options: keyword-only
        allowed = [k.name for k in keys if k.kind == k.KEYWORD_ONLY and k.name != "command"]
        if (unknown := next((key for key in options if key not in allowed), None)) is not None:
            raise ValueError(
                f"pages: {name}: unknown key {unknown!r}; the keys of a {kind} page are "
                f"report, runs, {', '.join(allowed)}"
            )
        checked.append(Page(str(name), write, [Path(r) for r in runs], options))
    return checked


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
    try:  # fail before the first run on a malformed spec, stage or page
        stages = plan_stages(
            sections.get("stages"),
            configs=args.config or [],
            overrides=args.set,
            backends=args.backends,
            variants=args.variants,
            grid=sections.get("grid"),
            experiment=args.experiment,
        )
        args.pages = plan_pages(sections.get("pages", {}), args.out)
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
    # --report-only and --into change no number: the page's command leaves them out.
    after = ["", *argv]
    own = [a for a, b in zip(argv, after) if a != "--report-only" and "--into" not in (a[:6], b)]
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
        for stage, variant in ((st, v) for st in stages for v in st.variants):
            for seed in stage.seeds or args.seeds:  # stage, variant, seed, source, command
                ckpt = "-" if stage.source is None else str(start(stage, variant.name, seed))
                command = shlex.join(runner(stage).command(variant, seed))
                log.info("stage %s | %s | seed %d | from %s | %s", stage.name or "-",
                         variant.name, seed, ckpt, command)  # fmt: skip
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
        jobs = [(v, s) for v in stage.variants for s in stage.seeds or args.seeds]
        earlier = list(results)

        def rows(
            finished: Sequence[RunResult], stage: Stage = stage, earlier: list[RunResult] = earlier
        ) -> list[RunResult]:
            return [*earlier, *(replace(r, variant=_label(stage, r.variant)) for r in finished)]

        if args.report_only:
            roots = [root / stage.name for root in (records, *args.records_also)]
            runs = runs_of(roots, [(v.name, s) for v, s in jobs])
        else:
            on_result = (lambda _, finished: tables(None, rows(finished))) if sweep_page else None
            runs = runner(stage).run_all(jobs, parallel=args.jobs, on_result=on_result)
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
