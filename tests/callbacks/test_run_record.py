"""RunRecord: a fit of the real reversal config leaves a complete record; a crash, a SIGTERM, a
non-finite stop and an early stop say how the run ended; a resume keeps one curve row per
(step, tag); a later test updates the fit's record; only rank 0 writes (also under DDP)."""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from attn_lightning.callbacks import (
    FitClock,
    GradientTracker,
    NonFiniteTraining,
    RunCheckpoint,
    RunRecord,
)
from attn_lightning.cli import main

ROOT = Path(__file__).resolve().parents[2]


class Tiny(pl.LightningModule):
    """A linear regression that logs ``train/loss`` and ``val/loss``."""

    def __init__(self, attention: dict | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.attention_config = attention  # what a task built its model with: the record's variant
        self.layer = nn.Linear(4, 1)

    def _loss(self, batch: list[torch.Tensor]) -> torch.Tensor:
        return (self.layer(batch[0]).squeeze(-1) - batch[0].sum(-1)).pow(2).mean()

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4)

    val_dataloader = train_dataloader


class RaiseAt(pl.Callback):
    """Raise ``error`` (or set ``should_stop`` / the SIGTERM flag) after optimiser step ``step``."""

    def __init__(self, step: int, error: BaseException | str) -> None:
        self.step, self.error = step, error

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        if self.error == "should_stop":  # as EarlyStopping stops a run
            trainer.should_stop = True
        elif self.error == "sigterm":  # what Lightning's SIGTERM handler sets
            trainer._signal_connector.received_sigterm = True
        elif isinstance(self.error, BaseException):
            raise self.error


class Mark(pl.Callback):
    """Log ``mark`` at every step straight to the loggers (as GradientTracker logs)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        for logger in trainer.loggers:
            logger.log_metrics({"mark": 1.0}, step=trainer.global_step)


def _fit(tmp_path: Path, *extra: pl.Callback, ckpt: str | None = None, **options) -> RunRecord:
    record = RunRecord(tags={"study": "unit"})
    tracker = GradientTracker(every_n_steps=2, spike_factor=0.5, spike_window=1)  # all spikes
    checkpoint = RunCheckpoint(dirpath=str(tmp_path / "ckpt"), monitor="val/loss", save_last=True)
    trainer = pl.Trainer(
        **{
            "accelerator": "cpu",
            "devices": 1,
            "max_steps": 5,
            "limit_train_batches": 3,
            "limit_val_batches": 1,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            "logger": TensorBoardLogger(tmp_path / "logs", name="exp", version="run"),
            "callbacks": [record, tracker, checkpoint, FitClock(), *extra],
            "enable_progress_bar": False,
            "enable_model_summary": False,
            **options,
        }
    )
    pl.seed_everything(7)
    trainer.fit(Tiny(attention={"name": "linear"}), ckpt_path=ckpt)
    return record


def _read(folder: Path) -> tuple[dict, list[dict], list[dict]]:
    record = json.loads((folder / "record.json").read_text())
    with open(folder / "curves.csv") as file:
        curves = list(csv.DictReader(file))
    with open(folder / "spikes.csv") as file:
        spikes = list(csv.DictReader(file))
    return record, curves, spikes


def _documented() -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)`", (ROOT / "docs" / "run_record.md").read_text(), re.M))


def test_a_fit_and_its_test_leave_a_complete_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    main(
        [
            "fit",
            *("--config", str(ROOT / "configs" / "reversal" / "base.yaml")),
            *("--config", str(ROOT / "configs" / "presets" / "debug.yaml")),
            "--data.init_args.train_size=48",
            "--data.init_args.val_size=16",
            "--data.init_args.batch_size=8",
            "--trainer.enable_progress_bar=false",
            "--trainer.max_steps=5",
            "--trainer.max_epochs=2",
            "--trainer.limit_train_batches=3",  # validation (and the best) after step 3
            "--test_after_fit=true",
            '--run_record.tags={study: smoke, lr: 0.001, base_lr: "0.01"}',
            "--gradient_tracker.spike_window=1",
            "--gradient_tracker.spike_factor=0.5",
        ]
    )
    folder = tmp_path / "logs" / "debug" / "version_0"
    record, curves, spikes = _read(folder)
    assert (folder / "config.yaml").is_file()
    assert record["schema"] == 1 and record["status"] == "ok" and record["subcommand"] == "fit"
    assert (record["experiment"], record["run"], record["seed"]) == ("debug", "version_0", 0)
    assert record["variant"] == {"name": "softmax"}
    # A quoted number stays a string (a study's tag spelled as it looks runs up by).
    assert record["tags"] == {"study": "smoke", "lr": 0.001, "base_lr": "0.01"}
    assert record["command"] == ["train.py"]
    assert record["git_commit"] is None or re.fullmatch(r"[0-9a-f]{7,40}", record["git_commit"])
    assert {"python", "torch", "lightning", "device", "threads"} <= set(record["environment"])
    assert record["fit_seconds"] > 0 and record["global_step"] == 5
    best = record["best_checkpoint"]
    assert best["step"] == 3 and best["monitor"] == "val/loss" and "step=3" in best["path"]
    assert best["score"] == pytest.approx(best["metrics"]["val/loss"])
    assert set(record["metrics"]) == {"fit", "test"}
    assert "train/loss" in record["metrics"]["fit"] and "test/loss" in record["metrics"]["test"]
    assert [record["subcommands"][s]["status"] for s in ("fit", "test")] == ["ok", "ok"]
    tags = {row["tag"] for row in curves}
    assert {"train/loss_step", "val/loss", "grad/global_norm", "train/loss_spike"} <= tags
    assert not any(tag.startswith("test/") for tag in tags)  # the test is in metrics, not curves
    assert [int(row["step"]) for row in spikes] == [1, 2, 3, 4]  # every step after the first
    (evaluation,) = record["evaluations"]  # --test_after_fit's test of the best checkpoint
    assert (evaluation["subcommand"], evaluation["step"]) == ("test", 3)
    assert "step=3" in evaluation["checkpoint"] and evaluation["data"]["seq_len"] == 50
    assert evaluation["metrics"] == record["metrics"]["test"] and evaluation["status"] == "ok"
    undocumented = set(record) | set(record["environment"]) | set(best)
    undocumented |= set(record["subcommands"]["fit"]) | set(evaluation)
    assert undocumented - _documented() == set()
    # Later tests of one checkpoint at other lengths each keep their own entry (metrics.test is
    # the latest only).
    for seq_len in (20, 30):
        main(
            [
                "test",
                *("--config", str(ROOT / "configs" / "reversal" / "base.yaml")),
                *("--config", str(ROOT / "configs" / "presets" / "debug.yaml")),
                *("--ckpt_path", "checkpoints/debug/version_0/last.ckpt"),
                f"--data.init_args.seq_len={seq_len}",
                "--trainer.enable_progress_bar=false",
            ]
        )
    record, _, _ = _read(folder)
    first, *later = record["evaluations"]
    assert first == evaluation
    assert [(e["data"]["seq_len"], e["step"]) for e in later] == [(20, 5), (30, 5)]
    assert all(e["checkpoint"].endswith("version_0/last.ckpt") for e in later)
    assert later[0]["metrics"] != later[1]["metrics"] == record["metrics"]["test"]


def test_a_crash_then_a_resume_keep_one_row_per_step_and_tag(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        _fit(tmp_path, Mark(), RaiseAt(5, RuntimeError("boom")))
    folder = tmp_path / "logs" / "exp" / "run"
    record, curves, spikes = _read(folder)
    assert record["status"] == "crashed" and record["subcommands"]["fit"]["error"] == (
        "RuntimeError: boom"
    )
    assert record["variant"] == {"name": "linear"} and record["tags"] == {"study": "unit"}
    assert max(int(row["step"]) for row in curves) >= 4  # logged after last.ckpt (step 3)
    crashed = {(row["step"], row["tag"]): row["value"] for row in curves}
    _fit(tmp_path, ckpt=str(tmp_path / "ckpt" / "last.ckpt"), max_steps=7)
    record, curves, spikes = _read(folder)
    assert record["status"] == "ok" and record["global_step"] == 7
    keys = [(row["step"], row["tag"]) for row in curves]
    assert len(keys) == len(set(keys))
    assert {int(step) for step, _ in keys} >= set(range(7))
    assert len({row["step"] for row in spikes}) == len(spikes)
    resumed = {(row["step"], row["tag"]): row["value"] for row in curves}
    assert all(resumed[key] == crashed[key] for key in crashed if int(key[0]) <= 3)
    # Logged after the checkpoint the run resumed from (step 3) and not again: no longer the run's.
    assert sorted(int(step) for step, tag in keys if tag == "mark") == [1, 2, 3]


def test_resuming_a_finished_fit_keeps_its_curves(tmp_path):
    # At max_steps already, Lightning restores the checkpoint and trains nothing (no
    # on_train_start): the finished run's curves and spikes stay as they were.
    _fit(tmp_path)
    folder = tmp_path / "logs" / "exp" / "run"
    _, curves, spikes = _read(folder)
    assert curves and spikes
    _fit(tmp_path, ckpt=str(tmp_path / "ckpt" / "last.ckpt"))
    record, again, spikes_again = _read(folder)
    assert record["status"] == "ok" and record["global_step"] == 5
    assert again == curves and spikes_again == spikes


@pytest.mark.parametrize(
    ("stop", "error", "line"),
    [
        ("sigterm", SIGTERMException, "SIGTERMException"),
        (
            NonFiniteTraining("loss not finite"),
            NonFiniteTraining,
            "NonFiniteTraining: loss not finite",
        ),
        ("should_stop", None, None),
    ],
)
def test_a_stopped_run_says_stopped(tmp_path, stop, error, line):
    if error is None:
        _fit(tmp_path, RaiseAt(2, stop))
    else:
        with pytest.raises(error):
            _fit(tmp_path, RaiseAt(2, stop))
    record, curves, _ = _read(tmp_path / "logs" / "exp" / "run")
    assert record["status"] == "stopped" and record["global_step"] == 2
    assert record["subcommands"]["fit"]["error"] == line
    assert curves  # the steps before the stop


def test_a_later_test_of_the_checkpoint_keeps_the_fit_record(tmp_path):
    _fit(tmp_path)
    folder = tmp_path / "logs" / "exp" / "run"
    fit_record, fit_curves, _ = _read(folder)
    logger = TensorBoardLogger(tmp_path / "logs", name="exp", version="run", sub_dir="test")
    trainer = pl.Trainer(
        logger=logger,
        callbacks=[RunRecord()],
        limit_test_batches=1,
        enable_progress_bar=False,
    )
    trainer.validate(Tiny(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"), verbose=False)
    record, curves, _ = _read(folder)
    assert not (folder / "test" / "record.json").exists()
    assert record["metrics"]["fit"] == fit_record["metrics"]["fit"]
    assert set(record["metrics"]["validate"]) == {"val/loss"}
    assert record["subcommands"]["validate"]["status"] == "ok"
    assert record["status"] == "ok" and record["subcommand"] == "fit"
    assert record["tags"] == {"study": "unit"} and curves == fit_curves


def test_only_global_rank_zero_writes(tmp_path, monkeypatch):
    monkeypatch.setattr(pl.Trainer, "is_global_zero", property(lambda self: False))
    _fit(tmp_path)
    assert not list((tmp_path / "logs").rglob("record.json"))
    assert not list((tmp_path / "logs").rglob("curves.csv"))


def test_fast_dev_run_writes_no_record(tmp_path):
    # Lightning swaps the logger for a DummyLogger, which has no folder.
    _fit(tmp_path, fast_dev_run=2)
    assert not list(tmp_path.rglob("record.json"))


def test_tags_must_be_json():
    with pytest.raises(ValueError, match="tags must be a JSON dict"):
        RunRecord(tags={"when": object()})


@pytest.mark.slow  # two spawned processes re-import torch and Lightning
def test_ddp_writes_one_record(tmp_path):
    _fit(tmp_path, devices=2, strategy="ddp_spawn", max_steps=3)
    (path,) = (tmp_path / "logs").rglob("record.json")
    record, curves, _ = _read(path.parent)
    assert record["status"] == "ok" and record["environment"]["world_size"] == 2
    keys = [(row["step"], row["tag"]) for row in curves]
    assert keys and len(keys) == len(set(keys))
