"""Callbacks of every training run: random-feature redraw and run checkpoint folders."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import nn

log = logging.getLogger(__name__)


def redraw_generator(seed: int, step: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, step)`` alone, so every DDP rank draws the same."""
    digest = hashlib.sha256(f"{seed}:{step}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def redraw_all_features(module: nn.Module, *, seed: int, step: int) -> int:
    """Call ``redraw_features(generator)`` on every submodule that has it; return how many.

    One generator is shared by the modules in ``modules()`` order, so layers get different but
    reproducible features.
    """
    generator = redraw_generator(seed, step)
    count = 0
    for sub in module.modules():
        redraw = getattr(sub, "redraw_features", None)
        if callable(redraw):
            redraw(generator)
            count += 1
    return count


class FeatureRedraw(Callback):
    """Redraw random features (Performer, random PolySketch) every ``every_n_steps`` steps.

    FAVOR+ needs periodic redraws to match softmax (Choromanski et al. 2021, §4). The draw depends
    only on ``(seed, global_step)``: identical on every rank, and a resumed run redraws exactly as
    an uninterrupted one would. The features themselves are buffers saved in checkpoints.

    Args:
        every_n_steps: optimiser steps between redraws; 0 disables redrawing.
        seed: mixed with the step into the generator's seed.
    """

    def __init__(self, *, every_n_steps: int = 1000, seed: int = 0) -> None:
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0 (0 disables), got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.seed = seed
        self._last_step = -1

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        # With gradient accumulation several batches share a step: redraw once per step.
        if self.every_n_steps == 0 or step == 0 or step % self.every_n_steps:
            return
        if step == self._last_step:
            return
        self._last_step = step
        count = redraw_all_features(pl_module, seed=self.seed, step=step)
        if count:
            log.debug("redrew random features of %d module(s) at step %d", count, step)


class RunCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that writes to ``<root>/<experiment>/<run>/``.

    ``experiment`` is the first logger's ``name`` and ``run`` the last part of its log dir (the
    logger's ``version``: ``version_N`` or the ``--run_name`` given), so logs and checkpoints of
    a run share their names. Both are broadcast from rank 0. An explicit ``dirpath`` wins; with no
    logger it falls back to ``<root>/default/run``.

    Args:
        root: top folder of all checkpoints.
        **kwargs: ``ModelCheckpoint`` arguments (monitor, save_last, save_top_k, ...).
    """

    def __init__(self, *, root: str = "checkpoints", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = root

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            experiment, run = "default", "run"
            if trainer.loggers:
                log_dir = trainer.log_dir  # broadcast from rank 0 by the trainer
                # A logger may have no name (TensorBoardLogger(name=None)) or no log dir
                # (save_dir=None): keep "default" / "run" rather than a folder named "None".
                experiment = str(trainer.strategy.broadcast(trainer.loggers[0].name) or experiment)
                if log_dir:
                    run = Path(log_dir).name
            self.dirpath = str(Path(self.root) / experiment / run)
        self._stage = stage
        super().setup(trainer, pl_module, stage)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if getattr(self, "_stage", "fit") != "fit":
            # validate/test/predict save nothing: no "dirpath has changed" warning for them.
            self.best_model_path = state_dict["best_model_path"]
            return
        super().load_state_dict(state_dict)
