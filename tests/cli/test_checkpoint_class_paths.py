"""A checkpoint's saved class path is compared as a string unless it names a class of this
package: reading a checkpoint never imports a module of another package (``checkpoints``)."""

from __future__ import annotations

import sys

import pytest
import torch

from attn_lightning.cli.checkpoints import CheckpointError, load_task, resolve_class
from attn_lightning.tasks import SequenceReversalTask
from tests.cli.one_line import BASE, TINY, fails_in_one_line

TRIPWIRE = "tripwire_for_class_paths"


@pytest.fixture
def tripwire(tmp_path, monkeypatch):
    """An installed module that leaves a file behind when imported, and a checkpoint naming a
    class in it."""
    (tmp_path / f"{TRIPWIRE}.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(tmp_path / 'imported')!r}).write_text('yes')\n"
        "class Task:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, TRIPWIRE, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.delenv("ATTN_LIGHTNING_DEBUG", raising=False)
    path = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"_class_path": f"{TRIPWIRE}.Task"}}, path)
    return path


def _imported(path) -> bool:
    return (path.parent / "imported").exists() or TRIPWIRE in sys.modules


def test_a_foreign_class_path_is_compared_as_a_string(tripwire, capsys):
    line = fails_in_one_line(["validate", *BASE, *TINY, "--ckpt_path", str(tripwire)], capsys)
    assert f"holds a Task task ({TRIPWIRE}.Task) but the config builds SequenceReversalTask" in line
    assert not _imported(tripwire)
    assert resolve_class(f"{TRIPWIRE}.Task") == f"{TRIPWIRE}.Task"
    assert not _imported(tripwire)


def test_a_tool_reading_a_foreign_checkpoint_refuses_it_unimported(tripwire):
    with pytest.raises(CheckpointError, match=r"names no task class of attn_lightning"):
        load_task(tripwire, flag="--checkpoints")
    assert not _imported(tripwire)


def test_our_own_classes_still_resolve_by_module_or_package_path():
    assert resolve_class("attn_lightning.tasks.SequenceReversalTask") is SequenceReversalTask
    assert resolve_class("attn_lightning.tasks.reversal.SequenceReversalTask") is (
        SequenceReversalTask
    )
    assert resolve_class("attn_lightning.tasks.NoSuchTask") == "attn_lightning.tasks.NoSuchTask"


def test_load_task_rebuilds_a_checkpoint_and_refuses_a_moved_class_path(tmp_path):
    task = SequenceReversalTask(net={"d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 16})
    hparams = {**task.hparams, "_class_path": "attn_lightning.tasks.SequenceReversalTask"}
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": hparams}, tmp_path / "new")
    loaded = load_task(tmp_path / "new")
    for key, value in task.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    # A path this package no longer has (classes moved before 2026-11-26) is refused by name.
    hparams["_class_path"] = "attn_lightning.tasks.lora_transformer.LoRAReversalTask"
    torch.save({"state_dict": {}, "hyper_parameters": hparams}, tmp_path / "old")
    with pytest.raises(CheckpointError, match=r"lora_transformer\.LoRAReversalTask"):
        load_task(tmp_path / "old")
