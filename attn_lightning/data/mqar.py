"""Multi-query associative recall (MQAR), generated from a seed: Zoology's ``multiquery_ar``.

Arora, Eyuboglu et al., "Zoology: Measuring and Improving Recall in Efficient Language Models",
ICLR 2024 (arXiv 2312.04927); the generator follows ``zoology/data/associative_recall.py``
(``_mqar``) as published, rewritten here in torch with a seeded generator. One example of length
L with P key-value pairs over a vocabulary of V tokens::

    inputs:  k1 v1 k2 v2 ... kP vP | 0  0  k2 0  0  0  k1 0 ...     (the P·2 pairs, then queries)
    labels:  -100 ...          -100 | -100 -100 v2 -100 ...  v1 ...  (the value, at its query)

* keys are drawn without replacement from ``1 .. V/2 - 1`` (token 0 is the filler), values from
  ``V/2 .. V - 1``: each key once per example, every value distinct;
* every key is queried exactly once, after the pairs: key j at position ``2P + 2·g_j``, with the
  gaps ``g_j`` drawn without replacement from ``0 .. (L - 2P)/2 - 1`` with probability
  ``∝ a · (g + 1)^(a - 1)`` (``power_a`` a; 0.01 in the paper, a strong pull towards the pairs:
  the power law of the distance between repeated bigrams in text; a = 1 is uniform);
* labels are -100 (ignored by the loss) everywhere but at the P query positions, where they are
  the value paired with the queried key: the model predicts it *at* the query token;
* ``random_non_queries``: every filler 0 is replaced by a token uniform over the whole
  vocabulary (as published; such a token may equal a key, without a label).

Each example also carries its P query positions, ascending, so a task reads its logits there only.
The splits come from generators seeded with ``(seed, split)`` (seed·3 + 0, 1, 2 for train, val,
test) and never share an example: a validation or test example whose inputs equal one of an
earlier split's is drawn again (``distinct``), which matters only at tiny vocabularies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attn_lightning.data.base import check_positive_ints

IGNORE = -100  # the label of every position that is not a query (F.cross_entropy's default)


def setting_name(seq_len: int, num_kv_pairs: int) -> str:
    """``L<seq_len>_P<num_kv_pairs>``, e.g. ``L256_P16``: a setting in metric and file names."""
    return f"L{seq_len}_P{num_kv_pairs}"


@dataclass(frozen=True)
class RecallSizes:
    """The sizes of MQAR examples, checked once.

    Attributes:
        vocab_size: V; keys from ``1 .. V/2 - 1``, values from ``V/2 .. V - 1``.
        seq_len: L, the input length (Zoology's ``input_seq_len``); even, as there.
        num_kv_pairs: P, pairs per example (and queries: each key is queried once).
        power_a: a of the power law placing the queries (> 0; 1 is uniform).
        random_non_queries: fill the non-query positions with random tokens instead of 0.

    Raises:
        ValueError: a size that cannot make an example, naming it and what is allowed.
    """

    vocab_size: int = 8192
    seq_len: int = 64
    num_kv_pairs: int = 4
    power_a: float = 0.01
    random_non_queries: bool = True

    def __post_init__(self) -> None:
        check_positive_ints(
            vocab_size=self.vocab_size, seq_len=self.seq_len, num_kv_pairs=self.num_kv_pairs
        )
        v, length, pairs = self.vocab_size, self.seq_len, self.num_kv_pairs
        if length % 2:
            raise ValueError(f"seq_len must be even (queries sit two tokens apart), got {length}")
        if 4 * pairs > length:
            raise ValueError(
                f"num_kv_pairs={pairs} needs seq_len >= 4·{pairs} = {4 * pairs} (the {2 * pairs} "
                f"tokens of the pairs, then {pairs} query slots two apart), got seq_len={length}"
            )
        if v // 2 - 1 < pairs:
            raise ValueError(
                f"vocab_size={v} has {max(v // 2 - 1, 0)} key tokens (1 .. V/2 - 1) for "
                f"num_kv_pairs={pairs} distinct keys; raise vocab_size to >= {2 * pairs + 2}"
            )
        if not isinstance(self.power_a, int | float) or not (
            math.isfinite(self.power_a) and self.power_a > 0
        ):
            raise ValueError(f"power_a must be a finite number > 0, got {self.power_a!r}")

    @property
    def name(self) -> str:
        """``L<seq_len>_P<num_kv_pairs>``: the setting's name in metric names (``setting_name``)."""
        return setting_name(self.seq_len, self.num_kv_pairs)

    @property
    def num_gaps(self) -> int:
        """Query slots after the pairs: ``(L - 2P) / 2``."""
        return (self.seq_len - 2 * self.num_kv_pairs) // 2

    def gap_probabilities(self) -> Tensor:
        """``p_g ∝ a · (g + 1)^(a - 1)`` for g = 0 .. num_gaps - 1 (float64, sums to 1)."""
        a = float(self.power_a)
        p = a * torch.arange(1, self.num_gaps + 1, dtype=torch.float64) ** (a - 1)
        return p / p.sum()


@dataclass(frozen=True)
class RecallExamples:
    """N examples: ``inputs (N, L)``, ``labels (N, L)`` (-100 off the queries) and the query
    ``positions (N, P)``, ascending."""

    inputs: Tensor
    labels: Tensor
    positions: Tensor

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def select(self, rows: Tensor) -> RecallExamples:
        return RecallExamples(self.inputs[rows], self.labels[rows], self.positions[rows])

    def value_distances(self) -> Tensor:
        """``(N, P)``: ``value_distances`` of these examples."""
        return value_distances(self.inputs, self.positions)

    @staticmethod
    def concat(parts: list[RecallExamples]) -> RecallExamples:
        return RecallExamples(
            torch.cat([p.inputs for p in parts]),
            torch.cat([p.labels for p in parts]),
            torch.cat([p.positions for p in parts]),
        )


def value_distances(inputs: Tensor, positions: Tensor) -> Tensor:
    """``(B, P)``: how many tokens each query of ``inputs: (B, L)`` at ``positions: (B, P)`` comes
    after its key's value (key j at 2j, its value at 2j + 1; at least 1) — the reach a model with a
    bounded view needs (a sliding window of w sees values at most w - 1 back)."""
    pairs = positions.shape[1]
    keys = inputs[:, 0 : 2 * pairs : 2]
    queried = inputs.gather(1, positions)
    index = (queried[:, :, None] == keys[:, None, :]).int().argmax(dim=-1)
    return positions - (2 * index + 1)


_BLOCK_ROWS = 1024  # rows drawn together: a (1024, 128) int64 block is 1 MB, in cache


def _uniform_without_replacement(
    population: int, rows: int, count: int, generator: torch.Generator
) -> Tensor:
    """``(rows, count)`` distinct indices in ``0 .. population - 1`` per row, uniform over ordered
    draws without replacement.

    Draw j picks the r-th smallest index not taken yet (0-based), r uniform in
    ``0 .. population - j - 1``: with the taken indices ascending, ``t_0 < t_1 < ...``, that index
    is ``r + #{i : t_i - i <= r}``. O(rows · count²) work and no ``population``-wide tensor: a
    4,096-key half vocabulary costs nothing (``torch.multinomial`` without replacement over it
    took 5.6 s for 20,000 rows); 128 keys for 20,000 rows take about 2 s on one thread.
    """
    # Every draw first, in the order one row-wide draw per j makes them; then the rows in blocks
    # whose (block, count) tensors stay in cache (the work is rows · count² / 2 elements).
    draws = [torch.randint(population - j, (rows, 1), generator=generator) for j in range(count)]
    chosen = torch.empty(rows, count, dtype=torch.long)
    steps = torch.arange(count)
    for start in range(0, rows, _BLOCK_ROWS):
        block = slice(start, start + _BLOCK_ROWS)
        taken = chosen[block, :0]  # (block, j): the indices drawn so far, ascending
        for j in range(count):
            r = draws[j][block].clone()
            if j:
                r += (taken - steps[:j] <= r).sum(dim=1, keepdim=True)
                # r put in its place among the taken ones: no sort of the whole row each draw.
                cols = steps[: j + 1]
                at = (taken < r).sum(dim=1, keepdim=True)
                below = taken.gather(1, (cols - (cols > at).long()).clamp(max=j - 1))
                taken = torch.where(cols == at, r, below)
            else:
                taken = r
            chosen[block, j] = r[:, 0]
    return chosen


def _weighted_without_replacement(
    weights: Tensor, rows: int, count: int, generator: torch.Generator
) -> Tensor:
    """``(rows, count)`` indices into ``weights`` drawn without replacement (successive draws
    among the rest, as numpy's ``choice(replace=False, p=...)`` that Zoology calls)."""
    return torch.multinomial(weights.expand(rows, -1), count, generator=generator)


def multiquery_ar(
    sizes: RecallSizes, *, num_examples: int, generator: torch.Generator
) -> RecallExamples:
    """``num_examples`` MQAR examples drawn from ``generator`` (see the module docstring)."""
    v, length, pairs = sizes.vocab_size, sizes.seq_len, sizes.num_kv_pairs
    half = v // 2
    keys = 1 + _uniform_without_replacement(half - 1, num_examples, pairs, generator)  # (N, P)
    values = half + _uniform_without_replacement(v - half, num_examples, pairs, generator)
    gaps = _weighted_without_replacement(sizes.gap_probabilities(), num_examples, pairs, generator)
    inputs = torch.zeros(num_examples, length, dtype=torch.long)
    inputs[:, 0 : 2 * pairs : 2] = keys  # (N, P)
    inputs[:, 1 : 2 * pairs : 2] = values
    queries = 2 * pairs + 2 * gaps  # (N, P): key j asked at its own slot
    inputs.scatter_(1, queries, keys)
    labels = torch.full_like(inputs, IGNORE).scatter_(1, queries, values)
    if sizes.random_non_queries:
        filler = labels == IGNORE
        filler[:, : 2 * pairs] = False  # the pairs stay; every other 0 becomes noise
        noise = torch.randint(v, inputs.shape, generator=generator)
        inputs = torch.where(filler, noise, inputs)
    return RecallExamples(inputs, labels, queries.sort(dim=1).values)


def distinct(
    draw: Callable[[int], RecallExamples], count: int, seen: set[bytes], *, rounds: int = 100
) -> RecallExamples:
    """``count`` examples from ``draw`` whose inputs are in none of ``seen`` nor each other;
    their inputs are added to ``seen``. Rows that collide are drawn again, up to ``rounds`` times.

    Raises:
        ValueError: fewer than ``count`` new distinct examples after ``rounds`` draws (the
            vocabulary and lengths allow too few examples).
    """
    kept: list[RecallExamples] = []
    have = 0
    for _ in range(rounds):
        if have == count:
            break
        batch = draw(count - have)
        new = []
        for i, row in enumerate(batch.inputs):
            key = row.numpy().tobytes()
            if key not in seen:
                seen.add(key)
                new.append(i)
        kept.append(batch.select(torch.tensor(new, dtype=torch.long)))
        have += len(new)
    if have < count:
        raise ValueError(
            f"could draw only {have} of {count} examples distinct from the earlier splits' in "
            f"{rounds} rounds: these sizes allow too few different examples; raise vocab_size "
            f"or seq_len, or lower the split sizes"
        )
    return RecallExamples.concat(kept)
