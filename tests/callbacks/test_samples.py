"""First-validation-batch logging: one every_n_epochs rule, Protocol hooks, sample tables."""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import MagicMock

import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from attn_lightning.callbacks import (
    AdapterExporter,
    DetectionImages,
    Detector,
    ImageGrids,
    ImageSampler,
    SamplePredictions,
    SampleRows,
)
from attn_lightning.tasks import LoRAClassifierTask, SequenceReversalTask

LOGGERS = (SamplePredictions, ImageGrids, DetectionImages)


def _trainer(epoch=0, *, sanity=False, rank_zero=True, logger=True):
    tensorboard = MagicMock(spec=TensorBoardLogger)
    return SimpleNamespace(
        current_epoch=epoch,
        sanity_checking=sanity,
        is_global_zero=rank_zero,
        global_step=7,
        loggers=[tensorboard] if logger else [],
    )


class Rows:
    def sample_rows(self, batch, num_samples):
        return [{"x": str(v)} for v in batch[:num_samples]]


def _run(callback, task, trainer, batches):
    for i, batch in enumerate(batches):
        callback.on_validation_batch_end(trainer, task, None, batch, i)
    callback.on_validation_epoch_end(trainer, task)


@pytest.mark.parametrize("cls", LOGGERS)
def test_one_every_n_epochs_rule(cls):
    for n, due in [(0, [0, 0, 0, 0]), (1, [1, 1, 1, 1]), (2, [0, 1, 0, 1]), (3, [0, 0, 1, 0])]:
        callback = cls(every_n_epochs=n)
        assert [callback.due(_trainer(epoch)) for epoch in range(4)] == [bool(d) for d in due]
        assert not callback.due(_trainer(1, sanity=True))
    with pytest.raises(ValueError, match="every_n_epochs must be >= 0"):
        cls(every_n_epochs=-1)


def test_sample_table_of_the_first_batch():
    callback, trainer = SamplePredictions(num_samples=2), _trainer()
    _run(callback, Rows(), trainer, [[1, 2, 3], [4, 5, 6]])
    experiment = trainer.loggers[0].experiment
    experiment.add_text.assert_called_once_with("samples/val", "| x |\n|---|\n| `1` |\n| `2` |", 7)


@pytest.mark.parametrize(
    "trainer",
    [_trainer(sanity=True), _trainer(rank_zero=False), _trainer(logger=False), _trainer(epoch=0)],
    ids=["sanity", "other_rank", "no_tensorboard", "not_due"],
)
def test_nothing_is_logged_or_kept_when_not_wanted(trainer):
    callback = SamplePredictions(every_n_epochs=2 if trainer.current_epoch == 0 else 1)
    callback.on_validation_batch_end(trainer, Rows(), None, [1], 0)
    assert callback._batch is None
    callback.on_validation_epoch_end(trainer, Rows())
    for logger in trainer.loggers:
        logger.experiment.add_text.assert_not_called()


@pytest.mark.parametrize("cls", LOGGERS)
def test_tasks_without_the_hook_are_skipped(cls):
    trainer = _trainer()
    _run(cls(), object(), trainer, [{"source": torch.zeros(2, 3)}])  # no pixels, no detect
    assert not trainer.loggers[0].experiment.method_calls


def test_tasks_satisfy_the_protocols_of_their_callbacks():
    reversal = SequenceReversalTask(
        net={"d_model": 8, "num_heads": 2, "num_layers": 1, "d_ff": 8, "max_len": 8}
    )
    assert isinstance(reversal, SampleRows)
    assert not isinstance(reversal, ImageSampler | Detector | AdapterExporter)
    lora = LoRAClassifierTask(adaptation="lora_scratch", lora_r=1)
    assert isinstance(lora, AdapterExporter) and not isinstance(lora, SampleRows)
