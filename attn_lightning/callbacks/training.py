"""Random-feature redraw: the same draw on every DDP rank and in a resumed run as in an
uninterrupted one (checkpoints: ``callbacks.checkpoints``)."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
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
