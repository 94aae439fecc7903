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
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import read_scalars, series
from attn_lightning.results.records import RunResult
from attn_lightning.studies.reversal.dynamics import (
    VAL_TAG,
    best_validation,
    last_value,
    max_grad_norm,
    spike_gradients,
    spike_steps,
    steps_to_threshold,
)
from attn_lightning.studies.runner import Runner, Variant, run_label

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


def _read(runner: Runner, root: Path, name: tuple[str, int], threshold: float) -> RunResult:
    label, seed = name
    run = runner.run(Variant(label), seed)
    # Only the test metrics: the fit's and the validation's are not the report's.
    run.metrics = {k: float(v) for k, v in run.metrics.items() if k.startswith("test/")}
    run.status = "ok" if CONVERGENCE_METRIC in run.metrics else "no test"
    stem = f"{label}-s{seed}"
    log_dir = root / (run.log_dir or f"logs/{runner.experiment}/{stem}")
    if not log_dir.is_dir():
        log.warning("run %s: no TensorBoard folder %s", stem, log_dir)
        return run
    run.info.update(run_facts(log_dir, threshold))
    return run


def load_runs(root: Path, experiment: str, threshold: float) -> list[RunResult]:
    """Every run of ``sweeps/<experiment>``, plus log folders without a metrics file, sorted by
    (variant, seed).

    Raises:
        FileNotFoundError: the folder holds no metrics file.
    """
    folder = root / "sweeps" / experiment
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(
            f"no runs in {folder.absolute()}: no <label>-s<seed>.json metrics files"
        )
    runner = Runner(experiment=experiment, runs_dir=folder, skip_runs=True)
    runs = []
    for path in files:
        name = split_name(path.stem)
        # The runner finds a run's file by its label: a name it would spell otherwise is foreign.
        if name is None or run_label(name[0]) != name[0]:
            log.warning("skipping %s: not <label>-s<seed>.json", path)
            continue
        runs.append(_read(runner, root, name, threshold))
    seen = {p.stem for p in files}
    logs = root / "logs" / experiment
    for log_dir in sorted(logs.iterdir()) if logs.is_dir() else []:
        name = split_name(log_dir.name)
        if log_dir.is_dir() and name is not None and log_dir.name not in seen:
            runs.append(RunResult(name[0], name[1], None, "unfinished"))
    return sorted(runs, key=lambda r: (r.variant, r.seed))
