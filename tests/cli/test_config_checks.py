"""Command-line checks before parsing: a lone overlay names the base config to stack it on; the
first mistakes (an unknown subcommand, a missing or broken config) are one line before torch and
Lightning load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attn_lightning.cli import check_command_line
from attn_lightning.cli.config_checks import answer_first_mistakes, config_files, first_mistake

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


ROOT = Path(__file__).resolve().parents[2]
BASE = str(ROOT / "configs" / "reversal" / "base.yaml")
HEAVY = ("torch", "lightning", "jsonargparse")


def _imported(importtime: str) -> set[str]:
    """The top-level packages ``python -X importtime`` says it imported."""
    modules = set()
    for line in importtime.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            modules.add(name.split(".")[0])
    return modules


@pytest.fixture
def bad_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text("trainer:\n  max_steps: [1\n")
    return path


@pytest.mark.parametrize(
    ("mistake", "expected"),
    [
        ("missing", "error: config file {tmp}/nope.yaml does not exist"),
        ("yaml", "error: {tmp}/bad.yaml:3:1: YAML syntax error: expected ',' or ']'"),
        ("subcommand", "error: unknown subcommand 'fitt'; one of: fit, validate, test, predict"),
    ],
)
@pytest.mark.parametrize("entry", [["train.py"], ["-m", "attn_lightning.cli"]])
def test_first_mistakes_are_one_line_before_torch_and_lightning_load(
    mistake, expected, entry, bad_yaml, tmp_path
):
    args = {
        "missing": ["fit", "--config", BASE, "--config", str(tmp_path / "nope.yaml")],
        "yaml": ["fit", "--config", BASE, "--config", str(bad_yaml)],
        "subcommand": ["fitt", "--config", BASE],
    }[mistake]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ATTN_LIGHTNING_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *entry, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert len(lines) == 2 and lines[0].startswith(expected.format(tmp=tmp_path)), lines
    assert lines[1].startswith("run with --help")
    imported = _imported(done.stderr)
    assert "yaml" in imported  # the importtime lines were read
    assert not imported & set(HEAVY), imported & set(HEAVY)


def test_the_check_imports_only_the_standard_library_and_yaml(tmp_path):
    # In a fresh interpreter: importing the package and calling the check loads no heavy module.
    code = (
        "import sys\n"
        "from attn_lightning.cli.config_checks import answer_first_mistakes\n"
        f"answer_first_mistakes(['fit', '--config', {BASE!r}])\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_sound_command_line_passes(tmp_path):
    assert first_mistake(["fit", "--config", BASE, "--trainer.max_steps=3"]) is None
    assert first_mistake([]) is None  # LightningCLI says a subcommand is needed
    assert first_mistake(["--help"]) is None
    # A mapping given inline is a config LightningCLI reads, not a path.
    assert first_mistake(["fit", "--config", BASE, "--config", "{trainer: {max_steps: 3}}"]) is None


def test_a_folder_or_a_far_subcommand_is_named(tmp_path):
    assert first_mistake(["fit", f"--config={tmp_path}"]) == (
        f"config file {tmp_path} is a folder, not a file"
    )
    assert first_mistake(["train"]) == (
        "unknown subcommand 'train'; one of: fit, validate, test, predict"
    )


def test_debug_leaves_the_mistake_to_lightning_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("ATTN_LIGHTNING_DEBUG", raising=False)
    missing = ["fit", "--config", str(tmp_path / "nope.yaml")]
    with pytest.raises(SystemExit) as exit_info:
        answer_first_mistakes(missing)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: config file {tmp_path}/nope.yaml")
    answer_first_mistakes([*missing, "--debug"])  # returns: the full report comes later
    monkeypatch.setenv("ATTN_LIGHTNING_DEBUG", "1")
    answer_first_mistakes(missing)
