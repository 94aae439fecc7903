"""Command-line checks before parsing: moved class paths and lone overlays name the fix; a
checkpoint that saved a moved class path still loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attn_lightning.cli import MOVED_CLASS_PATHS, check_command_line, main
from attn_lightning.cli.config_checks import config_files, rename_moved

ROOT = Path(__file__).resolve().parents[2]
REVERSAL = ROOT / "configs" / "reversal"


def test_every_moved_path_points_at_an_importable_class():
    import importlib

    for new in MOVED_CLASS_PATHS.values():
        module, _, name = new.rpartition(".")
        assert hasattr(importlib.import_module(module), name), new


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


def test_moved_class_path_in_yaml_names_file_key_and_new_path(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(
        "trainer:\n  callbacks:\n    - class_path: attn_lightning.image_callbacks.ImageGrids\n"
    )
    message = check_command_line(["fit", "--config", str(REVERSAL / "base.yaml"), "-c", str(old)])
    assert message is not None
    assert str(old) in message and "trainer.callbacks[0].class_path" in message
    assert "'attn_lightning.callbacks.ImageGrids'" in message


def test_moved_class_path_on_the_command_line():
    args = ["fit", "--model", "attn_lightning.tasks.lora.LoRAClassifierTask"]
    message = check_command_line(args)
    assert message is not None and "attn_lightning.tasks.LoRAClassifierTask" in message


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


def test_rename_moved_warns_and_leaves_current_paths_alone():
    assert rename_moved("attn_lightning.tasks.SequenceReversalTask") == (
        "attn_lightning.tasks.SequenceReversalTask"
    )
    with pytest.warns(FutureWarning, match="has moved"):
        new = rename_moved("attn_lightning.tasks.lora_transformer.LoRAReversalTask")
    assert new == "attn_lightning.tasks.LoRAReversalTask"


def test_checkpoint_with_a_moved_class_path_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = [
        "--config",
        str(REVERSAL / "base.yaml"),
        "--config",
        str(ROOT / "configs" / "presets" / "debug.yaml"),
    ]
    fit = ["fit", *base, "--trainer.max_steps=2", "--run_name", "old", "--trainer.logger=false"]
    main([*fit, "--checkpoint.dirpath", str(tmp_path / "ck")])
    ckpt = torch.load(tmp_path / "ck" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["_class_path"] == "attn_lightning.tasks.SequenceReversalTask"
    # What a checkpoint written before a class moved would say:
    old_path = "attn_lightning.tasks.old_module.SequenceReversalTask"
    monkeypatch.setitem(MOVED_CLASS_PATHS, old_path, "attn_lightning.tasks.SequenceReversalTask")
    ckpt["hyper_parameters"]["_class_path"] = old_path
    torch.save(ckpt, tmp_path / "old.ckpt")
    validate = [
        "validate",
        *base,
        "--trainer.logger=false",
        "--ckpt_path",
        str(tmp_path / "old.ckpt"),
    ]
    with pytest.warns(FutureWarning, match="has moved"):
        cli = main(validate)
    assert type(cli.model).__name__ == "SequenceReversalTask"
    assert "val/loss" in cli.trainer.callback_metrics
