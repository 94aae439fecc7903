"""Sequence reversal: learn y = reverse(x) for digit strings x (the polynomial-attention thesis).

Two layouts of the same task:

* ``mode="decoder"`` (default): a causal LM over ``x_1..x_n SEP y_1..y_n``; the loss covers the
  reversed half only (position n+t predicts y_{t+1}). Exercises causal kernels and ``step``.
* ``mode="encoder"``: a bidirectional encoder over x where position t predicts x_{n+1−t}
  (for backends without a causal form, e.g. optimization attention).

Metrics per split (``train/``, ``val/``, ``test/``): ``loss`` (measured in float64 from the
float32 logits, ``measured_cross_entropy``; the gradient comes from the usual float32 loss),
``token_acc`` (teacher-forced),
``exact_acc`` (fraction of sequences with every token right). For the decoder, teacher-forced
exact match equals greedy-decoding exact match (if every teacher-forced argmax is right, greedy
decoding reproduces the same prefix at every step, and conversely), so ``exact_acc`` is computed
on every batch; ``gen_token_acc`` and ``gen_exact_acc`` come from actually decoding (recurrent
``step`` where every backend has one, prefix recompute otherwise) on the first
``generate_max_batches`` validation batches every ``generate_every_n_epochs`` epochs and on the
whole test split.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention import resolve_attention
from attn_lightning.models.decoding import METHODS, generate
from attn_lightning.models.sequence import SequenceTransformer
from attn_lightning.models.specs import SequenceSpec
from attn_lightning.records import write_csv
from attn_lightning.tasks.base import AttentionTask, require_causal, require_from_data, split_means

MODES = ("decoder", "encoder")
TEACHER_FORCED = ("token_acc", "exact_acc")
GENERATED = ("gen_token_acc", "gen_exact_acc")
PREDICTION_FIELDS = ("index", "source", "prediction", "target", "correct")


def measured_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """Mean cross-entropy of ``logits`` ``(N, V)`` for ``target`` ``(N,)``, computed in float64
    (float32 on a device without it, Apple's MPS), outside the autograd graph.

    Why: float32 log-softmax rounds ``1 + Σ_{j≠t} exp(x_j − x_t)`` to 1 once the sum is below
    2^-24, so each token's loss is a multiple of 2^-23 ≈ 1.19e-7. A reversal model trained past
    convergence sits there: on a validation batch of a 10,000-step softmax run, 91 % of tokens
    read exactly 0 and the float32 mean was 1.1e-8 against 8.9e-8 in float64 (8× too low), and a
    3× "loss spike" at that level is rounding. The logits are the float32 ones; only the
    reduction is exact. Training still steps on the float32 loss (gradients unchanged).
    """
    dtype = torch.float32 if logits.device.type == "mps" else torch.float64
    with torch.no_grad():
        return F.cross_entropy(logits.detach().to(dtype), target)


def token_step(
    task: AttentionTask, split: str, logits: Tensor, target: Tensor, names: tuple[str, str]
) -> dict[str, Tensor]:
    """The cross-entropy of ``logits: (B, n, V)`` for ``target: (B, n)``, logged as ``<split>/loss``
    (``measured_cross_entropy``) with the argmax's accuracies (``AttentionTask.log_accuracy``).

    Returns:
        ``{"loss": the float32 loss to train on, "measured_loss": the one logged}``.
    """
    loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())
    measured = measured_cross_entropy(logits.flatten(0, 1), target.flatten())
    task.log_mean(f"{split}/loss", measured, batch_size=target.shape[0], prog_bar=True)
    task.log_accuracy(split, logits.argmax(dim=-1) == target, names, prog_bar=True)
    return {"loss": loss, "measured_loss": measured}


class SequenceReversalTask(AttentionTask):
    """Sequence reversal with any attention backend.

    Args:
        net: the transformer's sizes (``models.specs.SequenceSpec``: d_model, num_heads,
            num_layers, d_ff, dropout, positional, projections, max_len — the longest model
            input: 2n for the decoder, n for the encoder).
        attention: backend dict, e.g. ``{name: performer, num_features: 128}``; default softmax.
        attention_override: keys replacing ``attention``'s at build time, not saved as a
            hyper-parameter: a checkpoint evaluated with other options (``tasks.base``).
        mode: ``decoder`` (causal, ``x SEP y``) or ``encoder`` (bidirectional).
        num_symbols: digits 0..num_symbols-1; linked from the DataModule by the CLI.
        seq_len: n, the data's sequence length (linked from the DataModule by the CLI; None:
            not known, not checked); the model inputs it makes must fit ``net.max_len``.
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its warm-up + cosine schedule.
        generate_every_n_epochs: decode on validation every this many epochs (0 = never).
        generate_max_batches: validation batches decoded each time (the rest is teacher-forced).
        decode_method: ``auto`` (step if every backend supports it), ``step`` or ``recompute``.
    """

    hp_metrics = ("hp/val_loss", "hp/val_token_acc", "hp/val_exact_acc")
    net_spec = SequenceSpec

    def __init__(
        self,
        *,
        mode: str = "decoder",
        num_symbols: int = 10,
        seq_len: int | None = None,
        net: SequenceSpec = SequenceSpec(),
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        generate_every_n_epochs: int = 1,
        generate_max_batches: int = 2,
        decode_method: str = "auto",
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
        if decode_method not in METHODS:
            raise ValueError(
                f"unknown decode_method {decode_method!r}; allowed: {', '.join(METHODS)}"
            )
        require_from_data(self, num_symbols=num_symbols)
        spec = self.init_task(net, attention_override=attention_override)
        needed = None if seq_len is None else (seq_len if mode == "encoder" else 2 * seq_len)
        if needed is not None and needed > spec.max_len:
            raise ValueError(
                f"seq_len={seq_len} needs model inputs of {needed} tokens in mode {mode!r} "
                f"but net.max_len={spec.max_len}; raise model.init_args.net.max_len"
            )
        self.mode = mode
        self.num_symbols = num_symbols
        self.sep = num_symbols  # the separator token id, after the digits
        self.generate_every_n_epochs = generate_every_n_epochs
        self.generate_max_batches = generate_max_batches
        self.decode_method = decode_method
        self.attention_config = resolve_attention(attention, attention_override)
        self.net = SequenceTransformer(
            spec,
            vocab_size=num_symbols + 1,
            num_outputs=num_symbols,  # SEP is never a target
            max_len=spec.max_len,
            attention=self.attention_config,
            tie_embeddings=spec.tie_embeddings,  # refused: SEP is an input but not an output
            init=spec.init,
            embed_dropout=spec.embed_dropout,
        )
        if mode == "decoder":
            require_causal(
                self.net,
                why=f"mode='decoder' needs; use mode='encoder' (allowed modes: {', '.join(MODES)})",
            )
        self.metrics = split_means((*TEACHER_FORCED, *GENERATED))

    # ------------------------------------------------------------------ model
    def forward(self, source: Tensor, target: Tensor) -> Tensor:
        """Logits ``(B, n, num_symbols)`` for the n target positions (teacher-forced)."""
        if self.mode == "encoder":
            return self.net(source)  # (B, n, V)
        n = source.shape[1]
        sep = source.new_full((source.shape[0], 1), self.sep)
        tokens = torch.cat([source, sep, target[:, :-1]], dim=1)  # (B, 2n): x SEP y_1..y_{n-1}
        return self.net(tokens, causal=True)[:, n:]  # (B, n, V): outputs at SEP, y_1..y_{n-1}

    @torch.no_grad()
    def predict_reversal(self, source: Tensor) -> Tensor:
        """Predicted y ``(B, n)``: argmax for the encoder, greedy decoding for the decoder."""
        if self.mode == "encoder":
            return self.net(source).argmax(dim=-1)
        sep = source.new_full((source.shape[0], 1), self.sep)
        prompt = torch.cat([source, sep], dim=1)  # (B, n + 1)
        return generate(self.net, prompt, source.shape[1], method=self.decode_method)

    # ------------------------------------------------------------------ steps
    def _shared_step(self, batch: dict[str, Tensor], split: str) -> dict[str, Tensor]:
        """``{"loss": the float32 loss to train on, "measured_loss": the one logged}``."""
        logits = self(batch["source"], batch["target"])  # (B, n, V)
        return token_step(self, split, logits, batch["target"], TEACHER_FORCED)

    def _generation_metrics(self, batch: dict[str, Tensor], split: str) -> None:
        correct = self.predict_reversal(batch["source"]) == batch["target"]  # (B, n)
        self.log_accuracy(split, correct, GENERATED)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        # "measured_loss" is what GradientTracker's spike detector watches (see the function).
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss = self._shared_step(batch, "val")["measured_loss"]
        # Same values under hp/ names, shown against the hyper-parameters in the hparams tab.
        size = batch["source"].shape[0]
        self.log_mean("hp/val_loss", loss, batch_size=size)
        self.log("hp/val_token_acc", self._metric("val_token_acc"), on_epoch=True, batch_size=size)
        self.log("hp/val_exact_acc", self._metric("val_exact_acc"), on_epoch=True, batch_size=size)
        every = self.generate_every_n_epochs
        if (
            self.mode == "decoder"
            and every > 0
            and (self.current_epoch + 1) % every == 0
            and batch_idx < self.generate_max_batches
        ):
            self._generation_metrics(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._shared_step(batch, "test")
        if self.mode == "decoder":
            self._generation_metrics(batch, "test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """``{"source", "prediction"}`` ``(B, n)`` (greedy output), plus ``"target"`` if known."""
        out = {"source": batch["source"], "prediction": self.predict_reversal(batch["source"])}
        if "target" in batch:
            out["target"] = batch["target"]
        return out

    def save_predictions(
        self, predictions: list[dict[str, Tensor]], indices: list[int], folder: Path
    ) -> list[Path]:
        """Write ``predictions.csv``: ``index, source, prediction, target, correct``.

        Sequences are space-separated token ids (``3 1 4``, never read back as a number);
        ``correct`` is 1 when the whole prediction equals the target, 0 if not, empty (as is
        ``target``) when the data have no target. ``predictions`` are ``predict_step``'s rows.
        """
        rows = []
        for index, row in zip(indices, predictions, strict=True):
            target = row.get("target")
            correct = "" if target is None else int(torch.equal(row["prediction"], target))
            rows.append(
                {
                    "index": index,
                    "source": _tokens(row["source"]),
                    "prediction": _tokens(row["prediction"]),
                    "target": "" if target is None else _tokens(target),
                    "correct": correct,
                }
            )
        path = write_csv(Path(folder) / "predictions.csv", rows, fields=PREDICTION_FIELDS)
        return [path]

    # ------------------------------------------------------------------ samples for TensorBoard
    def sample_rows(self, batch: Mapping[str, Tensor], num_samples: int) -> list[dict[str, str]]:
        """Rows ``{input, target, prediction, correct}`` for the sample-prediction table."""
        source, target = batch["source"][:num_samples], batch["target"][:num_samples]
        predicted = self.predict_reversal(source)
        rows = []
        for x, y, p in zip(source.tolist(), target.tolist(), predicted.tolist(), strict=True):
            marks = "".join(str(d) if d == t else "·" for d, t in zip(p, y, strict=True))
            rows.append(
                {
                    "input": _digits(x),
                    "target": _digits(y),
                    "prediction": _digits(p),
                    "errors (· = wrong)": marks,
                    "correct": f"{sum(d == t for d, t in zip(p, y, strict=True))}/{len(y)}",
                }
            )
        return rows


def _digits(tokens: list[int]) -> str:
    return "".join(str(t) if t < 10 else f"<{t}>" for t in tokens)


def _tokens(tokens: Tensor) -> str:
    return " ".join(str(t) for t in tokens.tolist())
