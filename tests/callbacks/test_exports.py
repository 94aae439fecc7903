"""Exports. PredictionWriter: examples in dataset order, the folder it writes to, tasks without the
hook, and one set of files from two DDP processes. AdapterExport: writes through the task's
export_adapter, skips tasks without it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor, nn
from torch.utils.data import DataLoader

from attn_lightning.callbacks import AdapterExport, PredictionSaver, PredictionWriter, exports
from attn_lightning.callbacks.exports import in_dataset_order, unbatch
from attn_lightning.tasks import LoRAClassifierTask


class Doubler(pl.LightningModule):
    """Predicts 2·x for x in 0..size-1 and saves ``index,x,y`` rows."""

    def __init__(self, size: int = 10) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)
        self.size = size

    def predict_step(self, batch: Tensor, batch_idx: int) -> dict[str, Tensor]:
        return {"x": batch, "y": 2 * batch}

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(torch.arange(self.size), batch_size=4)

    def save_predictions(self, predictions: list, indices: list[int], folder: Path) -> list[Path]:
        path = folder / "rows.csv"
        lines = [f"{i},{int(p['x'])},{int(p['y'])}" for i, p in zip(indices, predictions)]
        path.write_text("\n".join(lines) + "\n")
        return [path]


class Silent(Doubler):
    """A task without ``save_predictions``."""

    save_predictions = None  # type: ignore[assignment]


def _rows(path: Path) -> list[list[int]]:
    return [[int(v) for v in line.split(",")] for line in path.read_text().splitlines()]


def _trainer(tmp_path: Path, writer: PredictionWriter, **kwargs) -> pl.Trainer:
    options = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": TensorBoardLogger(tmp_path / "logs", name="exp", version="run"),
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
    }
    return pl.Trainer(callbacks=[writer], **{**options, **kwargs})


def test_unbatch_splits_mappings_tensors_and_lists():
    rows = unbatch({"a": torch.arange(3), "b": torch.ones(3, 2)})
    assert len(rows) == 3 and int(rows[2]["a"]) == 2 and rows[2]["b"].shape == (2,)
    assert [int(t) for t in unbatch(torch.arange(2))] == [0, 1]
    assert unbatch([{"boxes": 1}, {"boxes": 2}]) == [{"boxes": 1}, {"boxes": 2}]
    with pytest.raises(TypeError, match="one batch size"):
        unbatch({"a": torch.arange(3), "b": torch.arange(2)})
    with pytest.raises(TypeError, match="one batch size"):
        unbatch({"a": torch.arange(3), "name": "x"})
    with pytest.raises(TypeError, match="returned int"):
        unbatch(3)


def test_in_dataset_order_sorts_and_drops_repeats():
    outputs = [{"x": torch.tensor([30, 10])}, {"x": torch.tensor([0, 31])}]
    examples, indices = in_dataset_order(outputs, [[3, 1], [0, 3]])
    assert indices == [0, 1, 3]
    assert [int(e["x"]) for e in examples] == [0, 10, 30]  # the first of index 3 is kept
    examples, indices = in_dataset_order(outputs, None)
    assert indices == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="3 examples"):
        in_dataset_order(outputs, [[3, 1], [0]])


def test_examples_that_carry_their_index_are_ordered_by_it_across_ranks():
    # Whole-batch loaders (MQAR's several settings) leave Lightning no indices: each example's
    # own "index" orders them, and two ranks' examples gathered on rank 0 are not merged by
    # their arrival numbers (0, 1, ... on every rank).
    rank0 = [{"index": torch.tensor([4, 0]), "x": torch.tensor([40, 0])}]
    rank1 = [{"index": torch.tensor([1, 3]), "x": torch.tensor([10, 30])}]
    per_rank = [in_dataset_order(outputs, None) for outputs in (rank0, rank1)]
    assert [indices for _, indices in per_rank] == [[0, 4], [1, 3]]
    examples, indices = in_dataset_order(
        [examples for examples, _ in per_rank], [indices for _, indices in per_rank]
    )
    assert indices == [0, 1, 3, 4] and [int(e["x"]) for e in examples] == [0, 10, 30, 40]


def test_writes_under_the_logger_run_folder(tmp_path, caplog):
    writer = PredictionWriter()
    assert isinstance(Doubler(), PredictionSaver) and not isinstance(Silent(), PredictionSaver)
    with caplog.at_level(logging.INFO, logger="attn_lightning.callbacks.exports"):
        _trainer(tmp_path, writer).predict(Doubler(size=10))
    folder = tmp_path / "logs" / "exp" / "run" / "predictions"
    assert writer.folder == folder and writer.written == [folder / "rows.csv"]
    assert _rows(folder / "rows.csv") == [[i, i, 2 * i] for i in range(10)]
    assert f"predictions of 10 examples to {folder}" in caplog.text


def test_folder_without_logger_explicit_and_from_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = PredictionWriter()
    _trainer(tmp_path, writer, logger=False).predict(Doubler(size=3))
    assert writer.written == [Path("predictions") / "rows.csv"]
    ckpt = tmp_path / "ckpts" / "run" / "last.ckpt"
    trainer = _trainer(tmp_path, writer, logger=False)
    trainer.strategy.connect(Doubler())
    trainer.save_checkpoint(ckpt)
    trainer.predict(Doubler(size=3), ckpt_path=str(ckpt))
    assert writer.written == [ckpt.parent / "predictions" / "rows.csv"]
    explicit = PredictionWriter(dirpath=str(tmp_path / "here"))
    _trainer(tmp_path, explicit).predict(Doubler(size=3))
    assert explicit.written == [tmp_path / "here" / "rows.csv"]


def test_a_task_without_save_predictions_writes_nothing(tmp_path):
    writer = PredictionWriter()
    (first, *_) = _trainer(tmp_path, writer).predict(Silent(size=5))
    assert writer.written == [] and int(first["y"][1]) == 2
    assert not (tmp_path / "logs" / "exp" / "run" / "predictions").exists()


def test_the_process_group_is_destroyed_at_exit(tmp_path):
    # The workers of ddp_spawn leave through multiprocessing: atexit is their only way out that
    # runs our code. The check is registered first, so it runs after the destroy (LIFO).
    script = f"""
import atexit, os
import torch.distributed as dist
from attn_lightning.callbacks.exports import close_process_group_at_exit
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{29400 + os.getpid() % 500}")
dist.init_process_group("gloo", rank=0, world_size=1)
atexit.register(lambda: print("alive at exit:", dist.is_initialized()))
close_process_group_at_exit()
close_process_group_at_exit()  # once per process
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "alive at exit: False"


def test_ddp_setup_registers_the_destroy(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(exports, "close_process_group_at_exit", lambda: calls.append(1))
    trainer = _trainer(tmp_path, PredictionWriter())
    monkeypatch.setattr(type(trainer), "world_size", property(lambda self: 2))
    PredictionWriter().setup(trainer, Doubler(), "predict")
    assert calls == [1]


@pytest.mark.slow  # two spawned processes re-import torch and Lightning
def test_ddp_ranks_are_gathered_into_one_file(tmp_path):
    # 11 examples, 2 processes, batches of 4: rank 0 sees 0, 2, ... and rank 1 sees 1, 3, ...
    writer = PredictionWriter()
    trainer = _trainer(tmp_path, writer, devices=2, strategy="ddp_spawn")
    trainer.predict(Doubler(size=11), return_predictions=False)
    rows = _rows(tmp_path / "logs" / "exp" / "run" / "predictions" / "rows.csv")
    assert rows == [[i, i, 2 * i] for i in range(11)]


def _adapter_trainer(dirpath, rank_zero=True):
    checkpoint = SimpleNamespace(dirpath=None if dirpath is None else str(dirpath))
    return SimpleNamespace(checkpoint_callback=checkpoint, is_global_zero=rank_zero)


def test_adapter_written_beside_the_checkpoints(tmp_path):
    task = LoRAClassifierTask(adaptation="lora_scratch", lora_r=1)
    AdapterExport(dirname="lora").on_fit_end(_adapter_trainer(tmp_path), task)
    assert (tmp_path / "lora" / "adapter_config.json").is_file()


def test_nothing_written_without_adapter_folder_or_rank_zero(tmp_path):
    callback = AdapterExport()
    callback.on_fit_end(_adapter_trainer(tmp_path), LoRAClassifierTask(adaptation="base"))
    callback.on_fit_end(_adapter_trainer(tmp_path), object())  # a task without export_adapter
    adapted = LoRAClassifierTask(adaptation="lora_scratch", lora_r=1)
    callback.on_fit_end(_adapter_trainer(tmp_path, rank_zero=False), adapted)
    callback.on_fit_end(_adapter_trainer(None), adapted)
    assert not list(tmp_path.iterdir())
