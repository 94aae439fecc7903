"""The runs of a reversal study, read from run records, with what their curves say.

Every folder holding a ``record.json`` under the given folders is one run; what its
``curves.csv`` says (``curve_facts``) is kept in ``RunResult.info``. A fact whose curve the
record lacks is the metric of the same name the record carries (a run converted from a
committed ``<out>_runs.csv`` holds its validation accuracy at most).

A run's ``status`` is the report's word for it: ``ok`` (test metrics present), ``no test`` (an
ok record without them) or ``unfinished`` (a record not ``ok``: running, stopped or crashed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.records.run_files import load_record
from lab.results.curves import series
from lab.results.records import (
    OK,
    RunResult,
    Scalars,
    load_run,
    record_folders,
    run_label,
    run_scalars,
)
from lab.studies.reversal.dynamics import (
    VAL_LOSS_TAG,
    VAL_TAG,
    best_validation,
    max_grad_norm,
    spike_gradients,
    spike_steps,
    steps_to_threshold,
)

log = logging.getLogger("lab.studies.reversal")

CONVERGENCE_METRIC = "test/token_acc"
DEFAULT_THRESHOLD = 0.99
# Facts a converted record carries as metrics (its CSV's columns): int, else float.
FACTS = ("steps_to_threshold", "spikes", "best_ckpt_step", "max_grad_norm", "final_val_loss")


def finished(run: RunResult) -> bool:
    """Whether the run's record is ``ok``."""
    return run.status != "unfinished"


def curve_facts(scalars: Scalars, threshold: float) -> dict[str, Any]:
    """The facts whose curves ``scalars`` holds (``dynamics``): ``steps_to_threshold`` (None:
    never reached), ``spikes`` and ``spike_gradients`` (absent: no flags logged),
    ``max_grad_norm``, ``best_ckpt_step`` (``best_validation``), ``final_val_loss`` (the last
    validation's) and ``val_curve`` (every logged ``(step, val/token_acc)``)."""
    facts: dict[str, Any] = {}
    if VAL_TAG in scalars:
        facts["steps_to_threshold"] = steps_to_threshold(scalars, threshold)
        facts["val_curve"] = series(scalars, VAL_TAG)
    spikes = spike_steps(scalars)
    if spikes is not None:
        facts["spikes"] = len(spikes)
        facts["spike_gradients"] = spike_gradients(scalars)
    if (norm := max_grad_norm(scalars)) is not None:
        facts["max_grad_norm"] = norm
    if (best := best_validation(scalars)) is not None:
        facts["best_ckpt_step"] = best[0]
    if VAL_LOSS_TAG in scalars:
        facts["final_val_loss"] = scalars[VAL_LOSS_TAG][-1][1]
    return facts


def read_run(folder: Path, threshold: float) -> RunResult:
    """The run of the record in ``folder``: its label, the report's status, only its test
    metrics, and its facts (``curve_facts``) in ``info`` beside its tags."""
    run = load_run(folder)
    record = load_record(folder)
    # The CSV(s) a converted record came from (one, or a list for the trajectory records).
    source = (record.get("source") or {}).get("converted_from") or []
    run.info["sources"] = [Path(s).name for s in ([source] if isinstance(source, str) else source)]
    run.variant = run_label(run.variant)
    if run.status != OK:  # left out of every number: no metrics, no facts
        run.status, run.metrics, run.seconds, run.global_step = "unfinished", {}, None, None
        return run
    carried = {k: run.metrics[k] for k in FACTS if k in run.metrics}
    carried = {k: v if k in FACTS[3:] else int(v) for k, v in carried.items()}
    run.info.update({**carried, **curve_facts(run_scalars(folder), threshold)})
    run.metrics = {k: float(v) for k, v in run.metrics.items() if k.startswith("test/")}
    if CONVERGENCE_METRIC not in run.metrics:
        run.status = "no test"
    return run


def chosen_runs(
    roots: Sequence[Path], variants: Sequence[str] | None, threshold: float = DEFAULT_THRESHOLD
) -> tuple[list[str], list[RunResult]]:
    """The labels of ``variants`` (attention specs are turned into labels; default: every label
    recorded, sorted) and their runs under ``roots``, by label then seed; a variant without runs
    is named in a warning. A (variant, seed) recorded twice keeps the first finished record (else
    the first), in the order of ``roots``.

    Raises:
        FileNotFoundError: naming a folder of ``roots`` that does not exist or holds no record.
    """
    found: dict[tuple[str, int], RunResult] = {}
    for root in roots:
        folders = record_folders(root)
        if not folders:
            what = "holds no run record (record.json)" if root.is_dir() else "does not exist"
            raise FileNotFoundError(f"runs folder {root} {what}")
        for folder in folders:
            run = read_run(folder, threshold)
            key = (run.variant, run.seed)
            if key not in found or (not finished(found[key]) and finished(run)):
                found[key] = run
    names = [run_label(v) for v in variants] if variants else sorted({v for v, _ in found})
    missing = [n for n in names if not any(v == n for v, _ in found)]
    if missing:
        log.warning("no runs of %s under %s", ", ".join(missing), ", ".join(map(str, roots)))
    runs = [r for r in found.values() if r.variant in names]
    return names, sorted(runs, key=lambda r: (names.index(r.variant), r.seed))
