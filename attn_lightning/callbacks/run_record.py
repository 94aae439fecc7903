"""The run record every run writes beside its ``config.yaml``: ``record.json`` (which run it is:
experiment, run folder, attention variant, seed; what ran it: git commit, versions, device; how
it ended, what it cost, its best checkpoint and final metrics as plain floats), ``curves.csv``
(every scalar logged while fitting) and ``spikes.csv`` (``GradientTracker``'s loss spikes).
Studies read these files instead of TensorBoard event folders; the layout, field by field:
``docs/run_record.md``.

Curves are taken from what is logged, by a small ``Logger`` (``CurveTap``) that ``RunRecord``
adds beside TensorBoard for the fit and removes after it, rather than by reading
``trainer.callback_metrics`` at log steps: callbacks write to the loggers directly
(``GradientTracker``'s ``grad/*`` and spike flags at every step, the learning-rate monitor),
never through ``callback_metrics``, and a logger gets each value at the step and rate
TensorBoard gets it, with no second rule of when to log. Only global rank 0 writes; the files
are written at the start, at each checkpoint save (so they match the checkpoint a resume starts
from), every ``flush_every_s`` seconds of logging, and at the end, each atomically.

A resumed fit keeps the rows of its earlier processes up to the step it resumes from and logs the
later ones again (one row per (step, tag)); a later ``validate``/``test`` of the run's checkpoint
(logged in ``<run>/<subcommand>/``) updates this record's metrics for that subcommand, leaving the
fit's as they were, and appends an entry to its ``evaluations``: every validate and test keeps
its checkpoint, that checkpoint's step, the data settings and its metrics, so one checkpoint
evaluated on several lengths keeps each result.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import lightning
import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities.exceptions import SIGTERMException

from attn_lightning.callbacks.backends import collect_diagnostics
from attn_lightning.callbacks.gradients import GradientTracker, SpikeRow
from attn_lightning.callbacks.resume import FitClock
from attn_lightning.callbacks.stopping import NonFiniteTraining
from attn_lightning.records import run_files as files
from attn_lightning.records.environment import git_commit as short_commit
from attn_lightning.records.run_files import SCHEMA


def run_folder(trainer: pl.Trainer) -> Path | None:
    """The run's log folder (where ``config.yaml`` is): the first logger's ``log_dir`` without
    its ``sub_dir`` (a run's ``validate``/``test`` log in ``<run>/<subcommand>/``); None without
    one. Read on this process alone, not broadcast: only rank 0 calls it."""
    if not trainer.loggers:
        return None
    logger = trainer.loggers[0]
    log_dir = getattr(logger, "log_dir", None)
    if not log_dir:
        return None
    folder = Path(log_dir)
    sub_dir = getattr(logger, "sub_dir", None)
    return folder.parents[len(Path(sub_dir).parts) - 1] if sub_dir else folder


def identity(trainer: pl.Trainer, pl_module: pl.LightningModule, tags: dict[str, Any]) -> dict:
    """The record's fields that say which run this is and what ran it."""
    folder = run_folder(trainer)
    seed = os.environ.get("PL_GLOBAL_SEED")  # set by seed_everything (LightningCLI's seed)
    return {
        "schema": SCHEMA,
        "experiment": trainer.loggers[0].name if trainer.loggers else None,
        "run": folder.name if folder else None,
        "variant": variant(pl_module),
        "seed": int(seed) if seed is not None and seed.lstrip("-").isdigit() else None,
        "tags": tags,
        "git_commit": git_commit(),
        "environment": environment(trainer),
    }


def variant(pl_module: pl.LightningModule) -> dict[str, Any] | None:
    """The attention backend the model was built with (the task's ``attention_config``: its
    ``attention`` with its ``attention_override`` over it), or None for a task without one."""
    config = getattr(pl_module, "attention_config", None)
    return None if config is None else dict(config)


def environment(trainer: pl.Trainer) -> dict[str, Any]:
    """Versions, device and parallelism of this process (rank 0's, under DDP)."""
    device = trainer.strategy.root_device
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "platform": platform.platform(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "world_size": trainer.world_size,
        "precision": str(trainer.precision),
        "threads": torch.get_num_threads(),
    }


@cache
def git_commit() -> str | None:
    """The (short) commit of the checkout this package runs from, or None outside one."""
    commit = short_commit()  # the one every result file's header names
    return None if commit == "unknown" else commit


def best_checkpoint(trainer: pl.Trainer, noted: dict[str, Any]) -> dict[str, Any] | None:
    """The best checkpoint's path, step, score, monitor and validation metrics (None without
    one); step and metrics are those noted when it was saved (None if it was not seen saved)."""
    ckpt = trainer.checkpoint_callback
    if not isinstance(ckpt, ModelCheckpoint) or not ckpt.best_model_path:
        return None
    same = noted.get("path") == ckpt.best_model_path
    score = ckpt.best_model_score
    return {
        "path": ckpt.best_model_path,
        "step": noted.get("step") if same else None,
        "score": None if score is None else float(score),
        "monitor": ckpt.monitor,
        "metrics": noted.get("metrics") if same else None,
    }


def scalars(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The one-number metrics whose names start with ``prefix``, as floats, sorted by name."""
    return {
        k: float(v)
        for k, v in sorted(metrics.items())
        if k.startswith(prefix) and (not isinstance(v, torch.Tensor) or v.numel() == 1)
    }


# The subcommands a record keeps every run of (``evaluations``), not just the latest.
EVALUATIONS = ("validate", "test")


def evaluated(trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
    """What an evaluation scored: ``checkpoint`` (the path given; None: the weights in memory, a
    fit's own or the initial ones), ``step`` (the checkpoint's global step, the task's
    ``checkpoint_step``; without one the trainer's) and ``data`` (the DataModule's
    hyper-parameters, JSON-safe: lengths, pairs, seed, ...; {} without a DataModule)."""
    datamodule = getattr(trainer, "datamodule", None)
    hparams = dict(getattr(datamodule, "hparams", {}) or {})
    data = json.loads(json.dumps(hparams, default=str))
    path = trainer.ckpt_path
    if path is None:
        return {"checkpoint": None, "step": trainer.global_step, "data": data}
    return {
        "checkpoint": str(path),
        "step": getattr(pl_module, "checkpoint_step", None),
        "data": data,
    }


# Exceptions that end a run on purpose (SIGTERM or a first Ctrl-C, a second Ctrl-C, a diverged
# loss): "stopped", resumable from last.ckpt; any other exception is "crashed".
STOPS = (SIGTERMException, KeyboardInterrupt, NonFiniteTraining)
# A tag's value, spelled out rather than Any: jsonargparse parses a string inside an Any-typed
# value again as YAML (``--run_record.tags={"lr": "0.01"}`` gave the float 0.01), so a study's
# string tags came back as numbers and no longer matched the tags it looks its runs up by. (Inside
# a list or dict value it still does: keep tags a study looks runs up by at the top level.)
TagValue = str | int | float | bool | list[Any] | dict[str, Any] | None


class RunRecord(Callback):
    """Write the run record (module docstring) for every subcommand, on global rank 0.

    Nothing is written without a logger that has a log folder (``logger: false``,
    ``fast_dev_run``): the record lives beside the logs.

    Args:
        tags: the study's labels of this run (any JSON dict, e.g. ``{study: lora, lr: 1e-3}``),
            copied into ``record.json`` as ``tags``; a quoted string stays a string.
        flush_every_s: seconds of logging between writes of the curves (besides the writes at
            each checkpoint save and at the end).
    """

    def __init__(
        self, *, tags: dict[str, TagValue] | None = None, flush_every_s: float = 60.0
    ) -> None:
        try:
            json.dumps(tags or {}, allow_nan=True)
        except (TypeError, ValueError) as error:
            raise ValueError(f"tags must be a JSON dict, got {tags!r}: {error}") from None
        if flush_every_s <= 0:
            raise ValueError(f"flush_every_s must be > 0, got {flush_every_s}")
        self.tags = dict(tags or {})
        self.flush_every_s = flush_every_s
        self.folder: Path | None = None  # set on rank 0 while a stage runs
        self._record: dict[str, Any] = {}
        self._stage = ""
        self._curves: files.Curves = {}
        self._spikes: files.Spikes = {}
        # The fit's curves and spikes are known (read back on a resume) only from on_train_start:
        # a fit that ends before it (a resume at max_steps, a crash in setup) leaves the files.
        self._curves_known = False
        self._tap: CurveTap | None = None
        self._trainer: pl.Trainer | None = None
        self._flushed = 0.0
        self._best: dict[str, Any] = {}  # path, step, metrics of the best checkpoint when saved

    # ------------------------------------------------------------------ stage start
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer, self._stage = trainer, stage
        self.folder = run_folder(trainer) if trainer.is_global_zero else None
        if self.folder is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self._record = files.read_record(self.folder)
        self._curves_known = False
        for key, value in identity(trainer, pl_module, self.tags).items():
            if stage == "fit" or key not in self._record:  # a later test keeps the fit's
                self._record[key] = value
        started = {"status": "running", "command": list(sys.argv), "started": _now()}
        self._record.setdefault("subcommands", {})[stage] = started
        self._write_record()
        if stage == "fit":
            self._tap = CurveTap(self)
            trainer.loggers = [*trainer.loggers, self._tap]
            for tracker in _trackers(trainer):
                tracker.spike_listeners.append(self._on_spike)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The checkpoint is known from here on; a fresh fit keeps nothing of an earlier record
        # (the CLI removed it with the attempt's other files, ``cli.run_folders``).
        if self.folder is not None and not trainer.ckpt_path:
            fit = self._record.get("subcommands", {}).get("fit", {})
            self._record = {**identity(trainer, pl_module, self.tags), "subcommands": {"fit": fit}}
            self._best = {}

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.folder is None:
            return
        step = trainer.global_step  # restored by now: the step a resumed run continues from
        resumed = bool(trainer.ckpt_path)
        self._curves = files.read_curves(self.folder, up_to_step=step) if resumed else {}
        self._spikes = files.read_spikes(self.folder, up_to_step=step) if resumed else {}
        self._curves_known = True
        self._flushed = time.monotonic()

    # ------------------------------------------------------------------ during the fit
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Keep the fit's logged scalars (``CurveTap``'s ``log_metrics``)."""
        for tag, value in metrics.items():
            if isinstance(value, torch.Tensor) and value.numel() != 1:
                continue
            self._curves[(int(step), tag)] = float(value)
        if time.monotonic() - self._flushed > self.flush_every_s:
            self._write_all()

    def _on_spike(self, row: SpikeRow) -> None:
        grads = (row.grad_norm, row.grad_ratio, row.prior_grad_ratio)
        self._spikes[row.step] = (row.loss, row.ratio, float(row.total), *grads)

    def state_dict(self) -> dict[str, Any]:
        # Called while each checkpoint is assembled, after ModelCheckpoint chose its file: a new
        # best is noted at the step it was saved at, and saved with it for a resumed run.
        self._note_best()
        return {"best": dict(self._best)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._best = dict(state_dict.get("best", {}))

    def saved(self) -> None:
        """A checkpoint was written (``CurveTap``'s ``after_save_checkpoint``): write the files
        as of that checkpoint."""
        self._write_all()

    # ------------------------------------------------------------------ stage end
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        status = "stopped" if stage == "fit" and trainer.should_stop else "ok"  # early stopping
        self._end(trainer, pl_module, status, None)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        status = "stopped" if isinstance(exception, STOPS) else "crashed"
        error = type(exception).__name__  # SIGTERMException has no message
        if str(exception):
            error += f": {str(exception).splitlines()[0][:500]}"
        self._end(trainer, pl_module, status, error)

    def _end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, status: str, error: str | None
    ) -> None:
        if self._tap is not None:
            trainer.loggers = [lg for lg in trainer.loggers if lg is not self._tap]
            self._tap = None
        for tracker in _trackers(trainer):
            if self._on_spike in tracker.spike_listeners:
                tracker.spike_listeners.remove(self._on_spike)
        if self.folder is None:
            return
        metrics = scalars(trainer.callback_metrics)
        if self._stage == "fit":
            metrics |= collect_diagnostics(pl_module)
        self._record.setdefault("metrics", {})[self._stage] = metrics
        stage = self._record.setdefault("subcommands", {}).setdefault(self._stage, {})
        stage.update(status=status, ended=_now(), error=error)
        if self._stage in EVALUATIONS:
            entry = {"subcommand": self._stage, **stage, **evaluated(trainer, pl_module)}
            self._record.setdefault("evaluations", []).append({**entry, "metrics": metrics})
        self._write_all()
        self.folder, self._trainer = None, None

    # ------------------------------------------------------------------ writing
    def _note_best(self) -> None:
        ckpt = self._trainer.checkpoint_callback if self._trainer is not None else None
        if self._stage != "fit" or not isinstance(ckpt, ModelCheckpoint):
            return
        if ckpt.best_model_path and ckpt.best_model_path != self._best.get("path"):
            assert self._trainer is not None
            validation = scalars(self._trainer.callback_metrics)
            self._best = {
                "path": ckpt.best_model_path,
                "step": self._trainer.global_step,
                "metrics": {k: v for k, v in validation.items() if k.startswith("val")},
            }

    def _write_all(self) -> None:
        if self.folder is None:
            return
        if self._stage == "fit" and self._curves_known:
            files.write_curves(self.folder, self._curves)
            files.write_spikes(self.folder, self._spikes)
        self._flushed = time.monotonic()
        self._write_record()

    def _write_record(self) -> None:
        assert self.folder is not None and self._trainer is not None
        record, trainer = self._record, self._trainer
        if self._stage == "fit":
            clock = next((c for c in _callbacks(trainer) if isinstance(c, FitClock)), None)
            record["fit_seconds"] = None if clock is None else clock.seconds()
            record["global_step"] = trainer.global_step
            record["best_checkpoint"] = best_checkpoint(trainer, self._best)
        # The run's own subcommand is its fit; a record of evaluations alone, the latest one.
        subcommands = record.get("subcommands", {})
        record["subcommand"] = "fit" if "fit" in subcommands else self._stage
        main = subcommands.get(record["subcommand"], {})
        record["status"], record["command"] = main.get("status"), main.get("command")
        files.write_record(self.folder, record)


class CurveTap(Logger):
    """A logger that hands every logged scalar to its ``RunRecord`` (module docstring) and tells
    it when a checkpoint was saved; it writes nothing itself."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__()
        self._run_record = record

    @property
    def name(self) -> str:
        return "run_record"

    @property
    def version(self) -> str:
        return ""

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass  # config.yaml holds them

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if step is not None:  # Lightning and our callbacks always give one
            self._run_record.log_metrics(metrics, step)

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self._run_record.saved()


def _trackers(trainer: pl.Trainer) -> list[GradientTracker]:
    return [c for c in _callbacks(trainer) if isinstance(c, GradientTracker)]


def _callbacks(trainer: pl.Trainer) -> list[Callback]:
    return list(trainer.callbacks)  # type: ignore[attr-defined]  # set in Trainer.__init__


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
