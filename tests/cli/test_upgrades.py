"""Configs, flags and checkpoints of the layout before model sizes moved under ``net``."""

from __future__ import annotations

from pathlib import Path

import lightning
import pytest
import torch
import yaml

from attn_lightning.cli import main
from attn_lightning.cli.upgrades import task_class, upgrade_args, upgrade_flags, upgrade_tree
from attn_lightning.tasks import DetectionTask, SequenceReversalTask
from attn_lightning.tasks.base import upgrade_hparams

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "reversal" / "base.yaml"
OLD = {
    "model": {
        "class_path": "attn_lightning.tasks.SequenceReversalTask",
        "init_args": {"d_model": 32, "num_heads": 2, "max_len": 128, "num_symbols": 10, "lr": 0.1},
    }
}


pytestmark = pytest.mark.usefixtures("cli_workdir")


def test_tree_moves_sizes_under_net_and_drops_linked_ones():
    tree, notes = upgrade_tree(OLD, SequenceReversalTask)
    init = tree["model"]["init_args"]
    assert init == {"lr": 0.1, "net": {"d_model": 32, "num_heads": 2, "max_len": 128}}
    assert "model.init_args.d_model is now model.init_args.net.d_model" in notes
    assert any("num_symbols=10 is ignored" in note for note in notes)
    assert upgrade_tree({"model": {"init_args": {"lr": 0.1}}}, SequenceReversalTask)[1] == []


def test_flags_are_renamed_and_linked_ones_dropped():
    args = ["--model.init_args.d_model=8", "--model.num_heads", "2", "--model.init_args.lr=1"]
    args += ["--model.init_args.num_symbols", "12", "--data.init_args.num_symbols=12"]
    new, notes = upgrade_flags(args, SequenceReversalTask)
    assert new == [
        "--model.init_args.net.d_model=8",
        "--model.init_args.net.num_heads",
        "2",
        "--model.init_args.lr=1",
        "--data.init_args.num_symbols=12",
    ]
    assert len(notes) == 3
    # A size of another task's spec is left alone (DETR has no num_layers).
    assert upgrade_flags(["--model.init_args.num_layers=2"], DetectionTask)[0] == [
        "--model.init_args.num_layers=2"
    ]


def test_task_class_is_the_last_named():
    assert task_class(["--model", "attn_lightning.tasks.DetectionTask"], [OLD]) is DetectionTask
    assert task_class([], [OLD]) is SequenceReversalTask
    assert task_class([], [{"model": "no.such.Task"}]) is None


def test_an_old_config_file_builds_the_same_model_as_today(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(OLD))
    with pytest.warns(FutureWarning, match=r"old\.yaml: model\.init_args\.d_model is now"):
        args = upgrade_args(["fit", "--config", str(BASE), "--config", str(old)])
    assert args[:3] == ["fit", "--config", str(BASE)] and args[4].startswith("model:")
    with pytest.warns(FutureWarning):
        cli = main(["--config", str(BASE), "--config", str(old)], run=False)
    assert cli.model.hparams["net"]["d_model"] == 32 and cli.model.hparams["net"]["max_len"] == 128
    assert cli.model.hparams["lr"] == 0.1


def test_hparams_of_an_old_checkpoint_are_upgraded():
    flat = {"d_model": 32, "positional": "learned", "lr": 0.1, "num_symbols": 10}
    upgraded, moved = upgrade_hparams(SequenceReversalTask, flat)
    assert moved == ["d_model", "positional"]
    assert upgraded == {
        "lr": 0.1,
        "num_symbols": 10,
        "net": {"d_model": 32, "positional": "learned"},
    }
    task = SequenceReversalTask(**upgraded)
    assert task.net.embed.weight.shape[1] == 32


def test_an_old_checkpoint_validates_through_the_cli(tmp_path):
    task = SequenceReversalTask(net={"d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 16})
    hparams = {k: v for k, v in task.hparams.items() if k != "net"}
    hparams.update(task.hparams["net"])  # the layout of checkpoints saved before 2026-11-25
    hparams["_class_path"] = "attn_lightning.tasks.SequenceReversalTask"
    path = tmp_path / "old.ckpt"
    checkpoint = {"state_dict": task.state_dict(), "hyper_parameters": hparams, "global_step": 3}
    torch.save({**checkpoint, "pytorch-lightning_version": lightning.__version__}, path)
    debug = ROOT / "configs" / "presets" / "debug.yaml"
    args = ["validate", "--config", str(BASE), "--config", str(debug), f"--ckpt_path={path}"]
    with pytest.warns(FutureWarning, match="saved the model sizes"):
        cli = main([*args, "--trainer.logger=false", "--data.init_args.val_size=8"])
    assert cli.model.hparams["net"]["d_model"] == 16
    assert cli.model.net.embed.weight.shape == (11, 16)
    assert cli.trainer.callback_metrics["val/loss"] > 0


def test_load_task_reads_old_and_new_checkpoints(tmp_path):
    from attn_lightning.cli.checkpoints import CheckpointError, load_task

    task = SequenceReversalTask(net={"d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 16})
    new = {**task.hparams, "_class_path": "attn_lightning.tasks.SequenceReversalTask"}
    old = {k: v for k, v in new.items() if k != "net"} | task.hparams["net"]
    for name, hparams in (("new", new), ("old", old)):
        torch.save({"state_dict": task.state_dict(), "hyper_parameters": hparams}, tmp_path / name)
    loaded = load_task(tmp_path / "new")
    for key, value in task.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    with pytest.warns(FutureWarning, match="saved the model sizes"):
        assert load_task(tmp_path / "old").hparams["net"] == task.hparams["net"]
    torch.save({"state_dict": {}, "hyper_parameters": {"lr": 1}}, tmp_path / "bare")
    with pytest.raises(CheckpointError, match="names no task class"):
        load_task(tmp_path / "bare")
