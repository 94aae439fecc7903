"""LoRA adaptation of a small MLP classifier to shifted image domains (peft).

What trains is ``AdaptedTask``'s ``adaptation`` (``attn_lightning.tasks.adaptation``); the base is
trained on the original domain. Under ``lora`` the head is adapted (in ``target_modules``), trained
whole (in ``modules_to_save``) or frozen (in neither).

Logged per split: ``loss``, ``acc`` (torchmetrics) and ``trainable_params``.
"""

from __future__ import annotations

from torch import Tensor

from attn_lightning.models.mlp import MLP
from attn_lightning.models.specs import MLPSpec
from attn_lightning.tasks.adaptation import AdaptedTask
from attn_lightning.tasks.base import require_from_data
from attn_lightning.tasks.classification import ClassifierSteps, accuracy_metrics


class LoRAClassifierTask(ClassifierSteps, AdaptedTask):
    """MLP digit classifier: base training, full fine-tuning or LoRA adaptation.

    LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): each adapted
    layer computes ``(W + (α/r)·B·A)·x + b`` with W, b frozen; r·(d_in + d_out) trainable
    parameters per layer (1,050·r for 784-64-64-10 with every layer adapted) and O(r·(d_in +
    d_out)) extra work per input.

    Args:
        adaptation: ``base``, ``full``, ``lora`` or ``lora_scratch`` (see the module docstring).
        base_checkpoint: checkpoint of an ``adaptation=base`` run (or a ``torch.save``'d MLP
            state dict); required by ``full`` and ``lora``, ignored otherwise.
        net: the MLP's hidden widths (``models.specs.MLPSpec``); the layers are
            ``fc1 .. fc{k+1}``.
        input_size: flattened image size (28×28 -> 784); linked from the DataModule by the CLI.
        num_classes: classes of the head; linked from the DataModule by the CLI.
        lora_r: adapter rank r.
        lora_alpha: α; ``None`` means α = r (scaling α/r = 1 at every rank).
        lora_dropout: dropout on the adapter input.
        target_modules: layers given adapters; default every layer, head included.
        modules_to_save: layers trained whole beside the adapters (e.g. ``[fc3]``, the head).
        lora_bias: peft's ``bias``: ``none`` (frozen), ``lora_only`` or ``all`` (biases train).
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its warm-up + cosine schedule.
    """

    base_hint = "the checkpoint of an adaptation=base run (e.g. checkpoints/lora/base/last.ckpt)"
    net_spec = MLPSpec

    def __init__(
        self,
        *,
        adaptation: str = "base",
        base_checkpoint: str | None = None,
        net: MLPSpec = MLPSpec(),
        input_size: int = 784,
        num_classes: int = 10,
        lora_r: int = 8,
        lora_alpha: float | None = None,
        lora_dropout: float = 0.0,
        target_modules: list[str] | None = None,
        modules_to_save: list[str] | None = None,
        lora_bias: str = "none",
        lr: float = 3e-3,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        min_lr_ratio: float = 0.1,
    ) -> None:
        super().__init__(adaptation=adaptation, base_checkpoint=base_checkpoint)
        require_from_data(self, input_size=input_size, num_classes=num_classes)
        spec = self.init_task(net)
        mlp = MLP(input_size=input_size, hidden_sizes=spec.hidden_sizes, num_classes=num_classes)
        self.net = mlp
        self.adapt(
            r=lora_r,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            target_modules=target_modules or mlp.layer_names,
            modules_to_save=modules_to_save,
            bias=lora_bias,
        )
        self.metrics = accuracy_metrics(num_classes)

    # ------------------------------------------------------------------ setup
    def base_description(self) -> str:
        hp = self.hparams
        hidden = "-".join(str(n) for n in hp["net"]["hidden_sizes"])
        return (
            f"an adaptation=base {type(self).__name__} run (an MLP {hp['input_size']}-{hidden}-"
            f"{hp['num_classes']}) or a saved MLP state dict"
        )

    # ------------------------------------------------------------------ model
    def forward(self, image: Tensor) -> Tensor:
        """``image: (B, H, W)`` -> logits ``(B, num_classes)``."""
        return self.net(image)

    # ------------------------------------------------------------------ steps
    def extra_logs(self, split: str, batch_size: int) -> None:
        self.log(
            f"{split}/trainable_params",
            float(self.num_trainable),
            on_step=False,
            on_epoch=True,
            batch_size=batch_size,
            sync_dist=True,  # the same on every rank; synced so Lightning does not warn under DDP
        )


__all__ = ["LoRAClassifierTask"]
