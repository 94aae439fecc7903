"""AdaptedTask: the base of every task trained from scratch, fine-tuned or LoRA-adapted (peft).

One word for what trains, ``adaptation`` (``attn_lightning.models.lora.ADAPTATIONS``):

* ``base``: the whole model from random initialisation (this is how a base checkpoint is made);
* ``full``: every weight, starting from ``base_checkpoint``;
* ``lora``: peft LoRA adapters ``W + (α/r)·B·A`` on ``base_checkpoint``'s frozen weights;
* ``lora_scratch``: the same adapters on a frozen *random* model: how far the low-rank update
  alone gets.

The base weights are loaded when a run starts (fit/validate/test/predict, after Lightning has
restored any ``--ckpt_path``), not in the constructor: configs build without the file, and a run
restored from its own checkpoint (resume, ``validate --ckpt_path``) never reads the base, since
that checkpoint already carries every weight.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from peft import PeftModel
from torch import nn

from attn_lightning.models.lora import (
    ADAPTED,
    FROM_BASE,
    build_lora_config,
    check_adaptation,
    copy_plain_state,
    load_base_state,
    merged_copy,
    plain_state,
    trainable_parameters,
    wrap_with_lora,
)
from attn_lightning.tasks.base import AttentionTask


class AdaptedTask(AttentionTask):
    """A task whose ``net`` is trained according to ``adaptation`` (see the module docstring).

    Subclasses build ``self.net`` (in their constructor or a parent's), then call ``adapt`` with
    their LoRA options; they describe the base they expect in ``base_description`` (and
    ``base_hparams``) and the run that writes it in ``base_hint``. Cooperative: the keyword
    arguments other than ``adaptation`` and ``base_checkpoint`` go to the next ``__init__`` of
    the subclass's MRO (``AttentionTask`` or, e.g., ``SequenceReversalTask``).

    Args:
        adaptation: ``base``, ``full``, ``lora`` or ``lora_scratch``.
        base_checkpoint: the checkpoint of the base run (or a ``torch.save``'d state dict of the
            bare model); required by ``full`` and ``lora``, ignored otherwise.
        **kwargs: the next constructor's arguments.
    """

    base_hint = "the checkpoint of an adaptation=base run"
    net: nn.Module
    num_trainable: int

    def __init__(self, *, adaptation: str, base_checkpoint: str | None, **kwargs: Any) -> None:
        check_adaptation(adaptation)
        if adaptation in FROM_BASE and not base_checkpoint:
            raise ValueError(
                f"adaptation={adaptation!r} needs model.init_args.base_checkpoint: {self.base_hint}"
            )
        super().__init__(**kwargs)
        self.adaptation = adaptation
        self.base_checkpoint = base_checkpoint
        self._base_loaded = False

    @property
    def needs_base(self) -> bool:
        """Whether the run starts from ``base_checkpoint``."""
        return self.adaptation in FROM_BASE

    def adapt(
        self,
        *,
        r: int,
        lora_alpha: float | None,
        lora_dropout: float,
        target_modules: list[str],
        modules_to_save: list[str] | None = None,
        bias: str = "none",
    ) -> None:
        """Wrap ``self.net`` with LoRA adapters when ``adaptation`` asks for them (the options of
        ``build_lora_config``, unchecked otherwise), then count its trainable parameters."""
        if self.adaptation in ADAPTED:
            config = build_lora_config(
                r=r,
                lora_alpha=lora_alpha,
                lora_dropout=lora_dropout,
                target_modules=target_modules,
                modules_to_save=modules_to_save,
                bias=bias,
            )
            self.net = wrap_with_lora(self.net, config)
        self.num_trainable = trainable_parameters(self.net)

    # ------------------------------------------------------------------ base weights
    def base_description(self) -> str:
        """Words for the base this task expects, for error messages ("a ... run")."""
        return f"an adaptation=base {type(self).__name__} run"

    def base_hparams(self) -> dict[str, Any] | None:
        """Hyper-parameters the base checkpoint must have saved with these values (if saved)."""
        return None

    def load_base(self, path: str | Path) -> None:
        """Load the base model's weights into the (possibly adapted) model; adapters untouched."""
        expected = plain_state(self.net)
        state = load_base_state(
            path, expected, what=self.base_description(), hparams=self.base_hparams()
        )
        copy_plain_state(self.net, state)
        self._base_loaded = True

    def _ensure_base(self) -> None:
        if self.needs_base and not self._base_loaded:
            self.load_base(str(self.base_checkpoint))  # not None: checked in __init__

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self._base_loaded = True  # the run's own checkpoint carries every weight

    def on_fit_start(self) -> None:
        super().on_fit_start()
        self._ensure_base()

    def on_validation_start(self) -> None:
        super().on_validation_start()
        self._ensure_base()

    def on_test_start(self) -> None:
        super().on_test_start()
        self._ensure_base()

    def on_predict_start(self) -> None:
        super().on_predict_start()
        self._ensure_base()

    # ------------------------------------------------------------------ exports
    def export_adapter(self, directory: str | Path) -> bool:
        """Write the adapter with peft's ``save_pretrained``; False (nothing written) if none."""
        if self.adaptation not in ADAPTED or not isinstance(self.net, PeftModel):
            return False
        self.net.save_pretrained(str(directory))
        return True

    def export_merged(self) -> nn.Module:
        """A plain copy of ``net`` computing what the task computes (LoRA folded in by peft)."""
        return merged_copy(self.net)


__all__ = ["AdaptedTask"]
