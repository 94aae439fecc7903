"""Adapter export: after fitting, write the task's peft adapter beside the run's checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol, runtime_checkable

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)


@runtime_checkable
class AdapterExporter(Protocol):
    """A task that can write its adapter (``AdaptedTask`` and so the LoRA tasks)."""

    def export_adapter(self, directory: str | Path) -> bool:
        """Write the adapter into ``directory``; False when there is none (nothing written)."""
        ...


class AdapterExport(Callback):
    """After fitting, write the model's peft adapter beside the run's checkpoints.

    ``<checkpoint dir>/adapter/`` (peft's ``save_pretrained`` format: ``adapter_config.json`` +
    ``adapter_model.safetensors``) holds the last weights; reload them onto the base model with
    ``PeftModel.from_pretrained(base, dir)``. The task provides ``export_adapter(dir)``
    (``AdapterExporter``); other tasks, runs without adapters (``adaptation`` ``base`` or
    ``full``) and runs without a checkpoint folder write nothing.

    Args:
        dirname: sub-folder of the checkpoint directory.
    """

    def __init__(self, *, dirname: str = "adapter") -> None:
        self.dirname = dirname

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        dirpath = getattr(trainer.checkpoint_callback, "dirpath", None)
        if not isinstance(pl_module, AdapterExporter) or dirpath is None:
            return
        if not trainer.is_global_zero:
            return
        target = Path(dirpath) / self.dirname
        if pl_module.export_adapter(target):
            log.info("wrote the LoRA adapter to %s", target)
