"""Image classification with a Vision Transformer: a small non-detection test of any backend.

Optimization-based attention ("Optimizing Attention") was shown on detection only; this task
compares backends on digit classification, where the softmax baseline with all projections is the
learned reference and ``projections: no_qk`` gives the paper's form of a layer (V and out kept).
Batches are ``DomainImageDataModule``'s: ``{"image": (B, H, W), "label": (B,)}``.

Metrics per split (``train/``, ``val/``, ``test/``): ``loss`` (cross-entropy) and ``acc``
(top-1 accuracy); the backends' ``diagnostics()`` (e.g. optimization's ``keys90``) are logged by
the ``attention_diagnostics`` callback, which finds every backend inside ``self.net``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from attn_lightning.models.transformer import Projections
from attn_lightning.models.vit import VisionTransformer
from attn_lightning.tasks.base import AttentionTask, resolve_attention
from attn_lightning.tasks.classifier_steps import ClassifierSteps, accuracy_metrics


class ImageClassificationTask(ClassifierSteps, AttentionTask):
    """Cross-entropy training of a ``VisionTransformer`` with any attention backend.

    Args:
        attention: backend dict, e.g. ``{name: optimization, iterations: 10}``; default softmax.
        attention_override: keys replacing ``attention``'s at build time, not saved as a
            hyper-parameter (evaluate a checkpoint with other backend options; see module
            ``attn_lightning.tasks.base``).
        projections: ``true`` (Q, K, V, out), ``no_qk`` (V and out: the paper's form) or
            ``false`` (none) in every layer.
        image_size: side of the images; must equal the DataModule's.
        patch_size: side of the patches (1: one token per pixel).
        num_classes: classes of the head; must equal the DataModule's.
        d_model, num_heads, num_layers, d_ff, dropout, positional: model sizes (see
            ``attn_lightning.models.vit.VisionTransformer``).
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its warm-up + cosine schedule.
    """

    def __init__(
        self,
        *,
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        projections: Projections = True,
        image_size: int = 8,
        patch_size: int = 1,
        num_classes: int = 10,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 128,
        dropout: float = 0.0,
        positional: str = "sinusoidal",
        lr: float = 2e-3,
        weight_decay: float = 0.05,
        warmup_steps: int = 50,
        min_lr_ratio: float = 0.1,
    ) -> None:
        super().__init__(
            lr=lr,
            weight_decay=weight_decay,
            warmup_steps=warmup_steps,
            min_lr_ratio=min_lr_ratio,
            attention_override=attention_override,
        )
        self.save_hyperparameters(ignore=["attention_override"])
        self.attention_config = resolve_attention(attention, attention_override)
        self.num_classes = num_classes
        self.net = VisionTransformer(
            image_size=image_size,
            patch_size=patch_size,
            num_classes=num_classes,
            d_model=d_model,
            num_heads=num_heads,
            num_layers=num_layers,
            d_ff=d_ff,
            attention=self.attention_config,
            dropout=dropout,
            positional=positional,
            projections=projections,
        )
        self.metrics = accuracy_metrics(num_classes)

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if data is None:
            return
        for name, ours in (("image_size", self.net.image_size), ("num_classes", self.num_classes)):
            theirs = getattr(data, name, ours)
            if theirs != ours:
                raise ValueError(
                    f"model {name}={ours} differs from the data's {name}={theirs}; "
                    f"set model.init_args.{name}={theirs}"
                )

    # ------------------------------------------------------------------ model
    def forward(self, image: Tensor) -> Tensor:
        """``image: (B, H, W)`` or ``(B, C, H, W)`` -> logits ``(B, num_classes)``."""
        return self.net(image)


__all__ = ["ImageClassificationTask"]
