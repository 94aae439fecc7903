"""The steps every image classifier task shares: cross-entropy, accuracy, predictions CSV.

``ClassifierSteps`` is mixed into a LightningModule (``LoRAClassifierTask``,
``ImageClassificationTask``) whose ``forward(image)`` gives logits ``(B, K)``, whose
``hparams["num_classes"]`` is K, and which has ``log_mean`` (``AttentionTask``). Batches are
``DomainImageDataModule``'s: ``{"image": (B, H, W), "label": (B,)}``. Logged per split:
``<split>/loss`` and ``<split>/acc``, plus ``hp/val_loss`` and ``hp/val_acc`` for the hparams tab;
a task adds its own per-step values in ``extra_logs``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from attn_lightning.records import write_csv

SPLITS = ("train", "val", "test")


def accuracy_metrics(num_classes: int) -> nn.ModuleDict:
    """One top-1 accuracy per split, keyed ``<split>_acc`` (Lightning reserves ``train`` as a
    Module attribute, so the split alone cannot be the key)."""
    return nn.ModuleDict(
        {f"{s}_acc": MulticlassAccuracy(num_classes, average="micro") for s in SPLITS}
    )


class ClassifierSteps(pl.LightningModule):
    """Training, validation, test and predict steps of a classifier (see the module docstring).

    Listed before the task's base class (``class T(ClassifierSteps, AttentionTask)``), so its
    steps come first in the MRO and the base supplies the optimizer and ``log_mean``.
    """

    hp_metrics: tuple[str, ...] = ("hp/val_loss", "hp/val_acc")
    metrics: nn.ModuleDict

    if TYPE_CHECKING:  # AttentionTask's, next in the MRO (not defined here: it must not shadow)

        def log_mean(self, *args: Any, **kwargs: Any) -> None: ...

    def _accuracy(self, split: str) -> MulticlassAccuracy:
        return cast(MulticlassAccuracy, self.metrics[f"{split}_acc"])  # ModuleDict: Module-typed

    def extra_logs(self, split: str, batch_size: int) -> None:
        """Per-step values a task logs beside loss and accuracy (none here)."""

    def _shared_step(self, batch: dict[str, Tensor], split: str) -> Tensor:
        image, label = batch["image"], batch["label"]
        logits = self(image)  # (B, K)
        loss = F.cross_entropy(logits.float(), label)
        accuracy = self._accuracy(split)
        accuracy(logits, label)  # calling (not .update) also gives the batch value for on_step
        size = label.shape[0]
        self.log_mean(f"{split}/loss", loss, batch_size=size, prog_bar=True)
        self.log(
            f"{split}/acc",
            accuracy,
            prog_bar=True,
            on_step=split == "train",
            on_epoch=True,
            batch_size=size,
        )
        self.extra_logs(split, size)
        return loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss = self._shared_step(batch, "val")
        # Same values under hp/ names, shown against the hyper-parameters in the hparams tab.
        size = batch["label"].shape[0]
        self.log_mean("hp/val_loss", loss, batch_size=size)
        self.log("hp/val_acc", self._accuracy("val"), on_epoch=True, batch_size=size)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """``{"label", "prediction"}`` ``(B,)`` and ``"probabilities"`` ``(B, K)`` (softmax)."""
        with torch.no_grad():
            probabilities = self(batch["image"]).float().softmax(dim=-1)
        return {
            "label": batch["label"],
            "prediction": probabilities.argmax(dim=-1),
            "probabilities": probabilities,
        }

    def save_predictions(
        self, predictions: list[dict[str, Tensor]], indices: list[int], folder: Path
    ) -> list[Path]:
        """Write ``predictions.csv``: ``index, label, prediction, p_0 .. p_{K-1}``."""
        classes = int(self.hparams["num_classes"])
        fields = ["index", "label", "prediction", *(f"p_{c}" for c in range(classes))]
        rows = [
            {
                "index": index,
                "label": int(row["label"]),
                "prediction": int(row["prediction"]),
                **{f"p_{c}": p for c, p in enumerate(row["probabilities"].tolist())},
            }
            for index, row in zip(indices, predictions, strict=True)
        ]
        path = write_csv(Path(folder) / "predictions.csv", rows, fields=fields)
        return [path]


__all__ = ["SPLITS", "ClassifierSteps", "accuracy_metrics"]
