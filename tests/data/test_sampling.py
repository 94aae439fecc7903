"""Seeded, resumable train loaders of every DataModule and the unpadded DDP evaluation shards."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from lightning.fabric.utilities.types import _Stateful

from attn_lightning.data import (
    AssociativeRecallDataModule,
    DetectionDataModule,
    DomainImageDataModule,
    PixelDataModule,
    SceneSpec,
    SequenceReversalDataModule,
    ShiftedReversalDataModule,
)
from attn_lightning.data.base import SplitDataModule
from attn_lightning.data.sampling import ResumableDataLoader, SettingBatchSampler, ShardedSampler

REVERSAL = {"train_size": 42, "val_size": 9, "test_size": 9, "seq_len": 6, "batch_size": 4}
SCENES = SceneSpec(image_size=32, min_size=6, max_size=12)
RECALL = {"vocab_size": 64, "val_size": 5, "test_size": 5, "batch_size": 4}
MIXTURE = [
    {"seq_len": 16, "num_kv_pairs": 2, "examples": 10},
    {"seq_len": 24, "num_kv_pairs": 3, "examples": 13},
]
# Every experiment's DataModule, tiny: a few batches per epoch, the last one partial.
DATAMODULES: dict[str, Callable[[], SplitDataModule]] = {
    "reversal": lambda: SequenceReversalDataModule(**REVERSAL),
    "shifted_reversal": lambda: ShiftedReversalDataModule(shift=3, **REVERSAL),
    "pixels": lambda: PixelDataModule(batch_size=100),
    "domains": lambda: DomainImageDataModule(image_size=8, domain="inverted", batch_size=100),
    "detection": lambda: DetectionDataModule(
        train_size=22, val_size=5, test_size=5, batch_size=4, scenes=SCENES
    ),
    "recall": lambda: AssociativeRecallDataModule(seq_len=16, train_size=22, **RECALL),
    # Whole batches of one setting each (batch_size None, SettingBatchSampler), both orders.
    "recall_settings": lambda: AssociativeRecallDataModule(train_settings=MIXTURE, **RECALL),
    "recall_shuffled": lambda: AssociativeRecallDataModule(
        train_settings=MIXTURE, order="shuffled", **RECALL
    ),
}


def same(a: Any, b: Any) -> bool:
    """Batches equal exactly: tensors by ``torch.equal``, containers element by element."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def same_batches(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def train_loader(name: str, epoch: int = 0) -> ResumableDataLoader:
    dm = DATAMODULES[name]()
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert isinstance(loader, ResumableDataLoader)
    loader.sampler.set_epoch(epoch)  # what Lightning does at every epoch start
    return loader


@pytest.mark.parametrize("name", DATAMODULES)
def test_restored_loader_yields_the_remaining_batches(name):
    original = train_loader(name, epoch=1)
    assert isinstance(original, _Stateful)  # what Lightning checks before saving the state
    k = len(original) // 2
    iterator = iter(original)
    taken = list(itertools.islice(iterator, k))
    state = original.state_dict()
    remaining = list(iterator)
    assert state["epoch"] == 1 and state["batches"] == k and len(remaining) == len(original) - k

    restored = train_loader(name)  # a fresh process: epoch 0 until the state says otherwise
    restored.load_state_dict(state)
    assert same_batches(list(restored), remaining)
    # The whole epoch, restarted, is the same order again (a pure function of seed and epoch).
    assert same_batches(list(train_loader(name, epoch=1)), taken + remaining)


def test_order_depends_on_seed_and_epoch_only(monkeypatch):
    def order(seed: str, epoch: int) -> list[int]:
        monkeypatch.setenv("PL_GLOBAL_SEED", seed)
        loader = train_loader("reversal", epoch)
        return list(loader.sampler)

    assert order("0", 0) == order("0", 0)
    assert sorted(order("0", 0)) == list(range(REVERSAL["train_size"]))
    assert order("0", 1) != order("0", 0)
    assert order("1", 0) not in (order("0", 0), order("0", 1))
    # The next epoch's permutation does not shift with the seed (no seed + epoch collisions).
    assert order("1", 0) != order("0", 1)


def test_state_of_a_complete_epoch_resumes_at_the_next_one():
    finished = train_loader("reversal", epoch=2)
    list(finished)
    state = finished.state_dict()
    restored = train_loader("reversal")
    restored.load_state_dict(state)
    assert same_batches(list(restored), list(train_loader("reversal", epoch=3)))


def test_saved_position_is_dropped_when_another_epoch_starts():
    # limit_train_batches: Lightning ends the epoch early and starts the next one on resume.
    original = train_loader("reversal", epoch=0)
    list(itertools.islice(iter(original), 3))
    restored = train_loader("reversal")
    restored.load_state_dict(original.state_dict())
    restored.sampler.set_epoch(1)
    assert same_batches(list(restored), list(train_loader("reversal", epoch=1)))


def test_position_counts_batches_yielded_not_indices_prefetched_by_workers():
    dm = SequenceReversalDataModule(**REVERSAL, num_workers=1)
    dm.setup("fit")
    loader = dm.train_dataloader()
    iterator = iter(loader)
    taken = list(itertools.islice(iterator, 2))  # the worker has fetched further by now
    assert loader.state_dict()["batches"] == 2
    remaining = list(iterator)
    restored = train_loader("reversal")
    restored.load_state_dict({**loader.state_dict(), "batches": 2})
    assert same_batches(list(restored), remaining)
    assert len(taken) + len(remaining) == len(loader)


@pytest.mark.parametrize("size", [9, 10, 11])
def test_evaluation_shards_cover_each_sample_exactly_once(size):
    data = range(size)
    shards = [list(ShardedSampler(data, shuffle=False, num_replicas=3, rank=r)) for r in range(3)]
    assert sorted(itertools.chain(*shards)) == list(range(size))
    assert [len(ShardedSampler(data, shuffle=False, num_replicas=3, rank=r)) for r in range(3)] == [
        len(s) for s in shards
    ]


def test_training_shards_are_equal_sized_and_cover_the_permutation():
    shards = [
        list(ShardedSampler(range(10), shuffle=True, num_replicas=3, rank=r)) for r in range(3)
    ]
    assert {len(s) for s in shards} == {4}  # padded to 12 so every rank steps the same
    assert set(itertools.chain(*shards)) == set(range(10))


def test_datamodule_shards_by_the_trainers_ranks():
    dm = SequenceReversalDataModule(**REVERSAL)
    dm.setup("fit")
    # What a DDP trainer tells the DataModule: 2 ranks, this is rank 1.
    dm.trainer = SimpleNamespace(distributed_sampler_kwargs={"num_replicas": 2, "rank": 1})
    val = dm.val_dataloader()
    assert list(val.sampler) == list(range(1, REVERSAL["val_size"], 2))
    assert len(dm.train_dataloader().sampler) == REVERSAL["train_size"] // 2


def _batches(sampler: SettingBatchSampler) -> list[tuple[int, list[int]]]:
    return [(setting, rows.tolist()) for setting, rows in sampler]


@pytest.mark.parametrize("order", ["settings", "shuffled"])
def test_setting_batches_cover_every_example_of_each_setting_once_an_epoch(order):
    sizes = [10, 13, 4]
    sampler = SettingBatchSampler(sizes, batch_size=4, shuffle=True, order=order, seed=3)
    batches = _batches(sampler)
    assert len(batches) == len(sampler) == 3 + 4 + 1  # a setting's last batch may be short
    for setting, size in enumerate(sizes):
        rows = [r for s, part in batches if s == setting for r in part]
        assert sorted(rows) == list(range(size))
    served = [s for s, _ in batches]
    if order == "settings":  # Zoology's loader: every batch of a setting, then the next's
        assert served == sorted(served)
    else:  # a seeded shuffle of the same batches (this seed and epoch interleave them)
        assert served != sorted(served)
        assert sorted(served) == [0, 0, 0, 1, 1, 1, 1, 2]
    sampler.set_epoch(1)
    assert _batches(sampler) != batches  # rows drawn again every epoch


def test_setting_batches_shard_like_every_other_loader():
    sizes = [10, 13, 4]  # 8 batches of 4 (three short)

    def shard(shuffle: bool, rank: int) -> SettingBatchSampler:
        return SettingBatchSampler(
            sizes, batch_size=4, shuffle=shuffle, seed=1, num_replicas=3, rank=rank
        )

    train = [_batches(shard(True, r)) for r in range(3)]
    assert [len(t) for t in train] == [3, 3, 3]  # padded to 9 batches: every rank steps alike
    every = _batches(shard(True, 0).__class__(sizes, batch_size=4, shuffle=True, seed=1))
    assert sorted(map(str, itertools.chain(*train))) == sorted(map(str, every + every[:1]))
    evaluation = [_batches(shard(False, r)) for r in range(3)]
    assert [len(e) for e in evaluation] == [len(shard(False, r)) for r in range(3)] == [3, 3, 2]
    turns = _batches(SettingBatchSampler(sizes, batch_size=4, shuffle=False))
    # The settings take turns until each runs out (3, 4 and 1 batches).
    assert [s for s, _ in turns] == [0, 1, 2, 0, 1, 0, 1, 1]
    seen = sorted((s, r) for part in evaluation for s, rows in part for r in rows)
    assert seen == [(s, r) for s, n in enumerate(sizes) for r in range(n)]  # each once


def test_setting_batch_order_is_checked():
    with pytest.raises(ValueError, match="order must be one of settings, shuffled, got 'random'"):
        SettingBatchSampler([4], batch_size=2, shuffle=True, order="random")
