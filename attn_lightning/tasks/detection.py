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
from torchvision.ops import box_convert

from attn_lightning.models.detr import DETR, SITES, attention_parameters
from attn_lightning.models.matcher import HungarianMatcher, SetCriterion
from attn_lightning.models.transformer import Projections
from attn_lightning.tasks.base import AttentionTask, resolve_attention

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
        attention: default backend dict for sites without their own (default softmax).
        attention_override: options merged into the sites of one backend at build time, not
            saved as a hyper-parameter (see ``site_specs`` and ``attn_lightning.tasks.base``).
        projections: Q/K/V/out projections for sites without their own dict.
        encoder_self, decoder_self, decoder_cross: ``{name, projections, **options}`` or None.
        num_classes: C; must match the DataModule's.
        num_queries, d_model, num_heads, num_encoder_layers, num_decoder_layers, d_ff, dropout,
            backbone, backbone_width, backbone_stages: see ``attn_lightning.models.detr.DETR``.
        eos_coef: no-object CE weight; bbox_weight, giou_weight: L1 and GIoU weights, used both
            in the matching cost and in the loss (class cost/weight 1), as in DETR.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its schedule.
    """

    hp_metrics = ("hp/val_mAP", "hp/val_AP50", "hp/val_loss")

    def __init__(
        self,
        *,
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        projections: Projections = True,
        encoder_self: dict[str, Any] | None = None,
        decoder_self: dict[str, Any] | None = None,
        decoder_cross: dict[str, Any] | None = None,
        num_classes: int = 3,
        num_queries: int = 10,
        d_model: int = 64,
        num_heads: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        d_ff: int = 256,
        dropout: float = 0.0,
        backbone: str = "small_cnn",
        backbone_width: int = 32,
        backbone_stages: int = 3,
        eos_coef: float = 0.1,
        bbox_weight: float = 5.0,
        giou_weight: float = 2.0,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        warmup_steps: int = 100,
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
        self.net = DETR(
            num_classes=num_classes,
            num_queries=num_queries,
            d_model=d_model,
            num_heads=num_heads,
            num_encoder_layers=num_encoder_layers,
            num_decoder_layers=num_decoder_layers,
            d_ff=d_ff,
            dropout=dropout,
            backbone=backbone,
            backbone_width=backbone_width,
            backbone_stages=backbone_stages,
            sites=self.site_configs,
        )
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

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        classes = getattr(data, "num_classes", self.num_classes)
        if classes != self.num_classes:
            raise ValueError(
                f"model num_classes={self.num_classes} differs from the data's "
                f"num_classes={classes}; set model.init_args.num_classes={classes}"
            )

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
        h, w = image_size
        scale = torch.tensor([w, h, w, h], dtype=torch.float32, device=prob.device)
        boxes = box_convert(outputs["pred_boxes"].float(), "cxcywh", "xyxy") * scale
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
        scale = torch.tensor([w, h, w, h], dtype=torch.float32, device=images.device)
        truth = [
            {
                "boxes": box_convert(t["boxes"].float(), "cxcywh", "xyxy") * scale,
                "labels": t["labels"],
            }
            for t in targets
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
        """Per image ``detect``'s dict plus ``image_id`` and ``input_size`` ``(H, W)``."""
        images, targets = batch
        size = torch.tensor(images.shape[-2:])
        return [
            {**found, "image_id": torch.tensor(int(target["image_id"])), "input_size": size}
            for found, target in zip(self.detect(images), targets, strict=True)
        ]

    def save_predictions(
        self, predictions: list[dict[str, Tensor]], indices: list[int], folder: Path
    ) -> list[Path]:
        """Write ``detections.json`` in the COCO results format, every query of every image:
        ``[{"image_id", "category_id", "bbox": [x, y, w, h], "score"}]``.

        Boxes are in pixels of the original image when the dataset knows its size (a COCO
        folder), else of the model input. Category ids are the dataset's: through ``label_of``
        for a COCO folder, label + 1 for synthetic scenes (as ``data.scenes.write_coco`` writes).
        """
        dataset = _predict_dataset(self)
        label_of = getattr(dataset, "label_of", None)
        category_of = {label: cat for cat, label in label_of.items()} if label_of else None
        coco = getattr(getattr(dataset, "coco", None), "coco", None)  # CocoScenes' COCO index
        results = []
        for found in predictions:
            image_id = int(found["image_id"])
            in_h, in_w = (int(v) for v in found["input_size"])
            info = coco.imgs.get(image_id, {}) if coco is not None else {}
            out_w, out_h = info.get("width", in_w), info.get("height", in_h)
            scale = torch.tensor([out_w / in_w, out_h / in_h] * 2)
            boxes = box_convert(found["boxes"].float().cpu() * scale, "xyxy", "xywh")
            for box, score, label in zip(
                boxes.tolist(), found["scores"].tolist(), found["labels"].tolist(), strict=True
            ):
                category = int(category_of[label] if category_of else label + 1)
                bbox, score = [round(v, 2) for v in box], round(score, 5)
                results.append(
                    {"image_id": image_id, "category_id": category, "bbox": bbox, "score": score}
                )
        path = Path(folder) / "detections.json"
        path.write_text(json.dumps(results))
        return [path]


def _predict_dataset(task: DetectionTask) -> Any:
    """The dataset of the running predict loader (None outside ``trainer.predict``)."""
    trainer = task._trainer
    loaders = trainer.predict_dataloaders if trainer is not None else None
    if isinstance(loaders, list | tuple):
        loaders = loaders[0] if loaders else None
    return getattr(loaders, "dataset", None)
