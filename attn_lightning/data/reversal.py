"""Sequence reversal: random digit strings and their reverses, generated from a seed.

Each example is ``{"source": x, "target": y}`` with ``x: (n,)`` uniform over ``num_symbols``
digits and ``y = x[::-1]``. The three splits come from independent generators seeded with
``(seed, split)``, so the data are identical on every machine, rank and run. The task decides how
to lay the pair out (``x SEP y`` for a causal decoder, ``x -> y`` position-wise for an encoder).

``ShiftedReversalDataModule`` moves the targets through the vocabulary,
``y_t = (x_{n+1−t} + shift) mod V``: the task the attention-projection LoRA adapts to.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from attn_lightning.data.base import SPLITS, SplitDataModule, check_positive_ints


class ReversalDataset(Dataset):
    """``size`` sequences of length ``seq_len``, drawn once from ``torch.Generator(seed)``."""

    def __init__(self, *, size: int, seq_len: int, num_symbols: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.source = torch.randint(num_symbols, (size, seq_len), generator=generator)  # (N, n)
        self.target = self.source.flip(dims=[1])  # (N, n)

    def __len__(self) -> int:
        return self.source.shape[0]

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        return {"source": self.source[index], "target": self.target[index]}


class SequenceReversalDataModule(SplitDataModule[ReversalDataset]):
    """Train/val/test splits of the reversal task.

    Args:
        num_symbols: digits 0..num_symbols-1 (the task adds a separator token after them).
        seq_len: n, the length of x (and of y).
        train_size, val_size, test_size: examples per split.
        batch_size: per device.
        seed: data seed (independent of the model seed ``seed_everything``).
        num_workers: DataLoader workers (0 is fastest for these in-memory tensors).
    """

    def __init__(
        self,
        *,
        num_symbols: int = 10,
        seq_len: int = 50,
        train_size: int = 20_000,
        val_size: int = 1_000,
        test_size: int = 1_000,
        batch_size: int = 64,
        seed: int = 1234,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        check_positive_ints(num_symbols=num_symbols, seq_len=seq_len)
        self.keep_splits((train_size, val_size, test_size), batch_size, seed, num_workers)
        if num_symbols < 2:
            raise ValueError(
                f"num_symbols must be >= 2 for reversal to be learnable, got {num_symbols}"
            )
        self.save_hyperparameters()
        self.num_symbols = num_symbols
        self.seq_len = seq_len

    def setup(self, stage: str | None = None) -> None:
        # Cheap to generate, so every stage builds every split (validate/test after fit reuse them).
        for split in SPLITS:
            if split not in self.datasets:
                self.datasets[split] = ReversalDataset(
                    size=self.split_sizes[split],
                    seq_len=self.seq_len,
                    num_symbols=self.num_symbols,
                    seed=self.split_seed(split),
                )


class ShiftedReversalDataModule(SequenceReversalDataModule):
    """Reversal with targets moved through the vocabulary: ``y_t = (x_{n+1−t} + shift) mod V``.

    The sources (and so the model's inputs) are the reversal data's own; ``shift=0`` is plain
    reversal. Used to adapt a trained reversal model to a task that needs the same attention
    pattern but different values (what ``v_proj`` carries).

    Args:
        shift: added to every target digit, modulo ``num_symbols``.
        **kwargs: the ``SequenceReversalDataModule`` options (num_symbols, seq_len, sizes,
            batch_size, seed, num_workers).
    """

    def __init__(self, *, shift: int = 1, **kwargs: Any) -> None:
        # The reversal options come through the parent's signature (LightningCLI and
        # --print_config show them), not a second copy of it.
        super().__init__(**kwargs)
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
