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

from attn_lightning.attention import resolve_attention
from attn_lightning.models.specs import VitSpec
from attn_lightning.models.vit import VisionTransformer
from attn_lightning.tasks.base import AttentionTask, require_from_data
from attn_lightning.tasks.classifier_steps import ClassifierSteps, accuracy_metrics


class ImageClassificationTask(ClassifierSteps, AttentionTask):
    """Cross-entropy training of a ``VisionTransformer`` with any attention backend.

    Args:
        net: the ViT's sizes (``models.specs.VitSpec``: d_model, num_heads, num_layers, d_ff,
            dropout, positional, patch_size — 1: one token per pixel — and projections:
            ``true`` (Q, K, V, out), ``no_qk`` (V and out: the paper's form) or ``false``).
        attention: backend dict, e.g. ``{name: optimization, iterations: 10}``; default softmax.
        attention_override: keys replacing ``attention``'s at build time, not saved as a
            hyper-parameter (evaluate a checkpoint with other backend options; see module
            ``attn_lightning.tasks.base``).
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


__all__ = ["ImageClassificationTask"]
