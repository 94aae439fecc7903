"""Domain shifts for the LoRA study: images of digits moved to another input distribution.

Every shift is a fixed, deterministic function of the image (no randomness, same on every run):

* ``original``: unchanged, x in [0, 1];
* ``quantized``: ``round(x·(L−1)) / (L−1)`` with ``L = levels`` grey levels (2 = binarised);
* ``rotated``: rotated by ``angle`` degrees counter-clockwise about the centre (bilinear,
  ``torchvision.transforms.functional.rotate``; corners filled with 0 = background);
* ``inverted``: ``1 − x`` (white digits on black become black on white).

``ShiftedReversalDataModule`` is the sequence counterpart used by the attention-projection LoRA:
reversal whose targets are moved through the vocabulary, ``y_t = (x_{n+1−t} + shift) mod V``.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from attn_lightning.data.base import SplitDataModule
from attn_lightning.data.images import SOURCES, load_images
from attn_lightning.data.reversal import SequenceReversalDataModule

DOMAINS = ("original", "quantized", "rotated", "inverted")
SPLITS = ("train", "val", "test")


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


class DomainImageDataModule(SplitDataModule):
    """Digit images of one domain; batches are ``{"image": (B, H, W), "label": (B,)}``.

    The train/val/test splits are ``load_images``'s (fixed, independent of the seed); the shift
    is applied once in ``setup``.

    Args:
        source: ``digits`` (embedded scikit-learn digits) or ``mnist`` (IDX files under ``root``).
        root: data folder for ``mnist``.
        image_size: side of the (resized) images; 28 gives 784 inputs.
        domain: ``original``, ``quantized``, ``rotated`` or ``inverted``.
        levels: grey levels of ``quantized``.
        angle: rotation of ``rotated`` in degrees.
        batch_size: per device.
        num_workers: DataLoader workers (0 is fastest for in-memory tensors).
    """

    collate = staticmethod(_as_dict)

    def __init__(
        self,
        *,
        source: str = "digits",
        root: str = "data",
        image_size: int = 28,
        domain: str = "original",
        levels: int = 2,
        angle: float = 90.0,
        batch_size: int = 64,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        if source not in SOURCES:
            raise ValueError(f"unknown image source {source!r}; allowed: {', '.join(SOURCES)}")
        if domain not in DOMAINS:
            raise ValueError(f"unknown domain {domain!r}; allowed: {', '.join(DOMAINS)}")
        if not isinstance(levels, int) or levels < 2:
            raise ValueError(f"levels must be an int >= 2, got {levels!r}")
        for label, value in (("image_size", image_size), ("batch_size", batch_size)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        self.save_hyperparameters()
        self.source, self.root, self.image_size = source, root, image_size
        self.domain, self.levels, self.angle = domain, levels, angle
        self.batch_size, self.num_workers = batch_size, num_workers
        self.num_classes = 10
        self.datasets: dict[str, TensorDataset] = {}

    @property
    def input_size(self) -> int:
        """Features per flattened image (what the classifier's first layer must take)."""
        return self.image_size * self.image_size

    def setup(self, stage: str | None = None) -> None:
        # Small in-memory tensors: every stage builds every split once.
        for split in SPLITS:
            if split not in self.datasets:
                images, labels = load_images(
                    self.source, split=split, root=self.root, image_size=self.image_size
                )
                shifted = apply_domain(images, self.domain, levels=self.levels, angle=self.angle)
                self.datasets[split] = TensorDataset(shifted, labels)


class ShiftedReversalDataModule(SequenceReversalDataModule):
    """Reversal with targets moved through the vocabulary: ``y_t = (x_{n+1−t} + shift) mod V``.

    The sources (and so the model's inputs) are the reversal data's own; ``shift=0`` is plain
    reversal. Used to adapt a trained reversal model to a task that needs the same attention
    pattern but different values (what ``v_proj`` carries).

    Args:
        shift: added to every target digit, modulo ``num_symbols``.
        num_symbols, seq_len, train_size, val_size, test_size, batch_size, seed, num_workers:
            as in ``SequenceReversalDataModule``.
    """

    def __init__(
        self,
        *,
        shift: int = 1,
        num_symbols: int = 10,
        seq_len: int = 50,
        train_size: int = 20_000,
        val_size: int = 1_000,
        test_size: int = 1_000,
        batch_size: int = 64,
        seed: int = 1234,
        num_workers: int = 0,
    ) -> None:
        super().__init__(
            num_symbols=num_symbols,
            seq_len=seq_len,
            train_size=train_size,
            val_size=val_size,
            test_size=test_size,
            batch_size=batch_size,
            seed=seed,
            num_workers=num_workers,
        )
        if not isinstance(shift, int):
            raise ValueError(f"shift must be an int, got {shift!r}")
        self.shift = shift
        self.save_hyperparameters()

    def setup(self, stage: str | None = None) -> None:
        fresh = [split for split in SPLITS if split not in self.datasets]
        super().setup(stage)
        for split in fresh:
            dataset = self.datasets[split]
            dataset.target = (dataset.source.flip(dims=[1]) + self.shift) % self.num_symbols


__all__ = [
    "DOMAINS",
    "DomainImageDataModule",
    "ShiftedReversalDataModule",
    "apply_domain",
]
