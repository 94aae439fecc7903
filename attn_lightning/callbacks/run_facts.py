"""What a run record says about the run beside its curves: which run it is (experiment, run
folder, attention variant, seed), what ran it (git commit, versions, device), its best
checkpoint and its metrics as plain floats. ``RunRecord`` (``callbacks.run_record``) writes them;
each field is documented in ``docs/run_record.md``.
"""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path
from typing import Any

import lightning
import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

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


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The one-number metrics as floats, sorted by name."""
    return {
        k: float(v)
        for k, v in sorted(metrics.items())
        if not isinstance(v, torch.Tensor) or v.numel() == 1
    }
