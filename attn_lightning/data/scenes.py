"""Synthetic detection scenes (the embedded, offline default) and their COCO-format writer.

``SceneSpec`` states what a scene is (canvas size, classes, object counts and sizes) once: both
``SyntheticScenes`` and ``DetectionDataModule`` take it. ``SyntheticScenes`` draws 0..k filled
shapes (square, disc, triangle, ring, plus: the first ``num_classes``) of random colour and size
on a noisy dark canvas, from ``torch.Generator(seed)``; boxes are the tight boxes of the drawn
pixels. Every example is ``(image, target)``: ``image: (3, H, W)`` float in [0, 1] and
``target`` a dict with ``boxes: (M, 4)`` (cx, cy, w, h) normalised to [0, 1], ``labels: (M,)``
int64 in [0, C) and ``image_id`` (int); ``M`` may be 0.

``write_coco`` (or ``python -m attn_lightning.data.scenes --out DIR``) writes the splits as a
COCO folder that ``DetectionDataModule(source="coco")`` reads back.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset
from torchvision.ops import box_iou

from attn_lightning.data.base import SPLITS
from attn_lightning.models.detr import cxcywh_to_xywh, pixel_scale, xyxy_to_cxcywh

SHAPES = ("square", "disc", "triangle", "ring", "plus")
Example = tuple[Tensor, dict[str, Any]]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SceneSpec:
    """What a synthetic scene is; sizes in pixels.

    Attributes:
        image_size: the square canvas side (for a COCO folder: the size images are resized to).
        num_classes: C shapes, the first C of ``SHAPES``.
        min_objects, max_objects: objects per scene, inclusive (0 allowed).
        min_size, max_size: an object's side, inclusive.
    """

    image_size: int = 64
    num_classes: int = 3
    min_objects: int = 1
    max_objects: int = 3
    min_size: int = 12
    max_size: int = 28

    def __post_init__(self) -> None:
        if not 1 <= self.num_classes <= len(SHAPES):
            raise ValueError(
                f"num_classes must be in 1..{len(SHAPES)} ({SHAPES}), got {self.num_classes}"
            )
        if not 0 <= self.min_objects <= self.max_objects:
            raise ValueError(
                f"need 0 <= min_objects <= max_objects, got {self.min_objects}, {self.max_objects}"
            )
        if not 2 <= self.min_size <= self.max_size <= self.image_size:
            raise ValueError(
                f"need 2 <= min_size <= max_size <= image_size, got {self.min_size}, "
                f"{self.max_size}, {self.image_size}"
            )


def _shape_mask(shape: str, dx: Tensor, dy: Tensor, r: float) -> Tensor:
    """Pixels of ``shape`` with half-size r, given offsets ``dx, dy: (H, W)`` from its centre."""
    ax, ay = dx.abs(), dy.abs()
    if shape == "square":
        return (ax <= r) & (ay <= r)
    if shape == "disc":
        return dx.square() + dy.square() <= r * r
    if shape == "triangle":  # apex up, base at the bottom
        return (ay <= r) & (ax <= (dy + r) / 2)
    if shape == "ring":
        d2 = dx.square() + dy.square()
        return (d2 <= r * r) & (d2 >= (0.55 * r) ** 2)
    bar = r / 3  # plus
    return ((ax <= r) & (ay <= bar)) | ((ay <= r) & (ax <= bar))


def render_scene(generator: torch.Generator, spec: SceneSpec) -> tuple[Tensor, Tensor, Tensor]:
    """One scene: image ``(3, S, S)``, boxes ``(M, 4)`` cxcywh in [0, 1], labels ``(M,)``.

    Objects whose box would overlap an earlier one by IoU > 0.1 are redrawn (up to 20 tries,
    then dropped), so every object stays mostly visible.
    """
    s = spec.image_size
    image = 0.1 + 0.05 * torch.rand(3, s, s, generator=generator)  # dark noisy canvas
    centres = torch.arange(s, dtype=torch.float32) + 0.5
    yy, xx = torch.meshgrid(centres, centres, indexing="ij")  # (S, S) pixel centres
    count = int(torch.randint(spec.min_objects, spec.max_objects + 1, (1,), generator=generator))
    boxes: list[Tensor] = []
    labels: list[int] = []
    for _ in range(count):
        for _ in range(20):
            size = float(torch.randint(spec.min_size, spec.max_size + 1, (1,), generator=generator))
            cx, cy = (size / 2 + torch.rand(2, generator=generator) * (s - size)).tolist()
            label = int(torch.randint(spec.num_classes, (1,), generator=generator))
            mask = _shape_mask(SHAPES[label], xx - cx, yy - cy, size / 2)
            rows, cols = mask.any(1).nonzero(), mask.any(0).nonzero()
            if not len(rows):
                continue
            box = torch.tensor(
                [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], dtype=torch.float32
            )  # xyxy in pixels
            if boxes and float(box_iou(box[None], torch.stack(boxes)).max()) > 0.1:
                continue
            colour = 0.4 + 0.6 * torch.rand(3, 1, 1, generator=generator)
            image = torch.where(mask, colour, image)
            boxes.append(box)
            labels.append(label)
            break
    xyxy = torch.stack(boxes) / s if boxes else torch.zeros(0, 4)
    return image, xyxy_to_cxcywh(xyxy), torch.tensor(labels, dtype=torch.int64)


class SyntheticScenes(Dataset):
    """``size`` scenes of ``spec`` rendered once from ``torch.Generator(seed)`` (module doc)."""

    def __init__(self, *, size: int, seed: int, spec: SceneSpec = SceneSpec()) -> None:
        generator = torch.Generator().manual_seed(seed)
        scenes = [render_scene(generator, spec) for _ in range(size)]
        self.images = torch.stack([s[0] for s in scenes]) if scenes else torch.zeros(0, 3, 1, 1)
        self.boxes = [s[1] for s in scenes]
        self.labels = [s[2] for s in scenes]
        self.categories = list(SHAPES[: spec.num_classes])

    def __len__(self) -> int:
        return len(self.boxes)

    def __getitem__(self, index: int) -> Example:
        target = {"boxes": self.boxes[index], "labels": self.labels[index], "image_id": index}
        return self.images[index], target


def synthetic_category_id(label: int) -> int:
    """The COCO category id of a synthetic label: label + 1 (COCO ids start at 1)."""
    return label + 1


def write_coco(dataset: SyntheticScenes, root: str | Path, split: str) -> Path:
    """Write ``<root>/<split>/<id>.png`` and ``<root>/annotations/instances_<split>.json``.

    Boxes become COCO's absolute ``[x, y, w, h]``; category ids are labels + 1. Returns the
    annotation file's path.
    """
    from PIL import Image

    root = Path(root)
    (root / split).mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for index in range(len(dataset)):
        image, target = dataset[index]
        _, h, w = image.shape
        name = f"{index:06d}.png"
        pixels = (image * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
        Image.fromarray(pixels).save(root / split / name)
        images.append({"id": index, "file_name": name, "width": w, "height": h})
        xywh = cxcywh_to_xywh(target["boxes"] * pixel_scale(h, w))
        for box, label in zip(xywh, target["labels"].tolist(), strict=True):
            x, y, bw, bh = box.tolist()
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": index,
                    "category_id": synthetic_category_id(label),
                    "bbox": [x, y, bw, bh],
                    "area": bw * bh,
                    "iscrowd": 0,
                }
            )
    categories = [
        {"id": synthetic_category_id(i), "name": n} for i, n in enumerate(dataset.categories)
    ]
    path = root / "annotations" / f"instances_{split}.json"
    path.write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories})
    )
    return path


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m attn_lightning.data.scenes``."""
    parser = argparse.ArgumentParser(prog="python -m attn_lightning.data.scenes")
    parser.add_argument("--out", required=True, type=Path, help="COCO folder to write")
    parser.add_argument(
        "--sizes", nargs=3, type=int, default=[4000, 500, 500], metavar=("TRAIN", "VAL", "TEST")
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--options",
        type=json.loads,
        default={},
        help="the SceneSpec's fields as JSON, e.g. '{\"max_objects\": 5}'",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """CLI: write the synthetic train/val/test splits as a COCO folder."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    options: Mapping[str, Any] = args.options
    spec = SceneSpec(**options)
    for index, (split, size) in enumerate(zip(SPLITS, args.sizes, strict=True)):
        data = SyntheticScenes(size=size, seed=args.seed * len(SPLITS) + index, spec=spec)
        log.info("wrote %s", write_coco(data, args.out, split))


if __name__ == "__main__":
    main()
