"""``--ckpt_path`` files that cannot be read: one ``error:`` line naming the file, through
``train.py``'s entry, and the "newest intact checkpoint" rescue skips every unreadable file; model
options given with ``--ckpt_path`` that the checkpoint replaced are named in one line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from attn_lightning.cli import command_line
from attn_lightning.cli.checkpoints import newest_intact, replaced_options
from tests.cli.one_line import BASE, TINY, fails_in_one_line


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.delenv("ATTN_LIGHTNING_DEBUG", raising=False)


# Bytes torch's weights-only unpickler fails on in ways other than UnpicklingError: "hello" is a
# memo lookup (KeyError: 101), an empty file, a pickle of a forbidden global.
JUNK = {"hello": b"hello", "empty": b"", "text": b"not a checkpoint\n", "zipish": b"PK\x03\x04xx"}


@pytest.mark.parametrize("name", list(JUNK))
def test_junk_bytes_are_one_line_naming_the_file(name, tmp_path, capsys):
    path = tmp_path / "x.ckpt"
    path.write_bytes(JUNK[name])
    line = fails_in_one_line(["validate", *BASE, *TINY, "--ckpt_path", str(path)], capsys)
    assert str(path) in line and "not a Lightning checkpoint" in line, line
    assert "weights_only" not in line


def test_an_unreadable_file_is_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "x.ckpt"
    torch.save({"state_dict": {}}, path)

    def denied(*args, **kwargs):  # as for a file of mode 000 (root would read it: this test's CI)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(torch, "load", denied)
    line = fails_in_one_line(["validate", *BASE, *TINY, "--ckpt_path", str(path)], capsys)
    assert str(path) in line and "cannot be read (PermissionError: Permission denied)" in line


def test_the_rescue_skips_junk_beside_a_truncated_last(tmp_path, capsys):
    folder = tmp_path / "checkpoints" / "reversal" / "r"
    folder.mkdir(parents=True)
    torch.save({"state_dict": {}, "global_step": 20}, folder / "best-step=20.ckpt")
    os.utime(folder / "best-step=20.ckpt", (20, 20))
    (folder / "x.ckpt").write_bytes(b"hello")  # newer than the intact one
    os.utime(folder / "x.ckpt", (30, 30))
    last = folder / "last.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}, "global_step": 40}, last)
    last.write_bytes(last.read_bytes()[:700])
    line = fails_in_one_line(["fit", *BASE, *TINY, "--ckpt_path", str(last)], capsys)
    assert "is corrupt" in line and str(last) in line
    assert line.endswith(f"'{folder / 'best-step=20.ckpt'}' (step 20)"), line
    assert newest_intact(folder) == (folder / "best-step=20.ckpt", 20)


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
def test_evaluating_without_a_checkpoint_is_refused(subcommand, capsys):
    line = fails_in_one_line([subcommand, *BASE, *TINY], capsys)
    assert f"{subcommand} without --ckpt_path" in line and "--ckpt_path initial" in line, line


def test_the_initial_weights_are_evaluated_when_asked_for(capsys):
    command_line(["validate", *BASE, *TINY, "--ckpt_path", "initial", "--metrics_file=m.json"])
    assert "val/loss" in Path("m.json").read_text()
    line = fails_in_one_line(["fit", *BASE, *TINY, "--ckpt_path=initial"], capsys)
    assert "fit starts from the initial weights without --ckpt_path" in line, line


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
