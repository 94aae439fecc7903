"""Resuming as if not stopped: FitClock carries a run's fit seconds through its checkpoints into a
resumed process."""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from attn_lightning.callbacks import FitClock, LastValidation


def test_state_adds_this_process_to_the_earlier_seconds():
    clock = FitClock(started=time.perf_counter() - 2.0)
    assert clock.earlier_seconds is None and 2.0 <= clock.state_dict()["fit_seconds"] < 60
    clock.load_state_dict({"fit_seconds": 100.0})
    assert clock.earlier_seconds == 100.0 and 102.0 <= clock.seconds() < 160


def _trainer(tmp_path, clock: FitClock, steps: int) -> pl.Trainer:
    return pl.Trainer(
        default_root_dir=tmp_path,
        max_steps=steps,
        limit_val_batches=0,
        callbacks=[clock],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )


def test_a_resumed_fit_starts_from_the_checkpoints_seconds(tmp_path):
    first = _trainer(tmp_path, FitClock(started=time.perf_counter() - 5.0), 2)
    first.fit(BoringModel())
    first.save_checkpoint(tmp_path / "last.ckpt")
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["callbacks"]["FitClock"]
    assert saved["fit_seconds"] >= 5.0
    clock = FitClock()
    _trainer(tmp_path, clock, 4).fit(BoringModel(), ckpt_path=tmp_path / "last.ckpt")
    assert clock.earlier_seconds == saved["fit_seconds"]
    assert clock.seconds() > saved["fit_seconds"]


class _Validated(BoringModel):
    def validation_step(self, batch, batch_idx):
        loss = super().validation_step(batch, batch_idx)["x"]
        self.log("val/loss", loss)
        self.log("hp/val_loss", loss)


def test_a_fit_resumed_after_its_last_validation_ends_with_its_metrics(tmp_path):
    # Validation at step 4 (the epoch's end), the kill after it: the resumed fit validates no
    # more, and ends with the metrics an uninterrupted fit to step 6 ends with.
    def trainer(steps: int) -> pl.Trainer:
        return pl.Trainer(
            default_root_dir=tmp_path,
            max_steps=steps,
            limit_train_batches=4,
            limit_val_batches=2,
            num_sanity_val_steps=0,
            callbacks=[LastValidation()],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            accelerator="cpu",
        )

    whole = trainer(6)
    torch.manual_seed(0)
    whole.fit(_Validated())
    killed = trainer(5)
    torch.manual_seed(0)
    killed.fit(_Validated())
    killed.save_checkpoint(tmp_path / "last.ckpt")
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["callbacks"]["LastValidation"]
    resumed = trainer(6)
    resumed.fit(_Validated(), ckpt_path=tmp_path / "last.ckpt")
    final = {k: float(v) for k, v in whole.callback_metrics.items() if k != "train_loss"}
    assert set(final) == {"val/loss", "hp/val_loss"} and saved["metrics"] == final
    assert {k: float(resumed.callback_metrics[k]) for k in final} == final
