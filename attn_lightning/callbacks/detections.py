"""TensorBoard images of detections: true boxes in green, predicted boxes in red with scores."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchvision.ops import box_convert
from torchvision.utils import draw_bounding_boxes


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
    scale = torch.tensor([w, h, w, h], dtype=torch.float32) * upscale
    true_boxes = box_convert(truth["boxes"].float().cpu(), "cxcywh", "xyxy") * scale
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


class DetectionImages(Callback):
    """Log the first validation batch's images with true and predicted boxes to TensorBoard.

    The task provides ``detect(images) -> [{boxes, scores, labels}]`` (``DetectionTask`` does);
    other tasks are skipped.

    Args:
        num_images: images per logged grid.
        every_n_epochs: log every this many validation epochs.
        score_threshold: smallest score of a drawn prediction.
    """

    def __init__(
        self, num_images: int = 8, every_n_epochs: int = 1, score_threshold: float = 0.5
    ) -> None:
        if num_images < 1 or every_n_epochs < 1:
            raise ValueError(
                f"num_images and every_n_epochs must be >= 1, got {num_images}, {every_n_epochs}"
            )
        self.num_images = num_images
        self.every_n_epochs = every_n_epochs
        self.score_threshold = score_threshold
        self._batch: Any = None

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
            self._batch = batch

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batch, self._batch = self._batch, None
        due = (trainer.current_epoch + 1) % self.every_n_epochs == 0
        if trainer.sanity_checking or batch is None or not due or not trainer.is_global_zero:
            return
        detect = getattr(pl_module, "detect", None)
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        if detect is None or not loggers:
            return
        images, targets = batch[0][: self.num_images], batch[1][: self.num_images]
        detections = detect(images)
        data = trainer.datamodule
        datasets = getattr(data, "datasets", {}) if data is not None else {}
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
