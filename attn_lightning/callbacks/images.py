"""The ``ImageGrids`` callback: image grids of an ``ImageGenerationTask`` in TensorBoard.

Unconditional samples and occluded completions drawn by ``attn_lightning.data.image_grids``
(which ``train.py predict`` and ``lab.studies.image.samples.write_grids`` use too), on
the first validation batch, with a generator seeded so that epochs are comparable.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from attn_lightning.callbacks.samples import ValidationBatchLogger
from attn_lightning.data.image_grids import (
    ImageSampler,
    completion_grid,
    grid_generator,
    sample_grid,
)


class ImageGrids(ValidationBatchLogger):
    """Log ``samples/unconditional`` and ``samples/completion`` image grids to TensorBoard.

    On the first validation batch's pixels, with a generator seeded by ``seed`` so that epochs
    are comparable; when, see ``attn_lightning.callbacks.samples``. The task provides
    ``ImageSampler``'s sampling methods and sizes (``ImageGenerationTask`` does).

    Args:
        every_n_epochs: log after every this many validation epochs; 0 disables.
        num_samples: unconditional samples.
        num_images: validation images to occlude and complete.
        num_completions: completions per occluded image.
        temperature: sampling temperature.
        seed: generator seed.
    """

    hook = ImageSampler

    def __init__(
        self,
        *,
        every_n_epochs: int = 1,
        num_samples: int = 16,
        num_images: int = 6,
        num_completions: int = 3,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> None:
        if num_samples < 1 or num_images < 1 or num_completions < 1:
            raise ValueError(
                f"num_samples, num_images and num_completions must be >= 1, "
                f"got {num_samples}, {num_images}, {num_completions}"
            )
        super().__init__(every_n_epochs=every_n_epochs)
        self.num_samples = num_samples
        self.num_images = num_images
        self.num_completions = num_completions
        self.temperature = temperature
        self.seed = seed

    def select(self, batch: Any) -> Tensor:
        return batch["pixels"][: self.num_images]

    def log_batch(
        self,
        trainer: pl.Trainer,
        task: ImageSampler,
        batch: Tensor,
        loggers: list[TensorBoardLogger],
    ) -> None:
        generator = grid_generator(self.seed)
        samples = sample_grid(
            task, self.num_samples, temperature=self.temperature, generator=generator
        )
        completions = completion_grid(
            task,
            batch,
            num_completions=self.num_completions,
            temperature=self.temperature,
            generator=generator,
        )
        for logger in loggers:
            logger.experiment.add_image("samples/unconditional", samples, trainer.global_step)
            logger.experiment.add_image("samples/completion", completions, trainer.global_step)
