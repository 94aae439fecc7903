"""The LoRA study's run records as its report reads them: tags, values, order, the runs CSVs.

A run's tags (``RunResult.info``, set by its plan): ``part``, ``domain``, ``adaptation``
(``LABELS``), the LoRA ``rank`` (0: none) and, in ``lrsweep``, the ``head``, ``lr`` and
``base_lr`` (``f"{lr:g}"``, "" for none) and the data and epoch protocol (``PROTOCOL``). Its
values (``METRICS``) are its record's: the test accuracy under the study's name and, for a fit,
its best validation epoch from its curves (``read_run``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attn_lightning.records.files import write_csv
from lab.results.records import RunResult, load_run, record_folders, run_scalars

# The CSVs' name for the adaptation: the committed files (and their summaries) use it.
ADAPTATION_COLUMN = "method"
FIELDS = ["part", "domain", ADAPTATION_COLUMN, "rank", "seed", "status", "trainable_params"]
FIELDS += ["acc", "exact_acc", "seconds"]
PROTOCOL = ("source", "levels", "angle", "normalize", "max_epochs", "patience")
SWEEP_FIELDS = ["part", *PROTOCOL, "domain", ADAPTATION_COLUMN, "rank", "head", "lr", "base_lr"]
SWEEP_FIELDS += ["seed", "status", "trainable_params", "val_acc", "val_loss", "acc", "epochs"]
SWEEP_FIELDS += ["best_epoch", "seconds"]
# The study's per-run values.
METRICS = ("trainable_params", "val_acc", "val_loss", "acc", "exact_acc", "epochs", "best_epoch")
# The test metrics they are named after: a classifier's accuracy, a reversal model's token
# accuracy (the first found is the run's ``acc``).
TEST_NAMES = {
    "acc": ("test/acc", "test/token_acc"),
    "exact_acc": ("test/exact_acc",),
    "trainable_params": ("test/trainable_params",),
}
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
# The order of runs in the tables and the *_runs.csv: the order the plans' stages run them in.
PARTS = ("mlp", "variants", "transformer", "lrsweep")
DOMAINS = ("original", "quantized", "rotated", "inverted", "reversal", "reversal+1")
HEAD_ORDER = ("", "lora", "frozen", "trained")


def position(value: Any, order: Sequence[Any]) -> int:
    """Where ``value`` sorts in ``order``: its index, after every listed value if not there."""
    return order.index(value) if value in order else len(order)


def tag_values(runs: Sequence[RunResult], key: str) -> list[str]:
    """The values of the tag ``key`` among ``runs`` as written, sorted ("" and absent left out)."""
    return sorted({str(r.info.get(key, "")) for r in runs} - {""})


def row_order(domain: str, adaptation: str, rank: int, head: str = "") -> tuple[Any, ...]:
    """Where a row of a table or CSV (one ``RowKey`` of ``lrsweep_report``) sorts: as the runs
    ran, a domain, adaptation or head not in ``DOMAINS``, ``LABELS``, ``HEAD_ORDER`` after."""
    return (
        position(domain, DOMAINS),
        domain,
        position(adaptation, list(LABELS)),
        position(head, HEAD_ORDER),
        rank,
    )


def run_order(run: RunResult) -> tuple[Any, ...]:
    """The position of ``run`` in its part: seed first (``mlp``, ``variants``,
    ``transformer``), or last (``lrsweep``, learning rate by learning rate)."""
    info = run.info
    row = row_order(info["domain"], info["adaptation"], int(info["rank"]), info.get("head", ""))
    key = (*row, float(info.get("lr") or 0), str(info.get("base_lr", "")))
    return (*key, run.seed) if info["part"] == "lrsweep" else (run.seed, *key)


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


def read_run(folder: Path) -> RunResult:
    """The run of the record in ``folder`` with the study's values (``METRICS``) as its metrics:
    those its record carries (a record converted from a runs CSV holds them by these names),
    then its test metrics under the study's names (``TEST_NAMES``) and its best validation epoch
    (``best_validation`` of its curves), where it has them. A run of the plan's (tagged with its
    stage) is named ``<stage>/<variant>``: the report's rows group runs by name, and two stages
    may have a variant of one name (``full,domain=rotated`` tested before, then fine-tuned)."""
    run = load_run(folder)
    if "stage" in run.info:  # a plan's run: its variant's name is its stage's own, not the plan's
        run.variant = f"{run.info['stage']}/{run.variant}"
    values = {k: run.metrics[k] for k in METRICS if k in run.metrics}
    for name, tested in TEST_NAMES.items():
        found = next((run.metrics[t] for t in tested if t in run.metrics), None)
        if found is not None:
            values[name] = int(found) if name == "trainable_params" else found
    values.update(best_validation(run_scalars(folder)))
    run.metrics = values
    return run


def load_parts(roots: Sequence[Path]) -> dict[str, list[RunResult]]:
    """The runs under ``roots`` by their ``part`` tag (``PARTS`` order, then others'), each
    part's in run order (``run_order``).

    Raises:
        FileNotFoundError: naming a folder of ``roots`` that holds no run record.
    """
    parts: dict[str, list[RunResult]] = {}
    for root in roots:
        for folder in record_folders(root, required=True):
            run = read_run(folder)
            parts.setdefault(str(run.info.get("part", "")), []).append(run)
    names = sorted(parts, key=lambda part: (position(part, PARTS), part))
    # (variant, seed) first, as a part's records were always read: ties keep that order.
    return {
        part: sorted(sorted(parts[part], key=lambda r: (r.variant, r.seed)), key=run_order)
        for part in names
    }


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
