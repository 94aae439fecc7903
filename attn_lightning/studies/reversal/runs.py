"""The runs of a reversal sweep as ``RunResult``s, with what their TensorBoard logs show.

Every ``<label>-s<seed>.json`` metrics file that ``studies.sweep`` wrote under
``sweeps/<experiment>/`` is read by ``Runner(skip_runs=True)``; its run's TensorBoard folder (the
file's ``log_dir``, read by ``results.curves.read_scalars``) gives the run's own facts, kept in
``RunResult.info``:

* ``steps_to_threshold``: the first logged step whose ``val/token_acc`` ≥ the threshold (None:
  never reached);
* ``spikes``: loss spikes flagged (None: no flags logged, or no logs);
* ``spike_gradients``: one ``dynamics.SpikeGradient`` per spike with a gradient log before it;
* ``max_grad_norm``: the largest global gradient norm logged;
* ``best_ckpt_step``: the optimiser step of the lowest validation loss, the checkpoint the test
  metrics come from (``dynamics.best_validation``);
* ``final_val_loss``: the validation loss at the end of training;
* ``val_curve``: every logged ``(step, val/token_acc)``;
* ``scalars``: every logged curve (``results.curves.Scalars``), read once for the trajectories.

A run's ``status`` is the report's word for it: ``ok`` (test metrics present), ``no test`` (a
metrics file without them) or ``unfinished`` (a folder under ``logs/<experiment>/`` without a
metrics file: still running, crashed or timed out).

The study runner no longer asks its runs for a metrics file: a run it trained is its run record,
``logs/<experiment>/<label>-s<seed>/record.json`` (``results.records.load_run``). Both are read:
the metrics files of earlier sweeps, then the records of runs without one (a record whose fit is
not ``ok`` counts as ``unfinished``).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import read_scalars, series
from attn_lightning.results.records import RunResult, load_run
from attn_lightning.results.run_files import RECORD
from attn_lightning.studies.reversal.dynamics import (
    VAL_TAG,
    best_validation,
    last_value,
    max_grad_norm,
    spike_gradients,
    spike_steps,
    steps_to_threshold,
)
from attn_lightning.studies.runner import run_label

log = logging.getLogger("attn_lightning.studies.reversal")

CONVERGENCE_METRIC = "test/token_acc"
RUN_FILE = re.compile(r"^(?P<label>.+)-s(?P<seed>\d+)$")


def split_name(stem: str) -> tuple[str, int] | None:
    """``(label, seed)`` of a run's file or folder name ``<label>-s<seed>``; None otherwise."""
    match = RUN_FILE.match(stem)
    return None if match is None else (match["label"], int(match["seed"]))


def finished(run: RunResult) -> bool:
    """Whether the run wrote a metrics file."""
    return run.status != "unfinished"


def converged(run: RunResult, threshold: float) -> bool:
    """Test token accuracy ≥ ``threshold``."""
    value = run.value(CONVERGENCE_METRIC)
    return value is not None and value >= threshold


def run_facts(log_dir: Path, threshold: float) -> dict[str, Any]:
    """The ``info`` of a run (see the module docstring) from its TensorBoard folder."""
    scalars = read_scalars(log_dir)
    spikes = spike_steps(scalars)
    best = best_validation(scalars)
    return {
        "scalars": scalars,
        "steps_to_threshold": steps_to_threshold(scalars, threshold),
        "spikes": None if spikes is None else len(spikes),
        "spike_gradients": spike_gradients(scalars),
        "max_grad_norm": max_grad_norm(scalars),
        "best_ckpt_step": None if best is None else best[0],
        "final_val_loss": last_value(scalars),
        "val_curve": series(scalars, VAL_TAG),
    }


def _from_metrics_file(path: Path, label: str, seed: int) -> RunResult:
    """A sweep's ``--metrics_file`` as a ``RunResult`` (fit, validate, test metrics merged)."""
    record = json.loads(path.read_text())
    metrics = {**record.get("metrics", {}), **record.get("validate", {}), **record.get("test", {})}
    return RunResult(
        label,
        seed,
        record.get("fit_seconds"),
        "ok",
        metrics=metrics,
        global_step=record.get("global_step"),
        log_dir=record.get("log_dir"),
    )


def _with_facts(run: RunResult, log_dir: Path, threshold: float) -> RunResult:
    """Only the test metrics (the fit's and validation's are not the report's), the report's
    status, and the run's TensorBoard facts in ``info``."""
    run.metrics = {k: float(v) for k, v in run.metrics.items() if k.startswith("test/")}
    run.status = "ok" if CONVERGENCE_METRIC in run.metrics else "no test"
    if not log_dir.is_dir():
        log.warning("run %s-s%d: no TensorBoard folder %s", run.variant, run.seed, log_dir)
        return run
    run.info.update(run_facts(log_dir, threshold))
    return run


def load_runs(root: Path, experiment: str, threshold: float) -> list[RunResult]:
    """Every run of ``sweeps/<experiment>`` (metrics files) and ``logs/<experiment>`` (run
    records of runs without a metrics file; log folders without either are ``unfinished``),
    sorted by (variant, seed).

    Raises:
        FileNotFoundError: neither folder holds a run.
    """
    folder = root / "sweeps" / experiment
    logs = root / "logs" / experiment
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    runs = []
    for path in files:
        name = split_name(path.stem)
        # A run's file is named by its label: a name the runner would spell otherwise is foreign.
        if name is None or run_label(name[0]) != name[0]:
            log.warning("skipping %s: not <label>-s<seed>.json", path)
            continue
        run = _from_metrics_file(path, *name)
        log_dir = root / (run.log_dir or f"logs/{experiment}/{path.stem}")
        runs.append(_with_facts(run, log_dir, threshold))
    seen = {p.stem for p in files}
    for log_dir in sorted(logs.iterdir()) if logs.is_dir() else []:
        name = split_name(log_dir.name)
        if not log_dir.is_dir() or name is None or log_dir.name in seen:
            continue
        if (log_dir / RECORD).is_file():
            run = load_run(log_dir)
            if run.status == "ok":
                run.variant, run.seed = name
                runs.append(_with_facts(run, log_dir, threshold))
                continue
        runs.append(RunResult(name[0], name[1], None, "unfinished"))
    if not runs:
        raise FileNotFoundError(
            f"no runs in {folder.absolute()} or {logs.absolute()}: no <label>-s<seed>.json "
            "metrics files and no run records"
        )
    return sorted(runs, key=lambda r: (r.variant, r.seed))
