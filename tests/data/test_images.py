"""The shared image loader: embedded digits, resizing, absent MNIST files and bad arguments."""

from __future__ import annotations

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


# Reading real-format IDX files (plain, .gz), the val rule, the DataModules on them and the
# opt-in download: tests/data/test_mnist_idx.py.


def test_missing_mnist_says_where_to_put_the_files(tmp_path):
    with pytest.raises(
        FileNotFoundError, match=r"MNIST/raw.*train-images-idx3-ubyte.*download: true"
    ):
        load_images("mnist", root=tmp_path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"source": "cifar"}, "allowed: digits, mnist"),
        ({"split": "dev"}, "allowed: train"),
        ({"image_size": 0}, "image_size"),
        ({"download": True}, "download=True only applies to source 'mnist'"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_images(**kwargs)
