"""TensorBoard images of detections: true boxes in green, predicted boxes in red with scores."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchvision.utils import draw_bounding_boxes

from attn_lightning.callbacks.samples import ValidationBatchLogger
from attn_lightning.models.box_ops import to_pixel_corners


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
