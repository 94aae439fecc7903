"""A hybrid stack through tasks and train.py: checkpoints, resume and warm-start keep it mixed."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.linear import LinearAttention
from attn_lightning.attention.performer import PerformerAttention
from attn_lightning.attention.softmax import SoftmaxAttention
from attn_lightning.cli.warm_start import warm_start
from attn_lightning.tasks import SequenceReversalTask
from tests.runs import CONFIGS, DEBUG, train

NET = {"d_model": 16, "num_heads": 2, "num_layers": 2, "d_ff": 32, "max_len": 32}
HYBRID = "{name: linear, layers: {0: {name: softmax}}}"
SMALL = [
    "--data.init_args.seq_len=6",
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=16",
    "--data.init_args.test_size=16",
    "--data.init_args.batch_size=8",
    "--trainer.max_epochs=5",
    "--model.init_args.net.d_model=16",
    "--model.init_args.net.num_heads=2",
    "--model.init_args.net.d_ff=16",
    f"--model.init_args.attention={HYBRID}",
]


def kinds(task) -> list[type]:
    return [type(layer.attn.backend) for layer in task.net.encoder.layers]


@pytest.mark.usefixtures("cli_workdir")
def test_fit_checkpoint_and_resume_keep_the_mixed_stack(tmp_path):
    base = CONFIGS / "reversal" / "base.yaml"
    first = train(
        "fit",
        tmp_path,
        (base, DEBUG),
        options=SMALL,
        extra=["--run_name=hybrid", "--trainer.max_steps=2"],
    )
    assert kinds(first.model) == [SoftmaxAttention, LinearAttention]
    last = tmp_path / "checkpoints" / "debug" / "hybrid" / "last.ckpt"
    saved = torch.load(last, weights_only=True)  # the layers mapping is primitive
    assert saved["hyper_parameters"]["attention"] == {
        "name": "linear",
        "layers": {0: {"name": "softmax"}},
    }
    # Resume with no attention on the command line: the checkpoint's own is restored.
    options = [o for o in SMALL if "attention" not in o]
    resumed = train(
        "fit",
        tmp_path,
        (base, DEBUG),
        options=options,
        extra=["--run_name=hybrid", f"--ckpt_path={last}", "--trainer.max_steps=4"],
    )
    assert kinds(resumed.model) == [SoftmaxAttention, LinearAttention]
    assert resumed.trainer.global_step == 4
    loaded = SequenceReversalTask.load_from_checkpoint(last, weights_only=True)
    assert kinds(loaded) == [SoftmaxAttention, LinearAttention]


def test_warm_start_into_a_mixed_stack_keeps_only_its_backends_fresh(tmp_path):
    torch.manual_seed(0)
    source = SequenceReversalTask(net=NET)
    path = tmp_path / "softmax.ckpt"
    hparams = {**source.hparams, "_class_path": "attn_lightning.tasks.SequenceReversalTask"}
    torch.save({"state_dict": source.state_dict(), "hyper_parameters": hparams}, path)
    hybrid = SequenceReversalTask(
        net=NET,
        attention={"name": "softmax", "layers": {1: {"name": "performer", "num_features": 8}}},
    )
    assert kinds(hybrid) == [SoftmaxAttention, PerformerAttention]
    record = warm_start(hybrid, path)
    assert record.fresh == ["net.encoder.layers.1.attn.backend.projection_matrix"]
    state = hybrid.state_dict()
    for key in record.loaded:
        assert torch.equal(state[key], source.state_dict()[key]), key
