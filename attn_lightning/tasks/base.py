"""What every experiment's LightningModule shares: attention options, optimiser, hparams tab.

* ``attention`` + ``attention_override``: the backend dict a model is built with is
  ``resolve_attention(attention, attention_override)``. Only ``attention`` is saved in the
  checkpoint's hyper-parameters; the override is excluded on purpose, because LightningCLI
  re-applies a checkpoint's hyper-parameters over the command line when ``--ckpt_path`` is given
  (see ``attn_lightning.cli``), so an override saved in the checkpoint could never be changed.
  With an override, backend tensors whose shape changed (e.g. Performer's projection matrix for
  another ``num_features``) are kept freshly initialised instead of loaded, with a warning.
* AdamW with linear warm-up and cosine decay over ``trainer.estimated_stepping_batches``.
* The TensorBoard hparams tab gets real metrics: ``hp_metrics`` are declared with placeholders at
  fit start and logged under the same names during validation.
* ``log_mean`` logs per-batch means (losses) so that their epoch values are sample-weighted and
  exact under DDP with uneven shards.
* Checkpoints carry the global RNG states (``checkpoint["rng_states"]``: torch CPU and CUDA,
  ``random``, NumPy), restored when a resumed fit starts training, so dropout and any other
  draw continue as in the uninterrupted run (the data order is the train loader's own state).
"""

from __future__ import annotations

import inspect
import math
import random
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torch import Tensor, nn
from torchmetrics import MeanMetric

from attn_lightning.attention import Attention
from attn_lightning.data.base import SPLITS
from attn_lightning.models.specs import as_spec, spec_dict


def require_from_data(task: object, **facts: object) -> None:
    """ValueError naming the facts of the data (linked from the DataModule by the CLI) that
    are None: the DataModule paired with ``task`` does not provide them."""
    missing = [name for name, value in facts.items() if value is None]
    if missing:
        raise ValueError(
            f"{type(task).__name__} needs {', '.join(missing)} from its DataModule, which "
            f"provides none; pair it with its experiment's DataModule "
            f"(configs/<experiment>/base.yaml) or pass {', '.join(missing)} explicitly"
        )


def require_causal(model: nn.Module, *, why: str) -> None:
    """ValueError naming the first attention backend in ``model`` that has no causal form.

    Checked when a task is built, so a config that pairs a causal task with e.g.
    ``optimization`` fails before training rather than at the first forward.
    """
    for module in model.modules():
        if isinstance(module, Attention) and not module.supports_causal:
            raise ValueError(f"attention {module.name!r} has no causal form, which {why}")


def split_means(names: tuple[str, ...]) -> nn.ModuleDict:
    """A ``MeanMetric`` per split and name, keyed ``<split>_<name>`` (nn.Module has a ``train()``
    method, so a ModuleDict cannot take the split alone as a key)."""
    return nn.ModuleDict({f"{split}_{name}": MeanMetric() for split in SPLITS for name in names})


def rng_states() -> dict[str, Any]:
    """The global RNG states as tensors, ints and tuples, so ``weights_only`` loading reads them."""
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (torch.from_numpy(np.asarray(keys, np.int64)), int(pos), int(has_gauss), cached),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # never initialise CUDA here
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: Mapping[str, Any]) -> None:
    """Restore what ``rng_states`` returned (CUDA only onto the same number of devices)."""
    torch.set_rng_state(states["torch"].cpu())
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state(("MT19937", keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    cuda = states.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([state.cpu() for state in cuda])


class AttentionTask(pl.LightningModule):
    """Base LightningModule: optimiser/schedule, override-aware loading, hparams-tab metrics.

    A subclass declares its options in its own ``__init__`` — the model's sizes as ``net`` (of
    type ``net_spec``), the AdamW schedule as ``lr``, ``weight_decay``, ``warmup_steps`` and
    ``min_lr_ratio`` — calls ``super().__init__()`` and then ``init_task``, and sets
    ``hp_metrics`` to the metric names (logged in validation) shown in the hparams tab.
    """

    hp_metrics: tuple[str, ...] = ()
    net_spec: ClassVar[type | None] = None  # the spec type of ``net`` (models.specs)
    metrics: nn.ModuleDict  # a task's own per-split metrics, keyed ``<split>_<name>``

    def __init__(self) -> None:
        super().__init__()
        self.attention_override: dict[str, Any] | None = None
        self.init_from: str | None = None  # a warm start's source checkpoint (cli.warm_start)
        self._rng_to_restore: dict[str, Any] | None = None
        # The global step of the checkpoint the weights were last loaded from (None: not loaded);
        # the run record notes it with each evaluation.
        self.checkpoint_step: int | None = None
        self._log_means = nn.ModuleDict()  # filled by log_mean; metric states are not saved

    def init_task(
        self,
        net: Any = None,
        *,
        attention_override: Mapping[str, Any] | None = None,
    ) -> Any:
        """Save the calling ``__init__``'s arguments as hyper-parameters, check the schedule's and
        return ``net`` as the task's ``net_spec`` (None for a task without one).

        ``attention_override`` is kept on the task but never saved (see the module docstring);
        ``net`` (a spec, or its dict from a checkpoint) is saved as a
        plain dict so checkpoints load with ``weights_only=True``.

        Raises:
            ValueError: ``lr`` not > 0, ``min_lr_ratio`` outside [0, 1], ``warmup_steps`` < 0, or
                an unknown size in ``net``.
        """
        caller = inspect.currentframe()
        self.save_hyperparameters(
            ignore=["attention_override"], frame=caller.f_back if caller else None
        )
        hp = self.hparams
        if not hp["lr"] > 0:
            raise ValueError(f"lr must be > 0, got {hp['lr']!r}")
        if not 0.0 <= hp["min_lr_ratio"] <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {hp['min_lr_ratio']!r}")
        if hp["warmup_steps"] < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {hp['warmup_steps']!r}")
        self.attention_override = dict(attention_override) if attention_override else None
        if self.net_spec is None:
            return None
        spec = as_spec(self.net_spec, net)
        hp["net"] = spec_dict(spec)
        return spec

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        decay: list[nn.Parameter] = []
        no_decay: list[nn.Parameter] = []
        for name, param in self.named_parameters():
            if param.requires_grad:
                # Norms, biases, embeddings and positional tables are not weight-decayed.
                (decay if param.dim() >= 2 and "embed" not in name else no_decay).append(param)
        hp = self.hparams
        optimizer = torch.optim.AdamW(
            [
                {"params": decay, "weight_decay": hp["weight_decay"], "name": "decay"},
                {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
            ],
            lr=hp["lr"],
            betas=(0.9, 0.98),
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup, floor = min(hp["warmup_steps"], total), hp["min_lr_ratio"]

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    # ------------------------------------------------------------------ logging
    def log_mean(
        self, name: str, value: Tensor, *, batch_size: int, prog_bar: bool = False
    ) -> None:
        """Log ``value``, a mean over ``batch_size`` samples: per step for ``train/`` names (this
        rank's batch), and per epoch as ``Σ value·batch / Σ batch`` over every rank's batches.

        Through a torchmetrics ``MeanMetric`` (float sums, gathered over DDP ranks once, at epoch
        end) rather than ``self.log(..., sync_dist=True)``: Lightning averages the summed batch
        count over ranks in integer arithmetic, so 33 samples on 2 ranks count as 32 and the
        epoch loss comes out 33/32 too large. Unsynced, it would be rank 0's alone.
        """
        key, metric = self._mean_metric(name, value.device)
        # One copy per sample rather than weight=batch_size: "disable" (which keeps NaN losses
        # visible) ignores weights in torchmetrics 1.9.
        per_sample = value.detach().float().expand(batch_size)
        train = name.startswith("train/")
        if train:
            metric(per_sample)  # forward: also this batch's value, logged on_step
        else:
            metric.update(per_sample)
        self.log(
            name,
            metric,
            prog_bar=prog_bar,
            on_step=train,
            on_epoch=True,
            batch_size=batch_size,
            metric_attribute=f"_log_means.{key}",
        )

    def log_epoch_mean(self, name: str, values: Tensor) -> None:
        """Log ``name`` per epoch: the mean of every element of ``values`` over the epoch's batches
        and every rank (any number a batch, none included; NaN when the epoch had none). Each
        rank must call it on every batch, so that every rank gathers it at the epoch's end."""
        key, metric = self._mean_metric(name, values.device)
        metric.update(values.detach().float().flatten())
        self.log(
            name,
            metric,
            on_step=False,
            on_epoch=True,
            batch_size=max(values.numel(), 1),
            metric_attribute=f"_log_means.{key}",
        )

    def _mean_metric(self, name: str, device: torch.device) -> tuple[str, MeanMetric]:
        key = name.replace(".", ",")  # module names may not contain "."
        if key not in self._log_means:
            self._log_means[key] = MeanMetric(nan_strategy="disable").to(device)
        return key, cast(MeanMetric, self._log_means[key])  # ModuleDict: Module-typed

    def _metric(self, key: str) -> MeanMetric:
        return cast(MeanMetric, self.metrics[key])  # ModuleDict items are typed as Module

    def log_accuracy(
        self, split: str, correct: Tensor, names: tuple[str, str], *, prog_bar: bool = False
    ) -> None:
        """Log ``<split>/<names[0]>``, the fraction of ``correct: (B, n)`` that is True (on the
        progress bar if ``prog_bar``), and ``<split>/<names[1]>``, the fraction of its rows all
        True, through ``self.metrics`` (``split_means``): per epoch, and per step in training."""
        for name, value in zip(names, (correct.float(), correct.all(dim=1).float()), strict=True):
            metric = self._metric(f"{split}_{name}")
            metric(value)  # calling (not .update) also gives the batch value logged on_step
            self.log(
                f"{split}/{name}",
                metric,
                prog_bar=prog_bar and name == names[0],
                on_step=split == "train",
                on_epoch=True,
                batch_size=correct.shape[0],
            )

    def on_fit_start(self) -> None:
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger) and self.hp_metrics:
                if self.trainer.ckpt_path and logger.log_dir and _has_events(logger.log_dir):
                    continue  # a resumed run: its placeholders are there, a second is a (0, nan)
                # Placeholders declare the metrics of the hparams tab; validation fills them in.
                # One call with everything: TensorBoard shows the last session's hparams.
                data = getattr(self.trainer, "datamodule", None)  # logged beside the task's
                merged = {**(data.hparams if data is not None else {}), **self.hparams}
                hparams = {k: v for k, v in merged.items() if not k.startswith("_")}
                if self.init_from:  # a run warm-started from another's weights says which
                    hparams["init_from"] = self.init_from
                logger.log_hyperparams(hparams, {name: float("nan") for name in self.hp_metrics})

    # ------------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_states"] = rng_states()
        if self.init_from:
            checkpoint["init_from"] = self.init_from

    def on_train_start(self) -> None:
        # Restored here rather than on load: the sanity check and loaders run in between, and the
        # saved states are those just before the next training batch of the interrupted run.
        if self._rng_to_restore is not None:
            set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rng_to_restore = checkpoint.get("rng_states")
        self.checkpoint_step = int(checkpoint.get("global_step", 0))
        if not self.attention_override:
            return
        state = checkpoint["state_dict"]
        own = self.state_dict()
        prefixes = tuple(
            f"{name}." for name, module in self.named_modules() if isinstance(module, Attention)
        )
        fresh = []
        for key in [k for k in state if k.startswith(prefixes)]:
            if key not in own or own[key].shape != state[key].shape:
                del state[key]
        for key, value in own.items():
            if key.startswith(prefixes) and key not in state:
                state[key] = value
                fresh.append(key)
        if fresh:
            warnings.warn(
                f"attention_override {self.attention_override}: {len(fresh)} backend tensor(s) "
                f"not loaded from the checkpoint (new or reshaped), kept as initialised: "
                f"{', '.join(fresh[:6])}{' ...' if len(fresh) > 6 else ''}",
                UserWarning,
                stacklevel=2,
            )


def _has_events(log_dir: str) -> bool:
    """Whether a TensorBoard run folder holds events (an earlier session of the run)."""
    return any(Path(log_dir).glob("events.out.tfevents.*"))
