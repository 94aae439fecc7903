"""Configuration and input errors: one ``error:`` line with the likely fix, exit 2, no traceback
(``--debug`` keeps it)."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from attn_lightning.attention.base import CHECK_FINITE_ENV, check_finite
from attn_lightning.cli import command_line
from attn_lightning.cli.config_checks import nearest
from attn_lightning.cli.errors import class_options, condense, trainer_error
from tests.cli.one_line import BASE, ROOT, TINY, fails_in_one_line

UNION_ERROR = """Parser key "model":
  Does not validate against any of the Union subtypes
  Errors:
    - Problem with given class_path 'attn_lightning.tasks.SequenceReversalTask':
        Option 'd_modl' is not accepted
    - Expected a <class 'NoneType'>
  Given value type: <class 'dict'>"""


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.delenv("ATTN_LIGHTNING_DEBUG", raising=False)
    # --debug turns the attention input check on for the process (and its DDP children, by the
    # environment): undone after each test, so later tests run as they would alone.
    monkeypatch.setenv(CHECK_FINITE_ENV, "0")
    with check_finite(False):
        yield


def test_nearest_and_class_options():
    assert nearest("d_modl", ["d_model", "d_ff", "dropout"]) == "d_model"
    assert nearest("zzz", ["d_model"]) is None
    # LoRAReversalTask takes the reversal options through **kwargs: they are offered too.
    assert {"adaptation", "mode", "net"} <= set(
        class_options("attn_lightning.tasks.LoRAReversalTask")
    )
    assert class_options("attn_lightning.nowhere.Nothing") == []


def test_condense_names_the_class_and_suggests():
    line = condense(UNION_ERROR)
    assert line == (
        "model (attn_lightning.tasks.SequenceReversalTask): option 'd_modl' is not accepted; "
        "did you mean 'net.d_model'?"
    )
    assert condense("unrecognized arguments: --trainer.max_stpes 5", ["--trainer.max_steps"]) == (
        "unrecognized argument --trainer.max_stpes; did you mean --trainer.max_steps?"
    )


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--model.init_args.attention", "{name: performr}"], "unknown attention 'performr'"),
        (
            ["--model.init_args.attention", "{name: performer, num_feature: 8}"],
            "unknown option(s) 'num_feature' for attention 'performer'; allowed: num_features",
        ),
        (["--trainer.max_stpes", "5"], "did you mean --trainer.max_steps?"),
        (
            ["--model.init_args.d_modl", "32"],
            "'d_modl' is not accepted; did you mean 'net.d_model'?",
        ),
        (["--model.init_args.net.d_model", "abc"], "net.d_model expects int; got abc"),
        (["--model.init_args.net.d_modl", "3"], "'d_modl' of net is not accepted; did you mean"),
    ],
)
def test_bad_configuration_is_one_line(extra, expected, capsys):
    line = fails_in_one_line(["fit", *BASE, *TINY, *extra], capsys)
    assert expected in line


def test_typo_in_a_yaml_key_suggests_the_nearest(tmp_path, capsys):
    typo = tmp_path / "typo.yaml"
    typo.write_text("model:\n  init_args:\n    d_modl: 32\n")
    line = fails_in_one_line(["fit", *BASE, "--config", str(typo)], capsys)
    assert f"option 'd_modl' is not accepted in {typo}:3; did you mean 'net.d_model'?" in line


def test_missing_data_files_are_one_line(tmp_path, capsys):
    lora = ["--config", str(ROOT / "configs" / "lora" / "base.yaml")]
    args = ["fit", *lora, *TINY[:2], "--data.init_args.source=mnist"]
    line = fails_in_one_line([*args, f"--data.init_args.root={tmp_path}"], capsys)
    assert "MNIST IDX files not found" in line and str(tmp_path) in line


@pytest.mark.parametrize("kind", ["random", "truncated", "missing", "not_lightning"])
def test_bad_checkpoints_are_one_line_without_unsafe_hints(kind, tmp_path, capsys):
    path = tmp_path / f"{kind}.ckpt"
    if kind == "random":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "truncated":
        torch.save({"state_dict": {"w": torch.zeros(1000)}}, path)
        path.write_bytes(path.read_bytes()[:500])
    elif kind == "not_lightning":
        torch.save({"w": torch.zeros(3)}, path)
    line = fails_in_one_line(["validate", *BASE, *TINY, "--ckpt_path", str(path)], capsys)
    assert str(path) in line and "weights_only" not in line
    assert ("no such file" if kind == "missing" else "not a Lightning checkpoint") in line


def test_a_corrupt_last_checkpoint_names_the_newest_intact_one(tmp_path, capsys):
    folder = tmp_path / "checkpoints" / "reversal" / "r"
    folder.mkdir(parents=True)
    for step in (20, 30):
        torch.save({"state_dict": {}, "global_step": step}, folder / f"best-step={step}.ckpt")
        os.utime(folder / f"best-step={step}.ckpt", (step, step))  # written in step order
    last = folder / "last.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}, "global_step": 40}, last)
    last.write_bytes(last.read_bytes()[:700])  # a copy killed midway
    line = fails_in_one_line(["fit", *BASE, *TINY, "--ckpt_path", str(last)], capsys)
    assert "is corrupt" in line and "newest intact checkpoint in its folder is " in line
    assert line.endswith(f"'{folder / 'best-step=30.ckpt'}' (step 30)")


def test_a_missing_lora_base_checkpoint_is_one_line(tmp_path, capsys):
    # Loaded in the task's on_fit_start: setup, not the run; was a 35-line traceback, exit 1.
    lora = ["--config", str(ROOT / "configs" / "lora_reversal" / "base.yaml")]
    missing = tmp_path / "nowhere" / "last.ckpt"
    args = ["fit", *lora, *TINY, f"--model.init_args.base_checkpoint={missing}"]
    line = fails_in_one_line(args, capsys)
    assert "base_checkpoint" in line and "does not exist" in line and str(missing) in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "is empty; a config is a YAML mapping of options"),
        ("- trainer\n", "holds a list; a config is a YAML mapping of options"),
        ("trainer:\n  max_steps: [1\n  devices: 1\n", ":3:10: YAML syntax error: "),
    ],
)
def test_a_bad_yaml_file_is_one_line_naming_it(text, expected, tmp_path, capsys):
    config = tmp_path / "mine.yaml"
    config.write_text(text)
    line = fails_in_one_line(["fit", *BASE, "--config", str(config)], capsys)
    assert f"error: {config}" in line and expected in line


def test_no_config_names_the_experiment_config(capsys):
    line = fails_in_one_line(["fit", "--trainer.max_steps=3"], capsys)
    assert "--config configs/<experiment>/base.yaml" in line and "(data, model)" in line


def test_model_help_takes_a_class_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command_line(["fit", "--model.help", "SequenceReversalTask"])
    assert exit_info.value.code == 0
    assert "--model.net.d_model" in capsys.readouterr().out
    line = fails_in_one_line(["fit", "--model.help", "SequenceReversal"], capsys)
    assert "unknown class 'SequenceReversal'; one of: " in line and "SequenceReversalTask" in line


def test_debug_keeps_the_traceback(monkeypatch):
    monkeypatch.setenv("ATTN_LIGHTNING_DEBUG", "1")
    with pytest.raises(ValueError, match="unknown attention 'performr'"):
        command_line(["fit", *BASE, *TINY, "--model.init_args.attention", "{name: performr}"])


no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param(
            ["--trainer.accelerator", "gpu"],
            "no GPU found (trainer.accelerator gpu): use --trainer.accelerator cpu "
            "or configs/presets/cpu.yaml",
            marks=no_gpu,
        ),
        pytest.param(
            ["--config", str(ROOT / "configs" / "presets" / "gpu_ddp.yaml")],
            "no GPU found (trainer.accelerator gpu): use --trainer.accelerator cpu "
            "--trainer.devices 1 or configs/presets/cpu.yaml",
            marks=no_gpu,
        ),
        (["--trainer.devices", "0"], "trainer.devices 0"),
        (["--trainer.max_steps", "-5"], "trainer.max_steps -5"),
    ],
)
def test_trainer_misconfigurations_are_one_line(extra, expected, capsys):
    # Lightning raises MisconfigurationException while the Trainer is built: 30+ lines before.
    line = fails_in_one_line(["fit", *BASE, *TINY, *extra], capsys)
    assert expected in line


def test_trainer_misconfigurations_name_the_fix(capsys):
    line = fails_in_one_line(["fit", *BASE, *TINY, "--trainer.devices", "0"], capsys)
    assert "--trainer.devices 1" in line
    line = fails_in_one_line(["fit", *BASE, *TINY, "--trainer.max_steps", "-5"], capsys)
    assert "-1" in line and "not accepted" not in line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--model.init_args.net.d_model", "-4"], "net.d_model must be >= 1, got -4"),
        (["--model.init_args.net.num_layers", "0"], "net.num_layers must be >= 1, got 0"),
    ],
)
def test_bad_sizes_are_one_line(extra, expected, capsys):
    line = fails_in_one_line(["fit", *BASE, *TINY, *extra], capsys)
    assert expected in line


@pytest.mark.parametrize(
    ("yaml_text", "wrong", "right", "line"),
    [
        ("trainr:\n  max_steps: 3\n", "trainr.max_steps", "trainer.max_steps", 1),
        (
            "seed_everything: 1\ntrainer:\n  max_stesp: 3\n",
            "trainer.max_stesp",
            "trainer.max_steps",
            3,
        ),
    ],
)
def test_a_key_typo_in_a_file_reads_as_the_same_typo_as_a_flag(
    yaml_text, wrong, right, line, tmp_path, capsys
):
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml_text)
    from_file = fails_in_one_line(["fit", *BASE, "--config", str(typo)], capsys)
    from_flag = fails_in_one_line(["fit", *BASE, f"--{wrong}=3"], capsys)
    assert from_flag == f"error: unrecognized argument --{wrong}; did you mean --{right}?"
    assert from_file == f"error: unrecognized key {wrong} in {typo}:{line}; did you mean {right}?"


def test_trainer_error_names_the_option_lightning_refuses():
    refused = MisconfigurationException(
        "You have passed invalid value -1 for val_check_interval, it has to be in [0.0, 1.0] "
        "or an int."
    )
    assert trainer_error(refused, {"val_check_interval": -1}) == (
        "trainer.val_check_interval -1: You have passed invalid value -1 for val_check_interval, "
        "it has to be in [0.0, 1.0] or an int"
    )
    # A message that names no configured option still comes as one line.
    assert trainer_error(TypeError("odd\n  thing"), {}) == "trainer: TypeError: odd thing"


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "data:\n  init_args:\n    batch_sise: 3\n",
            "option 'batch_sise' is not accepted in {typo}:3; did you mean 'batch_size'?",
        ),
        (
            "model:\n  init_args:\n    net:\n      d_modl: 3\n",
            "option 'd_modl' of net is not accepted in {typo}:4; did you mean 'd_model'?",
        ),
    ],
)
def test_a_class_option_typo_in_a_file_names_the_file(yaml_text, expected, tmp_path, capsys):
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml_text)
    line = fails_in_one_line(["fit", *BASE, "--config", str(typo)], capsys)
    assert expected.format(typo=typo) in line


def test_a_misconfiguration_at_setup_is_one_line(monkeypatch, capsys):
    # Lightning's checks at the start of fit (after the Trainer is built) raise it too.
    def refuse(args):
        raise MisconfigurationException("No `training_step()` method defined.")

    monkeypatch.setattr("attn_lightning.cli.entry.main", refuse)
    line = fails_in_one_line(["fit"], capsys)
    assert line == "error: trainer: No `training_step()` method defined."
