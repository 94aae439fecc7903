"""Logging from the first validation batch every N epochs: the one base, and what it logs to
TensorBoard: sample tables, image grids (``ImageGrids``: unconditional samples and occluded
completions drawn by ``attn_lightning.data.image_grids``, with a generator seeded so that epochs
are comparable) and detections (``DetectionImages``: true boxes in green, predicted boxes in red
with scores).

``ValidationBatchLogger`` holds the rule every such callback follows (``SamplePredictions`` here,
``ImageGrids``, ``DetectionImages``): it keeps the first batch of the first validation
dataloader and, at the end of that validation run, hands it to ``log_batch`` when

* the run is not Lightning's sanity check,
* the epoch is due: ``every_n_epochs > 0`` and ``(current_epoch + 1) % every_n_epochs == 0``
  (1: every validation run; 0: never; negative values are rejected),
* this is rank 0, a ``TensorBoardLogger`` is attached, and
* the task provides the callback's hook: an ``isinstance`` check against a ``runtime_checkable``
  ``Protocol`` (``hook``); other tasks are skipped.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchvision.utils import draw_bounding_boxes

from attn_lightning.data.image_grids import (
    ImageSampler,
    completion_grid,
    grid_generator,
    sample_grid,
)
from attn_lightning.models.detr import to_pixel_corners
from attn_lightning.records import markdown_records


@runtime_checkable
class SampleRows(Protocol):
    """A task whose predictions can be shown as a table (``SequenceReversalTask``)."""

    def sample_rows(self, batch: Any, num_samples: int) -> list[dict[str, str]]:
        """One dict per row (same keys) for the first ``num_samples`` examples of ``batch``."""
        ...


class ValidationBatchLogger(Callback):
    """Base: log something from the first validation batch every ``every_n_epochs`` epochs.

    Subclasses set ``hook`` (the Protocol a task must satisfy) and implement ``log_batch``; they
    may override ``select`` to keep only part of the batch. See the module docstring for when
    ``log_batch`` runs.

    Args:
        every_n_epochs: log after every this many validation epochs; 0 disables.
    """

    hook: ClassVar[type]

    def __init__(self, *, every_n_epochs: int = 1) -> None:
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs must be >= 0 (0 disables), got {every_n_epochs}")
        self.every_n_epochs = every_n_epochs
        self._batch: Any = None

    def due(self, trainer: pl.Trainer) -> bool:
        """Whether this validation run logs (the rule of the module docstring)."""
        n = self.every_n_epochs
        return not trainer.sanity_checking and n > 0 and (trainer.current_epoch + 1) % n == 0

    def select(self, batch: Any) -> Any:
        """The part of the first validation batch that ``log_batch`` needs (default: all)."""
        return batch

    def log_batch(
        self,
        trainer: pl.Trainer,
        task: Any,
        batch: Any,
        loggers: list[TensorBoardLogger],
    ) -> None:
        """Log from ``select(batch)``; ``task`` satisfies ``hook``."""
        raise NotImplementedError

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and self._wanted(trainer, pl_module):
            self._batch = self.select(batch)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batch, self._batch = self._batch, None
        if batch is not None and self._wanted(trainer, pl_module):
            self.log_batch(trainer, pl_module, batch, _tensorboards(trainer))

    def _wanted(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
        return (
            self.due(trainer)
            and trainer.is_global_zero
            and isinstance(pl_module, self.hook)
            and bool(_tensorboards(trainer))
        )


def _tensorboards(trainer: pl.Trainer) -> list[TensorBoardLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


class SamplePredictions(ValidationBatchLogger):
    """Log a markdown table of sample predictions (``samples/val``, TensorBoard's text tab).

    The task provides ``sample_rows(batch, num_samples)`` (``SampleRows``).

    Args:
        num_samples: rows per table.
        every_n_epochs: log after every this many validation epochs; 0 disables.
    """

    hook = SampleRows

    def __init__(self, *, num_samples: int = 8, every_n_epochs: int = 1) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self.num_samples = num_samples

    def log_batch(
        self,
        trainer: pl.Trainer,
        task: SampleRows,
        batch: Any,
        loggers: list[TensorBoardLogger],
    ) -> None:
        rows = task.sample_rows(batch, self.num_samples)
        # Code spans keep digit strings from rendering as numbers in TensorBoard's text tab.
        quoted = [{k: f"`{v}`" for k, v in row.items()} for row in rows]
        table = markdown_records(quoted) or "(no samples)"
        for logger in loggers:
            logger.experiment.add_text("samples/val", table, trainer.global_step)


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


@runtime_checkable
class Detector(Protocol):
    """A task that detects objects in images (``DetectionTask``)."""

    def detect(self, images: Tensor) -> list[dict[str, Tensor]]:
        """``images: (B, 3, H, W)`` -> one ``{boxes (N, 4) xyxy pixels, scores, labels}`` each."""
        ...


def draw_detections(
    image: Tensor,
    truth: dict[str, Tensor],
    detections: dict[str, Tensor],
    *,
    score_threshold: float,
    categories: list[str] | None = None,
    upscale: int = 4,
) -> Tensor:
    """One ``(3, H·u, W·u)`` uint8 image with the boxes drawn.

    Args:
        image: ``(3, H, W)`` in [0, 1].
        truth: ``boxes (M, 4)`` cxcywh in [0, 1] and ``labels (M,)``.
        detections: ``boxes (N, 4)`` xyxy in pixels, ``scores (N,)``, ``labels (N,)``.
        score_threshold: predictions below it are not drawn.
        categories: label names (default: the label numbers).
        upscale: nearest-neighbour zoom so small synthetic images stay readable.
    """
    h, w = image.shape[-2:]
    big = F.interpolate(image[None].float(), scale_factor=upscale, mode="nearest")[0]
    canvas = (big.clamp(0, 1) * 255).to(torch.uint8).cpu()
    name = (lambda i: categories[i]) if categories else str
    true_boxes = to_pixel_corners(truth["boxes"].cpu(), h * upscale, w * upscale)
    if len(true_boxes):
        canvas = draw_bounding_boxes(
            canvas, true_boxes, [name(int(i)) for i in truth["labels"]], colors="lime"
        )
    keep = detections["scores"].cpu() >= score_threshold
    pred_boxes = detections["boxes"].float().cpu()[keep] * upscale
    if len(pred_boxes):
        labels = [
            f"{name(int(i))} {float(s):.2f}"
            for i, s in zip(
                detections["labels"].cpu()[keep], detections["scores"].cpu()[keep], strict=True
            )
        ]
        canvas = draw_bounding_boxes(canvas, pred_boxes, labels, colors="red")
    return canvas


class DetectionImages(ValidationBatchLogger):
    """Log the first validation batch's images with true and predicted boxes (``detections/val``).

    When, see ``attn_lightning.callbacks.samples``. The task provides ``detect(images)``
    (``Detector``; ``DetectionTask`` does); the DataModule's validation dataset may name the
    categories (``categories``).

    Args:
        num_images: images per logged grid.
        every_n_epochs: log after every this many validation epochs; 0 disables.
        score_threshold: smallest score of a drawn prediction.
    """

    hook = Detector

    def __init__(
        self, *, num_images: int = 8, every_n_epochs: int = 1, score_threshold: float = 0.5
    ) -> None:
        if num_images < 1:
            raise ValueError(f"num_images must be >= 1, got {num_images}")
        super().__init__(every_n_epochs=every_n_epochs)
        self.num_images = num_images
        self.score_threshold = score_threshold

    def select(self, batch: Any) -> tuple[Tensor, list[dict[str, Tensor]]]:
        return batch[0][: self.num_images], batch[1][: self.num_images]

    def log_batch(
        self,
        trainer: pl.Trainer,
        task: Detector,
        batch: tuple[Tensor, list[dict[str, Tensor]]],
        loggers: list[TensorBoardLogger],
    ) -> None:
        images, targets = batch
        detections = task.detect(images)
        datasets = getattr(getattr(trainer, "datamodule", None), "datasets", None) or {}
        categories = getattr(datasets.get("val"), "categories", None)
        drawn = torch.stack(
            [
                draw_detections(
                    image, truth, found, score_threshold=self.score_threshold, categories=categories
                )
                for image, truth, found in zip(images, targets, detections, strict=True)
            ]
        )
        for logger in loggers:
            logger.experiment.add_images("detections/val", drawn, trainer.global_step)
