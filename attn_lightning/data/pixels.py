"""Grey-scale images as quantised pixel sequences in raster order, for autoregressive models.

Images come from ``attn_lightning.data.images.load_images`` (its module docstring has the three
sources: ``digits``, ``mnist5k`` and ``mnist``). A pixel ``x ∈ [0, 1]`` becomes the token
``round(x · (levels − 1)) ∈ {0, …, levels − 1}``, so with ``levels=256`` an 8-bit pixel
``p / 255`` maps back to ``p`` exactly. Each example is
``{"pixels": (H·W,) int64 in raster order (row by row, left to right), "label": int64}``.
``histogram_bits_per_dim`` is the context-free baseline of these tokens: an independent
per-pixel histogram (``python -m lab.benchmark generation --histogram`` prints it).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset

from attn_lightning.data.base import SPLITS, SplitDataModule, check_positive_ints
from attn_lightning.data.images import ImageSource, check_source


def quantize(images: Tensor, levels: int) -> Tensor:
    """``(N, H, W)`` floats in [0, 1] -> ``(N, H·W)`` int64 tokens in ``[0, levels)``, raster."""
    tokens = torch.round(images.clamp(0.0, 1.0) * (levels - 1)).long()  # (N, H, W)
    return tokens.flatten(1)  # (N, H·W)


def dequantize(tokens: Tensor, levels: int, *, height: int, width: int) -> Tensor:
    """``(N, H·W)`` tokens -> ``(N, 1, H, W)`` floats in [0, 1] (for image grids)."""
    return (tokens.float() / (levels - 1)).view(-1, 1, height, width)


class PixelDataset(Dataset):
    """Quantised pixel sequences ``(N, H·W)`` and their labels ``(N,)``."""

    def __init__(self, pixels: Tensor, labels: Tensor) -> None:
        self.pixels = pixels
        self.labels = labels

    def __len__(self) -> int:
        return self.pixels.shape[0]

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return {"pixels": self.pixels[index], "label": self.labels[index]}


class PixelDataModule(ImageSource, SplitDataModule[PixelDataset]):
    """Train/val/test pixel sequences for image generation and completion.

    Args:
        source: ``digits`` (embedded 8×8, offline), ``mnist5k`` (embedded real MNIST, 5,000
            images, offline; ``data/mnist5k.py``) or ``mnist`` (IDX files under ``root``).
        image_size: resize to ``image_size × image_size``; None keeps the native size (8 for
            digits, 28 for MNIST and mnist5k). ``digits`` with 28 gives 784-token sequences
            of upsampled 8×8 digits (a length test).
        levels: quantisation levels (256 for 8-bit-like pixels); the model's vocabulary.
        root: folder holding ``MNIST/raw/`` for ``source="mnist"``.
        download: ``mnist`` only, opt-in (needs internet): fetch missing IDX files into
            ``root`` with torchvision's downloader in ``prepare_data``. Off by default.
        batch_size: per device.
        num_workers: DataLoader workers (0 is fastest for these in-memory tensors).
    """

    def __init__(
        self,
        *,
        source: str = "digits",
        image_size: int | None = None,
        levels: int = 256,
        root: str = "data",
        download: bool = False,
        batch_size: int = 64,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        check_source(source, download)
        if isinstance(levels, bool) or not isinstance(levels, int) or not 2 <= levels <= 65536:
            raise ValueError(f"levels must be an int in [2, 65536], got {levels!r}")
        check_positive_ints(batch_size=batch_size)
        if image_size is not None and (not isinstance(image_size, int) or image_size <= 0):
            raise ValueError(f"image_size must be a positive int or None, got {image_size!r}")
        self.save_hyperparameters()
        self.source = source
        self.levels = levels
        self.root = root
        self.download = download
        self.batch_size = batch_size
        self.num_workers = num_workers
        native = 8 if source == "digits" else 28
        self.height = self.width = image_size if image_size is not None else native
        # The side the images have (native when not resized): what the model is sized for.
        self.image_size = self.height
        self.datasets = {}

    @property
    def seq_len(self) -> int:
        """Tokens per image, H·W."""
        return self.height * self.width

    def setup(self, stage: str | None = None) -> None:
        # Every stage builds every split: cheap, and validate/test after fit reuse them.
        for split in SPLITS:
            if split not in self.datasets:
                images, labels = self.load_split(split)
                if images.shape[1:] != (self.height, self.width):
                    raise ValueError(
                        f"{self.source} images are {tuple(images.shape[1:])}, expected "
                        f"{(self.height, self.width)}; set image_size"
                    )
                self.datasets[split] = PixelDataset(quantize(images, self.levels), labels)


def histogram_bits_per_dim(
    train_tokens: Tensor,
    eval_tokens: Tensor,
    levels: int,
    *,
    smoothing: float = 0.5,
    held_out_from: int = 0,
) -> float:
    """Bits/dim of an independent per-pixel histogram: the context-free floor a model must beat.

    ``p_i(v) ∝ count_i(v) + smoothing`` for the values v that occur anywhere in
    ``train_tokens: (N, L)`` (other values get probability 0), fitted per position i and scored
    as ``−mean log₂ p_i(x_i)`` over ``eval_tokens: (M, L)`` at positions ``i ≥ held_out_from``
    (``held_out_from = k`` gives the held-out completion pixels).

    Raises:
        ValueError: mismatched shapes, tokens outside ``[0, levels)``, ``smoothing <= 0``,
            ``held_out_from`` outside ``[0, L)``, or an evaluated value never seen in training
            (its probability would be 0, its bits infinite).
    """
    if train_tokens.dim() != 2 or eval_tokens.dim() != 2:
        raise ValueError("train_tokens and eval_tokens must be (N, L) and (M, L)")
    length = train_tokens.shape[1]
    if eval_tokens.shape[1] != length:
        raise ValueError(f"{length} training pixels per image, {eval_tokens.shape[1]} evaluated")
    if not smoothing > 0:
        raise ValueError(f"smoothing must be > 0, got {smoothing!r}")
    if not 0 <= held_out_from < length:
        raise ValueError(f"held_out_from must be in [0, {length}), got {held_out_from!r}")
    for tokens in (train_tokens, eval_tokens):
        if tokens.numel() and not 0 <= int(tokens.min()) <= int(tokens.max()) < levels:
            raise ValueError(f"tokens must lie in [0, {levels})")
    evaluated = eval_tokens[:, held_out_from:].long()
    used = train_tokens.long().unique()
    unseen = evaluated[~torch.isin(evaluated, used)].unique()
    if unseen.numel():
        raise ValueError(
            f"evaluated values never seen in training: {unseen[:8].tolist()}; add-smoothing over "
            "the training levels gives them probability 0"
        )
    counts = torch.zeros(length, levels, dtype=torch.float64)  # (L, levels)
    counts[:, used] = smoothing
    counts.scatter_add_(1, train_tokens.long().T, torch.ones(length, len(train_tokens)).double())
    probs = counts / counts.sum(1, keepdim=True)
    chosen = probs[held_out_from:].gather(1, evaluated.T)  # (L − k, M)
    return float(-torch.log2(chosen).mean())
