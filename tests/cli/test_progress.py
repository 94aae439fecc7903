"""On a terminal the step bar shows each validation's line above itself; metrics in number order."""

from __future__ import annotations

import io
import logging
import sys
from pathlib import Path

import pytest

from attn_lightning.cli import main
from attn_lightning.cli.progress import StepProgressBar, _metric_items

ROOT = Path(__file__).resolve().parents[2]
REVERSAL = ["--config", str(ROOT / "configs" / "reversal" / "base.yaml")]
TINY = [
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=32",
    "--data.init_args.batch_size=8",
    "--trainer.val_check_interval=2",
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.max_steps=4",
    "--experiment=exp",
    "--run_name=r",
]

pytestmark = pytest.mark.usefixtures("cli_workdir")


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal (tqdm then draws its bars with carriage returns)."""

    def isatty(self) -> bool:
        return True


def test_validation_lines_show_above_the_bar_on_a_terminal(monkeypatch, caplog):
    screen = FakeTerminal()
    monkeypatch.setattr(sys, "stdout", screen)  # Lightning's bars write to stdout
    monkeypatch.setattr(sys, "stderr", screen)  # which makes progress.terminal() true
    with caplog.at_level(logging.INFO, logger="attn_lightning"):
        cli = main(["fit", *REVERSAL, *TINY])
    assert any(isinstance(c, StepProgressBar) for c in cli.trainer.callbacks)
    text = screen.getvalue()
    # Each on a line of its own (tqdm clears the bar, writes the line, redraws the bar).
    lines = [line.split("\r")[-1] for line in text.split("\n")]
    for step in (2, 4):
        shown = [line for line in lines if line.startswith(f"validation at step {step} · ")]
        assert len(shown) == 1, text
        assert "val/loss" in shown[0] and "val/token_acc" in shown[0]
    assert "validation at step" not in caplog.text  # once, by the bar, not also logged


def test_metrics_are_listed_with_their_numbers_in_order():
    metrics = {
        "val/query_acc_d16-31": 0.3,
        "val/query_acc_d8-15": 0.2,
        "val/query_acc_d1-7": 0.1,
        "val/query_acc_L128_P8": 0.5,
        "val/query_acc_L64_P4": 0.4,
        "val/loss": 1.0,
        "hp/val_loss": 1.0,
    }
    assert [item.split()[0] for item in _metric_items(metrics, prefix="val/")] == [
        "val/loss",
        "val/query_acc_L64_P4",
        "val/query_acc_L128_P8",
        "val/query_acc_d1-7",
        "val/query_acc_d8-15",
        "val/query_acc_d16-31",
    ]
