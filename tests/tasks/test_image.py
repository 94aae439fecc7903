"""Image generation task: bits/dim, completion, fast_dev_run per backend."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from attn_lightning.models.pixel import bits_per_dim
from attn_lightning.tasks.image import ImageGenerationTask
from tests.runs import SMOKE, smoke_fit, train

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
BASE = CONFIGS / "image" / "base.yaml"
DEBUG = CONFIGS / "presets" / "debug.yaml"
# Backend overlays set the attention; the other overlays (size28.yaml) change sizes only.
BACKENDS = sorted(
    p
    for p in (CONFIGS / "image").glob("*.yaml")
    if p.name != "base.yaml"
    if "attention" in ((yaml.safe_load(p.read_text()).get("model") or {}).get("init_args") or {})
)
SIZE28 = CONFIGS / "image" / "size28.yaml"
TINY = ["--data.init_args.batch_size=8", "--trainer.enable_progress_bar=false"]
SMALL = {"net": {"d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 32}, "levels": 16}


pytestmark = pytest.mark.usefixtures("cli_workdir")


def run(subcommand, tmp, *configs, extra=()):
    return train(subcommand, tmp, (BASE, *configs), options=TINY, extra=extra)


def test_every_paper_backend_has_a_config():
    assert {p.stem for p in BACKENDS} == {"softmax", "linear", "performer", "polysketch"}


@pytest.mark.parametrize("config", BACKENDS, ids=[p.stem for p in BACKENDS])
def test_fast_dev_run_per_backend(config, tmp_path):
    cli = smoke_fit(run, config, tmp_path)
    metrics = cli.trainer.callback_metrics
    bpd = float(metrics["test/bits_per_dim"])
    assert 0 < bpd < 9 and math.isfinite(float(metrics["test/completion_bpd"]))
    assert float(metrics["test/loss"]) == bpd


def test_size28_overlay_trains_at_784_tokens_with_the_mixture(tmp_path):
    cli = run(
        "fit",
        tmp_path,
        SIZE28,
        CONFIGS / "image" / "linear.yaml",
        DEBUG,
        extra=SMOKE,
    )
    assert (
        cli.model.hparams.image_size == 28 and cli.model.hparams.net["output"] == "logistic_mixture"
    )
    assert cli.datamodule.image_size == 28
    assert math.isfinite(float(cli.trainer.callback_metrics["test/bits_per_dim"]))


def test_the_model_takes_image_size_and_levels_from_the_data(tmp_path):
    # Stated once, by the DataModule: the model takes them from its link.
    cli = run(
        "fit",
        tmp_path,
        DEBUG,
        extra=(
            "--trainer.fast_dev_run=true",
            "--data.init_args.image_size=6",
            "--data.init_args.levels=16",
        ),
    )
    assert (cli.model.image_size, cli.model.levels, cli.model.net.seq_len) == (6, 16, 36)
    assert cli.model.hparams["image_size"] == 6


@torch.no_grad()
def test_bits_per_dim_and_completion_bpd():
    torch.manual_seed(0)
    task = ImageGenerationTask(attention={"name": "linear"}, image_size=4, **SMALL).eval()
    torch.nn.init.zeros_(task.net.net.head.weight)
    torch.nn.init.zeros_(task.net.net.head.bias)
    pixels = torch.randint(16, (3, 16))
    assert abs(float(bits_per_dim(task(pixels))) - 4.0) < 1e-5  # uniform over 16 levels
    task = ImageGenerationTask(attention={"name": "linear"}, image_size=4, **SMALL).eval()
    log_lik = task(pixels)  # (B, N) nats
    k = task.observed_pixels
    assert k == 8  # round(0.38 · 4) = 2 rows of 4
    expected = -log_lik[:, k:].sum() / (3 * (16 - k)) / math.log(2)
    torch.testing.assert_close(bits_per_dim(log_lik[:, k:]), expected)


def test_observed_pixels_default_and_errors():
    assert ImageGenerationTask(image_size=8, **SMALL).observed_pixels == 24
    assert ImageGenerationTask(image_size=28, **SMALL).observed_pixels == 308
    assert ImageGenerationTask(image_size=8, observed_pixels=0, **SMALL).observed_pixels == 0
    with pytest.raises(ValueError, match="observed_pixels"):
        ImageGenerationTask(image_size=4, observed_pixels=16, **SMALL)


def test_completion_keeps_the_observed_pixels_and_sampling_is_seeded():
    torch.manual_seed(0)
    task = ImageGenerationTask(
        attention={"name": "performer", "num_features": 8}, image_size=4, **SMALL
    ).eval()
    pixels = torch.randint(16, (2, 16))
    completions = task.complete(
        pixels, num_completions=3, generator=torch.Generator().manual_seed(0)
    )
    assert completions.shape == (2, 3, 16)
    assert torch.equal(completions[:, :, :8], pixels[:, None, :8].expand(-1, 3, -1))
    samples = [task.sample(5, generator=torch.Generator().manual_seed(1)) for _ in range(2)]
    assert samples[0].shape == (5, 16) and torch.equal(samples[0], samples[1])
