"""The runs of the LoRA study (``studies.lora``): jobs, their CSV rows, resuming and running.

A job is a variant (a name plus overrides on one of the study's configs), a seed and the keys of
its row. ``run_part`` runs a part's jobs in this process and appends one row per run to
``<out>_<part>_runs.csv`` (columns ``FIELDS``, or ``SWEEP_FIELDS`` for ``lrsweep``); ``pending``
leaves out those with an ok row already (the row keys ``KEYS``/``SWEEP_KEY`` say which row is
the same run), unless a checkpoint later runs load is gone. ``best_validation`` reads a fit's
best validation epoch from its TensorBoard events. ``LABELS`` names each method a row holds.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path
from typing import Any

from attn_lightning.results.records import RunResult
from attn_lightning.studies.runner import ROOT, Runner, Variant, run_label, run_name

MLP_CONFIG = str(ROOT / "configs" / "lora" / "base.yaml")
REV_CONFIG = str(ROOT / "configs" / "lora_reversal" / "base.yaml")
REVERSAL_BASE = str(ROOT / "configs" / "reversal" / "base.yaml")
EXPERIMENT = "lora-study"
# One planned run: the variant, its seed and its row keys (part, domain, method, rank, ...). A
# row's "_keep" (not written) names a checkpoint later runs load: kept, and the run is redone
# when it is gone even though its CSV row is ok.
Job = tuple[Variant, int, dict[str, Any]]
FIELDS = [
    "part",
    "domain",
    "method",
    "rank",
    "seed",
    "status",
    "trainable_params",
    "acc",
    "exact_acc",
    "seconds",
]
SWEEP_FIELDS = [
    "part",
    "source",
    "levels",
    "angle",
    "normalize",
    "max_epochs",
    "patience",
    "domain",
    "method",
    "rank",
    "head",
    "lr",
    "base_lr",
    "seed",
    "status",
    "trainable_params",
    "val_acc",
    "val_loss",
    "acc",
    "epochs",
    "best_epoch",
    "seconds",
]
KEYS = ("domain", "method", "rank", "seed")  # what makes a row "the same run" on resume
# A row of the student-vs-ours table; the learning rate is chosen within it. base_lr: the base
# the run adapted ("" for runs that load none), so a changed base choice never mixes bases.
SWEEP_GROUP = ("domain", "method", "rank", "head", "base_lr")
SWEEP_KEY = (*SWEEP_GROUP, "lr", "seed")  # one run, for resuming
PART_KEYS = {"lrsweep": SWEEP_KEY}
PART_FIELDS = {"lrsweep": SWEEP_FIELDS}
LABELS = {  # a row's method, in the reports' words
    "base": "base, trained on the original task",
    "before": "base before adaptation",
    "full": "full fine-tune",
    "lora": "LoRA",
    "lora_scratch": "LoRA from scratch",
    "lora_head_frozen": "LoRA on fc1, fc2; head frozen",
    "lora_head_saved": "LoRA on fc1, fc2; head trained whole (modules_to_save)",
    "lora_bias_all": "LoRA on fc1-fc3 + every bias trained (bias='all')",
}


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a run CSV (none when it does not exist)."""
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def _key(row: dict[str, Any], part: str = "mlp") -> tuple[str, ...]:
    return tuple(str(row[k]) for k in PART_KEYS.get(part, KEYS))


def runs_csv(args: argparse.Namespace, part: str) -> Path:
    """``<out>_<part>_runs.csv``: the part's rows, one per run."""
    return Path(f"{args.out}_{part}_runs.csv")


def checkpoint_path(args: argparse.Namespace, variant: str, seed: int, name: str = "last") -> Path:
    """Where the run of ``variant`` at ``seed`` saves its checkpoint ``name`` under ``--work``."""
    work = Path(args.work) / "checkpoints" / EXPERIMENT
    return work / f"{run_label(variant)}-s{seed}" / f"{name}.ckpt"


def pending(args: argparse.Namespace, part: str, jobs: list[Job]) -> list[Job]:
    """The jobs still to run: no ok row in the part's CSV, or their ``_keep`` checkpoint gone."""
    done: set[tuple[str, ...]] = set()
    if runs_csv(args, part).exists():
        with runs_csv(args, part).open() as f:
            done = {_key(row, part) for row in csv.DictReader(f) if row["status"] == "ok"}
    return [
        (variant, seed, row)
        for variant, seed, row in jobs
        if _key({**row, "seed": seed}, part) not in done
        or ("_keep" in row and not Path(row["_keep"]).exists())
    ]


def best_validation(log_dir: Path, monitor: str = "val/loss") -> dict[str, Any]:
    """``val_loss``, ``val_acc`` and ``best_epoch`` (1-based) at the lowest ``monitor``.

    Read from the run's TensorBoard events: the fit's metrics file has only the last epoch's
    values, and the tested checkpoint is the best one (``checkpoint.monitor``, first minimum,
    as ``ModelCheckpoint`` keeps it). Empty when the run logged no ``monitor`` (or no logs).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not log_dir.is_dir():
        return {}
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    if monitor not in tags:
        return {}
    losses = events.Scalars(monitor)
    accuracy = {e.step: e.value for e in events.Scalars("val/acc")} if "val/acc" in tags else {}
    best = min(range(len(losses)), key=lambda i: losses[i].value)
    return {
        "val_loss": losses[best].value,
        "val_acc": accuracy.get(losses[best].step, ""),
        "best_epoch": best + 1,  # one validation per epoch
    }


def _fit_details(metrics_file: Path) -> dict[str, Any]:
    # Epochs trained (trainer.current_epoch after fit: max_epochs, or fewer if stopped early)
    # and the validation metrics of the tested checkpoint; nothing for a test-only run.
    if not metrics_file.exists():
        return {}
    record = json.loads(metrics_file.read_text())
    details: dict[str, Any] = {}
    if record.get("epoch") is not None:
        details["epochs"] = record["epoch"]
    if record.get("log_dir"):
        details.update(best_validation(Path(record["log_dir"])))
    return details


def run_part(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Run a part's jobs in order, in this process, appending a row per run to its CSV.

    Jobs with an ok row in ``<out>_<part>_runs.csv`` are skipped (``--fresh`` removes the CSV
    first, in ``studies.lora.main``), except those whose ``_keep`` checkpoint is gone: later
    runs load it.
    """
    path = runs_csv(args, part)
    fields = PART_FIELDS.get(part, FIELDS)
    todo = pending(args, part, jobs)
    rows = {(variant.name, seed): row for variant, seed, row in todo}
    work = Path(args.work)
    for variant, seed, _ in todo:  # a rerun's earlier folders: train.py refuses to reuse them
        for folder in ("logs", "checkpoints"):
            shutil.rmtree(work / folder / EXPERIMENT / run_name(variant, seed), ignore_errors=True)
    runner = Runner(
        overrides=(
            "trainer.enable_model_summary=false",
            f"trainer.logger.init_args.save_dir={work / 'logs'}",
            f"checkpoint.root={work / 'checkpoints'}",
            "sample_predictions.every_n_epochs=0",
        ),
        experiment=EXPERIMENT,
        runs_dir=work / "metrics",
        in_process=True,  # ~150 short runs: the imports are paid once
    )

    def record(result: RunResult, _: list[RunResult]) -> None:
        row = {**rows[(result.variant, result.seed)], "seed": result.seed}
        row.update(status="ok" if result.status == "ok" else "crashed")
        label = f"{run_label(result.variant)}-s{result.seed}"
        if result.status == "ok":
            params = result.value("test/trainable_params")  # not logged by the reversal base
            row.update(
                acc=result.metrics.get("test/acc", result.value("test/token_acc")),
                exact_acc=result.value("test/exact_acc"),
                trainable_params="" if params is None else int(params),
            )
            if "val_acc" in fields:
                row.update(_fit_details(work / "metrics" / f"{label}.json"))
        row["seconds"] = round(result.seconds or 0.0, 1)
        if not args.keep_checkpoints and "_keep" not in row:
            shutil.rmtree(work / "checkpoints" / EXPERIMENT / label, ignore_errors=True)
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(row)

    runner.run_all([(variant, seed) for variant, seed, _ in todo], on_result=record)
