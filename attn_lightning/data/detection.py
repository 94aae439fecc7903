"""Object-detection data: the DataModule over synthetic scenes or a COCO-format folder.

Batches are ``(images (B, 3, H, W), [target, ...])`` with the targets of ``data/scenes.py``.

* ``source="synthetic"``: ``SyntheticScenes`` of the ``scenes`` spec (``data/scenes.py``'s
  ``SceneSpec``); splits use independent seeds.
* ``source="coco"``: ``<root>/<split>/`` images and ``<root>/annotations/instances_<split>.json``
  (split folder names configurable, e.g. ``{train: train2017, val: val2017, test: val2017}``),
  read by torchvision's ``CocoDetection``; images are resized to the spec's ``image_size²``
  (boxes are normalised, so they follow). Category ids map to labels 0..C−1 in id order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from attn_lightning.data.base import SPLITS, SplitDataModule
from attn_lightning.data.scenes import Example, SceneSpec, SyntheticScenes, synthetic_category_id
from attn_lightning.models.detr import pixel_scale, xywh_to_cxcywh

SOURCES = ("synthetic", "coco")


class CocoScenes(Dataset):
    """A COCO-format split through ``torchvision.datasets.CocoDetection`` (see module doc)."""

    def __init__(self, *, root: str | Path, split: str, image_size: int) -> None:
        root = Path(root)
        images, ann = root / split, root / "annotations" / f"instances_{split}.json"
        if not images.is_dir() or not ann.is_file():
            raise FileNotFoundError(
                f"COCO split {split!r} not found: expected images in {images.resolve()}/ and "
                f"annotations in {ann.resolve()}. Nothing is downloaded: put a COCO-format folder "
                f"there, write the synthetic set with `python -m attn_lightning.data.scenes "
                f"--out {root}`, or use source='synthetic'."
            )
        try:
            import pycocotools.coco  # noqa: F401
        except ImportError:  # faster_coco_eval ships a drop-in COCO API (torchmetrics' backend)
            import faster_coco_eval

            faster_coco_eval.init_as_pycocotools()
        from torchvision.datasets import CocoDetection

        self.coco = CocoDetection(str(images), str(ann))
        ids = sorted(self.coco.coco.cats)
        self.label_of = {cat: i for i, cat in enumerate(ids)}
        self.categories = [self.coco.coco.cats[c]["name"] for c in ids]
        self.image_size = image_size

    def __len__(self) -> int:
        return len(self.coco)

    def __getitem__(self, index: int) -> Example:
        image, anns = self.coco[index]
        w, h = image.size
        pixels = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
        x = pixels.view(h, w, 3).permute(2, 0, 1).float().div(255)[None]
        x = F.interpolate(x, size=(self.image_size,) * 2, mode="bilinear", align_corners=False)[0]
        kept = [
            a for a in anns if not a.get("iscrowd", 0) and a["bbox"][2] > 0 and a["bbox"][3] > 0
        ]
        xywh = torch.tensor([a["bbox"] for a in kept], dtype=torch.float32).view(-1, 4)
        boxes = xywh_to_cxcywh(xywh) / pixel_scale(h, w)
        labels = torch.tensor([self.label_of[a["category_id"]] for a in kept], dtype=torch.int64)
        # orig_size: predictions are written in pixels of the original image (COCO results).
        target = {"boxes": boxes, "labels": labels, "image_id": self.coco.ids[index]}
        return x, {**target, "orig_size": torch.tensor([h, w])}


def coco_category_ids(root: str | Path, split: str) -> list[int]:
    """The category ids of a COCO split's annotations, sorted: label i is the i-th id.

    Raises:
        FileNotFoundError: naming the annotation file when it is absent.
    """
    path = Path(root) / "annotations" / f"instances_{split}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"COCO annotations {path.resolve()} not found (categories of split {split!r}); "
            f"nothing is downloaded: put a COCO-format folder there or use source='synthetic'"
        )
    return sorted(int(c["id"]) for c in json.loads(path.read_text()).get("categories", []))


def collate(batch: list[Example]) -> tuple[Tensor, list[dict[str, Any]]]:
    """Stack the (equal-size) images; keep the targets as a list."""
    return torch.stack([image for image, _ in batch]), [target for _, target in batch]


class DetectionDataModule(SplitDataModule[Dataset]):
    """Synthetic scenes or a COCO folder (see module doc).

    Args:
        source: ``synthetic`` or ``coco``.
        root: the COCO folder (``source="coco"``).
        coco_splits: folder/annotation name of each split, e.g. ``{val: val2017}``.
        scenes: the synthetic scenes (``data.scenes.SceneSpec``: image_size, num_classes,
            min_objects, max_objects, min_size, max_size); for COCO only its ``image_size`` is
            used (the resize), the classes are the annotations' categories.
        train_size, val_size, test_size: synthetic examples per split.
        batch_size, num_workers: DataLoader settings.
        seed: synthetic data seed (split i uses ``seed·3 + i``).
    """

    collate = staticmethod(collate)

    def __init__(
        self,
        *,
        source: str = "synthetic",
        root: str = "data/coco",
        coco_splits: dict[str, str] | None = None,
        scenes: SceneSpec = SceneSpec(),
        train_size: int = 4000,
        val_size: int = 500,
        test_size: int = 500,
        batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 1234,
    ) -> None:
        super().__init__()
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}; allowed: {', '.join(SOURCES)}")
        splits = {s: s for s in SPLITS} | dict(coco_splits or {})
        if set(splits) != set(SPLITS):
            raise ValueError(f"coco_splits keys must be among {SPLITS}, got {sorted(splits)}")
        self.keep_splits((train_size, val_size, test_size), batch_size, seed, num_workers)
        self.save_hyperparameters()
        self.source, self.root, self.splits = source, root, splits
        self.scenes = scenes
        # The facts the CLI links into the task (cli/options.py) are read as attributes.
        self.image_size = scenes.image_size
        self._category_ids: list[int] | None = None

    def setup(self, stage: str | None = None) -> None:
        for split in SPLITS:
            if split in self.datasets:
                continue
            if self.source == "synthetic":
                self.datasets[split] = SyntheticScenes(
                    size=self.split_sizes[split], seed=self.split_seed(split), spec=self.scenes
                )
            else:
                self.datasets[split] = CocoScenes(
                    root=self.root, split=self.splits[split], image_size=self.image_size
                )

    @property
    def category_ids(self) -> list[int]:
        """The dataset's category id of each label 0..C−1, the ids prediction files name:
        label + 1 for synthetic scenes (as ``write_coco`` writes them), the annotations' sorted
        ids for a COCO folder (read from the train split's annotations on first use)."""
        if self.source == "synthetic":
            return [synthetic_category_id(label) for label in range(self.scenes.num_classes)]
        if self._category_ids is None:
            self._category_ids = coco_category_ids(self.root, self.splits["train"])
        return self._category_ids

    @property
    def num_classes(self) -> int:
        """C: the configured count for synthetic scenes, the annotations' for a COCO folder."""
        return self.scenes.num_classes if self.source == "synthetic" else len(self.category_ids)
