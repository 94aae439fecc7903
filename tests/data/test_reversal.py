"""The reversal DataModule: deterministic from its seed, targets reversed, clear errors."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.data import (
    ReversalDataset,
    SequenceReversalDataModule,
    ShiftedReversalDataModule,
)


def make(**kwargs):
    options = {"train_size": 40, "val_size": 10, "test_size": 12, "batch_size": 8, **kwargs}
    dm = SequenceReversalDataModule(**options)
    dm.setup("fit")
    return dm


def test_targets_are_reversed_sources_over_the_vocabulary():
    dm = make(num_symbols=4, seq_len=9)
    batch = next(iter(dm.train_dataloader()))
    assert batch["source"].shape == (8, 9)
    assert torch.equal(batch["target"], batch["source"].flip(dims=[1]))
    src = dm.datasets["train"].source
    assert src.min() >= 0 and src.max() == 3


def test_same_seed_same_data_and_splits_differ():
    a, b, c = make(seed=5), make(seed=5), make(seed=6)
    for split in ("train", "val", "test"):
        assert torch.equal(a.datasets[split].source, b.datasets[split].source)
    assert not torch.equal(a.datasets["train"].source, c.datasets["train"].source)
    assert not torch.equal(a.datasets["val"].source, a.datasets["test"].source[:10])
    assert [len(a.datasets[s]) for s in ("train", "val", "test")] == [40, 10, 12]


def test_eval_loaders_are_ordered():
    dm = make()
    first = [b["source"] for b in dm.val_dataloader()]
    second = [b["source"] for b in dm.val_dataloader()]
    assert all(torch.equal(x, y) for x, y in zip(first, second, strict=True))
    assert len(ReversalDataset(size=3, seq_len=2, num_symbols=2, seed=0)) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq_len": 0}, "seq_len must be a positive int, got 0"),
        ({"num_symbols": 1}, "num_symbols must be >= 2"),
        ({"batch_size": 2.5}, "batch_size must be a positive int"),
    ],
)
def test_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SequenceReversalDataModule(**kwargs)


@pytest.mark.parametrize("shift", [0, 3])
def test_shifted_reversal_targets(shift):
    data = ShiftedReversalDataModule(
        shift=shift, num_symbols=7, seq_len=5, train_size=8, val_size=4, test_size=4
    )
    data.setup("fit")
    batch = next(iter(data.val_dataloader()))
    expected = (batch["source"].flip(dims=[1]) + shift) % 7
    assert torch.equal(batch["target"], expected)
