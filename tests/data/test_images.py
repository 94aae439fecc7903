"""The shared image loader: embedded digits, resizing, MNIST IDX files and their absence."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from attn_lightning.data.images import load_images


def test_digits_splits_are_disjoint_deterministic_and_cover_the_set():
    parts = {s: load_images("digits", split=s) for s in ("train", "val", "test")}
    assert sum(len(x) for x, _ in parts.values()) == 1797
    x, y = parts["train"]
    assert x.shape[1:] == (8, 8) and x.dtype == torch.float32
    assert x.min() >= 0.0 and x.max() <= 1.0
    assert set(y.tolist()) == set(range(10))
    again, _ = load_images("digits", split="train")
    assert torch.equal(x, again)
    flat = {s: {tuple(img.flatten().tolist()) for img in x} for s, (x, _) in parts.items()}
    assert len(flat["train"] & flat["test"]) < 10  # a few duplicates exist in the raw data


def test_resize_to_mnist_size():
    x, _ = load_images("digits", split="val", image_size=28)
    assert x.shape[1:] == (28, 28)
    assert x.min() >= 0.0 and x.max() <= 1.0


def _write_idx(path, array: np.ndarray) -> None:
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    with gzip.open(f"{path}.gz", "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


def test_mnist_from_idx_files(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 5010), ("t10k", 7)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, (n,)))
    train, _ = load_images("mnist", split="train", root=tmp_path)
    val, _ = load_images("mnist", split="val", root=tmp_path)
    test, labels = load_images("mnist", split="test", root=tmp_path)
    assert (len(train), len(val), len(test)) == (10, 5000, 7)
    assert test.shape[1:] == (28, 28) and labels.dtype == torch.int64


def test_missing_mnist_says_where_to_put_the_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"MNIST/raw.*train-images-idx3-ubyte"):
        load_images("mnist", root=tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"source": "cifar"}, "allowed: digits, mnist"),
        ({"split": "dev"}, "allowed: train"),
        ({"image_size": 0}, "image_size"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_images(**kwargs)
