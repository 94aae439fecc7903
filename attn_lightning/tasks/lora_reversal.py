"""LoRA on the attention projections of a trained sequence-reversal transformer (peft).

The base is a ``SequenceReversalTask`` checkpoint (``base_checkpoint``); the shifted task is
``ShiftedReversalDataModule``'s "reverse, then add ``shift`` mod V": the attention pattern the
base learnt (position n+t reads x_{n+1−t}) stays right, the values it copies must be relabelled.
``adaptation`` picks what trains:

* ``base``: everything, from random initialisation (plain reversal training);
* ``full``: every weight, starting from the checkpoint;
* ``lora``: peft LoRA adapters on ``target_modules`` (default ``q_proj`` and ``v_proj`` of every
  layer), the checkpoint frozen; 2·L·r·(d_in + d_out) = 4·L·r·d_model trainable parameters for L
  layers;
* ``lora_scratch``: the same adapters on a random frozen transformer.

Everything else (metrics, decoding, logging) is ``SequenceReversalTask``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attn_lightning.models.lora import (
    ADAPTED_MODES,
    BaseWeightsHooks,
    build_lora_config,
    check_mode,
    copy_plain_state,
    load_base_state,
    plain_state,
    trainable_parameters,
    wrap_with_lora,
)
from attn_lightning.tasks.base import resolve_attention
from attn_lightning.tasks.reversal import SequenceReversalTask


class LoRAReversalTask(BaseWeightsHooks, SequenceReversalTask):
    """Sequence reversal adapted from a trained checkpoint: full fine-tuning or LoRA.

    Args:
        adaptation: ``base``, ``full``, ``lora`` or ``lora_scratch`` (module docstring).
        base_checkpoint: a ``SequenceReversalTask`` (or ``adaptation=full``/``base``) checkpoint
            with the same sizes, attention and mode; required by ``full`` and ``lora``.
        lora_r, lora_alpha, lora_dropout: adapter rank r, α (``None``: α = r) and dropout.
        target_modules: projections given adapters (``q_proj``, ``k_proj``, ``v_proj``,
            ``out_proj``, or any ``nn.Linear`` name of the model).
        **others**: as in ``SequenceReversalTask``.
    """

    def __init__(
        self,
        *,
        adaptation: str = "lora",
        base_checkpoint: str | None = None,
        lora_r: int = 4,
        lora_alpha: float | None = None,
        lora_dropout: float = 0.0,
        target_modules: list[str] | None = None,
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        mode: str = "decoder",
        num_symbols: int = 10,
        max_len: int = 1024,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 256,
        dropout: float = 0.0,
        positional: str = "sinusoidal",
        projections: bool = True,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        min_lr_ratio: float = 0.1,
        generate_every_n_epochs: int = 0,
        generate_max_batches: int = 2,
        decode_method: str = "auto",
    ) -> None:
        check_mode(adaptation)
        if adaptation in ("full", "lora") and not base_checkpoint:
            raise ValueError(
                f"adaptation={adaptation!r} needs model.init_args.base_checkpoint: the checkpoint "
                f"of a SequenceReversalTask run (e.g. checkpoints/reversal/<run>/last.ckpt)"
            )
        super().__init__(
            attention=attention,
            attention_override=attention_override,
            mode=mode,
            num_symbols=num_symbols,
            max_len=max_len,
            d_model=d_model,
            num_heads=num_heads,
            num_layers=num_layers,
            d_ff=d_ff,
            dropout=dropout,
            positional=positional,
            projections=projections,
            lr=lr,
            weight_decay=weight_decay,
            warmup_steps=warmup_steps,
            min_lr_ratio=min_lr_ratio,
            generate_every_n_epochs=generate_every_n_epochs,
            generate_max_batches=generate_max_batches,
            decode_method=decode_method,
        )
        self.adaptation = adaptation
        self.base_checkpoint = base_checkpoint
        self.needs_base = adaptation in ("full", "lora")
        if adaptation in ADAPTED_MODES:
            config = build_lora_config(
                r=lora_r,
                lora_alpha=lora_alpha,
                lora_dropout=lora_dropout,
                target_modules=target_modules or ["q_proj", "v_proj"],
                modules_to_save=None,
            )
            # peft forwards attribute look-ups (step, max_len, supports_recurrence) to the model,
            # so the reversal task's forward and decoding work unchanged on the wrapper.
            self.net = wrap_with_lora(self.net, config)
        self.num_trainable = trainable_parameters(self.net)

    def load_base(self, path: str | Path | None) -> None:
        """Load a reversal checkpoint's transformer into the (possibly adapted) model."""
        hp = self.hparams
        what = (
            f"a SequenceReversalTask run with mode={hp.mode!r}, attention "
            f"{self.attention_config}, d_model={hp.d_model}, num_layers={hp.num_layers}, "
            f"num_symbols={hp.num_symbols}"
        )
        attention = resolve_attention(hp.attention, None)  # as saved, without the override
        expected = {"mode": hp.mode, "attention": attention, "positional": hp.positional}
        state = load_base_state(path, plain_state(self.net), what=what, hparams=expected)
        copy_plain_state(self.net, state)
        self._base_loaded = True

    def on_train_epoch_start(self) -> None:
        # Logged once per epoch so every run's metrics file carries its trainable count.
        self.log("trainable_params", float(self.num_trainable), on_step=False, on_epoch=True)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        self.log("test/trainable_params", float(self.num_trainable), on_epoch=True)

    def export_adapter(self, directory: str | Path) -> bool:
        """Write the adapter with peft's ``save_pretrained``; False (nothing written) if none."""
        if self.adaptation not in ADAPTED_MODES:
            return False
        self.net.save_pretrained(str(directory))
        return True


__all__ = ["LoRAReversalTask"]
