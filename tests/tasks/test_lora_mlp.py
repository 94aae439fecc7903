"""LoRA adaptation of the MLP with peft: initial equality, frozen base, merge, export, errors,
and one tiny train.py run per ``configs/lora`` file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel

from attn_lightning.cli import main
from attn_lightning.models.mlp import MLP
from attn_lightning.tasks.lora_mlp import LoRAClassifierTask

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "lora"
DEBUG = ROOT / "configs" / "presets" / "debug.yaml"
STACKED = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "base.yaml")


@pytest.fixture
def base_path(tmp_path) -> Path:
    """A trained-looking base: a seeded MLP with non-zero biases, saved as a plain state dict."""
    torch.manual_seed(0)
    mlp = MLP()
    with torch.no_grad():
        for p in mlp.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = tmp_path / "base.pt"
    torch.save(mlp.state_dict(), path)
    return path


def _base_mlp(path: Path) -> MLP:
    mlp = MLP()
    mlp.load_state_dict(torch.load(path, weights_only=True))
    return mlp


def _lora(path: Path, **kwargs) -> LoRAClassifierTask:
    task = LoRAClassifierTask(adaptation="lora", base_checkpoint=str(path), **kwargs)
    task.load_base(path)
    return task


def _perturb_adapters(task: LoRAClassifierTask) -> None:
    with torch.no_grad():
        for name, p in task.named_parameters():
            if "lora_B" in name:  # B = 0 at initialisation: make the update non-zero
                p.normal_(0, 0.1)


def test_lora_starts_equal_to_the_base(base_path):
    x = torch.rand(8, 28, 28)
    task = _lora(base_path, lora_r=4, lora_dropout=0.1).eval()
    assert torch.equal(task(x), _base_mlp(base_path)(x))


@pytest.mark.parametrize("r", [1, 4, 64])
def test_trainable_count_is_1050_r_with_all_layers_adapted(base_path, r):
    task = _lora(base_path, lora_r=r)
    assert task.num_trainable == 1050 * r
    names = [n for n, p in task.named_parameters() if p.requires_grad]
    assert names and all("lora_A" in n or "lora_B" in n for n in names)


def test_only_adapters_and_saved_head_get_gradients(base_path):
    task = _lora(base_path, lora_r=2, target_modules=["fc1", "fc2"], modules_to_save=["fc3"])
    assert task.num_trainable == 2 * (784 + 64) + 2 * (64 + 64) + 64 * 10 + 10
    _perturb_adapters(task)
    task(torch.rand(4, 28, 28)).square().sum().backward()
    for name, p in task.named_parameters():
        trainable = "lora_" in name or "modules_to_save.default" in name
        assert p.requires_grad == trainable, name
        assert (p.grad is not None and p.grad.abs().sum() > 0) == trainable, name


def test_merged_model_equals_adapted_and_float64_formula(base_path):
    task = _lora(base_path, lora_r=3, lora_alpha=6.0).eval()
    _perturb_adapters(task)
    x = torch.rand(5, 28, 28)
    merged = task.export_merged()
    assert type(merged) is MLP and not any("lora" in n for n, _ in merged.named_parameters())
    torch.testing.assert_close(merged(x), task(x), rtol=1e-5, atol=1e-5)
    # W' = W + (α/r)·B·A, evaluated naively in float64 from the task's own tensors.
    state = {k: v.double() for k, v in task.state_dict().items()}
    h = x.double().flatten(1)
    for i, name in enumerate(("fc1", "fc2", "fc3")):
        prefix = f"net.base_model.model.{name}."
        a, b = state[prefix + "lora_A.default.weight"], state[prefix + "lora_B.default.weight"]
        w = state[prefix + "base_layer.weight"] + (6.0 / 3) * b @ a
        h = h @ w.T + state[prefix + "base_layer.bias"]
        h = h.clamp_min(0) if i < 2 else h
    torch.testing.assert_close(task(x).double(), h, rtol=1e-5, atol=1e-5)


def test_adapter_round_trip_in_peft_format(base_path, tmp_path):
    task = _lora(base_path, lora_r=2, target_modules=["fc1", "fc2"], modules_to_save=["fc3"])
    _perturb_adapters(task)
    with torch.no_grad():
        task.net.base_model.model.fc3.modules_to_save["default"].weight.add_(0.3)
    assert task.export_adapter(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    loaded = PeftModel.from_pretrained(_base_mlp(base_path), str(tmp_path / "adapter")).eval()
    x = torch.rand(6, 28, 28)
    torch.testing.assert_close(loaded(x), task.eval()(x))
    assert not LoRAClassifierTask(adaptation="base").export_adapter(tmp_path / "none")


def test_missing_base_checkpoint_names_path_and_expectation(tmp_path):
    missing = tmp_path / "nope" / "last.ckpt"
    task = LoRAClassifierTask(adaptation="lora", base_checkpoint=str(missing))
    with pytest.raises(FileNotFoundError, match=r"nope/last\.ckpt.*expected the checkpoint of"):
        task.load_base(missing)
    with pytest.raises(ValueError, match=r"needs model\.init_args\.base_checkpoint"):
        LoRAClassifierTask(adaptation="full")


def test_incompatible_base_checkpoints_are_explained(tmp_path, base_path):
    other = tmp_path / "other.pt"
    torch.save(MLP(hidden_sizes=[32, 64]).state_dict(), other)
    task = LoRAClassifierTask(adaptation="full", base_checkpoint=str(other))
    with pytest.raises(
        ValueError, match=r"other\.pt.*fc1\.weight: \(32, 784\) \(expected \(64, 784"
    ):
        task.load_base(other)
    adapted = tmp_path / "adapted.pt"
    torch.save(_lora(base_path).state_dict(), adapted)
    with pytest.raises(ValueError, match="holds a peft-adapted model"):
        task.load_base(adapted)


def test_bad_options_are_rejected():
    with pytest.raises(ValueError, match=r"unknown adaptation 'qlora'; allowed: base, full, lora"):
        LoRAClassifierTask(adaptation="qlora")
    with pytest.raises(ValueError, match=r"target\(s\) fc9 not found.*fc1, fc2, fc3"):
        LoRAClassifierTask(adaptation="lora_scratch", target_modules=["fc9"])
    with pytest.raises(ValueError, match="lora_r must be a positive int"):
        LoRAClassifierTask(adaptation="lora_scratch", lora_r=0)


# ---------------------------------------------------------------------- train.py end to end
def _run(subcommand: str, tmp: Path, *configs: Path, extra: tuple[str, ...] = ()):
    args = [subcommand]
    for config in (CONFIGS / "base.yaml", *configs):
        args += ["--config", str(config)]
    args += [
        "--trainer.enable_progress_bar=false",
        f"--trainer.logger.init_args.save_dir={tmp / 'logs'}",
        f"--checkpoint.root={tmp / 'checkpoints'}",
        *extra,
    ]
    return main(args)


@pytest.mark.usefixtures("cli_workdir")
@pytest.mark.parametrize("config", [None, *STACKED], ids=["base", *(p.stem for p in STACKED)])
def test_fast_dev_run_per_config(config, tmp_path, base_path):
    configs = () if config is None else (config,)
    cli = _run(
        "fit",
        tmp_path,
        *configs,
        extra=(
            "--trainer.fast_dev_run=true",
            "--test_after_fit=true",
            f"--model.init_args.base_checkpoint={base_path}",
        ),
    )
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics["test/loss"]) and 0.0 <= float(metrics["test/acc"]) <= 1.0
    assert float(metrics["test/trainable_params"]) == cli.model.num_trainable


@pytest.mark.usefixtures("cli_workdir")
def test_base_then_lora_then_validate_from_the_lora_checkpoint(tmp_path):
    _run("fit", tmp_path, DEBUG, extra=("--run_name=base",))
    base = tmp_path / "checkpoints" / "debug" / "base" / "last.ckpt"
    cli = _run(
        "fit",
        tmp_path,
        CONFIGS / "lora.yaml",
        DEBUG,
        extra=("--run_name=lora", f"--model.init_args.base_checkpoint={base}"),
    )
    run_dir = tmp_path / "checkpoints" / "debug" / "lora"
    assert (run_dir / "adapter" / "adapter_model.safetensors").is_file()  # AdapterExport
    ckpt = torch.load(run_dir / "last.ckpt", weights_only=True)  # primitive hparams only
    assert ckpt["hyper_parameters"]["lora_r"] == 8
    base.unlink()  # restoring the run's own checkpoint must not need the base any more
    val = _run(
        "validate",
        tmp_path,
        CONFIGS / "lora.yaml",
        DEBUG,
        extra=(f"--ckpt_path={run_dir / 'last.ckpt'}", f"--model.init_args.base_checkpoint={base}"),
    )
    assert val.model.num_trainable == 8 * 1050
    x = torch.rand(3, 28, 28)
    torch.testing.assert_close(val.model.cpu().eval()(x), cli.model.cpu().eval()(x))
