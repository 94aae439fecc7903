"""Multi-query associative recall (MQAR): recall the value of every key queried after the pairs.

Zoology's benchmark (Arora, Eyuboglu et al., ICLR 2024, arXiv 2312.04927) of how much a
sequence mixer recalls from its context for the memory it keeps; the data are
``data.recall.AssociativeRecallDataModule``. A causal LM reads ``k1 v1 ... kP vP ... k_j ...`` and
must predict, at each query token k_j, the value v_j paired with it earlier. Softmax attention
keeps every pair (a KV cache growing with the context); a fixed-size state (linear attention,
Performer, PolySketch: ``Attention.state_size``) must compress them.

The loss and the metrics cover the P query positions only, and the output head runs there only
(``SequenceTransformer(positions=)``): with Zoology's vocabulary of V = 8,192 tokens the head costs
L·E·V multiply-adds per example over all positions, e.g. 64·128·8,192 = 67 M at L = 64,
E = 128, and (B, L, V) float32 logits, 134 MB for a batch of 64; at the P = 4 queries it is 16
times less (L/P), while the embedding and head still hold 2·V·E = 2.1 M parameters.

Metrics per split (``train/``, ``val/``, ``test/``): ``loss`` (cross-entropy over the queries,
reduced in float64 as ``tasks.reversal.measured_cross_entropy``), ``query_acc`` (fraction of
queries answered right: Zoology's accuracy) and ``example_acc`` (fraction of examples with every
query right). Validation and test also log ``query_acc_d<lo>-<hi>``: ``query_acc`` over the
queries whose value came ``lo`` to ``hi`` tokens before them (``distance_bins``), which says
whether a model misses the far queries (a bounded view, a blurred state) or all of them alike.
With several settings (the DataModule's ``eval_settings``), validation and test also log
``query_acc_<setting>`` and ``example_acc_<setting>`` per setting (``query_acc_L256_P64``: Zoology's
per-``num_kv_pairs`` accuracy), while ``query_acc`` stays the fraction of all queries answered right
(Zoology's overall accuracy averages examples instead: the same within one setting).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attn_lightning.attention import resolve_attention
from attn_lightning.data.mqar import setting_name, value_distances
from attn_lightning.models.sequence import SequenceTransformer
from attn_lightning.models.specs import SequenceSpec
from attn_lightning.records import write_csv
from attn_lightning.tasks.base import AttentionTask, require_causal, require_from_data, split_means
from attn_lightning.tasks.reversal import token_step

METRICS = ("query_acc", "example_acc")
PREDICTION_FIELDS = (
    "index",
    "setting",
    "position",
    "distance",
    "query",
    "prediction",
    "target",
    "correct",
)


def distance_bins(seq_len: int) -> list[tuple[int, int]]:
    """The query-to-value distances ``[lo, hi]`` (inclusive) that ``query_acc_d<lo>-<hi>``
    groups: 1-7, then a bin per power of two (8-15, 16-31, ...) until one reaches ``seq_len``
    (the longest distance in an example of length L is L - 3)."""
    edges = [1, 8]
    while edges[-1] < seq_len:
        edges.append(2 * edges[-1])
    return [(lo, hi - 1) for lo, hi in pairwise(edges)]


class AssociativeRecallTask(AttentionTask):
    """MQAR with any causal attention backend, or a hybrid stack (``attention.layers``).

    Args:
        vocab_size: V, input tokens and output classes; linked from the DataModule by the CLI.
        seq_len: L, the input length (linked from the DataModule; None: not checked); must fit
            ``net.max_len``.
        net: the transformer's sizes (``models.specs.SequenceSpec``).
        attention: backend dict, e.g. ``{name: linear}``, optionally with ``layers`` (a hybrid
            stack, ``models.hybrid``); default softmax. Must have a causal form.
        attention_override: keys replacing ``attention``'s at build time, not saved
            (``tasks.base``).
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its warm-up + cosine schedule.

    Raises:
        ValueError: no ``vocab_size``, ``seq_len`` > ``net.max_len``, or a backend without a
            causal form (e.g. ``optimization``).
    """

    hp_metrics = ("hp/val_loss", "hp/val_query_acc", "hp/val_example_acc")
    net_spec = SequenceSpec

    def __init__(
        self,
        *,
        vocab_size: int | None = None,
        seq_len: int | None = None,
        net: SequenceSpec = SequenceSpec(),
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
    ) -> None:
        super().__init__()
        require_from_data(self, vocab_size=vocab_size)
        assert vocab_size is not None  # for the type checker: require_from_data raised otherwise
        spec = self.init_task(net, attention_override=attention_override)
        if seq_len is not None and seq_len > spec.max_len:
            raise ValueError(
                f"seq_len={seq_len} is longer than net.max_len={spec.max_len}; raise "
                f"model.init_args.net.max_len"
            )
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.attention_config = resolve_attention(attention, attention_override)
        self.net = SequenceTransformer(
            spec,
            vocab_size=vocab_size,
            max_len=spec.max_len,
            attention=self.attention_config,
            tie_embeddings=spec.tie_embeddings,
            init=spec.init,
            embed_dropout=spec.embed_dropout,
        )
        require_causal(self.net, why="associative recall (a causal language model) needs")
        self.metrics = split_means(METRICS)

    def forward(self, inputs: Tensor, positions: Tensor) -> Tensor:
        """Logits ``(B, P, V)`` at the query ``positions: (B, P)`` of ``inputs: (B, L)``."""
        return self.net(inputs, causal=True, positions=positions)

    def _shared_step(self, batch: Mapping[str, Tensor], split: str) -> dict[str, Tensor]:
        """``{"loss": the float32 loss to train on, "measured_loss": the one logged}``."""
        positions = batch["positions"]  # (B, P)
        target = batch["labels"].gather(1, positions)  # (B, P): the values asked for
        logits = self(batch["inputs"], positions)  # (B, P, V)
        # query_acc: every example has P queries, so the mean over the (B, P) answers is the mean
        # over queries.
        out = token_step(self, split, logits, target, METRICS)
        if split != "train":
            correct = logits.argmax(dim=-1) == target
            distance = value_distances(batch["inputs"], positions)
            # Every bin and every setting on every batch, even empty, so that each DDP rank logs
            # the same names in the same order; bins up to the longest setting (the linked
            # seq_len), not this batch's.
            for lo, hi in distance_bins(self.seq_len or batch["inputs"].shape[1]):
                inside = (distance >= lo) & (distance <= hi)
                self.log_epoch_mean(f"{split}/query_acc_d{lo}-{hi}", correct[inside])
            for index, name in enumerate(batch.get("settings", ())):
                mine = batch["setting"] == index  # (B,)
                self.log_epoch_mean(f"{split}/query_acc_{name}", correct[mine])
                self.log_epoch_mean(f"{split}/example_acc_{name}", correct[mine].all(dim=-1))
        return out

    def training_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        loss = self._shared_step(batch, "val")["measured_loss"]
        size = batch["positions"].shape[0]  # the same values under hp/ names (hparams tab)
        self.log_mean("hp/val_loss", loss, batch_size=size)
        for name in METRICS:
            self.log(f"hp/val_{name}", self._metric(f"val_{name}"), on_epoch=True, batch_size=size)

    def test_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> None:
        self._shared_step(batch, "test")

    @torch.no_grad()
    def predict_step(self, batch: Mapping[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """``{"position", "distance", "query", "prediction", "target"}``, each ``(B, P)``: the
        queries' positions, how far each comes after its value, the query tokens (the keys asked),
        the model's answers and the values paired with them; ``seq_len`` and ``num_kv_pairs``
        ``(B,)``, and the batch's ``index`` (B,) where it has one (several settings)."""
        positions = batch["positions"]
        size, length = batch["inputs"].shape
        out = {"index": batch["index"]} if "index" in batch else {}
        return out | {
            "seq_len": positions.new_full((size,), length),
            "num_kv_pairs": positions.new_full((size,), positions.shape[1]),
            "position": positions,
            "distance": value_distances(batch["inputs"], positions),
            "query": batch["inputs"].gather(1, positions),
            "prediction": self(batch["inputs"], positions).argmax(dim=-1),
            "target": batch["labels"].gather(1, positions),
        }

    def save_predictions(
        self, predictions: list[dict[str, Tensor]], indices: list[int], folder: Path
    ) -> list[Path]:
        """Write ``predictions.csv``, one row per query: ``index`` (the test example; with several
        settings, numbered setting after setting), ``setting`` (``L<seq_len>_P<num_kv_pairs>``),
        ``position`` (of the query in it), ``distance`` (tokens after its key's value, at least
        1), ``query`` (the key token), ``prediction`` (the
        model's answer), ``target`` (the value paired with the key) and ``correct`` (1 or 0)."""
        rows = []
        # With several settings the loader yields whole batches, which Lightning cannot index:
        # predict_step's "index" numbers them (callbacks.exports.in_dataset_order).
        for index, row in zip(indices, predictions, strict=True):
            setting = setting_name(int(row["seq_len"]), int(row["num_kv_pairs"]))
            for position, distance, query, predicted, target in zip(
                *(row[k].tolist() for k in PREDICTION_FIELDS[2:-1]),
                strict=True,
            ):
                rows.append(
                    {
                        "index": index,
                        "setting": setting,
                        "position": position,
                        "distance": distance,
                        "query": query,
                        "prediction": predicted,
                        "target": target,
                        "correct": int(predicted == target),
                    }
                )
        return [write_csv(Path(folder) / "predictions.csv", rows, fields=PREDICTION_FIELDS)]

    def sample_rows(self, batch: Mapping[str, Tensor], num_samples: int) -> list[dict[str, str]]:
        """Rows ``{queries, target, prediction, correct}`` for the sample-prediction table."""
        head = {key: value[:num_samples] for key, value in batch.items()}
        out = self.predict_step(head, 0)
        rows = []
        for query, target, predicted in zip(
            out["query"].tolist(), out["target"].tolist(), out["prediction"].tolist(), strict=True
        ):
            right = sum(p == t for p, t in zip(predicted, target, strict=True))
            rows.append(
                {
                    "queries": " ".join(map(str, query)),
                    "target": " ".join(map(str, target)),
                    "prediction": " ".join(map(str, predicted)),
                    "correct": f"{right}/{len(target)}",
                }
            )
        return rows
