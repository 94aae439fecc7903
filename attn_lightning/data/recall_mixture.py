"""MQAR over several (length, pairs) settings at once: Zoology's multi-setting protocol.

Zoology's MQAR sweeps (``zoology/experiments/mqar_example_configs/original_mqar_configs.py``)
train one model on several settings, e.g. (64, 4) ×100,000, (128, 8), (256, 16), (256, 32) and
(256, 64) ×20,000 each, and test it on others up to (1,024, 256), reporting the accuracy per
setting (their ``slice_keys``). Their loader serves each batch from one setting (no padding: a
causal model's outputs would not change, but the compute would) and does not shuffle batches:
every epoch is setting 0's batches, then setting 1's, ... Ours does the same by default
(``SettingBatchSampler``, ``order: settings``), or in a random order (``order: shuffled``); ours
also permutes the rows inside a setting every epoch, as our single-setting loader does.

Each setting's examples come from their own generator, seeded from (data seed, split, seq_len,
num_kv_pairs): adding or reordering settings leaves every other setting's examples unchanged.
Validation and test examples are distinct from every earlier split's (``mqar.distinct``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset

from attn_lightning.data.base import SPLITS, check_positive_ints
from attn_lightning.data.mqar import RecallExamples, RecallSizes, distinct, multiquery_ar

TRAIN_KEYS = ("seq_len", "num_kv_pairs", "examples")
EVAL_KEYS = ("seq_len", "num_kv_pairs")


def parse_settings(
    entries: Sequence[Mapping[str, Any]], base: RecallSizes, *, option: str, keys: tuple[str, ...]
) -> list[tuple[RecallSizes, int | None]]:
    """Each entry of ``option`` as ``(sizes, examples)``: ``base`` with the entry's seq_len and
    num_kv_pairs, and its ``examples`` (None where ``keys`` has no ``examples``).

    Raises:
        ValueError: not a non-empty list of mappings with exactly ``keys``, a size no example can
            have (``RecallSizes``'s message), or a (seq_len, num_kv_pairs) given twice; naming the
            entry by its index.
    """
    if isinstance(entries, str | Mapping) or not isinstance(entries, Sequence) or not entries:
        raise ValueError(
            f"{option} must be a non-empty list of {{{', '.join(keys)}}} mappings, got {entries!r}"
        )
    out: list[tuple[RecallSizes, int | None]] = []
    for i, entry in enumerate(entries):
        where = f"{option}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) != set(keys):
            raise ValueError(
                f"{where} must be a mapping with keys {', '.join(keys)}, got {entry!r}"
            )
        try:
            check_positive_ints(**{k: entry[k] for k in keys})
            sizes = replace(base, seq_len=entry["seq_len"], num_kv_pairs=entry["num_kv_pairs"])
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        if any(s.name == sizes.name for s, _ in out):
            raise ValueError(f"{where}: the setting {sizes.name} is given twice in {option}")
        out.append((sizes, entry.get("examples")))
    return out


def setting_generator(seed: int, split: str, sizes: RecallSizes) -> torch.Generator:
    """The generator of one split of one setting (hashed from the data seed, the split, and the
    setting's name)."""
    digest = hashlib.sha256(f"mqar:{seed}:{split}:{sizes.name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


class MixtureDataset(Dataset):
    """Examples of several settings; item ``(setting, rows)`` is one batch of that setting (keys
    from ``data.sampling.SettingBatchSampler``).

    A batch is ``{"inputs": (b, L_s), "labels": (b, L_s), "positions": (b, P_s), "index": (b,),
    "setting": (b,), "settings": [names]}``: ``index`` numbers the examples of the split (settings
    one after another, in the order given), ``setting`` is the setting's index in ``settings``, the
    names of every setting of the split (``L<seq_len>_P<num_kv_pairs>``), so a task can log every
    setting's metric on every batch (as DDP needs: each rank must log the same names).
    """

    def __init__(self, parts: list[tuple[str, RecallExamples]]) -> None:
        self.names = [name for name, _ in parts]
        self.parts = [examples for _, examples in parts]
        self.sizes = [len(examples) for examples in self.parts]
        self.offsets = torch.tensor([0, *self.sizes]).cumsum(0)[:-1].tolist()

    def __len__(self) -> int:
        return sum(self.sizes)

    def __getitem__(self, key: tuple[int, Tensor]) -> dict[str, Any]:
        setting, rows = key
        part = self.parts[setting]
        return {
            "inputs": part.inputs[rows],
            "labels": part.labels[rows],
            "positions": part.positions[rows],
            "index": rows + self.offsets[setting],
            "setting": torch.full_like(rows, setting),
            "settings": self.names,
        }


def mixture_splits(
    train: list[tuple[RecallSizes, int | None]],
    evaluate: list[tuple[RecallSizes, int | None]],
    split_sizes: Mapping[str, int],
    generator: Callable[[str, RecallSizes], torch.Generator],
) -> dict[str, MixtureDataset]:
    """The train split (each ``train`` setting with its own example count; repeats allowed, as
    Zoology's) and the val and test splits (``split_sizes["val"]`` / ``["test"]`` examples of each
    ``evaluate`` setting), every val and test example distinct from the splits before it. Each
    (split, setting) draws from ``generator(split, sizes)`` (``setting_generator`` of a seed)."""
    seen: set[bytes] = set()
    out = {}
    for split in SPLITS:
        settings = train if split == "train" else [(s, split_sizes[split]) for s, _ in evaluate]
        parts = []
        for sizes, count in settings:
            assert count is not None  # parse_settings asked train entries for their examples
            source = generator(split, sizes)

            def draw(
                n: int, source: torch.Generator = source, sizes: RecallSizes = sizes
            ) -> RecallExamples:
                return multiquery_ar(sizes, num_examples=n, generator=source)

            if split == "train":
                examples = draw(count)
                seen.update(row.numpy().tobytes() for row in examples.inputs)
            else:
                examples = distinct(draw, count, seen)
            parts.append((sizes.name, examples))
        out[split] = MixtureDataset(parts)
    return out
