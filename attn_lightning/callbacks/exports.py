"""What a run exports beside its checkpoints: prediction files (``train.py predict`` hands every
example's prediction to the task to save) and, after a fit, the task's peft adapter
(``AdapterExport``).

Lightning keeps what ``predict_step`` returns per batch; ``PredictionWriter`` splits those batches
into one prediction per example, pairs each with its dataset index, and at the end of the predict
epoch calls the task's ``save_predictions`` (``PredictionSaver``) with the examples in dataset
order. What a prediction is and which files it makes is the task's: the reversal tasks write
``predictions.csv``, the image task PNG grids and ``.pt`` tensors, the detection task COCO results
JSON, the LoRA classifier ``predictions.csv`` (see each task's ``save_predictions``).

``predict_step`` returns, per batch, either a mapping of tensors whose first dimension is the
batch (one prediction = the i-th row of every tensor) or a list with one entry per example; an
``index`` entry numbers the examples where Lightning cannot (a loader of whole batches).

Under DDP every rank predicts part of the test split; the predictions are gathered to rank 0,
which writes one set of files, the same whatever the number of processes (Lightning's predict
sampler gives each example to one rank; an example seen twice, e.g. by a padding sampler, is kept
once). Every process of a DDP run destroys its process group at exit
(``close_process_group_at_exit``).
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import lightning.pytorch as pl
import torch.distributed as dist
from lightning.pytorch.callbacks import BasePredictionWriter, Callback
from torch import Tensor

log = logging.getLogger(__name__)


@runtime_checkable
class PredictionSaver(Protocol):
    """A task that writes its predictions to files (every task of ``attn_lightning.tasks``)."""

    def save_predictions(
        self, predictions: list[Any], indices: list[int], folder: Path
    ) -> list[Path]:
        """Write ``predictions`` (one per example, in dataset order) of the test examples
        ``indices`` into ``folder`` (created if missing); return the files written."""
        ...


def unbatch(output: Any) -> list[Any]:
    """One ``predict_step`` output -> one prediction per example (see the module docstring)."""
    if isinstance(output, Mapping):
        sizes = {key: value.shape[0] for key, value in output.items() if isinstance(value, Tensor)}
        if len(sizes) != len(output) or len(set(sizes.values())) != 1:
            raise TypeError(
                f"predict_step returned a mapping whose values are not tensors of one batch size "
                f"({ {k: type(v).__name__ for k, v in output.items()} }); return batched tensors "
                f"or a list with one entry per example"
            )
        size = next(iter(sizes.values()))
        return [{key: value[i] for key, value in output.items()} for i in range(size)]
    if isinstance(output, Tensor):
        return list(output.unbind(0))
    if isinstance(output, Sequence) and not isinstance(output, str):
        return list(output)
    raise TypeError(
        f"predict_step returned {type(output).__name__}; return a mapping of batched tensors, "
        f"a tensor or a list with one entry per example"
    )


def in_dataset_order(
    outputs: Sequence[Any], batch_indices: Sequence[Sequence[int]] | None
) -> tuple[list[Any], list[int]]:
    """Split batches into examples and sort them by dataset index, keeping the first of
    duplicates (``DistributedSampler``'s padding). Without ``batch_indices`` (a loader Lightning
    could not index, e.g. one whose sampler yields whole batches) each example's own ``index``
    entry, where ``predict_step`` returns one for every example; else examples are numbered in
    the order they came (on one process only: ranks would number theirs alike)."""
    examples = [example for output in outputs for example in unbatch(output)]
    if batch_indices is None:
        own = [e["index"] for e in examples if isinstance(e, Mapping) and "index" in e]
        if len(own) != len(examples):
            return examples, list(range(len(examples)))
        batch_indices = [[int(i) for i in own]]
    indices = [int(i) for batch in batch_indices for i in batch]
    if len(indices) != len(examples):
        raise ValueError(
            f"predict_step returned {len(examples)} predictions for {len(indices)} examples; "
            f"return one per example"
        )
    first: dict[int, Any] = {}
    for index, example in zip(indices, examples, strict=True):
        first.setdefault(index, example)
    order = sorted(first)
    return [first[i] for i in order], order


class PredictionWriter(BasePredictionWriter):
    """Save the task's predictions at the end of ``predict`` (see the module docstring).

    The folder is, first found: ``dirpath``; ``<logger's log dir>/<dirname>`` (with the default
    TensorBoard logger ``logs/<experiment>/<run>/predictions/``, beside the run's ``config.yaml``);
    ``<folder of --ckpt_path>/<dirname>`` when there is no logger; ``./<dirname>`` otherwise.
    After a predict run, ``written`` lists the files (empty on ranks other than 0 and for a task
    without ``save_predictions``) and ``folder`` the folder; both are also logged.

    Args:
        dirpath: write here instead of the run folder.
        dirname: sub-folder of the run folder.
    """

    def __init__(self, *, dirpath: str | None = None, dirname: str = "predictions") -> None:
        super().__init__(write_interval="epoch")
        self.dirpath = dirpath
        self.dirname = dirname
        self.folder: Path | None = None
        self.written: list[Path] = []

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if trainer.world_size > 1:
            close_process_group_at_exit()
        if stage == "predict":
            self.folder, self.written = None, []

    def _folder(self, trainer: pl.Trainer) -> Path:
        if self.dirpath is not None:
            return Path(self.dirpath)
        log_dir = trainer.log_dir if trainer.loggers else None
        if log_dir:
            return Path(log_dir) / self.dirname
        if trainer.ckpt_path:
            return Path(trainer.ckpt_path).parent / self.dirname
        return Path(self.dirname)

    def write_on_epoch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        predictions: Sequence[Any],
        batch_indices: Sequence[Any],
    ) -> None:
        if not isinstance(pl_module, PredictionSaver):
            log.info("%s has no save_predictions: no prediction files", type(pl_module).__name__)
            return
        # Lightning nests per dataloader only when there are several; this project serves one.
        if trainer.num_predict_batches and len(trainer.num_predict_batches) > 1:
            raise NotImplementedError("PredictionWriter writes the predictions of one dataloader")
        # Empty when Lightning could not index the loader: then the examples' own index.
        indices = batch_indices[0] if batch_indices and batch_indices[0] else None
        examples, order = in_dataset_order(predictions, indices)
        examples, order = _gather_to_rank_zero(trainer, examples, order)
        # Every rank asks (trainer.log_dir is a broadcast from rank 0), and only now: the
        # checkpoint path is known once Lightning has restored it, after ``setup``.
        self.folder = folder = self._folder(trainer)
        if not trainer.is_global_zero:
            return
        folder.mkdir(parents=True, exist_ok=True)
        self.written = pl_module.save_predictions(examples, order, folder)
        log.info(
            "wrote the predictions of %d examples to %s: %s",
            len(order),
            folder,
            ", ".join(p.name for p in self.written),
        )


_REGISTERED = False


def close_process_group_at_exit() -> None:
    """Destroy this process's ``torch.distributed`` group when the interpreter exits (registered
    once per process; nothing to do if the group is gone by then).

    A DDP process that exits with its gloo group alive leaves the group's threads to the C++
    runtime's teardown, which sometimes destroys them while still joinable: the process aborts
    ("terminate called without an active exception", SIGABRT) after a run that finished, more
    often on a loaded machine. ``train.py``'s processes destroy the group on their way out
    (``cli.entry``), but the workers of ``strategy="ddp_spawn"`` return to multiprocessing, not
    there; ``atexit`` runs in every process, before the interpreter tears anything down.
    """
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    atexit.register(destroy_process_group)


def destroy_process_group() -> None:
    """Destroy this process's ``torch.distributed`` group, if it has one (see above)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _gather_to_rank_zero(
    trainer: pl.Trainer, examples: list[Any], indices: list[int]
) -> tuple[list[Any], list[int]]:
    """Every rank's examples on rank 0 (in dataset order, duplicates dropped); others unchanged."""
    if trainer.world_size == 1 or not (dist.is_available() and dist.is_initialized()):
        return examples, indices
    gathered: list[Any] | None = [None] * trainer.world_size if trainer.is_global_zero else None
    dist.gather_object((examples, indices), gathered, dst=0)
    if gathered is None:
        return examples, indices
    # Each rank's examples as one batch: sorted by index, an example two ranks saw kept once.
    return in_dataset_order([e for e, _ in gathered], [i for _, i in gathered])


@runtime_checkable
class AdapterExporter(Protocol):
    """A task that can write its adapter (``AdaptedTask`` and so the LoRA tasks)."""

    def export_adapter(self, directory: str | Path) -> bool:
        """Write the adapter into ``directory``; False when there is none (nothing written)."""
        ...


class AdapterExport(Callback):
    """After fitting, write the model's peft adapter beside the run's checkpoints.

    ``<checkpoint dir>/adapter/`` (peft's ``save_pretrained`` format: ``adapter_config.json`` +
    ``adapter_model.safetensors``) holds the last weights; reload them onto the base model with
    ``PeftModel.from_pretrained(base, dir)``. The task provides ``export_adapter(dir)``
    (``AdapterExporter``); other tasks, runs without adapters (``adaptation`` ``base`` or
    ``full``) and runs without a checkpoint folder write nothing.

    Args:
        dirname: sub-folder of the checkpoint directory.
    """

    def __init__(self, *, dirname: str = "adapter") -> None:
        self.dirname = dirname

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        dirpath = getattr(trainer.checkpoint_callback, "dirpath", None)
        if not isinstance(pl_module, AdapterExporter) or dirpath is None:
            return
        if not trainer.is_global_zero:
            return
        target = Path(dirpath) / self.dirname
        if pl_module.export_adapter(target):
            log.info("wrote the LoRA adapter to %s", target)


__all__ = [
    "AdapterExport",
    "AdapterExporter",
    "PredictionSaver",
    "PredictionWriter",
    "close_process_group_at_exit",
    "destroy_process_group",
    "in_dataset_order",
    "unbatch",
]
