"""Logging from the first validation batch every N epochs: the one base, and sample tables.

``ValidationBatchLogger`` holds the rule every such callback follows (``SamplePredictions`` here,
``ImageGrids``, ``DetectionImages``): it keeps the first batch of the first validation
dataloader and, at the end of that validation run, hands it to ``log_batch`` when

* the run is not Lightning's sanity check,
* the epoch is due: ``every_n_epochs > 0`` and ``(current_epoch + 1) % every_n_epochs == 0``
  (1: every validation run; 0: never; negative values are rejected),
* this is rank 0, a ``TensorBoardLogger`` is attached, and
* the task provides the callback's hook: an ``isinstance`` check against a ``runtime_checkable``
  ``Protocol`` (``hook``); other tasks are skipped.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger

from attn_lightning.records import markdown_records


@runtime_checkable
class SampleRows(Protocol):
    """A task whose predictions can be shown as a table (``SequenceReversalTask``)."""

    def sample_rows(self, batch: Any, num_samples: int) -> list[dict[str, str]]:
        """One dict per row (same keys) for the first ``num_samples`` examples of ``batch``."""
        ...


class ValidationBatchLogger(Callback):
    """Base: log something from the first validation batch every ``every_n_epochs`` epochs.

    Subclasses set ``hook`` (the Protocol a task must satisfy) and implement ``log_batch``; they
    may override ``select`` to keep only part of the batch. See the module docstring for when
    ``log_batch`` runs.

    Args:
        every_n_epochs: log after every this many validation epochs; 0 disables.
    """

    hook: ClassVar[type]

    def __init__(self, *, every_n_epochs: int = 1) -> None:
        if every_n_epochs < 0:
            raise ValueError(f"every_n_epochs must be >= 0 (0 disables), got {every_n_epochs}")
        self.every_n_epochs = every_n_epochs
        self._batch: Any = None

    def due(self, trainer: pl.Trainer) -> bool:
        """Whether this validation run logs (the rule of the module docstring)."""
        n = self.every_n_epochs
        return not trainer.sanity_checking and n > 0 and (trainer.current_epoch + 1) % n == 0

    def select(self, batch: Any) -> Any:
        """The part of the first validation batch that ``log_batch`` needs (default: all)."""
        return batch

    def log_batch(
        self,
        trainer: pl.Trainer,
        task: Any,
        batch: Any,
        loggers: list[TensorBoardLogger],
    ) -> None:
        """Log from ``select(batch)``; ``task`` satisfies ``hook``."""
        raise NotImplementedError

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and self._wanted(trainer, pl_module):
            self._batch = self.select(batch)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        batch, self._batch = self._batch, None
        if batch is not None and self._wanted(trainer, pl_module):
            self.log_batch(trainer, pl_module, batch, _tensorboards(trainer))

    def _wanted(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
        return (
            self.due(trainer)
            and trainer.is_global_zero
            and isinstance(pl_module, self.hook)
            and bool(_tensorboards(trainer))
        )


def _tensorboards(trainer: pl.Trainer) -> list[TensorBoardLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]


class SamplePredictions(ValidationBatchLogger):
    """Log a markdown table of sample predictions (``samples/val``, TensorBoard's text tab).

    The task provides ``sample_rows(batch, num_samples)`` (``SampleRows``).

    Args:
        num_samples: rows per table.
        every_n_epochs: log after every this many validation epochs; 0 disables.
    """

    hook = SampleRows

    def __init__(self, *, num_samples: int = 8, every_n_epochs: int = 1) -> None:
        super().__init__(every_n_epochs=every_n_epochs)
        self.num_samples = num_samples

    def log_batch(
        self,
        trainer: pl.Trainer,
        task: SampleRows,
        batch: Any,
        loggers: list[TensorBoardLogger],
    ) -> None:
        rows = task.sample_rows(batch, self.num_samples)
        # Code spans keep digit strings from rendering as numbers in TensorBoard's text tab.
        quoted = [{k: f"`{v}`" for k, v in row.items()} for row in rows]
        table = markdown_records(quoted) or "(no samples)"
        for logger in loggers:
            logger.experiment.add_text("samples/val", table, trainer.global_step)
