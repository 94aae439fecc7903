"""Image grids from pixel tokens: unconditional samples and occluded completions.

``sample_grid`` and ``completion_grid`` build ``(3, H', W')`` float images in [0, 1] from any
``ImageSampler`` (``draw_samples`` and ``draw_completions`` from tokens already sampled). The
``ImageGrids`` callback logs them to TensorBoard, ``ImageGenerationTask.save_predictions`` writes
them beside its predicted tokens and ``lab.studies.image.samples.write_grids`` writes
them from a checkpoint: here, below both tasks and callbacks, because both draw them.
Completion rows read ``occluded | completion 1 … C | original``; the held-out part of the
occluded image is drawn mid-grey with a red line under the last observed pixel row.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.utils import make_grid

from attn_lightning.data.pixels import dequantize

_MIN_PIXELS = 56  # upscale small images (8×8 digits) so a grid is readable
_HIDDEN = 0.5  # grey for the held-out part of an occluded image


@runtime_checkable
class ImageSampler(Protocol):
    """A task that samples and completes ``image_size``² images of ``levels`` grey levels
    (``ImageGenerationTask``); the grids read its first ``observed_pixels`` as given."""

    image_size: int
    levels: int
    observed_pixels: int

    def sample(
        self,
        num_images: int,
        *,
        temperature: float = ...,
        generator: torch.Generator | None = ...,
    ) -> Tensor:
        """Unconditional samples ``(num_images, N)``."""
        ...

    def complete(
        self,
        pixels: Tensor,
        *,
        num_completions: int = ...,
        temperature: float = ...,
        generator: torch.Generator | None = ...,
    ) -> Tensor:
        """``num_completions`` completions of ``pixels: (B, N)`` -> ``(B, num_completions, N)``."""
        ...


def _to_rgb(tokens: Tensor, task: ImageSampler) -> Tensor:
    """``(N, H·W)`` tokens -> ``(N, 3, H·s, W·s)`` in [0, 1], nearest-upscaled by s."""
    size = task.image_size
    images = dequantize(tokens.cpu(), task.levels, height=size, width=size)  # (N, 1, H, W)
    scale = max(1, math.ceil(_MIN_PIXELS / size))
    return F.interpolate(images, scale_factor=scale, mode="nearest").expand(-1, 3, -1, -1)


def _occluded(pixels: Tensor, task: ImageSampler) -> Tensor:
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
    task: ImageSampler,
    num_samples: int,
    *,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``num_samples`` unconditional samples in a square-ish grid ``(3, H', W')``."""
    return draw_samples(
        task, task.sample(num_samples, temperature=temperature, generator=generator)
    )


def draw_samples(task: ImageSampler, tokens: Tensor) -> Tensor:
    """Already drawn samples ``tokens: (S, N)`` in a square-ish grid ``(3, H', W')``."""
    nrow = math.ceil(math.sqrt(tokens.shape[0]))
    return make_grid(_to_rgb(tokens, task), nrow=nrow, padding=2, pad_value=1.0)


def completion_grid(
    task: ImageSampler,
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
    return draw_completions(task, pixels, completions)


def draw_completions(task: ImageSampler, pixels: Tensor, completions: Tensor) -> Tensor:
    """Already sampled ``completions: (B, C, N)`` of ``pixels: (B, N)`` as a grid, one row per
    image: occluded | completion 1 … C | original."""
    b, num_completions = completions.shape[:2]
    rows = torch.cat(
        [
            _occluded(pixels, task)[:, None],
            _to_rgb(completions.flatten(0, 1), task).view(b, num_completions, 3, *_hw(task)),
            _to_rgb(pixels, task)[:, None],
        ],
        dim=1,
    )  # (B, C + 2, 3, H', W')
    return make_grid(rows.flatten(0, 1), nrow=num_completions + 2, padding=2, pad_value=1.0)


def _hw(task: ImageSampler) -> tuple[int, int]:
    side = task.image_size * max(1, math.ceil(_MIN_PIXELS / task.image_size))
    return side, side


def grid_generator(seed: int) -> torch.Generator:
    """The CPU generator the grids sample from: the same pictures for the same seed."""
    return torch.Generator().manual_seed(seed)
