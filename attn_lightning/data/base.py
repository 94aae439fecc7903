"""What every DataModule here shares: built splits in ``self.datasets`` and their loaders."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset

from attn_lightning.data.sampling import sharded_loader

# The splits every DataModule serves, in this order (split i of a generated set uses seed·3 + i).
SPLITS = ("train", "val", "test")

D = TypeVar("D", bound=Dataset)


def check_positive_ints(**sizes: object) -> None:
    """ValueError naming the first of ``sizes`` that is not an int > 0 (a bool is not an int)."""
    for label, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{label} must be a positive int, got {value!r}")


class SplitDataModule(pl.LightningDataModule, Generic[D]):
    """Serves ``self.datasets["train" | "val" | "test"]`` (filled by the subclass's ``setup``).

    Training batches are shuffled in an order fixed by (run seed, epoch, position) and the train
    loader saves its position in checkpoints, so a resumed run sees the batches the uninterrupted
    one would have (``data/sampling.py``). Validation, test and predict (the test split) are in
    order; under DDP each rank gets its own unpadded shard, so no sample counts twice. The loaders
    shard themselves (Lightning keeps a ``DistributedSampler`` it is given).
    Subclasses set ``batch_size`` and ``num_workers`` (``keep_splits`` for generated splits) and
    may override ``collate``.
    """

    datasets: dict[str, D]
    batch_size: int
    num_workers: int
    seed: int
    split_sizes: dict[str, int]
    collate: Callable[[list[Any]], Any] | None = None

    def keep_splits(
        self, sizes: tuple[int, int, int], batch_size: int, seed: int, num_workers: int
    ) -> None:
        """Check the (train, val, test) example counts and the batch size (positive ints), keep
        them with the data seed and the loader's workers; no split is built yet."""
        named = {f"{split}_size": size for split, size in zip(SPLITS, sizes, strict=True)}
        check_positive_ints(**named, batch_size=batch_size)
        self.split_sizes = dict(zip(SPLITS, sizes, strict=True))
        self.batch_size, self.seed, self.num_workers = batch_size, seed, num_workers
        self.datasets = {}

    def split_seed(self, split: str) -> int:
        """The seed ``split`` is generated from: ``seed·3 + i`` for the i-th of ``SPLITS``."""
        return self.seed * len(SPLITS) + SPLITS.index(split)

    def _loader(self, split: str, *, shuffle: bool) -> DataLoader:
        trainer = self.trainer
        # ParallelStrategy's {"num_replicas", "rank"}; None on one device or without a trainer.
        shard = trainer.distributed_sampler_kwargs if trainer is not None else None
        return sharded_loader(
            self.datasets[split],
            train=shuffle,
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            collate_fn=type(self).collate,
            **(shard or {}),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    predict_dataloader = test_dataloader  # predict runs over the test split
