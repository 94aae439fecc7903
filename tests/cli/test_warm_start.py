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
    with pytest.raises(CheckpointError, match=r"^--init_from '.*absent\.ckpt': no such file"):
        warm_start(SequenceReversalTask(net=NET), tmp_path / "absent.ckpt")
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"hello")  # named by the flag that gave it, not --ckpt_path
    with pytest.raises(CheckpointError, match=r"^--init_from '.*corrupt\.ckpt' is corrupt"):
        warm_start(SequenceReversalTask(net=NET), corrupt)
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


# ---------------------------------------------------------------------------- through train.py
def _fit(tmp_path, *extra):
    from tests.runs import CONFIGS, DEBUG, train

    base = CONFIGS / "reversal" / "base.yaml"
    small = ["--data.init_args.train_size=256", "--data.init_args.val_size=16"]
    small += ["--data.init_args.test_size=16", "--model.init_args.net.d_model=16"]
    small += ["--model.init_args.net.num_heads=2", "--model.init_args.net.d_ff=16"]
    return train("fit", tmp_path, (base, DEBUG), options=small, extra=extra)


@pytest.mark.usefixtures("cli_workdir")
def test_fit_init_from_starts_a_fresh_run_with_another_backend(tmp_path, caplog):
    source = _fit(tmp_path, "--run_name=softmax")
    ckpt = tmp_path / "checkpoints" / "debug" / "softmax" / "last.ckpt"
    assert ckpt.is_file() and source.trainer.global_step == 4
    performer = "{name: performer, num_features: 8}"
    with caplog.at_level("INFO", logger="attn_lightning"):
        cli = _fit(
            tmp_path,
            "--run_name=warm",
            f"--init_from={ckpt}",
            f"--model.init_args.attention={performer}",
            "--trainer.max_steps=2",
        )
    assert "warm start from" in caplog.text and "new (attention backends)" in caplog.text
    assert cli.model.attention_config["name"] == "performer"
    assert cli.trainer.global_step == 2  # step 0, its own schedule: not the source's 4 steps
    saved = torch.load(tmp_path / "checkpoints" / "debug" / "warm" / "last.ckpt", weights_only=True)
    assert saved["init_from"] == str(ckpt) and saved["global_step"] == 2
    # the optimizer state is the new run's: one state per trained parameter, 2 steps taken
    (state,) = saved["optimizer_states"]
    assert all(int(s["step"]) == 2 for s in state["state"].values())


@pytest.mark.usefixtures("cli_workdir")
def test_init_from_with_ckpt_path_or_outside_fit_is_one_clear_error(tmp_path):
    _fit(tmp_path, "--run_name=softmax")
    ckpt = tmp_path / "checkpoints" / "debug" / "softmax" / "last.ckpt"
    with pytest.raises(ValueError, match="give one of them"):
        _fit(tmp_path, "--run_name=x", f"--init_from={ckpt}", f"--ckpt_path={ckpt}")
    with pytest.raises(ValueError, match="--freeze_except goes with --init_from"):
        _fit(tmp_path, "--run_name=y", "--freeze_except=['*attn*']")
