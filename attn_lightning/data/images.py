"""Grey-scale digit images shared by the image-generation and LoRA experiments.

Two sources, one interface (``load_images``) returning float images in [0, 1] of shape
``(N, H, W)`` and int64 labels ``(N,)``:

* ``digits`` (embedded default, works offline): scikit-learn's bundled handwritten digits,
  1,797 images of 8×8 pixels with 17 grey levels (0..16), from the UCI optdigits test set.
  Split deterministically into train / val / test (70 / 15 / 15 %) by a fixed permutation.
  ``image_size=28`` resizes bilinearly so sequences have MNIST's 784 tokens (the content is
  still 8×8 digits upsampled: smooth, not MNIST's pen strokes).
* ``mnist``: the IDX files under ``<root>/MNIST/raw/`` read by torchvision's ``MNIST`` with
  ``download=False`` (``.gz`` files are decompressed beside themselves); val is the last 5,000
  training images. Missing files raise ``FileNotFoundError`` saying which files to put where.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.data.base import SPLITS

SOURCES = ("digits", "mnist")
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
_DIGITS_SPLIT_SEED = 0  # fixed: the split must not move with the experiment's seed
_MNIST_VAL = 5000


def load_images(
    source: str = "digits",
    *,
    split: str = "train",
    root: str | Path = "data",
    image_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Images ``(N, H, W)`` float32 in [0, 1] and labels ``(N,)`` int64.

    Args:
        source: ``digits`` (embedded) or ``mnist`` (IDX files under ``root``).
        split: ``train``, ``val`` or ``test``.
        root: folder holding ``MNIST/raw/`` for ``source="mnist"``.
        image_size: resize to ``image_size × image_size`` (bilinear); None keeps the native size.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown image source {source!r}; allowed: {', '.join(SOURCES)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    if image_size is not None and (not isinstance(image_size, int) or image_size <= 0):
        raise ValueError(f"image_size must be a positive int or None, got {image_size!r}")
    images, labels = _digits(split) if source == "digits" else _mnist(Path(root), split)
    if image_size is not None and image_size != images.shape[-1]:
        images = F.interpolate(
            images[:, None], size=(image_size, image_size), mode="bilinear", align_corners=False
        )[:, 0].clamp_(0.0, 1.0)
    return images.contiguous(), labels


def _digits(split: str) -> tuple[Tensor, Tensor]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = torch.as_tensor(bunch.images, dtype=torch.float32) / 16.0  # (1797, 8, 8)
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(_DIGITS_SPLIT_SEED))
    n_train, n_val = int(0.7 * len(order)), int(0.15 * len(order))
    index = {
        "train": order[:n_train],
        "val": order[n_train : n_train + n_val],
        "test": order[n_train + n_val :],
    }[split]
    return images[index], labels[index]


def _mnist(root: Path, split: str) -> tuple[Tensor, Tensor]:
    raw = root / "MNIST" / "raw"
    missing = [name for name in MNIST_FILES if not _has_idx(raw, name)]
    if missing:
        raise FileNotFoundError(
            f"MNIST IDX files not found under {raw.resolve()}: missing {', '.join(missing)}. "
            f"Nothing is downloaded at run time: copy the four files "
            f"({', '.join(MNIST_FILES)}, optionally .gz) into {raw}/, "
            f"or use source='digits' for the embedded dataset."
        )
    for name in MNIST_FILES:  # torchvision reads only the uncompressed files
        if not (raw / name).exists():
            with gzip.open(raw / f"{name}.gz", "rb") as src, open(raw / name, "wb") as dst:
                shutil.copyfileobj(src, dst)
    from torchvision.datasets import MNIST

    dataset = MNIST(str(root), train=split != "test", download=False)
    images = dataset.data.float() / 255.0  # (N, 28, 28)
    labels = dataset.targets.long()
    if split == "train":
        return images[:-_MNIST_VAL], labels[:-_MNIST_VAL]
    if split == "val":
        return images[-_MNIST_VAL:], labels[-_MNIST_VAL:]
    return images, labels


def _has_idx(raw: Path, name: str) -> bool:
    return (raw / name).exists() or (raw / f"{name}.gz").exists()
