"""Model options given with ``--ckpt_path`` that the checkpoint replaced are named in one line
(``checkpoint_options``), not dropped without a word."""

from __future__ import annotations

import sys

import pytest

from attn_lightning.cli import command_line
from attn_lightning.cli.checkpoint_options import replaced_options
from tests.cli.one_line import BASE, TINY


def test_replaced_options_are_the_given_values_the_checkpoint_changed():
    before = {
        "attention": {"name": "performer", "num_features": 16},
        "net": {"d_model": 32, "num_heads": 2},
        "seq_len": None,  # from the data: not given, not named
        "lr": 0.001,
    }
    after = {
        "attention": {"name": "softmax"},
        "net": {"d_model": 64, "num_heads": 2},
        "seq_len": 50,
        "lr": 0.001,
    }
    assert replaced_options(before, after) == [
        ("attention", {"name": "performer", "num_features": 16}, {"name": "softmax"}),
        ("net.d_model", 32, 64),
    ]
    assert replaced_options(after, after) == []


def test_validate_names_the_model_options_the_checkpoint_replaced(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    tiny = [*BASE, *TINY, "--model.init_args.net.d_model=16", "--model.init_args.net.d_ff=32"]
    command_line(["fit", *tiny])
    (last,) = (tmp_path / "checkpoints").rglob("last.ckpt")
    capsys.readouterr()
    command_line(["validate", *tiny, "--ckpt_path", str(last)])
    assert "replacing" not in capsys.readouterr().err  # nothing replaced: nothing said
    given = ["--model.init_args.net.d_model=32", "--model.init_args.attention={name: linear}"]
    command_line(["validate", *tiny, *given, "--ckpt_path", str(last)])
    lines = [line for line in capsys.readouterr().err.splitlines() if "replacing" in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"--ckpt_path {last}: the model is built with the checkpoint's")
    assert "net.d_model 32 -> 16" in lines[0]
    assert "attention {'name': 'linear'} -> {'name': 'softmax'}" in lines[0]


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv("ATTN_LIGHTNING_DEBUG", raising=False)
