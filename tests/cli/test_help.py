"""What a newcomer reads: ``--help`` in whole sentences, a short ``fit --help`` that names every
option group, each group and every option one flag away; a run that prints no advertisement,
deprecation or empty FLOPs count; the README's count of backends."""

from __future__ import annotations

import logging
import re
import sys
import warnings
from pathlib import Path

import pytest

from attn_lightning.cli import command_line, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])


def _help(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        command_line(list(args))
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def _options(text: str) -> set[str]:
    return set(re.findall(r"^\s+(--[\w.]+)", text, flags=re.MULTILINE))


def test_top_level_help_describes_each_subcommand_in_whole_sentences(capsys):
    text = _help(capsys, "--help")
    for name in ("fit", "validate", "test", "predict"):
        (entry,) = re.findall(rf"^    {name} +(.+?)(?=^    \w|\Z)", text, re.MULTILINE | re.DOTALL)
        assert " ".join(entry.split()).endswith("."), entry


def test_fit_help_is_short_and_every_option_is_one_flag_away(capsys):
    short = _help(capsys, "fit", "--help")
    assert len(short.splitlines()) < 100
    groups = re.findall(r"^  (\w+) {2,}", short.split("option groups:")[1], re.MULTILINE)
    assert {"trainer", "model", "data", "checkpoint", "lr_monitor"} <= set(groups)
    everything = _options(_help(capsys, "fit", "--help", "all"))
    reachable = _options(short)
    for group in groups:
        in_full = _options(_help(capsys, "fit", "--help", group))
        assert in_full and all(option.startswith(f"--{group}") for option in in_full), group
        reachable |= in_full
    assert everything - reachable <= {"--help"}, everything - reachable
    assert "--trainer.max_steps" in reachable and "--threads" in reachable


def test_an_unknown_help_group_names_the_groups(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command_line(["fit", "--help", "trainr"])
    assert exit_info.value.code == 2
    assert "no such option group; one of: all, trainer" in capsys.readouterr().err


def test_a_run_prints_no_tip_no_deprecation_and_the_model_in_one_line(tmp_path, capfd, caplog):
    args = ["fit", "--config", str(ROOT / "configs" / "reversal" / "base.yaml")]
    args += ["--config", str(ROOT / "configs" / "presets" / "debug.yaml")]
    args += ["--data.init_args.train_size=64", "--trainer.enable_model_summary=true"]
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        main([*args, "--trainer.max_steps=2", "--run_name=r"])
    printed = capfd.readouterr().err + caplog.text
    assert "Tip:" not in printed and "litlogger" not in printed
    assert "FLOPs" not in printed
    model = r"model: SequenceReversalTask \(net: SequenceTransformer\) · [\d.]+ K parameters"
    assert re.search(model, printed)
    assert not [w for w in caught if "LeafSpec" in str(w.message)]


def test_the_readmes_backend_row_names_every_registered_backend():
    # No count to keep in step: the row lists the names, and a new backend is missing by name.
    from attn_lightning.attention import available_attentions

    row = next(line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith("| attention backends: "))  # fmt: skip
    missing = [name for name in available_attentions() if f"`{name}`" not in row]
    assert not missing, f"README's attention backends row does not name {missing}"
