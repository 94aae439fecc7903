"""MQAR over several settings: each setting's examples are MQAR's, splits never share an example,
a setting's examples do not depend on the others, and bad settings are named."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.data.mqar import RecallExamples, RecallSizes
from attn_lightning.data.recall import AssociativeRecallDataModule
from tests.data.test_recall import check_invariants

TRAIN = [
    {"seq_len": 16, "num_kv_pairs": 2, "examples": 40},
    {"seq_len": 32, "num_kv_pairs": 6, "examples": 30},
]
EVAL = [{"seq_len": 16, "num_kv_pairs": 2}, {"seq_len": 64, "num_kv_pairs": 12}]
SIZES = {"vocab_size": 48, "val_size": 12, "test_size": 10, "batch_size": 8, "seed": 5}


def datamodule(**options) -> AssociativeRecallDataModule:
    dm = AssociativeRecallDataModule(**(SIZES | options))
    dm.setup()
    return dm


def test_every_setting_is_mqar_and_the_splits_never_share_an_example():
    dm = datamodule(train_settings=TRAIN, eval_settings=EVAL)
    assert dm.seq_len == 64  # the longest setting: what the model must take (linked)
    expected = {
        "train": [(16, 2, 40), (32, 6, 30)],
        "val": [(16, 2, 12), (64, 12, 12)],
        "test": [(16, 2, 10), (64, 12, 10)],
    }
    seen: set[bytes] = set()
    for split, settings in expected.items():
        data = dm.datasets[split]
        assert data.names == [f"L{n}_P{p}" for n, p, _ in settings]
        assert data.sizes == [count for *_, count in settings]
        for (length, pairs, _), examples in zip(settings, data.parts, strict=True):
            sizes = RecallSizes(vocab_size=48, seq_len=length, num_kv_pairs=pairs)
            check_invariants(examples, sizes)
            rows = {row.numpy().tobytes() for row in examples.inputs}
            if split != "train":
                assert len(rows) == len(examples) and not rows & seen
            seen |= rows


def test_a_batch_says_which_examples_and_setting_it_holds():
    dm = datamodule(train_settings=TRAIN, eval_settings=EVAL)
    batches = list(dm.test_dataloader())
    # The settings take turns, so a limit on evaluation batches still sees each of them.
    assert [tuple(b["inputs"].shape) for b in batches] == [(8, 16), (8, 64), (2, 16), (2, 64)]
    assert sorted(torch.cat([b["index"] for b in batches]).tolist()) == list(range(20))
    assert [b["index"][0].item() for b in batches] == [0, 10, 8, 18]
    assert [b["setting"].unique().tolist() for b in batches] == [[0], [1], [0], [1]]
    assert all(b["settings"] == ["L16_P2", "L64_P12"] for b in batches)
    test = dm.datasets["test"]
    second = batches[1]
    assert torch.equal(second["inputs"], test.parts[1].inputs[:8])
    assert torch.equal(second["positions"], test.parts[1].positions[:8])


def _examples(dm: AssociativeRecallDataModule, split: str, name: str) -> RecallExamples:
    data = dm.datasets[split]
    return data.parts[data.names.index(name)]


def test_a_settings_examples_do_not_depend_on_the_other_settings():
    alone = datamodule(train_settings=TRAIN[1:])
    both = datamodule(
        train_settings=TRAIN[::-1], eval_settings=[*EVAL, {"seq_len": 32, "num_kv_pairs": 6}]
    )
    for split in ("train", "val"):
        a, b = _examples(alone, split, "L32_P6"), _examples(both, split, "L32_P6")
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.labels, b.labels)
    other_seed = datamodule(train_settings=TRAIN[1:], seed=6)
    assert not torch.equal(
        _examples(other_seed, "train", "L32_P6").inputs, _examples(alone, "train", "L32_P6").inputs
    )


def test_replaced_options_are_not_recorded_as_used():
    one = AssociativeRecallDataModule(**SIZES)
    assert {"seq_len", "num_kv_pairs", "train_size"} <= set(one.hparams)
    several = AssociativeRecallDataModule(train_settings=TRAIN, **SIZES)
    assert not {"seq_len", "num_kv_pairs", "train_size"} & set(several.hparams)
    assert several.hparams["train_settings"] == TRAIN


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"train_settings": []}, r"train_settings must be a non-empty list of \{seq_len, "),
        (
            {"train_settings": [{"seq_len": 16, "num_kv_pairs": 2}]},
            r"train_settings\[0\] must be a mapping with keys seq_len, num_kv_pairs, examples",
        ),
        (
            {"train_settings": [*TRAIN, {"seq_len": 20, "num_kv_pairs": 2, "examples": 0}]},
            r"train_settings\[2\]: examples must be a positive int, got 0",
        ),
        (
            {"train_settings": TRAIN, "eval_settings": [{"seq_len": 15, "num_kv_pairs": 2}]},
            r"eval_settings\[0\]: seq_len must be even .* got 15",
        ),
        (
            {"train_settings": TRAIN, "eval_settings": [{"seq_len": 16, "num_kv_pairs": 30}]},
            r"eval_settings\[0\]: num_kv_pairs=30 needs seq_len >= 4·30",
        ),
        (
            {"train_settings": [TRAIN[0], {**TRAIN[0], "examples": 3}]},
            r"train_settings\[1\]: the setting L16_P2 is given twice in train_settings",
        ),
        ({"eval_settings": EVAL}, r"eval_settings needs train_settings \(one entry to train on"),
        ({"train_settings": TRAIN, "order": "random"}, r"order must be one of settings, shuffled"),
    ],
)
def test_bad_settings_name_the_entry_and_what_is_allowed(options, message):
    with pytest.raises(ValueError, match=message):
        AssociativeRecallDataModule(**(SIZES | options))
