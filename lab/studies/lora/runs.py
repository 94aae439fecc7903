"""The runs of the LoRA study: jobs, their run records, resuming and running them.

A job is a variant on one of the study's configs, a seed and its tags (``RunResult.info``):
``part``, ``domain``, ``adaptation`` (``LABELS``), the LoRA ``rank`` (0: none) and, in
``lrsweep``, the ``head``, ``lr`` and ``base_lr`` (``f"{lr:g}"``, "" for none) and the data and
epoch protocol (``PROTOCOL``). A part's finished runs are committed as run records under
``<out>/runs/<part>/`` (``part_dir``), the study's ``METRICS`` among their fit metrics.
"""

from __future__ import annotations

import argparse
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from attn_lightning.records.files import write_csv
from attn_lightning.records.run_files import load_record, write_record
from lab.results.records import (
    OK,
    RunResult,
    load_runs,
    publish_run,
    run_label,
    run_scalars,
    study_runs_dir,
)
from lab.studies.runner import CONFIGS, Runner, Variant

MLP_CONFIG = str(CONFIGS / "lora" / "base.yaml")
REV_CONFIG = str(CONFIGS / "lora_reversal" / "base.yaml")
REVERSAL_BASE = str(CONFIGS / "reversal" / "base.yaml")
# A "before" run tests the base as the task builds it from base_checkpoint, from no run's
# checkpoint: train.py refuses validate/test/predict without --ckpt_path unless it is "initial".
BASE_WEIGHTS = "ckpt_path=initial"
EXPERIMENT = "lora-study"
# One planned run: the variant, its seed and its info. An info's "_keep" (not a tag of the run)
# names a checkpoint later runs load: kept, and the run is redone when it is gone even though
# its record is ok.
Job = tuple[Variant, int, dict[str, Any]]
# The CSVs' name for the adaptation: the committed files (and their summaries) use it.
ADAPTATION_COLUMN = "method"
FIELDS = ["part", "domain", ADAPTATION_COLUMN, "rank", "seed", "status", "trainable_params"]
FIELDS += ["acc", "exact_acc", "seconds"]
PROTOCOL = ("source", "levels", "angle", "normalize", "max_epochs", "patience")
SWEEP_FIELDS = ["part", *PROTOCOL, "domain", ADAPTATION_COLUMN, "rank", "head", "lr", "base_lr"]
SWEEP_FIELDS += ["seed", "status", "trainable_params", "val_acc", "val_loss", "acc", "epochs"]
SWEEP_FIELDS += ["best_epoch", "seconds"]
# The study's per-run metrics (the record's fit metrics of a published run).
METRICS = ("trainable_params", "val_acc", "val_loss", "acc", "exact_acc", "epochs", "best_epoch")
# A row of the student-vs-ours table; the learning rate is chosen within it. base_lr: the base
# the run adapted ("" for runs that load none), so a changed base choice never mixes bases.
SWEEP_GROUP = ("domain", "adaptation", "rank", "head", "base_lr")
LABELS = {  # each adaptation, in the reports' words
    "base": "base, trained on the original task",
    "before": "base before adaptation",
    "full": "full fine-tune",
    "lora": "LoRA",
    "lora_scratch": "LoRA from scratch",
    "lora_head_frozen": "LoRA on fc1, fc2; head frozen",
    "lora_head_saved": "LoRA on fc1, fc2; head trained whole (modules_to_save)",
    "lora_bias_all": "LoRA on fc1-fc3 + every bias trained (bias='all')",
}
# The order of runs in the tables and the *_runs.csv: the order the parts' jobs run in.
DOMAINS = ("original", "quantized", "rotated", "inverted", "reversal", "reversal+1")
HEAD_ORDER = ("", "lora", "frozen", "trained")


def part_dir(out: str | Path, part: str) -> Path:
    """``<out>/runs/<part>/``: where the part's finished run records are committed."""
    out = Path(out)
    return study_runs_dir(out.name, out.parent) / part


def checkpoint_path(work: str | Path, variant: str, seed: int | str, name: str = "last") -> Path:
    """Where the run of ``variant`` at ``seed`` (or ``runner.SEED``) saves checkpoint ``name``."""
    folder = f"{run_label(variant)}-s{seed}"  # records.run_folder, with SEED allowed
    return Path(work) / "checkpoints" / EXPERIMENT / folder / f"{name}.ckpt"


def position(value: Any, order: Sequence[Any]) -> int:
    """Where ``value`` sorts in ``order``: its index, after every listed value if not there."""
    return order.index(value) if value in order else len(order)


def tag_values(runs: Sequence[RunResult], key: str) -> list[str]:
    """The values of the tag ``key`` among ``runs`` as written, sorted ("" and absent left out)."""
    return sorted({str(r.info.get(key, "")) for r in runs} - {""})


def row_order(domain: str, adaptation: str, rank: int, head: str = "") -> tuple[Any, ...]:
    """Where a row of a table or CSV (one ``RowKey`` of ``lrsweep_report``) sorts: as the jobs
    run, a domain, adaptation or head not in ``DOMAINS``, ``LABELS``, ``HEAD_ORDER`` after."""
    adaptations = list(LABELS)
    return (
        position(domain, DOMAINS),
        domain,
        position(adaptation, adaptations),
        position(head, HEAD_ORDER),
        rank,
    )


def run_order(run: RunResult) -> tuple[Any, ...]:
    """The position of ``run`` in its part's job order: seed first (``mlp``, ``variants``,
    ``transformer``), or last (``lrsweep``, learning rate by learning rate)."""
    info = run.info
    row = row_order(info["domain"], info["adaptation"], int(info["rank"]), info.get("head", ""))
    key = (*row, float(info.get("lr") or 0), str(info.get("base_lr", "")))
    return (*key, run.seed) if info["part"] == "lrsweep" else (run.seed, *key)


def load_part(out: str | Path, part: str) -> list[RunResult]:
    """The part's committed runs (``part_dir``) in job order (``run_order``)."""
    return sorted(load_runs(part_dir(out, part)), key=run_order)


def write_runs(out: str | Path, part: str, runs: Sequence[RunResult]) -> None:
    """Write the part's runs to ``<out>_<part>_runs.csv``, the adaptation under
    ``ADAPTATION_COLUMN`` (an output: nothing reads it back)."""
    rows = [
        {**r.info, ADAPTATION_COLUMN: r.info["adaptation"], "seed": r.seed, "status": r.status}
        | {k: v for k, v in r.metrics.items() if k in METRICS}
        | {"seconds": r.seconds}
        for r in runs
    ]
    fields = SWEEP_FIELDS if part == "lrsweep" else FIELDS
    write_csv(Path(f"{out}_{part}_runs.csv"), rows, fields=fields)


def pending(args: argparse.Namespace, part: str, jobs: list[Job]) -> list[Job]:
    """The jobs still to run: no ok record in ``part_dir``, or their ``_keep`` checkpoint gone."""
    done = {(r.variant, r.seed) for r in load_runs(part_dir(args.out, part)) if r.status == OK}
    return [
        (variant, seed, info)
        for variant, seed, info in jobs
        if (variant.name, seed) not in done
        or ("_keep" in info and not Path(info["_keep"]).exists())
    ]


def best_validation(scalars: Mapping[str, list[tuple[int, float]]]) -> dict[str, Any]:
    """``epochs`` trained (one validation each), and ``val_loss``, ``val_acc`` and ``best_epoch``
    (1-based) at the first lowest ``val/loss``: the tested checkpoint, as ``ModelCheckpoint``
    keeps it. ``scalars``: ``records.run_scalars``; ``{}`` when it has no ``val/loss``."""
    losses = scalars.get("val/loss", [])
    if not losses:
        return {}
    accuracy = dict(scalars.get("val/acc", []))
    # A NaN loss ranks as +inf, as ModelCheckpoint ranks it (min() would keep a leading NaN).
    best = min(
        range(len(losses)), key=lambda i: math.inf if math.isnan(losses[i][1]) else losses[i][1]
    )
    step, loss = losses[best]
    found = {"epochs": len(losses), "val_loss": loss, "best_epoch": best + 1}
    return found if step not in accuracy else {**found, "val_acc": accuracy[step]}


def study_metrics(result: RunResult, fit: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The study's metrics of a finished run: its test metrics under the study's names and, for
    a fit of ``lrsweep``, ``fit`` (``best_validation`` of its curves)."""
    found = {
        "acc": result.metrics.get("test/acc", result.value("test/token_acc")),
        "exact_acc": result.value("test/exact_acc"),
        "trainable_params": result.value("test/trainable_params"),  # not logged by every run
        **(fit or {}),
    }
    if found["trainable_params"] is not None:
        found["trainable_params"] = int(found["trainable_params"])
    return {k: v for k, v in found.items() if v is not None}


def publish(result: RunResult, out: str | Path, part: str, fit: Mapping[str, Any] | None) -> Path:
    """Copy a finished run's record to ``part_dir`` with the study's metrics among its fit
    metrics and status ok (an early-stopped fit's record says ``stopped``: resumable, yet the
    study's run is done); returns the copy's folder."""
    assert result.log_dir is not None  # a finished run was read from its record
    out = Path(out)
    target = publish_run(Path(result.log_dir), out.name, out.parent, group=part)
    record = load_record(target)
    metrics = record.setdefault("metrics", {})
    metrics["fit"] = {**(metrics.get("fit") or {}), **study_metrics(result, fit)}
    if record.get("fit_seconds") is None:  # a test-only run: its process time
        record["fit_seconds"] = result.seconds
    write_record(target, {**record, "status": OK})
    return target


def run_part(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Run a part's jobs in order, in this process, publishing each finished run (``publish``).

    Jobs with an ok record in ``part_dir`` are skipped (``--fresh`` removes the folder first, in
    ``studies.lora.cli.main``), except those whose ``_keep`` checkpoint is gone: later runs load
    it. A run that did not finish is logged by the runner and left out.
    """
    todo = pending(args, part, jobs)
    planned = {(variant.name, seed): (variant, info) for variant, seed, info in todo}
    work = Path(args.work)
    runner = Runner(
        overrides=(
            "trainer.enable_model_summary=false",
            f"trainer.logger.init_args.save_dir={work / 'logs'}",
            f"checkpoint.root={work / 'checkpoints'}",
            "sample_predictions.every_n_epochs=0",
        ),
        experiment=EXPERIMENT,
        study=Path(args.out).name,
        in_process=True,  # ~150 short runs: the imports are paid once
    )

    def record(result: RunResult, _: list[RunResult]) -> None:
        variant, info = planned[(result.variant, result.seed)]
        if result.status == OK:
            fitted = part == "lrsweep" and variant.subcommand == "fit"
            fit = best_validation(run_scalars(Path(str(result.log_dir)))) if fitted else None
            result.seconds = round(result.seconds or 0.0, 1)
            publish(result, args.out, part, fit)
        if not args.keep_checkpoints and "_keep" not in info:
            folder = checkpoint_path(work, result.variant, result.seed).parent
            shutil.rmtree(folder, ignore_errors=True)

    tags = [{k: v for k, v in info.items() if k != "_keep"} for _, _, info in todo]
    variants = [(replace(v, info=t), seed) for (v, seed, _), t in zip(todo, tags, strict=True)]
    runner.run_all(variants, on_result=record)
