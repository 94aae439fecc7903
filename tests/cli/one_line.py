"""What the CLI tests of one-line errors share: the reversal config, a tiny run without logs, and
the check that a command fails with exactly one ``error:`` line (exit 2, no traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_lightning.cli import command_line

ROOT = Path(__file__).resolve().parents[2]
BASE = ["--config", str(ROOT / "configs" / "reversal" / "base.yaml")]
TINY = [
    "--config",
    str(ROOT / "configs" / "presets" / "debug.yaml"),
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=32",
    "--data.init_args.test_size=32",
    "--trainer.logger=false",
]


def fails_in_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``train.py args``; assert exit 2 with one ``error:`` line and no traceback or usage."""
    with pytest.raises(SystemExit) as exit_info:
        command_line(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "usage:" not in err
    return lines[0]
