"""DETR's bipartite matching and set criterion (Carion et al. 2020, §3.1).

Targets are a list with one dict per image: ``labels: (M,)`` int64 in [0, C) and
``boxes: (M, 4)`` (cx, cy, w, h) in [0, 1]; ``M`` may be 0. Predictions are the model's dict
(``pred_logits: (B, N, C + 1)``, ``pred_boxes: (B, N, 4)``, optional ``aux_outputs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from torch import Tensor, nn
from torchvision.ops import generalized_box_iou

from attn_lightning.models.detr import cxcywh_to_xyxy

Target = Mapping[str, Tensor]
Indices = list[tuple[Tensor, Tensor]]


class HungarianMatcher(nn.Module):
    """One-to-one assignment of predictions to targets minimising, per image,

    ``cost = −w_class · p(target class) + w_bbox · ‖b − b̂‖₁ + w_giou · (−GIoU(b, b̂))``

    The cost matrix of the whole batch is computed at once (``B·N × ΣM``) and then split per
    image, so the assignment equals per-image matching; scipy's ``linear_sum_assignment`` solves
    each block in O(N·M²). Images without objects get empty index tensors.
    """

    def __init__(
        self, *, cost_class: float = 1.0, cost_bbox: float = 5.0, cost_giou: float = 2.0
    ) -> None:
        super().__init__()
        if cost_class == cost_bbox == cost_giou == 0:
            raise ValueError("at least one matching cost must be nonzero, got all 0")
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou

    @torch.no_grad()
    def forward(self, outputs: Mapping[str, Tensor], targets: Sequence[Target]) -> Indices:
        """Returns one ``(prediction_index, target_index)`` pair of int64 tensors per image."""
        b, n = outputs["pred_logits"].shape[:2]
        prob = outputs["pred_logits"].flatten(0, 1).float().softmax(-1)  # (B·N, C + 1)
        pred = outputs["pred_boxes"].flatten(0, 1).float()  # (B·N, 4)
        labels = torch.cat([t["labels"] for t in targets])  # (ΣM,)
        boxes = torch.cat([t["boxes"] for t in targets]).float()  # (ΣM, 4)
        sizes = [len(t["boxes"]) for t in targets]
        empty = torch.empty(0, dtype=torch.int64)
        if not sum(sizes):
            return [(empty, empty) for _ in targets]
        cost = (
            -self.cost_class * prob[:, labels]
            + self.cost_bbox * torch.cdist(pred, boxes, p=1)
            - self.cost_giou * generalized_box_iou(cxcywh_to_xyxy(pred), cxcywh_to_xyxy(boxes))
        )  # (B·N, ΣM)
        cost = cost.view(b, n, -1).cpu()
        indices = []
        for i, block in enumerate(cost.split(sizes, dim=-1)):
            rows, cols = linear_sum_assignment(block[i].numpy())
            indices.append(
                (torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64))
            )
        return indices


class SetCriterion(nn.Module):
    """``L = L_CE + w_bbox · L1 + w_giou · (1 − GIoU)`` after Hungarian matching, per decoder layer.

    Cross-entropy covers every query (unmatched ones target "no object", weighted ``eos_coef``);
    the box terms cover matched queries and are divided by the number of target boxes in the
    batch (at least 1), so an image without objects adds only its no-object terms. With
    ``aux_outputs`` the same loss is added for each earlier decoder layer (DETR's aux loss).

    Args:
        num_classes: C; the no-object class is index C.
        matcher: the assignment (DETR's costs by default).
        eos_coef: relative CE weight of the no-object class (0.1 in DETR).
        weight_ce, weight_bbox, weight_giou: loss weights (1, 5, 2 in DETR).
    """

    empty_weight: Tensor  # buffer, declared for the type checker

    def __init__(
        self,
        *,
        num_classes: int,
        matcher: HungarianMatcher | None = None,
        eos_coef: float = 0.1,
        weight_ce: float = 1.0,
        weight_bbox: float = 5.0,
        weight_giou: float = 2.0,
    ) -> None:
        super().__init__()
        if not 0 < eos_coef <= 1:
            raise ValueError(f"eos_coef must be in (0, 1], got {eos_coef!r}")
        self.num_classes = num_classes
        self.matcher = matcher or HungarianMatcher()
        self.weights = {"ce": weight_ce, "bbox": weight_bbox, "giou": weight_giou}
        empty_weight = torch.ones(num_classes + 1)
        empty_weight[-1] = eos_coef
        self.register_buffer("empty_weight", empty_weight, persistent=False)

    def layer_losses(
        self, outputs: Mapping[str, Tensor], targets: Sequence[Target], num_boxes: float
    ) -> dict[str, Tensor]:
        """Unweighted ``ce``, ``bbox`` (L1) and ``giou`` losses of one decoder layer's outputs."""
        logits, pred = outputs["pred_logits"], outputs["pred_boxes"]  # (B, N, C+1), (B, N, 4)
        indices = self.matcher(outputs, targets)
        batch_idx = torch.cat([torch.full_like(s, i) for i, (s, _) in enumerate(indices)])
        src_idx = torch.cat([s for s, _ in indices])
        batch_idx, src_idx = batch_idx.to(logits.device), src_idx.to(logits.device)
        classes = torch.full(logits.shape[:2], self.num_classes, device=logits.device)
        matched_labels = torch.cat(
            [
                t["labels"][j.to(t["labels"].device)]
                for t, (_, j) in zip(targets, indices, strict=True)
            ]
        )
        classes[batch_idx, src_idx] = matched_labels.to(logits.device)
        ce = F.cross_entropy(logits.float().transpose(1, 2), classes, self.empty_weight)
        src = pred[batch_idx, src_idx].float()  # (K, 4) with K = Σ matched
        tgt = torch.cat(
            [
                t["boxes"][j.to(t["boxes"].device)]
                for t, (_, j) in zip(targets, indices, strict=True)
            ]
        ).to(src)
        bbox = F.l1_loss(src, tgt, reduction="sum") / num_boxes
        # Diagonal of the pairwise GIoU: the K×K matrix is tiny next to the batch.
        giou = generalized_box_iou(cxcywh_to_xyxy(src), cxcywh_to_xyxy(tgt)).diagonal()
        return {"ce": ce, "bbox": bbox, "giou": (1 - giou).sum() / num_boxes}

    def forward(
        self, outputs: Mapping[str, Any], targets: Sequence[Target]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Returns (total weighted loss over all decoder layers, last layer's unweighted parts)."""
        num_boxes = max(float(sum(len(t["labels"]) for t in targets)), 1.0)
        layers = [outputs, *outputs.get("aux_outputs", [])]
        total = outputs["pred_logits"].new_zeros((), dtype=torch.float32)
        parts: dict[str, Tensor] = {}
        for i, layer in enumerate(layers):
            losses = self.layer_losses(layer, targets, num_boxes)
            total = total + sum(self.weights[k] * v for k, v in losses.items())
            if i == 0:
                parts = {k: v.detach() for k, v in losses.items()}
        return total, parts
