"""A tiny ``train.py fit`` of the reversal task; the callback tests read its TensorBoard scalars."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attn_lightning.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fit_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])

    def fit(*extra: str) -> dict[str, list[tuple[int, float]]]:
        main(
            [
                "fit",
                "--config",
                str(ROOT / "configs" / "reversal" / "base.yaml"),
                "--config",
                str(ROOT / "configs" / "presets" / "debug.yaml"),
                f"--trainer.logger.init_args.save_dir={tmp_path / 'tb'}",
                "--data.init_args.train_size=96",
                "--data.init_args.val_size=16",
                "--data.init_args.batch_size=8",
                "--trainer.enable_progress_bar=false",
                "--trainer.max_steps=5",
                "--trainer.limit_train_batches=10",
                *extra,
            ]
        )
        (run,) = (tmp_path / "tb").glob("*/*")
        events = EventAccumulator(str(run))
        events.Reload()
        tags = events.Tags()["scalars"]
        return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in tags}

    return fit
