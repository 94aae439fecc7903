"""Image grids of an ``ImageGenerationTask``: unconditional samples and occluded completions.

``sample_grid`` and ``completion_grid`` build ``(3, H', W')`` float images in [0, 1]; the
``ImageGrids`` callback logs them to TensorBoard each validation epoch, and
``python -m attn_lightning.studies.image_samples`` writes the same grids as PNG from a checkpoint.
Completion rows read ``occluded | completion 1 … C | original``; the held-out part of the
occluded image is drawn mid-grey with a red line under the last observed pixel row.
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchvision.utils import make_grid

from attn_lightning.data.pixels import dequantize

_MIN_PIXELS = 56  # upscale small images (8×8 digits) so a grid is readable
_HIDDEN = 0.5  # grey for the held-out part of an occluded image


def _to_rgb(tokens: Tensor, task: Any) -> Tensor:
    """``(N, H·W)`` tokens -> ``(N, 3, H·s, W·s)`` in [0, 1], nearest-upscaled by s."""
    size = task.image_size
    images = dequantize(tokens.cpu(), task.levels, height=size, width=size)  # (N, 1, H, W)
    scale = max(1, math.ceil(_MIN_PIXELS / size))
    return F.interpolate(images, scale_factor=scale, mode="nearest").expand(-1, 3, -1, -1)


def _occluded(pixels: Tensor, task: Any) -> Tensor:
    """The observed part of ``pixels: (B, N)`` with the rest grey, as RGB ``(B, 3, H', W')``."""
    rgb = _to_rgb(pixels, task).clone()
    size, k = task.image_size, task.observed_pixels
    scale = rgb.shape[-1] // size
    hidden = torch.ones(pixels.shape[0], 1, size * size, dtype=torch.bool)
    hidden[:, :, :k] = False
    hidden = F.interpolate(
        hidden.view(-1, 1, size, size).float(), scale_factor=scale, mode="nearest"
    ).bool()  # (B, 1, H', W')
    rgb = rgb.masked_fill(hidden.expand_as(rgb), _HIDDEN)
    if k % size == 0 and 0 < k < size * size:  # whole rows observed: mark the boundary
        row = (k // size) * scale
        rgb[:, :, row, :] = torch.tensor([1.0, 0.0, 0.0])[:, None]
    return rgb


def sample_grid(
    task: Any,
    num_samples: int,
    *,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``num_samples`` unconditional samples in a square-ish grid ``(3, H', W')``."""
    tokens = task.sample(num_samples, temperature=temperature, generator=generator)
    nrow = math.ceil(math.sqrt(num_samples))
    return make_grid(_to_rgb(tokens, task), nrow=nrow, padding=2, pad_value=1.0)


def completion_grid(
    task: Any,
    pixels: Tensor,
    *,
    num_completions: int = 3,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """One row per image of ``pixels: (B, N)``: occluded | completions | original."""
    completions = task.complete(
        pixels, num_completions=num_completions, temperature=temperature, generator=generator
    )  # (B, C, N)
    b = pixels.shape[0]
    rows = torch.cat(
        [
            _occluded(pixels, task)[:, None],
            _to_rgb(completions.flatten(0, 1), task).view(b, num_completions, 3, *_hw(task)),
            _to_rgb(pixels, task)[:, None],
        ],
        dim=1,
    )  # (B, C + 2, 3, H', W')
    return make_grid(rows.flatten(0, 1), nrow=num_completions + 2, padding=2, pad_value=1.0)


def _hw(task: Any) -> tuple[int, int]:
    side = task.image_size * max(1, math.ceil(_MIN_PIXELS / task.image_size))
    return side, side


def grid_generator(seed: int) -> torch.Generator:
    """The CPU generator the grids sample from: the same pictures for the same seed."""
    return torch.Generator().manual_seed(seed)


class ImageGrids(Callback):
    """Log ``samples/unconditional`` and ``samples/completion`` image grids to TensorBoard.

    Runs after each ``every_n_epochs``-th validation epoch (not during the sanity check), on the
    first validation batch's images, in eval mode, with a generator seeded by ``seed`` so that
    epochs are comparable.

    Args:
        every_n_epochs: log every this many validation epochs (0 disables).
        num_samples: unconditional samples.
        num_images: validation images to occlude and complete.
        num_completions: completions per occluded image.
        temperature: sampling temperature.
        seed: generator seed.
    """

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
        if every_n_epochs < 0 or num_samples < 1 or num_images < 1 or num_completions < 1:
            raise ValueError(
                f"every_n_epochs must be >= 0 and num_samples, num_images, num_completions >= 1, "
                f"got {every_n_epochs}, {num_samples}, {num_images}, {num_completions}"
            )
        self.every_n_epochs = every_n_epochs
        self.num_samples = num_samples
        self.num_images = num_images
        self.num_completions = num_completions
        self.temperature = temperature
        self.seed = seed
        self._pixels: Tensor | None = None

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx == 0 and dataloader_idx == 0:
            self._pixels = batch["pixels"][: self.num_images]

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pixels, self._pixels = self._pixels, None
        due = self.every_n_epochs > 0 and (trainer.current_epoch + 1) % self.every_n_epochs == 0
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        if trainer.sanity_checking or pixels is None or not due or not trainer.is_global_zero:
            return
        if not loggers:
            return
        generator = grid_generator(self.seed)
        samples = sample_grid(
            pl_module, self.num_samples, temperature=self.temperature, generator=generator
        )
        completions = completion_grid(
            pl_module,
            pixels,
            num_completions=self.num_completions,
            temperature=self.temperature,
            generator=generator,
        )
        for logger in loggers:
            logger.experiment.add_image("samples/unconditional", samples, trainer.global_step)
            logger.experiment.add_image("samples/completion", completions, trainer.global_step)
