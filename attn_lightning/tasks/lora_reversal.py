"""LoRA on the attention projections of a trained sequence-reversal transformer (peft).

The base is a ``SequenceReversalTask`` checkpoint (``base_checkpoint``); the shifted task is
``ShiftedReversalDataModule``'s "reverse, then add ``shift`` mod V": the attention pattern the
base learnt (position n+t reads x_{n+1−t}) stays right, the values it copies must be relabelled.
``adaptation`` (``attn_lightning.tasks.adaptation``) picks what trains; ``lora``'s adapters sit on
``target_modules`` (default ``q_proj`` and ``v_proj`` of every layer): 2·L·r·(d_in + d_out) =
4·L·r·d_model trainable parameters for L layers.

Everything else (options, metrics, decoding, logging) is ``SequenceReversalTask``'s.
"""

from __future__ import annotations

from typing import Any

from attn_lightning.attention import resolve_attention
from attn_lightning.tasks.adaptation import AdaptedTask
from attn_lightning.tasks.reversal import SequenceReversalTask


# ``net``: SequenceReversalTask's SequenceTransformer until ``adapt`` wraps it in a PeftModel.
class LoRAReversalTask(AdaptedTask, SequenceReversalTask):  # type: ignore[misc]
    """Sequence reversal adapted from a trained checkpoint: full fine-tuning or LoRA.

    Args:
        adaptation: ``base``, ``full``, ``lora`` or ``lora_scratch`` (module docstring).
        base_checkpoint: a ``SequenceReversalTask`` (or ``adaptation=full``/``base``) checkpoint
            with the same sizes, attention and mode; required by ``full`` and ``lora``.
        lora_r, lora_alpha, lora_dropout: adapter rank r, α (``None``: α = r) and dropout.
        target_modules: projections given adapters (``q_proj``, ``k_proj``, ``v_proj``,
            ``out_proj``, or any ``nn.Linear`` name of the model).
        weight_decay, warmup_steps, generate_every_n_epochs: as in ``SequenceReversalTask``,
            with fine-tuning defaults (no decay, no warm-up, no decoding during validation).
        **kwargs: every other ``SequenceReversalTask`` option (attention, mode, sizes, lr, ...).
    """

    base_hint = (
        "the checkpoint of a SequenceReversalTask run (e.g. checkpoints/reversal/<run>/last.ckpt)"
    )

    def __init__(
        self,
        *,
        adaptation: str = "lora",
        base_checkpoint: str | None = None,
        lora_r: int = 4,
        lora_alpha: float | None = None,
        lora_dropout: float = 0.0,
        target_modules: list[str] | None = None,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        generate_every_n_epochs: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            adaptation=adaptation,
            base_checkpoint=base_checkpoint,
            weight_decay=weight_decay,
            warmup_steps=warmup_steps,
            generate_every_n_epochs=generate_every_n_epochs,
            **kwargs,
        )
        # peft forwards attribute look-ups (step, max_len, supports_recurrence) to the model,
        # so the reversal task's forward and decoding work unchanged on the wrapper.
        self.adapt(
            r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            target_modules=target_modules or ["q_proj", "v_proj"],
        )

    def base_description(self) -> str:
        hp = self.hparams
        return (
            f"a SequenceReversalTask run with mode={hp['mode']!r}, attention "
            f"{self.attention_config}, d_model={hp['net']['d_model']}, "
            f"num_layers={hp['net']['num_layers']}, num_symbols={hp['num_symbols']}"
        )

    def base_hparams(self) -> dict[str, Any]:
        hp = self.hparams
        attention = resolve_attention(hp["attention"], None)  # as saved, without the override
        return {
            "mode": hp["mode"],
            "attention": attention,
            "net.positional": hp["net"]["positional"],
            "net.rotary_base": hp["net"]["rotary_base"],
        }

    def on_train_epoch_start(self) -> None:
        # Logged once per epoch so every run's metrics file carries its trainable count.
        self.log(
            "trainable_params",
            float(self.num_trainable),
            on_step=False,
            on_epoch=True,
            sync_dist=True,
        )

    def test_step(self, batch: Any, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        self.log("test/trainable_params", float(self.num_trainable), on_epoch=True, sync_dist=True)


__all__ = ["LoRAReversalTask"]
