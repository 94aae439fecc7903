"""Image classification with a Vision Transformer: a small non-detection test of any backend, and
the steps every image classifier task shares (``ClassifierSteps``: cross-entropy, accuracy,
predictions CSV; the LoRA classifier mixes them in too).

Optimization-based attention ("Optimizing Attention") was shown on detection only; this task
compares backends on digit classification, where the softmax baseline with all projections is the
learned reference and ``projections: no_qk`` gives the paper's form of a layer (V and out kept).
Batches are ``DomainImageDataModule``'s: ``{"image": (B, H, W), "label": (B,)}``.

Metrics per split (``train/``, ``val/``, ``test/``): ``loss`` (cross-entropy) and ``acc``
(top-1 accuracy), plus ``hp/val_loss`` and ``hp/val_acc`` for the hparams tab; the backends'
``diagnostics()`` (e.g. optimization's ``keys90``) are logged by the ``attention_diagnostics``
callback, which finds every backend inside ``self.net``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from attn_lightning.attention import resolve_attention
from attn_lightning.data.base import SPLITS
from attn_lightning.models.specs import VitSpec
from attn_lightning.models.vit import VisionTransformer
from attn_lightning.records import write_csv
from attn_lightning.tasks.base import AttentionTask, require_from_data


def accuracy_metrics(num_classes: int) -> nn.ModuleDict:
    """One top-1 accuracy per split, keyed ``<split>_acc`` (Lightning reserves ``train`` as a
    Module attribute, so the split alone cannot be the key)."""
    return nn.ModuleDict(
        {f"{s}_acc": MulticlassAccuracy(num_classes, average="micro") for s in SPLITS}
    )


class ClassifierSteps(pl.LightningModule):
    """Training, validation, test and predict steps of a classifier.

    The task's ``forward(image)`` gives logits ``(B, K)``, its ``hparams["num_classes"]`` is K and
    it has ``log_mean`` (``AttentionTask``); it adds its own per-step values in ``extra_logs``.

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


class ImageClassificationTask(ClassifierSteps, AttentionTask):
    """Cross-entropy training of a ``VisionTransformer`` with any attention backend.

    Args:
        net: the ViT's sizes (``models.specs.VitSpec``: d_model, num_heads, num_layers, d_ff,
            dropout, positional, patch_size — 1: one token per pixel — and projections:
            ``true`` (Q, K, V, out), ``no_qk`` (V and out: the paper's form) or ``false``).
        attention: backend dict, e.g. ``{name: optimization, iterations: 10}``; default softmax.
        attention_override: keys replacing ``attention``'s at build time, not saved as a
            hyper-parameter: a checkpoint evaluated with other options (``tasks.base``).
        image_size: side of the images; linked from the DataModule by the CLI.
        num_classes: classes of the head; linked from the DataModule by the CLI.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its warm-up + cosine schedule.
    """

    net_spec = VitSpec

    def __init__(
        self,
        *,
        image_size: int = 8,
        num_classes: int = 10,
        net: VitSpec = VitSpec(),
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        lr: float = 2e-3,
        weight_decay: float = 0.05,
        warmup_steps: int = 50,
        min_lr_ratio: float = 0.1,
    ) -> None:
        super().__init__()
        require_from_data(self, image_size=image_size, num_classes=num_classes)
        spec = self.init_task(net, attention_override=attention_override)
        self.attention_config = resolve_attention(attention, attention_override)
        self.num_classes = num_classes
        self.net = VisionTransformer(
            spec, image_size=image_size, num_classes=num_classes, attention=self.attention_config
        )
        self.metrics = accuracy_metrics(num_classes)

    # ------------------------------------------------------------------ model
    def forward(self, image: Tensor) -> Tensor:
        """``image: (B, H, W)`` or ``(B, C, H, W)`` -> logits ``(B, num_classes)``."""
        return self.net(image)


__all__ = ["ClassifierSteps", "ImageClassificationTask", "accuracy_metrics"]
