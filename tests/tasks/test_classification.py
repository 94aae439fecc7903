"""The digits classification task: one training step, its configs through train.py, errors."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from attn_lightning.cli import main
from attn_lightning.tasks import ImageClassificationTask

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "digits"
BASE = CONFIGS / "base.yaml"
DEBUG = ROOT / "configs" / "presets" / "debug.yaml"
VARIANTS = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "base.yaml")
SMALL = {"net": {"d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 32}}


def run(tmp: Path, *configs: Path, extra: tuple[str, ...] = ()):
    args = ["fit"]
    for config in (BASE, *configs, DEBUG):
        args += ["--config", str(config)]
    return main(
        [
            *args,
            "--data.init_args.batch_size=16",
            "--trainer.enable_progress_bar=false",
            f"--trainer.logger.init_args.save_dir={tmp / 'logs'}",
            f"--checkpoint.root={tmp / 'checkpoints'}",
            *extra,
        ]
    )


def test_one_training_step_lowers_the_loss_on_its_batch():
    torch.manual_seed(0)
    task = ImageClassificationTask(**SMALL)
    batch = {"image": torch.rand(8, 8, 8), "label": torch.arange(8)}
    optimizer = torch.optim.AdamW(task.parameters(), lr=1e-2)
    with pytest.warns(UserWarning, match="self.log"):  # no trainer here to log to
        loss = task.training_step(batch, 0)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        after = torch.nn.functional.cross_entropy(task(batch["image"]), batch["label"])
    assert torch.isfinite(loss) and after < loss


def test_predictions_csv_has_one_row_per_example(tmp_path):
    task = ImageClassificationTask(**SMALL).eval()
    batch = {"image": torch.rand(3, 8, 8), "label": torch.tensor([1, 2, 3])}
    out = task.predict_step(batch, 0)
    rows = [{key: value[i] for key, value in out.items()} for i in range(3)]
    (path,) = task.save_predictions(rows, [5, 6, 7], tmp_path)
    lines = list(csv.reader(path.open()))
    assert lines[0][:4] == ["index", "label", "prediction", "p_0"] and len(lines[0]) == 13
    assert [line[0] for line in lines[1:]] == ["5", "6", "7"]
    assert sum(float(p) for p in lines[1][3:]) == pytest.approx(1.0)


def test_the_comparison_has_its_configs():
    assert {p.stem for p in VARIANTS} >= {"optimization", "softmax_no_qk", "pool"}
    paper = yaml.safe_load((CONFIGS / "optimization.yaml").read_text())["model"]["init_args"]
    control = yaml.safe_load((CONFIGS / "softmax_no_qk.yaml").read_text())["model"]["init_args"]
    assert paper["net"]["projections"] == control["net"]["projections"] == "no_qk"
    assert paper["attention"]["name"] == "optimization"
    assert control["attention"] == {"name": "softmax"}


@pytest.mark.usefixtures("cli_workdir")
@pytest.mark.parametrize("config", [None, *VARIANTS], ids=["base", *(p.stem for p in VARIANTS)])
def test_fast_dev_run_per_config(config, tmp_path):
    configs = () if config is None else (config,)
    record = tmp_path / "metrics.json"
    cli = run(
        tmp_path,
        *configs,
        extra=("--trainer.fast_dev_run=true", "--test_after_fit=true", f"--metrics_file={record}"),
    )
    metrics = json.loads(record.read_text())
    assert {"train/loss", "val/loss", "val/acc"} <= set(metrics["metrics"])
    test = metrics["test"]
    assert math.isfinite(test["test/loss"]) and 0.0 <= test["test/acc"] <= 1.0
    if config is not None and config.stem == "optimization":
        layer = cli.model.net.encoder.layers[0].attn
        assert layer.backend.name == "optimization" and layer.q_proj is None


@pytest.mark.usefixtures("cli_workdir")
def test_the_model_takes_image_size_and_classes_from_the_data(tmp_path):
    cli = run(tmp_path, extra=("--trainer.fast_dev_run=true", "--data.init_args.image_size=12"))
    assert cli.model.net.image_size == 12 and cli.model.hparams["image_size"] == 12
