"""Command-line checks before parsing: a lone overlay names the base config to stack it on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attn_lightning.cli import check_command_line
from attn_lightning.cli.config_checks import config_files

ROOT = Path(__file__).resolve().parents[2]
REVERSAL = ROOT / "configs" / "reversal"


def test_config_files_in_both_spellings():
    args = ["fit", "--config", "a.yaml", "-c", "b.yaml", "--config=c.yaml", "--x", "1"]
    assert config_files(args) == [Path("a.yaml"), Path("b.yaml"), Path("c.yaml")]


def test_lone_overlay_names_the_base_to_stack_on():
    message = check_command_line(["fit", "--config", str(REVERSAL / "linear.yaml")])
    assert message is not None
    assert "overlay" in message and f"--config {REVERSAL / 'base.yaml'}" in message


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--model", "attn_lightning.tasks.SequenceReversalTask"],
    ],
)
def test_stacked_overlay_passes(extra):
    base = [] if extra else ["--config", str(REVERSAL / "base.yaml")]
    args = ["fit", *base, "--config", str(REVERSAL / "linear.yaml"), *extra]
    assert check_command_line(args) is None


def test_train_py_exits_2_with_one_error_line_for_a_lone_overlay():
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "fit", "--config", "configs/reversal/linear.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "stack it on" in errors[0]
