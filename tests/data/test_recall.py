"""MQAR: the generator's invariants, checked on it and on a slow reference written plainly from the
paper's description; the query-gap law; seeds; splits that never share an example; errors."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from attn_lightning.data.mqar import (
    IGNORE,
    RecallExamples,
    RecallSizes,
    _uniform_without_replacement,
    multiquery_ar,
)
from attn_lightning.data.recall import AssociativeRecallDataModule


def reference_mqar(sizes: RecallSizes, num_examples: int, seed: int) -> RecallExamples:
    """Zoology's MQAR (arXiv 2312.04927, §3 and ``multiquery_ar``), one token at a time: P
    distinct keys from the lower half of the vocabulary (0 excluded), P distinct values from the
    upper half, the pairs first; then each key once, at 2P + 2g with the gaps g drawn one after
    the other among the free ones with weight a·(g + 1)^(a − 1); the label at a query is its
    key's value; the other positions are 0 or, with random_non_queries, a random token."""
    rng = random.Random(seed)
    v, n, p, a = sizes.vocab_size, sizes.seq_len, sizes.num_kv_pairs, sizes.power_a
    rows, labels, positions = [], [], []
    for _ in range(num_examples):
        keys = rng.sample(range(1, v // 2), p)
        values = rng.sample(range(v // 2, v), p)
        tokens = [0] * n
        target = [IGNORE] * n
        for j in range(p):
            tokens[2 * j], tokens[2 * j + 1] = keys[j], values[j]
        free = list(range((n - 2 * p) // 2))
        where = []
        for j in range(p):
            gap = rng.choices(free, weights=[a * (g + 1) ** (a - 1) for g in free])[0]
            free.remove(gap)
            position = 2 * p + 2 * gap
            tokens[position], target[position] = keys[j], values[j]
            where.append(position)
        if sizes.random_non_queries:
            for i in range(2 * p, n):
                if target[i] == IGNORE:
                    tokens[i] = rng.randrange(v)
        rows.append(tokens)
        labels.append(target)
        positions.append(sorted(where))
    return RecallExamples(torch.tensor(rows), torch.tensor(labels), torch.tensor(positions))


def check_invariants(examples: RecallExamples, sizes: RecallSizes) -> None:
    """What every MQAR example must satisfy, read from the paper, not from our generator."""
    v, n, p = sizes.vocab_size, sizes.seq_len, sizes.num_kv_pairs
    for tokens, target, where in zip(
        examples.inputs.tolist(), examples.labels.tolist(), examples.positions.tolist(), strict=True
    ):
        assert len(tokens) == len(target) == n and len(where) == p
        keys, values = tokens[0 : 2 * p : 2], tokens[1 : 2 * p : 2]
        assert all(1 <= k < v // 2 for k in keys) and len(set(keys)) == p  # each key once
        assert all(v // 2 <= x < v for x in values) and len(set(values)) == p
        labelled = [i for i, y in enumerate(target) if y != IGNORE]
        assert labelled == where == sorted(where)  # labels only at the query positions
        assert all(i >= 2 * p and (i - 2 * p) % 2 == 0 for i in where)
        pair = dict(zip(keys, values, strict=True))
        assert sorted(tokens[i] for i in where) == sorted(keys)  # every key asked once
        for i in where:
            assert target[i] == pair[tokens[i]]  # the value paired with the queried key
        others = [tokens[i] for i in range(2 * p, n) if i not in where]
        if sizes.random_non_queries:
            assert all(0 <= t < v for t in others)
        else:
            assert set(others) <= {0}


SIZES = [
    RecallSizes(vocab_size=64, seq_len=32, num_kv_pairs=4),
    RecallSizes(vocab_size=20, seq_len=16, num_kv_pairs=4, random_non_queries=False),
    RecallSizes(vocab_size=8192, seq_len=64, num_kv_pairs=16, power_a=1.0),
    RecallSizes(vocab_size=12, seq_len=16, num_kv_pairs=4, random_non_queries=False),  # all keys
]


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"V{s.vocab_size}-L{s.seq_len}")
def test_generator_and_reference_satisfy_the_invariants(sizes):
    check_invariants(multiquery_ar(sizes, num_examples=200, generator=torch.Generator()), sizes)
    check_invariants(reference_mqar(sizes, 50, seed=0), sizes)


def _gap_counts(examples: RecallExamples, pairs: int) -> Counter:
    return Counter(((examples.positions - 2 * pairs) // 2).flatten().tolist())


@pytest.mark.parametrize("power_a", [0.01, 1.0])
def test_query_gaps_follow_the_reference_law(power_a):
    # The gap distribution of ours and of the reference agree (total variation < 0.05 over 20
    # gaps, 4 queries an example); power_a 0.01 pulls the queries towards the pairs.
    sizes = RecallSizes(vocab_size=64, seq_len=48, num_kv_pairs=4, power_a=power_a)
    ours = _gap_counts(multiquery_ar(sizes, num_examples=4000, generator=torch.Generator()), 4)
    ref = _gap_counts(reference_mqar(sizes, 4000, seed=1), 4)
    total = 4 * 4000
    tv = 0.5 * sum(abs(ours[g] - ref[g]) / total for g in range(sizes.num_gaps))
    assert tv < 0.05, (tv, ours, ref)
    if power_a == 0.01:
        assert ours[0] > 3 * ours[sizes.num_gaps - 1]  # near gaps far likelier than far ones
    else:
        assert max(ours.values()) < 1.3 * min(ours.values())  # uniform


@pytest.mark.parametrize(
    ("population", "rows", "count"),
    [(7, 5, 7), (4095, 2100, 9), (40, 1030, 24)],  # every index; rows past one block; dense
)
def test_draws_without_replacement_take_the_rth_index_not_taken(population, rows, count):
    # Draw j is r uniform in 0 .. population - j - 1 (one row-wide randint per j, in order): the
    # row's r-th smallest index not drawn yet, found here one row at a time from the same draws.
    got = _uniform_without_replacement(population, rows, count, torch.Generator().manual_seed(5))
    replay = torch.Generator().manual_seed(5)
    draws = [torch.randint(population - j, (rows, 1), generator=replay) for j in range(count)]
    for i, row in enumerate(got.tolist()):
        taken: list[int] = []
        for j in range(count):
            free = [x for x in range(population) if x not in taken]
            taken.append(free[int(draws[j][i])])
        assert row == taken


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: f"V{s.vocab_size}-L{s.seq_len}")
def test_value_distances_are_how_far_each_query_is_after_its_value(sizes):
    examples = multiquery_ar(sizes, num_examples=100, generator=torch.Generator().manual_seed(2))
    got = examples.value_distances()
    for row, positions in zip(examples.inputs.tolist(), examples.positions.tolist()):
        # one token at a time: the query's key, where it first stands, its value one later
        want = [t - (row.index(row[t]) + 1) for t in positions]
        assert got[0].tolist() == want
        got = got[1:]
    # The pairs come first: a query is at least one token after its value.
    assert examples.value_distances().min() >= 1


def test_seeded_splits_are_reproducible_and_never_share_an_example():
    # A tiny vocabulary (keys 1..3, values 4..7, 2 gaps: 144 distinct examples) makes repeats
    # between independently drawn splits certain; the module draws them again.
    options = {"vocab_size": 8, "seq_len": 8, "num_kv_pairs": 2, "random_non_queries": False}
    data = AssociativeRecallDataModule(**options, train_size=100, val_size=20, test_size=20, seed=3)
    data.setup("fit")
    rows = {
        split: {tuple(r) for r in data.datasets[split].examples.inputs.tolist()}
        for split in ("train", "val", "test")
    }
    assert not rows["train"] & rows["val"] and not rows["train"] & rows["test"]
    assert not rows["val"] & rows["test"]
    assert len(rows["val"]) == 20 and len(rows["test"]) == 20
    sizes = RecallSizes(**options)
    check_invariants(data.datasets["test"].examples, sizes)
    # Without the check the independent draws would have shared examples:
    test_alone = multiquery_ar(sizes, num_examples=20, generator=torch.Generator().manual_seed(11))
    assert {tuple(r) for r in test_alone.inputs.tolist()} & rows["train"]
    again = AssociativeRecallDataModule(
        **options, train_size=100, val_size=20, test_size=20, seed=3
    )
    again.setup("test")
    for split in ("train", "val", "test"):
        assert torch.equal(
            again.datasets[split].examples.inputs, data.datasets[split].examples.inputs
        )
    item = data.datasets["val"][0]
    assert set(item) == {"inputs", "labels", "positions"} and item["positions"].shape == (2,)


def test_too_few_distinct_examples_is_one_clear_error():
    data = AssociativeRecallDataModule(
        vocab_size=8,
        seq_len=8,
        num_kv_pairs=2,
        random_non_queries=False,
        train_size=10,
        val_size=200,  # more than the 144 examples there are
        test_size=5,
    )
    with pytest.raises(ValueError, match=r"could draw only \d+ of 200 examples distinct"):
        data.setup("fit")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_kv_pairs": 20, "seq_len": 64}, r"num_kv_pairs=20 needs seq_len >= 4·20 = 80"),
        ({"seq_len": 63}, "seq_len must be even"),
        ({"vocab_size": 8, "num_kv_pairs": 4}, r"vocab_size=8 has 3 key tokens .* >= 10"),
        ({"power_a": 0.0}, "power_a must be a finite number > 0, got 0.0"),
        ({"vocab_size": 0}, "vocab_size must be a positive int, got 0"),
        ({"train_size": 0}, "train_size must be a positive int, got 0"),
    ],
)
def test_bad_options_name_the_value(options, message):
    with pytest.raises(ValueError, match=message):
        AssociativeRecallDataModule(**options)
