"""The runs of the LoRA study: jobs, their per-run CSVs, resuming and running them.

A job is a variant (a name plus overrides on one of the study's configs), a seed and the run's
own facts, which become its ``RunResult.info``: the ``part`` of the study, the ``domain``, the
``adaptation`` (``base``, ``before``, ``full``, ``lora``, ``lora_scratch`` or a LoRA variant),
the LoRA ``rank`` (0: none) and, in ``lrsweep``, the ``head`` setting, the learning rate ``lr``
and the base's ``base_lr`` (as written, ``f"{lr:g}"``, "" for none, so resumed runs compare
equal) and the data and epoch protocol. Its metrics are the study's: ``acc`` (test accuracy, or
token accuracy of the transformer), ``exact_acc``, ``trainable_params`` and, for ``lrsweep``
fits, ``val_acc``/``val_loss`` at the best validation (``epochs`` and ``best_epoch`` in info).

``run_part`` runs a part's jobs in this process and rewrites ``<out>_<part>_runs.csv`` after each
run (``write_runs``: columns ``FIELDS``, or ``SWEEP_FIELDS`` for ``lrsweep``); ``read_runs``
reads it back. ``pending`` leaves out the jobs with an ok run already (``KEYS``/``SWEEP_KEY`` say
which run is the same), unless a checkpoint later runs load is gone.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import read_scalars
from attn_lightning.results.files import read_csv, write_csv
from attn_lightning.results.records import RunResult
from attn_lightning.studies.runner import CONFIGS, Runner, Variant, run_label, run_name

MLP_CONFIG = str(CONFIGS / "lora" / "base.yaml")
REV_CONFIG = str(CONFIGS / "lora_reversal" / "base.yaml")
REVERSAL_BASE = str(CONFIGS / "reversal" / "base.yaml")
# A "before" run tests the base as the task builds it from base_checkpoint, from no run's
# checkpoint: train.py refuses validate/test/predict without --ckpt_path unless it is "initial".
BASE_WEIGHTS = "ckpt_path=initial"
EXPERIMENT = "lora-study"
# One planned run: the variant, its seed and its info. An info's "_keep" (not kept in the run)
# names a checkpoint later runs load: kept, and the run is redone when it is gone even though
# its CSV row is ok.
Job = tuple[Variant, int, dict[str, Any]]
# The CSVs' name for the adaptation: the committed files (and their summaries) use it.
ADAPTATION_COLUMN = "method"
FIELDS = [
    "part",
    "domain",
    ADAPTATION_COLUMN,
    "rank",
    "seed",
    "status",
    "trainable_params",
    "acc",
    "exact_acc",
    "seconds",
]
PROTOCOL = ("source", "levels", "angle", "normalize", "max_epochs", "patience")
SWEEP_FIELDS = [
    "part",
    *PROTOCOL,
    "domain",
    ADAPTATION_COLUMN,
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
METRICS = ("trainable_params", "val_acc", "val_loss", "acc", "exact_acc")
# How a CSV cell reads back: these as numbers, the others (names, lr, base_lr) as strings.
INTEGERS = {"rank", "levels", "max_epochs", "patience", "epochs", "best_epoch", "trainable_params"}
FLOATS = {"angle", "val_acc", "val_loss", "acc", "exact_acc", "seconds"}
KEYS = ("domain", "adaptation", "rank", "seed")  # what makes a run "the same run" on resume
# A row of the student-vs-ours table; the learning rate is chosen within it. base_lr: the base
# the run adapted ("" for runs that load none), so a changed base choice never mixes bases.
SWEEP_GROUP = ("domain", "adaptation", "rank", "head", "base_lr")
SWEEP_KEY = (*SWEEP_GROUP, "lr", "seed")  # one run, for resuming
PART_KEYS = {"lrsweep": SWEEP_KEY}
PART_FIELDS = {"lrsweep": SWEEP_FIELDS}
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


def runs_csv(out: str | Path, part: str) -> Path:
    """``<out>_<part>_runs.csv``: the part's runs, one row each."""
    return Path(f"{out}_{part}_runs.csv")


def checkpoint_path(work: str | Path, variant: str, seed: int, name: str = "last") -> Path:
    """Where the run of ``variant`` at ``seed`` saves its checkpoint ``name`` under ``work``."""
    return (
        Path(work) / "checkpoints" / EXPERIMENT / f"{run_label(variant)}-s{seed}" / f"{name}.ckpt"
    )


def _cell(column: str, text: str) -> Any:
    if column in INTEGERS:
        return int(text)
    return float(text) if column in FLOATS else text


def _variant(info: Mapping[str, Any]) -> str:
    # A run read back has no variant name in its row: its key stands in for it.
    parts = [info.get("domain", ""), info.get("adaptation", "")]
    parts += [f"r{info['rank']}"] if info.get("rank") else []
    parts += [f"h{info['head']}"] if info.get("head") else []
    parts += [f"lr{info['lr']}"] if info.get("lr") else []
    return "-".join(str(p) for p in parts)


def read_runs(path: Path) -> list[RunResult]:
    """The runs of a per-run CSV (none when it does not exist); empty numeric cells are left
    out of ``metrics`` and ``info``."""
    if not path.is_file():
        return []
    runs = []
    for row in read_csv(path)[1]:
        cells = {k: _cell(k, v) for k, v in row.items() if v or k not in INTEGERS | FLOATS}
        info = {k: v for k, v in cells.items() if k not in (*METRICS, "seed", "status", "seconds")}
        info["adaptation"] = info.pop(ADAPTATION_COLUMN)
        seconds = cells.get("seconds")
        metrics = {k: cells[k] for k in METRICS if k in cells}
        runs.append(
            RunResult(_variant(info), int(row["seed"]), seconds, row["status"], metrics, info=info)
        )
    return runs


def run_row(run: RunResult) -> dict[str, Any]:
    """A run as a row of its CSV (the adaptation under ``ADAPTATION_COLUMN``)."""
    row = {**run.info, ADAPTATION_COLUMN: run.info["adaptation"], **run.metrics}
    return {**row, "seed": run.seed, "status": run.status, "seconds": run.seconds}


def write_runs(path: Path, runs: Sequence[RunResult], part: str) -> None:
    """Write the part's runs to ``path`` (its columns), replacing the file only once complete:
    a study stopped mid-write keeps its earlier rows."""
    partial = path.with_name(path.name + ".partial")
    write_csv(partial, [run_row(r) for r in runs], fields=PART_FIELDS.get(part, FIELDS))
    partial.replace(path)


def _key(info: Mapping[str, Any], seed: int, part: str) -> tuple[str, ...]:
    facts = {**info, "seed": seed}
    return tuple(str(facts[k]) for k in PART_KEYS.get(part, KEYS))


def pending(args: argparse.Namespace, part: str, jobs: list[Job]) -> list[Job]:
    """The jobs still to run: no ok run in the part's CSV, or their ``_keep`` checkpoint gone."""
    done = {
        _key(r.info, r.seed, part) for r in read_runs(runs_csv(args.out, part)) if r.status == "ok"
    }
    return [
        (variant, seed, info)
        for variant, seed, info in jobs
        if _key(info, seed, part) not in done
        or ("_keep" in info and not Path(info["_keep"]).exists())
    ]


def best_validation(log_dir: Path, monitor: str = "val/loss") -> dict[str, Any]:
    """``val_loss``, ``val_acc`` and ``best_epoch`` (1-based) at the lowest ``monitor``.

    Read from the run's TensorBoard events (``results.curves.read_scalars``): the fit's metrics
    file has only the last epoch's values, and the tested checkpoint is the best one
    (``checkpoint.monitor``, first minimum, as ``ModelCheckpoint`` keeps it). Empty when the run
    logged no ``monitor`` (or no logs); ``val_acc`` absent when it logged no ``val/acc``.
    """
    if not log_dir.is_dir():
        return {}
    scalars = read_scalars(log_dir)
    losses = scalars.get(monitor, [])
    if not losses:
        return {}
    accuracy = dict(scalars.get("val/acc", []))
    best = min(range(len(losses)), key=lambda i: losses[i][1])
    step, loss = losses[best]
    found = {"val_loss": loss, "best_epoch": best + 1}  # one validation per epoch
    return found if step not in accuracy else {**found, "val_acc": accuracy[step]}


def study_run(
    result: RunResult, info: Mapping[str, Any], fit: Mapping[str, Any] | None = None
) -> RunResult:
    """The runner's result of a job as the study's run: its info, the study's metrics and, for
    a fit of ``lrsweep``, ``fit`` (``epochs`` trained and ``best_validation``'s numbers)."""
    ok = result.status == "ok"
    run = RunResult(
        result.variant,
        result.seed,
        round(result.seconds or 0.0, 1),
        "ok" if ok else "crashed",
        global_step=result.global_step,
        log_dir=result.log_dir,
        info={k: v for k, v in info.items() if k != "_keep"},
    )
    if not ok:
        return run
    found = {
        "acc": result.metrics.get("test/acc", result.value("test/token_acc")),
        "exact_acc": result.value("test/exact_acc"),
        "trainable_params": result.value("test/trainable_params"),  # not logged by every run
    }
    run.metrics = {k: v for k, v in found.items() if v is not None}
    if "trainable_params" in run.metrics:
        run.metrics["trainable_params"] = int(run.metrics["trainable_params"])
    for key, value in (fit or {}).items():
        if value is not None:
            (run.metrics if key in METRICS else run.info)[key] = value
    return run


def fit_details(runner: Runner, variant: Variant, result: RunResult) -> dict[str, Any]:
    """Epochs trained (``trainer.current_epoch`` after fit: ``max_epochs``, or fewer when stopped
    early, from the run's metrics file) and the validation metrics of the tested checkpoint
    (``best_validation``); nothing for a test-only run or one that did not finish."""
    if result.status != "ok":
        return {}
    details = {"epochs": runner.record(variant, result.seed).get("epoch")}
    return details | (best_validation(Path(result.log_dir)) if result.log_dir else {})


def run_part(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Run a part's jobs in order, in this process, rewriting its CSV after each run.

    Jobs with an ok run in ``<out>_<part>_runs.csv`` are skipped (``--fresh`` removes the CSV
    first, in ``studies.lora.cli.main``), except those whose ``_keep`` checkpoint is gone: later
    runs load it.
    """
    path = runs_csv(args.out, part)
    todo = pending(args, part, jobs)
    planned = {(variant.name, seed): (variant, info) for variant, seed, info in todo}
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
    runs = read_runs(path)
    with_fit = "val_acc" in PART_FIELDS.get(part, FIELDS)  # lrsweep's columns

    def record(result: RunResult, _: list[RunResult]) -> None:
        variant, info = planned[(result.variant, result.seed)]
        fit = fit_details(runner, variant, result) if with_fit else None
        runs.append(study_run(result, info, fit))
        if not args.keep_checkpoints and "_keep" not in info:
            label = run_name(Variant(result.variant), result.seed)
            shutil.rmtree(work / "checkpoints" / EXPERIMENT / label, ignore_errors=True)
        write_runs(path, runs, part)

    runner.run_all([(variant, seed) for variant, seed, _ in todo], on_result=record)
