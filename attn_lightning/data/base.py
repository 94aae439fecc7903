"""What every DataModule here shares: built splits in ``self.datasets`` and their loaders."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset

# The splits every DataModule serves, in this order (split i of a generated set uses seed·3 + i).
SPLITS = ("train", "val", "test")

D = TypeVar("D", bound=Dataset)


class SplitDataModule(pl.LightningDataModule, Generic[D]):
    """Serves ``self.datasets["train" | "val" | "test"]`` (filled by the subclass's ``setup``).

    Training batches are shuffled; validation, test and predict (the test split) are not.
    Subclasses set ``batch_size`` and ``num_workers`` and may override ``collate``.
    """

    datasets: dict[str, D]
    batch_size: int
    num_workers: int
    collate: Callable[[list[Any]], Any] | None = None

    def _loader(self, split: str, *, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.datasets[split],
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=type(self).collate,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
