"""Warm-start: weights from a checkpoint into a model with another attention, backends fresh."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.cli.checkpoints import CheckpointError
from attn_lightning.cli.warm_start import warm_start
from attn_lightning.tasks import ImageClassificationTask, LoRAClassifierTask, SequenceReversalTask

NET = {"d_model": 16, "num_heads": 2, "num_layers": 2, "d_ff": 32, "max_len": 32}


def _save(task, path):
    hparams = {**task.hparams, "_class_path": f"attn_lightning.tasks.{type(task).__name__}"}
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": hparams}, path)
    return path


@pytest.fixture
def softmax_ckpt(tmp_path):
    torch.manual_seed(0)
    return _save(SequenceReversalTask(net=NET), tmp_path / "softmax.ckpt")


def test_weights_come_from_the_checkpoint_and_the_backend_stays_fresh(softmax_ckpt):
    source = torch.load(softmax_ckpt, weights_only=True)["state_dict"]
    torch.manual_seed(1)
    performer = SequenceReversalTask(net=NET, attention={"name": "performer", "num_features": 8})
    fresh = {k: v.clone() for k, v in performer.state_dict().items() if ".backend." in k}
    record = warm_start(performer, softmax_ckpt)
    state = performer.state_dict()
    for key in record.loaded:
        assert torch.equal(state[key], source[key]), key
    assert record.fresh and set(record.fresh) == set(fresh)
    for key, value in fresh.items():
        assert torch.equal(state[key], value), key  # the projection is the new model's own
    assert len(record.loaded) == len(source)  # softmax has no backend tensors
    assert (
        "tensors from the checkpoint" in record.line()
        and "new (attention backends)" in record.line()
    )


def test_another_experiment_or_size_is_one_clear_error(softmax_ckpt, tmp_path):
    with pytest.raises(CheckpointError, match=r"holds a SequenceReversalTask .* builds Image"):
        warm_start(ImageClassificationTask(), softmax_ckpt)
    wider = SequenceReversalTask(net={**NET, "d_model": 32})
    with pytest.raises(CheckpointError, match=r"is \(11, 16\) there but \(11, 32\)"):
        warm_start(wider, softmax_ckpt)
    deeper = SequenceReversalTask(net={**NET, "num_layers": 3})
    with pytest.raises(CheckpointError, match=r"has no tensor 'net\.encoder\.layers\.2"):
        warm_start(deeper, softmax_ckpt)
    with pytest.raises(CheckpointError, match="no such file"):
        warm_start(SequenceReversalTask(net=NET), tmp_path / "absent.ckpt")
    with pytest.raises(CheckpointError, match="adaptation='lora_scratch'"):
        warm_start(LoRAClassifierTask(adaptation="lora_scratch"), softmax_ckpt)


def test_freeze_except_keeps_only_the_named_parameters_trainable(softmax_ckpt):
    task = SequenceReversalTask(net=NET, attention={"name": "linear"})
    record = warm_start(task, softmax_ckpt, freeze_except=["*.attn.*"])
    trainable = [n for n, p in task.named_parameters() if p.requires_grad]
    assert trainable and all(".attn." in n for n in trainable)
    assert record.frozen > 0 and record.trainable == len(trainable)
    assert "frozen" in record.line()
    with pytest.raises(CheckpointError, match=r"\['\*nope\*'\] matches no parameter"):
        warm_start(SequenceReversalTask(net=NET), softmax_ckpt, freeze_except=["*nope*"])
