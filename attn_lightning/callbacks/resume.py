"""What lets a stopped run resume as if it had not stopped, beyond Lightning's own checkpoint:
checkpoints written atomically, the fit clock across processes, and torchmetrics' running sums.

**Atomic writes**: a checkpoint is written to a temporary file beside its target, flushed to the
disk and renamed over it, so a kill leaves either the old file or the new one, never a truncated
one; a write that fails removes its temporary file.

**Fit time across resumes**: a run stopped (Ctrl-C, SIGTERM, a session that ended) and resumed
from its ``last.ckpt`` is several processes. ``FitClock`` saves the fit seconds so far in every
checkpoint (as callback state) and, on resume, starts from the saved value, so the metrics file's
``fit_seconds`` is the time of all processes up to each one's last checkpoint plus the last
process's whole fit (work lost after a process's last checkpoint is done and counted again). The
CLI registers the clock for every subcommand, not only ``fit``: Lightning restores callback
states from ``--ckpt_path`` for ``validate``/``test``/``predict`` too, and warns "Please add the
following callbacks: ['FitClock']" for a saved state without its callback.

**The last validation**: ``LastValidation`` saves the last validation's metrics in every
checkpoint and, when a fit resumes, puts them back among the trainer's ``callback_metrics``, where
an uninterrupted run still holds them: a run resumed after its last validation (killed between it
and the end) ends with the same final metrics (metrics file, run record, summary) instead of none,
and a checkpoint saved before the next validation reads the same monitored value.

**Metric states**: the running sums of a task's torchmetrics metrics, saved in a checkpoint and
added back after a resume, so the train-epoch averages of a run resumed mid-epoch cover the whole
epoch.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.callbacks import Callback
from torch import nn
from torchmetrics import Metric

log = logging.getLogger("attn_lightning")
PARTIAL = ".partial"  # a checkpoint being written: ``.<name>.<pid>.partial`` beside it


def is_partial(path: Path) -> bool:
    """Whether ``path`` is the temporary file of a checkpoint write (finished or cut short)."""
    return path.name.startswith(".") and path.name.endswith(PARTIAL)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes beside the target, fsyncs and renames over it.

    Lightning's own write goes through a temporary file in ``$TMPDIR`` and moves it into place:
    with checkpoints on another filesystem (a node-local TMPDIR, shared storage) the move is a
    copy, which a kill cuts short, leaving a truncated ``last.ckpt`` and the temporary file
    behind. A rename within one directory is atomic. Remote paths (``s3://``) keep Lightning's
    write.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}{PARTIAL}")
        try:
            with open(partial, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    # The rename itself reaches the disk only when the folder's entry does (POSIX).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders (Windows): the rename is all we have
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class FitClock(Callback):
    """Fit seconds of a run over all its processes (module docstring).

    Args:
        started: ``time.perf_counter()`` when this process's fit began (the CLI's start);
            default: now.
    """

    def __init__(self, started: float | None = None) -> None:
        self.started = time.perf_counter() if started is None else started
        # None: a fresh run, or a checkpoint from before this clock (its earlier time unknown).
        self.earlier_seconds: float | None = None

    def seconds(self) -> float:
        """This process's fit seconds so far plus the earlier processes' (unknown: 0)."""
        return (self.earlier_seconds or 0.0) + time.perf_counter() - self.started

    def state_dict(self) -> dict[str, Any]:
        return {"fit_seconds": self.seconds()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Also on validate/test/predict from a checkpoint (harmless: nothing reads it there).
        self.earlier_seconds = float(state_dict["fit_seconds"])


class LastValidation(Callback):
    """The last validation's ``val/`` and ``hp/`` metrics across a resume (module docstring)."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        # Before ModelCheckpoint's own on_validation_end (Lightning runs checkpoint callbacks
        # last), so the checkpoint it saves holds this validation.
        if not trainer.sanity_checking:
            self.metrics = {
                k: float(v)
                for k, v in trainer.callback_metrics.items()
                if k.startswith(("val/", "hp/")) and v.numel() == 1
            }

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        restored = {k: v for k, v in self.metrics.items() if k not in trainer.callback_metrics}
        # callback_metrics is the trainer's own dict: what is added stays until overwritten.
        trainer.callback_metrics.update({k: torch.tensor(v) for k, v in restored.items()})

    def state_dict(self) -> dict[str, Any]:
        return {"metrics": dict(self.metrics)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.metrics = dict(state_dict.get("metrics", {}))


def metric_states(module: nn.Module, names: set[str]) -> dict[str, dict[str, Any]]:
    """The accumulated states of the torchmetrics metrics ``names`` of ``module`` (on the CPU).

    A metric logged ``on_epoch`` keeps its running sums itself, outside Lightning's checkpoint;
    saved here, a run resumed mid-epoch ends the epoch with the same average as one that was not
    stopped.
    """
    states: dict[str, dict[str, Any]] = {}
    for name, metric in module.named_modules():
        if name in names and isinstance(metric, Metric):
            state = {key: getattr(metric, key) for key in metric._defaults}
            states[name] = {
                key: [t.detach().cpu() for t in v] if isinstance(v, list) else v.detach().cpu()
                for key, v in state.items()
            }
    return states


def restore_metric_states(module: nn.Module, states: dict[str, dict[str, Any]]) -> None:
    """Add saved ``metric_states`` into the metrics of ``module`` that exist now.

    Called after the first step of a resumed run: a metric the task creates when first logged
    exists by then, and holds that step's value, to which the saved sums are added (in the order
    the uninterrupted run adds them: saved, then this step).
    """
    for name, metric in module.named_modules():
        saved = states.get(name)
        if saved is None or not isinstance(metric, Metric):
            continue
        device = metric.device
        incoming = {
            k: [t.to(device) for t in v] if isinstance(v, list) else v.to(device)
            for k, v in saved.items()
        }
        try:
            metric.merge_state(incoming)
        except (RuntimeError, ValueError) as error:  # a metric that cannot merge states
            log.warning("metric %s starts the resumed epoch afresh: %s", name, error)
