"""MQAR's DataModule: the splits of one setting (``data.mqar``) or of several
(``data.recall_mixture``), generated in memory from a seed, no files."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from attn_lightning.data.base import SPLITS, SplitDataModule
from attn_lightning.data.mqar import RecallExamples, RecallSizes
from attn_lightning.data.recall_mixture import (
    EVAL_KEYS,
    TRAIN_KEYS,
    mixture_splits,
    parse_settings,
    setting_generator,
)
from attn_lightning.data.sampling import BATCH_ORDERS, SettingBatchSampler, loader_over, run_seed


class RecallDataset(Dataset):
    """Examples as ``{"inputs": (L,), "labels": (L,), "positions": (P,)}`` long tensors."""

    def __init__(self, examples: RecallExamples) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        e = self.examples
        return {
            "inputs": e.inputs[index],
            "labels": e.labels[index],
            "positions": e.positions[index],
        }


class AssociativeRecallDataModule(SplitDataModule[Any]):
    """Train/val/test splits of MQAR (module docstring), generated in memory from ``seed``.

    One setting (``seq_len``, ``num_kv_pairs``) by default; ``train_settings`` and
    ``eval_settings`` train and evaluate on several (``data.recall_mixture``: Zoology's
    multi-setting protocol), each batch from one setting, and the task logs each eval setting's
    accuracy beside the overall one (``val/query_acc_L256_P16``, ...).

    Args:
        vocab_size, seq_len, num_kv_pairs, power_a, random_non_queries: ``RecallSizes``.
        train_size, val_size, test_size: examples per split (Zoology: 100,000 train, 3,000 test);
            with several eval settings, val_size and test_size examples of each.
        batch_size: per device.
        seed: data seed (independent of the model seed ``seed_everything``).
        num_workers: DataLoader workers (0 is fastest for these in-memory tensors).
        train_settings: ``[{seq_len, num_kv_pairs, examples}, ...]`` to train on, replacing
            ``seq_len``, ``num_kv_pairs`` and ``train_size`` (then not in the hyper-parameters);
            vocabulary and query law stay shared.
        eval_settings: ``[{seq_len, num_kv_pairs}, ...]`` for validation and test (default: the
            train settings), e.g. longer ones than trained on; needs ``train_settings``.
        order: the training batches' order with settings: ``settings`` (all of the first
            setting's, then the next's, as Zoology's loader) or ``shuffled``.
    """

    def __init__(
        self,
        *,
        vocab_size: int = 8192,
        seq_len: int = 64,
        num_kv_pairs: int = 4,
        power_a: float = 0.01,
        random_non_queries: bool = True,
        train_size: int = 100_000,
        val_size: int = 3_000,
        test_size: int = 3_000,
        batch_size: int = 64,
        seed: int = 1234,
        num_workers: int = 0,
        train_settings: list[dict[str, int]] | None = None,
        eval_settings: list[dict[str, int]] | None = None,
        order: str = "settings",
    ) -> None:
        super().__init__()
        self.keep_splits((train_size, val_size, test_size), batch_size, seed, num_workers)
        self.sizes = RecallSizes(
            vocab_size=vocab_size,
            seq_len=seq_len,
            num_kv_pairs=num_kv_pairs,
            power_a=power_a,
            random_non_queries=random_non_queries,
        )
        if order not in BATCH_ORDERS:
            raise ValueError(f"order must be one of {', '.join(BATCH_ORDERS)}, got {order!r}")
        self.order = order
        # Several settings: (sizes, examples) per train and per eval setting; None: one setting.
        self.mixture: tuple[list[Any], list[Any]] | None = None
        replaced: list[str] = []  # options the settings replace: not recorded, as not used
        if eval_settings is not None and train_settings is None:
            raise ValueError(
                "eval_settings needs train_settings (one entry to train on a single setting, "
                f"e.g. [{{seq_len: {seq_len}, num_kv_pairs: {num_kv_pairs}, examples: "
                f"{train_size}}}]), got train_settings=None"
            )
        if train_settings is not None:
            train = parse_settings(
                train_settings, self.sizes, option="train_settings", keys=TRAIN_KEYS
            )
            evaluate = (
                parse_settings(eval_settings, self.sizes, option="eval_settings", keys=EVAL_KEYS)
                if eval_settings is not None
                else train
            )
            self.mixture = (train, evaluate)
            seq_len = max(s.seq_len for s, _ in train + evaluate)
            replaced = ["seq_len", "num_kv_pairs", "train_size"]
        self.save_hyperparameters(ignore=replaced)
        self.vocab_size = vocab_size  # linked into the task by the CLI
        self.seq_len = seq_len  # with several settings the longest, which the model must take

    def setup(self, stage: str | None = None) -> None:
        # Every split every stage (cheap), in order: val and test avoid the splits before them.
        if len(self.datasets) == len(SPLITS):
            return
        if self.mixture is not None:
            generator = partial(setting_generator, self.seed)
            self.datasets = dict(mixture_splits(*self.mixture, self.split_sizes, generator))
            return
        # One setting: the splits' generators are seeded with seed·3 + i (SplitDataModule).
        one: list[tuple[RecallSizes, int | None]] = [(self.sizes, self.split_sizes["train"])]
        splits = mixture_splits(one, one, self.split_sizes, lambda split, _: self.generator(split))
        self.datasets = {split: RecallDataset(data.parts[0]) for split, data in splits.items()}

    def generator(self, split: str) -> torch.Generator:
        """The generator of ``split`` with one setting (``split_seed``)."""
        return torch.Generator().manual_seed(self.split_seed(split))

    def _loader(self, split: str, *, shuffle: bool) -> DataLoader:
        if self.mixture is None:
            return super()._loader(split, shuffle=shuffle)
        trainer = self.trainer
        shard = trainer.distributed_sampler_kwargs if trainer is not None else None
        dataset = self.datasets[split]
        sampler = SettingBatchSampler(
            dataset.sizes,
            batch_size=self.batch_size,
            shuffle=shuffle,
            order=self.order,
            seed=run_seed(),
            **(shard or {}),
        )
        # batch_size None: each sampler item is a whole batch of one setting.
        return loader_over(
            dataset, sampler, train=shuffle, batch_size=None, num_workers=self.num_workers
        )
