"""DETR-style set prediction with any attention backend at each attention site.

Sites (``encoder_self``, ``decoder_self``, ``decoder_cross``) are configured one by one as
``{name, projections, **options}``; a site left as None uses ``attention`` with the task-level
``projections`` flag. So "softmax without projections" is ``projections: false``, and
"optimization attention in the decoder cross-attention only" sets ``decoder_cross`` alone.

Metrics per split: ``loss`` (Hungarian set loss summed over decoder layers), ``loss_ce``,
``loss_bbox``, ``loss_giou`` (last layer, unweighted) and, for val/test, ``mAP``
(COCO AP@[.5:.95]), ``AP50``, ``AP75`` from torchmetrics' ``MeanAveragePrecision``
(faster_coco_eval backend), computed in pixels of the input image.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn
from torchmetrics.detection import MeanAveragePrecision

from attn_lightning.attention import resolve_attention
from attn_lightning.data.scenes import synthetic_category_id
from attn_lightning.models.detr import (
    DETR,
    SITES,
    attention_parameters,
    to_coco_xywh,
    to_pixel_corners,
)
from attn_lightning.models.matcher import HungarianMatcher, SetCriterion
from attn_lightning.models.multihead import Projections
from attn_lightning.models.specs import DetrSpec
from attn_lightning.tasks.base import AttentionTask, require_from_data

Batch = tuple[Tensor, list[dict[str, Any]]]
MAP_KEYS = {"mAP": "map", "AP50": "map_50", "AP75": "map_75"}


def site_specs(
    *,
    attention: Mapping[str, Any],
    projections: Projections,
    sites: Mapping[str, Mapping[str, Any] | None],
    override: Mapping[str, Any] | None,
) -> dict[str, dict[str, Any]]:
    """Each site's ``{name, projections, **options}``.

    A site without its own dict gets ``attention`` and ``projections``. ``override``'s options
    are merged into every site whose backend has the override's ``name`` (default: the name of
    ``attention``), so a checkpoint can be evaluated with other options of that backend.
    """
    target = (override or {}).get("name", attention.get("name"))
    specs = {}
    for site in SITES:
        spec = dict(sites.get(site) or {**attention, "projections": projections})
        if override and spec.get("name") == target:
            spec = {**spec, **override}
        specs[site] = spec
    return specs


class DetectionTask(AttentionTask):
    """DETR on boxes + labels with per-site attention backends.

    Args:
        net: DETR's sizes (``models.specs.DetrSpec``: num_queries, d_model, num_heads,
            num_encoder_layers, num_decoder_layers, d_ff, dropout, backbone, backbone_width,
            backbone_stages).
        attention: default backend dict for sites without their own (default softmax).
        attention_override: options merged into the sites of one backend at build time, not
            saved as a hyper-parameter (see ``site_specs`` and ``attn_lightning.tasks.base``).
        projections: Q/K/V/out projections for sites without their own dict.
        encoder_self, decoder_self, decoder_cross: ``{name, projections, **options}`` or None.
        num_classes: C; linked from the DataModule by the CLI.
        category_ids: the dataset's category id of each label (what prediction files name);
            linked from the DataModule by the CLI; None: label + 1 (synthetic scenes).
        eos_coef: no-object CE weight; bbox_weight, giou_weight: L1 and GIoU weights, used both
            in the matching cost and in the loss (class cost/weight 1), as in DETR.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its schedule.
    """

    hp_metrics = ("hp/val_mAP", "hp/val_AP50", "hp/val_loss")
    net_spec = DetrSpec

    def __init__(
        self,
        *,
        num_classes: int = 3,
        category_ids: list[int] | None = None,
        net: DetrSpec = DetrSpec(),
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        projections: Projections = True,
        encoder_self: dict[str, Any] | None = None,
        decoder_self: dict[str, Any] | None = None,
        decoder_cross: dict[str, Any] | None = None,
        eos_coef: float = 0.1,
        bbox_weight: float = 5.0,
        giou_weight: float = 2.0,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
    ) -> None:
        super().__init__()
        require_from_data(self, num_classes=num_classes)
        spec = self.init_task(net, attention_override=attention_override)
        if category_ids is not None and len(category_ids) != num_classes:
            raise ValueError(
                f"category_ids has {len(category_ids)} ids for num_classes={num_classes}; "
                f"give one dataset category id per class"
            )
        self.category_ids = (
            list(category_ids)
            if category_ids
            else [synthetic_category_id(label) for label in range(num_classes)]
        )
        self.attention_config = resolve_attention(attention, None)
        self.site_configs = site_specs(
            attention=self.attention_config,
            projections=projections,
            sites={
                "encoder_self": encoder_self,
                "decoder_self": decoder_self,
                "decoder_cross": decoder_cross,
            },
            override=attention_override,
        )
        self.num_classes = num_classes
        self.net = DETR(spec, num_classes=num_classes, sites=self.site_configs)
        matcher = HungarianMatcher(cost_class=1.0, cost_bbox=bbox_weight, cost_giou=giou_weight)
        self.criterion = SetCriterion(
            num_classes=num_classes,
            matcher=matcher,
            eos_coef=eos_coef,
            weight_bbox=bbox_weight,
            weight_giou=giou_weight,
        )
        # Lightning reserves "train"/"val" names on Modules: key the metrics by "<split>_map".
        self.maps = nn.ModuleDict(
            {
                f"{split}_map": MeanAveragePrecision(backend="faster_coco_eval")
                for split in ("val", "test")
            }
        )

    def _map(self, split: str) -> MeanAveragePrecision:
        return cast(MeanAveragePrecision, self.maps[f"{split}_map"])  # ModuleDict: Module-typed

    @property
    def attention_parameter_count(self) -> int:
        return attention_parameters(self.net)

    # ------------------------------------------------------------------ model
    def forward(self, images: Tensor) -> dict[str, Any]:
        """``images: (B, 3, H, W)`` -> the DETR output dict (see ``DETR.forward``)."""
        return self.net(images)

    @staticmethod
    def postprocess(outputs: Mapping[str, Any], image_size: tuple[int, int]) -> list[dict]:
        """Per image ``{boxes (N, 4) xyxy pixels, scores (N,), labels (N,)}``, one per query.

        DETR's rule: score = the largest real-class probability (no-object excluded).
        """
        prob = outputs["pred_logits"].float().softmax(-1)[..., :-1]  # (B, N, C)
        scores, labels = prob.max(-1)  # (B, N)
        boxes = to_pixel_corners(outputs["pred_boxes"], *image_size)  # (B, N, 4)
        return [
            {"boxes": b, "scores": s, "labels": lab}
            for b, s, lab in zip(boxes, scores, labels, strict=True)
        ]

    @torch.no_grad()
    def detect(self, images: Tensor) -> list[dict[str, Tensor]]:
        """Detections of every query for ``images: (B, 3, H, W)`` (see ``postprocess``)."""
        return self.postprocess(self(images), (images.shape[-2], images.shape[-1]))

    # ------------------------------------------------------------------ steps
    def _shared_step(self, batch: Batch, split: str) -> tuple[Tensor, dict[str, Any]]:
        images, targets = batch
        outputs = self(images)
        loss, parts = self.criterion(outputs, targets)
        size = images.shape[0]
        self.log_mean(f"{split}/loss", loss, batch_size=size, prog_bar=True)
        for name, value in parts.items():
            self.log_mean(f"{split}/loss_{name}", value, batch_size=size)
        return loss, outputs

    def _update_map(self, batch: Batch, outputs: Mapping[str, Any], split: str) -> None:
        images, targets = batch
        h, w = images.shape[-2:]
        truth = [
            {"boxes": to_pixel_corners(t["boxes"], h, w), "labels": t["labels"]} for t in targets
        ]
        self._map(split).update(self.postprocess(outputs, (h, w)), truth)

    def _log_map(self, split: str) -> dict[str, float]:
        metric = self._map(split)
        result = metric.compute()  # already reduced over DDP ranks
        metric.reset()
        values = {name: float(result[key]) for name, key in MAP_KEYS.items()}
        for name, value in values.items():
            # The same on every rank: the mean over ranks keeps it and Lightning does not warn.
            self.log(f"{split}/{name}", value, prog_bar=name == "mAP", sync_dist=True)
        return values

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")[0]

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss, outputs = self._shared_step(batch, "val")
        self.log_mean("hp/val_loss", loss, batch_size=batch[0].shape[0])
        self._update_map(batch, outputs, "val")

    def on_validation_epoch_end(self) -> None:
        values = self._log_map("val")
        self.log("hp/val_mAP", values["mAP"], sync_dist=True)
        self.log("hp/val_AP50", values["AP50"], sync_dist=True)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        _, outputs = self._shared_step(batch, "test")
        self._update_map(batch, outputs, "test")

    def on_test_epoch_end(self) -> None:
        self._log_map("test")

    def predict_step(self, batch: Batch, batch_idx: int) -> list[dict[str, Tensor]]:
        """Per image ``detect``'s dict plus ``image_id``, ``input_size`` ``(H, W)`` and
        ``orig_size`` (the original image's ``(H, W)`` when the target gives it, else the
        input's)."""
        images, targets = batch
        size = torch.tensor(images.shape[-2:])
        return [
            {
                **found,
                "image_id": torch.tensor(int(target["image_id"])),
                "input_size": size,
                "orig_size": torch.as_tensor(target.get("orig_size", size)),
            }
            for found, target in zip(self.detect(images), targets, strict=True)
        ]

    def save_predictions(
        self, predictions: list[dict[str, Tensor]], indices: list[int], folder: Path
    ) -> list[Path]:
        """Write ``detections.json`` in the COCO results format, every query of every image:
        ``[{"image_id", "category_id", "bbox": [x, y, w, h], "score"}]``.

        Boxes are in pixels of the original image (``orig_size``: a COCO folder's targets give
        it), category ids the dataset's (``category_ids``, linked from the DataModule).
        """
        results = []
        for found in predictions:
            image_id = int(found["image_id"])
            in_h, in_w = (int(v) for v in found["input_size"])
            out_h, out_w = (int(v) for v in found["orig_size"])
            boxes = to_coco_xywh(found["boxes"].float().cpu(), out_w / in_w, out_h / in_h)
            for box, score, label in zip(
                boxes.tolist(), found["scores"].tolist(), found["labels"].tolist(), strict=True
            ):
                bbox, score = [round(v, 2) for v in box], round(score, 5)
                results.append(
                    {
                        "image_id": image_id,
                        "category_id": self.category_ids[label],
                        "bbox": bbox,
                        "score": score,
                    }
                )
        path = Path(folder) / "detections.json"
        path.write_text(json.dumps(results))
        return [path]
