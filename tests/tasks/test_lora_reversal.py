"""LoRA on the attention projections of a reversal transformer, and its train.py configs."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import torch
import yaml

from attn_lightning.cli import main
from attn_lightning.tasks.lora_reversal import LoRAReversalTask
from attn_lightning.tasks.reversal import SequenceReversalTask

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "lora_reversal"
STACKED = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "base.yaml")
SMALL = {"net": {"d_model": 16, "num_heads": 2, "num_layers": 2, "d_ff": 32, "max_len": 16}}


def _save_reversal(path: Path, **sizes) -> SequenceReversalTask:
    """A reversal checkpoint as train.py writes it (``net.*`` keys, hyper-parameters)."""
    torch.manual_seed(0)
    task = SequenceReversalTask(attention={"name": "softmax"}, **sizes)
    torch.save({"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams)}, path)
    return task.eval()


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "reversal.ckpt"
    return path, _save_reversal(path, **SMALL)


def _adapted(path: Path, **kwargs) -> LoRAReversalTask:
    options = {"attention": {"name": "softmax"}, **SMALL, **kwargs}
    task = LoRAReversalTask(base_checkpoint=str(path), **options)
    task.load_base(path)
    return task.eval()


def test_lora_starts_equal_to_the_base_in_forward_and_decoding(base):
    path, reversal = base
    task = _adapted(path, lora_r=2)
    source = torch.randint(10, (3, 6))
    target = source.flip(dims=[1])
    assert torch.equal(task(source, target), reversal(source, target))
    # step() decoding reaches the wrapped model through peft's attribute forwarding.
    assert torch.equal(task.predict_reversal(source), reversal.predict_reversal(source))


@pytest.mark.parametrize("r", [1, 8])
def test_only_q_and_v_adapters_train(base, r):
    task = _adapted(base[0], lora_r=r)
    # 2 layers × (q_proj, v_proj) × r·(d_in + d_out)
    assert task.num_trainable == 2 * 2 * r * (16 + 16)
    names = [n for n, p in task.named_parameters() if p.requires_grad]
    assert len(names) == 8 and all(("q_proj.lora_" in n or "v_proj.lora_" in n) for n in names)


def test_full_adaptation_trains_everything_from_the_checkpoint(base):
    path, reversal = base
    task = _adapted(path, adaptation="full")
    assert task.num_trainable == sum(p.numel() for p in reversal.parameters())
    for key, value in reversal.state_dict().items():
        assert torch.equal(task.state_dict()[key], value), key


def test_incompatible_reversal_checkpoints_are_explained(base, tmp_path):
    path, _ = base
    with pytest.raises(ValueError, match=r"attention=\{'name': 'softmax'\}.*expected"):
        _adapted(path, attention={"name": "linear"})
    with pytest.raises(ValueError, match=r"net\.positional='sinusoidal' \(expected 'learned'\)"):
        _adapted(path, net={**SMALL["net"], "positional": "learned"})
    with pytest.raises(ValueError, match=r"is incompatible with the model.*d_model=32"):
        _adapted(path, net={**SMALL["net"], "d_model": 32})
    with pytest.raises(FileNotFoundError, match=r"missing\.ckpt"):
        _adapted(tmp_path / "missing.ckpt")
    with pytest.raises(ValueError, match=r"adaptation='lora' needs .*base_checkpoint"):
        LoRAReversalTask(**SMALL)


def test_reversal_options_come_from_the_parent_signature(tmp_path, monkeypatch, capsys):
    """``**kwargs`` reach ``SequenceReversalTask``: in the CLI's options and in the hparams."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(CONFIGS / "base.yaml"), "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
    reversal = inspect.signature(SequenceReversalTask.__init__).parameters
    linked = {"num_symbols", "seq_len"}  # set from the DataModule, not printed
    assert set(reversal) - {"self", *linked} <= set(printed)
    assert printed["net"]["d_model"] == 64 and printed["weight_decay"] == 0.0
    task = LoRAReversalTask(
        adaptation="lora_scratch", net={"d_model": 32}, decode_method="recompute"
    )
    assert set(reversal) - {"self", "attention_override"} <= set(task.hparams)
    assert task.hparams["net"]["d_model"] == 32 and task.hparams["decode_method"] == "recompute"
    assert task.hparams["warmup_steps"] == 0 and task.hparams["lora_r"] == 4


@pytest.mark.parametrize("config", [None, *STACKED], ids=["base", *(p.stem for p in STACKED)])
def test_fast_dev_run_per_config(config, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    init = yaml.safe_load((CONFIGS / "base.yaml").read_text())["model"]["init_args"]
    _save_reversal(tmp_path / "reversal.ckpt", net=init["net"])
    args = ["fit", "--config", str(CONFIGS / "base.yaml")]
    args += [] if config is None else ["--config", str(config)]
    cli = main(
        [
            *args,
            f"--model.init_args.base_checkpoint={tmp_path / 'reversal.ckpt'}",
            "--data.init_args.train_size=32",
            "--data.init_args.val_size=16",
            "--data.init_args.test_size=16",
            "--data.init_args.batch_size=16",
            "--trainer.fast_dev_run=true",
            "--trainer.enable_progress_bar=false",
            "--test_after_fit=true",
            f"--trainer.logger.init_args.save_dir={tmp_path / 'logs'}",
            f"--checkpoint.root={tmp_path / 'checkpoints'}",
        ]
    )
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics["test/loss"]) and 0.0 <= float(metrics["test/token_acc"]) <= 1
    assert float(metrics["test/trainable_params"]) == cli.model.num_trainable
