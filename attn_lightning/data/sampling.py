"""Seeded, DDP-sharded samplers and the training loader that saves its place in the epoch.

* ``ShardedSampler`` (training, ``shuffle=True``): epoch ``e`` visits ``randperm(N)`` drawn from
  a generator seeded with ``hash(seed, e)``, so the order is a pure function of (seed, epoch,
  position). Under DDP the permutation is padded by wrapping round to a multiple of the world
  size R and rank r takes positions r, r + R, ... (every rank needs the same number of batches).
* ``ShardedSampler`` (evaluation, ``shuffle=False``): 0..N−1 unpadded, rank r takes r, r + R, ...
  so every sample is evaluated on exactly one rank (ranks may differ by one sample) and metrics
  synced over ranks equal the single-process ones. Lightning keeps a ``DistributedSampler`` it is
  given, which is why the class derives from it.
* ``SettingBatchSampler``: the same for whole batches that each hold one setting of a
  several-setting dataset (MQAR's ``train_settings``): it yields ``(setting, rows)`` keys, padded
  and sharded by batch, for a loader with ``batch_size=None``.
* ``ResumableDataLoader``: ``state_dict()`` is ``{epoch, batches, seed, ...}``, counted at the
  loader (workers prefetch indices from the sampler ahead of the training loop). Lightning saves
  the train loader's state in the checkpoint (``loops.fit_loop.state_dict.combined_loader``) and
  loads it on resume, so the resumed run continues with the next batch of the same permutation.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import warnings
from collections.abc import Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


def run_seed() -> int:
    """The run's ``seed_everything`` seed (``PL_GLOBAL_SEED``; 0 when none was set).

    Read from the environment rather than ``torch.initial_seed()``: it is the same in every DDP
    process (``strategy=ddp`` re-launches the script with the environment), later
    ``torch.manual_seed`` calls do not move it, and Lightning's own ``DistributedSampler`` uses it.
    """
    return int(os.environ.get("PL_GLOBAL_SEED", "0"))


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, epoch)`` alone (hashed: seed 1 epoch 0 and seed 0
    epoch 1 do not share an order, as they would with ``seed + epoch``)."""
    digest = hashlib.sha256(f"shuffle:{seed}:{epoch}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


class ShardedSampler(DistributedSampler):
    """One rank's indices of ``dataset``: shuffled and padded for training, in order and unpadded
    for evaluation (see the module docstring).

    Args:
        dataset: anything with ``len``.
        shuffle: training order (seeded permutation per epoch) or evaluation order (0..N−1).
        seed: shuffling seed (``run_seed()`` in the DataModules).
        num_replicas, rank: the DDP world size and this process's rank.
    """

    def __init__(
        self,
        dataset: Sized,
        *,
        shuffle: bool,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        super().__init__(
            dataset,  # type: ignore[arg-type]  # only its len is used
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=False,
        )
        if not shuffle:
            self.num_samples = len(range(rank, len(dataset), num_replicas))
            self.total_size = len(dataset)
        # Positions of this rank's list to skip in the next __iter__ only (set on resume).
        self.start = 0

    def indices(self) -> list[int]:
        """This rank's indices for the current epoch, from the first position."""
        size = len(self.dataset)  # type: ignore[arg-type]
        if not self.shuffle:
            return list(range(self.rank, size, self.num_replicas))
        order = torch.randperm(size, generator=epoch_generator(self.seed, self.epoch)).tolist()
        padding = self.total_size - size
        order += (order * math.ceil(padding / max(size, 1)))[:padding]
        return order[self.rank : self.total_size : self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        start, self.start = self.start, 0
        return iter(self.indices()[start:])


BATCH_ORDERS = ("settings", "shuffled")


class SettingBatchSampler(ShardedSampler):
    """Whole batches of examples that share a setting (one length each), as ``(setting, rows)``
    keys for a dataset that returns a batch per key (a ``DataLoader`` with ``batch_size=None``).

    Training: epoch e permutes each setting's rows with the generator of ``(seed, e)`` and cuts
    them into batches of ``batch_size`` (a setting's last batch may be short); ``order="settings"``
    serves every batch of setting 0, then of setting 1, ... (Zoology's loader, which does not
    shuffle its batches), ``"shuffled"`` serves them in a random order of the same generator. The
    batch list is padded by wrapping round to a multiple of the world size R and rank r takes
    batches r, r + R, ... Evaluation: every setting's rows in order, the settings' batches taken
    in turn (batch 0 of each setting, then batch 1, ...: ``limit_val_batches`` still sees every
    setting), unpadded, rank r takes r, r + R, ...: each example is evaluated once.

    Args:
        sizes: examples per setting.
        batch_size: examples per batch (a setting's last batch may hold fewer).
        shuffle, seed, num_replicas, rank: as ``ShardedSampler``.
        order: ``settings`` or ``shuffled`` (training only).
    """

    def __init__(
        self,
        sizes: list[int],
        *,
        batch_size: int,
        shuffle: bool,
        order: str = "settings",
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if order not in BATCH_ORDERS:
            raise ValueError(f"order must be one of {', '.join(BATCH_ORDERS)}, got {order!r}")
        self.sizes, self.batch_size, self.order = list(sizes), batch_size, order
        count = sum(math.ceil(n / batch_size) for n in self.sizes)
        super().__init__(
            range(count), shuffle=shuffle, seed=seed, num_replicas=num_replicas, rank=rank
        )

    def batches(self) -> list[tuple[int, torch.Tensor]]:
        """Every ``(setting, rows)`` batch of the current epoch, in serving order, unsharded."""
        generator = epoch_generator(self.seed, self.epoch)
        per_setting = []
        for setting, size in enumerate(self.sizes):
            rows = torch.randperm(size, generator=generator) if self.shuffle else torch.arange(size)
            per_setting.append([(setting, part) for part in rows.split(self.batch_size)])
        if not self.shuffle:  # round robin: a limit on evaluation batches still sees every setting
            return [b for group in itertools.zip_longest(*per_setting) for b in group if b]
        out = [b for batches in per_setting for b in batches]
        if self.order == "shuffled":
            out = [out[i] for i in torch.randperm(len(out), generator=generator).tolist()]
        return out

    def indices(self) -> list[tuple[int, torch.Tensor]]:  # type: ignore[override]
        """This rank's batches of the current epoch, from the first."""
        out = self.batches()
        if self.shuffle:
            padding = self.total_size - len(out)
            out += (out * math.ceil(padding / max(len(out), 1)))[:padding]
            return out[self.rank : self.total_size : self.num_replicas]
        return out[self.rank :: self.num_replicas]


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` over a ``ShardedSampler`` that can stop and resume mid-epoch.

    ``state_dict()``: ``epoch``, ``batches`` (yielded in that epoch), ``seed``, ``batch_size`` and
    ``num_replicas``. After ``load_state_dict``, the next iteration of the saved epoch starts at
    batch ``batches`` (skipped in the sampler, not loaded); a complete epoch resumes at the next
    one; an iteration of another epoch (Lightning moved on) starts from its beginning. The
    checkpoint's seed wins over the current one: resuming continues the saved run's order.
    """

    _epoch = 0
    _batches = 0
    _resume: tuple[int, int] | None = None

    # A generator, not the _BaseDataLoaderIter of the base class: it counts what it yields.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        # Everything happens at the first next(): by then Lightning has called set_epoch.
        sampler = self.sampler
        epoch = getattr(sampler, "epoch", 0)
        skip = self._resume[1] if self._resume is not None and self._resume[0] == epoch else 0
        self._resume = None
        drop = skip  # batches to draw and drop (a sampler swapped in by Lightning: overfit)
        if isinstance(sampler, ShardedSampler):  # batch_size None: the sampler's items are batches
            sampler.start, drop = skip * (self.batch_size or 1), 0
        self._epoch, self._batches = epoch, skip
        iterator = super().__iter__()
        for _ in range(drop):
            next(iterator)
        for batch in iterator:
            self._batches += 1
            yield batch

    def _examples_per_batch(self) -> int:
        return int(self.batch_size or getattr(self.sampler, "batch_size", None) or 1)

    def state_dict(self) -> dict[str, int]:
        """Where the loader is: ``{epoch, batches, seed, batch_size, num_replicas}``."""
        sampler = self.sampler
        return {
            "epoch": self._epoch,
            "batches": self._batches,
            "seed": int(getattr(sampler, "seed", 0)),
            "batch_size": self._examples_per_batch(),
            "num_replicas": int(getattr(sampler, "num_replicas", 1)),
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at ``state`` with the next ``__iter__`` (see the class docstring)."""
        epoch, batches = int(state["epoch"]), int(state["batches"])
        saved = int(state.get("batch_size", 1)) * int(state.get("num_replicas", 1))
        now = self._examples_per_batch() * int(getattr(self.sampler, "num_replicas", 1))
        if saved != now:
            warnings.warn(
                f"resuming with {now} samples per step (batch size × ranks) instead of the "
                f"checkpoint's {saved}: the data order continues near, not exactly at, the saved "
                "position",
                UserWarning,
                stacklevel=2,
            )
            batches = batches * saved // now
        if batches >= len(self):  # that epoch was complete: go on with the next one
            epoch, batches = epoch + 1, 0
        sampler = self.sampler
        if isinstance(sampler, ShardedSampler):
            sampler.seed = int(state["seed"])
            sampler.set_epoch(epoch)
        self._resume = (epoch, batches)


def sharded_loader(
    dataset: Dataset,
    *,
    train: bool,
    batch_size: int,
    num_workers: int = 0,
    collate_fn: Any = None,
    num_replicas: int = 1,
    rank: int = 0,
) -> DataLoader:
    """The loader of one split over a ``ShardedSampler`` (``loader_over``)."""
    sampler = ShardedSampler(
        dataset,  # type: ignore[arg-type]  # map-style datasets here all have a len
        shuffle=train,
        seed=run_seed(),
        num_replicas=num_replicas,
        rank=rank,
    )
    return loader_over(
        dataset,
        sampler,
        train=train,
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=collate_fn,
    )


def loader_over(
    dataset: Dataset,
    sampler: ShardedSampler,
    *,
    train: bool,
    batch_size: int | None,
    num_workers: int = 0,
    collate_fn: Any = None,
) -> DataLoader:
    """A ``ResumableDataLoader`` for training, a plain ``DataLoader`` over the unpadded shard
    otherwise (``batch_size`` None: the sampler's items are whole batches). Worker seeds come from
    the loader's own generator, so iterating a loader never draws from the global torch RNG (which
    a resumed run restores: a draw there would shift every later dropout mask)."""
    return (ResumableDataLoader if train else DataLoader)(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        collate_fn=collate_fn,
        generator=torch.Generator().manual_seed(run_seed()),
    )
