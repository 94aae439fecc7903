"""DETR task end to end through train.py: one fast_dev_run per config, site specs, images."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attn_lightning.callbacks.samples import draw_detections
from attn_lightning.cli import main
from attn_lightning.tasks.detection import DetectionTask, site_specs

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "detection"
BASE = CONFIGS / "base.yaml"
DEBUG = ROOT / "configs" / "presets" / "debug.yaml"
VARIANTS = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "base.yaml")
TINY = [
    "--data.init_args.train_size=8",
    "--data.init_args.val_size=4",
    "--data.init_args.test_size=4",
    "--data.init_args.batch_size=4",
    "--trainer.enable_progress_bar=false",
]


pytestmark = pytest.mark.usefixtures("cli_workdir")


def run(tmp: Path, *configs: Path, extra: tuple[str, ...] = ()):
    args = ["fit"]
    for config in (BASE, *configs, DEBUG):
        args += ["--config", str(config)]
    return main(
        [
            *args,
            *TINY,
            f"--trainer.logger.init_args.save_dir={tmp / 'logs'}",
            f"--checkpoint.root={tmp / 'checkpoints'}",
            *extra,
        ]
    )


def test_the_paper_comparison_has_its_configs():
    assert {p.stem for p in VARIANTS} >= {
        "softmax",
        "softmax_no_projections",
        "optimization_encoder_self",
        "optimization_decoder_self",
        "optimization_decoder_cross",
        "optimization_all",
        "mean",
    }


@pytest.mark.parametrize("config", VARIANTS, ids=[p.stem for p in VARIANTS])
def test_fast_dev_run_per_config(config, tmp_path):
    cli = run(tmp_path, config, extra=("--trainer.fast_dev_run=true", "--test_after_fit=true"))
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics["test/loss"])
    for name in ("test/mAP", "test/AP50", "test/AP75"):
        assert 0.0 <= float(metrics[name]) <= 1.0 or float(metrics[name]) == -1.0


def test_optimization_all_keeps_only_value_and_output_projections(tmp_path):
    # The paper removes the Q and K projections only: every encoder self, decoder self and
    # decoder cross site keeps V and out (E² + E each) and nothing else.
    cli = run(tmp_path, CONFIGS / "optimization_all.yaml", extra=("--trainer.fast_dev_run=true",))
    net = cli.model.hparams.net
    e = net["d_model"]
    sites = net["num_encoder_layers"] + 2 * net["num_decoder_layers"]
    assert cli.model.attention_parameter_count == sites * 2 * (e * e + e)
    assert {spec["name"] for spec in cli.model.site_configs.values()} == {"optimization"}


def test_fit_logs_detection_images_and_checkpoints_by_map(tmp_path):
    cli = run(tmp_path, CONFIGS / "softmax.yaml", extra=("--trainer.max_steps=2", "--run_name=r"))
    assert cli.trainer.checkpoint_callback.monitor == "val/mAP"
    events = EventAccumulator(str(tmp_path / "logs" / "debug" / "r")).Reload()
    assert "detections/val" in events.Tags()["images"]
    assert "val/mAP" in events.Tags()["scalars"]


def test_site_specs_defaults_sites_and_override():
    specs = site_specs(
        attention={"name": "softmax"},
        projections=False,
        sites={"decoder_cross": {"name": "optimization", "projections": False, "lam": 0.1}},
        override={"name": "optimization", "lam": 0.2},
    )
    assert (
        specs["encoder_self"] == specs["decoder_self"] == {"name": "softmax", "projections": False}
    )
    assert specs["decoder_cross"] == {"name": "optimization", "projections": False, "lam": 0.2}
    # Without a name the override goes to the sites of the default backend.
    nameless = site_specs(
        attention={"name": "mean"},
        projections=True,
        sites={"decoder_cross": {"name": "softmax"}},
        override={"chunk_size": 8},
    )
    assert nameless["encoder_self"]["chunk_size"] == 8
    assert "chunk_size" not in nameless["decoder_cross"]


def test_the_model_takes_its_classes_from_the_data(tmp_path):
    cli = run(
        tmp_path, extra=("--data.init_args.scenes.num_classes=4", "--trainer.fast_dev_run=true")
    )
    assert cli.model.num_classes == 4 and cli.model.category_ids == [1, 2, 3, 4]
    assert cli.model.net.class_head.out_features == 5  # + no object


def test_postprocess_scores_exclude_no_object():
    logits = torch.tensor([[[0.0, 2.0, 5.0]]])  # C = 2; the no-object logit is the largest
    boxes = torch.tensor([[[0.5, 0.5, 0.5, 0.25]]])
    (det,) = DetectionTask.postprocess({"pred_logits": logits, "pred_boxes": boxes}, (8, 16))
    prob = logits.softmax(-1)[0, 0]
    assert int(det["labels"][0]) == 1 and float(det["scores"][0]) == pytest.approx(float(prob[1]))
    torch.testing.assert_close(det["boxes"][0], torch.tensor([4.0, 3.0, 12.0, 5.0]))


def test_draw_detections_marks_true_and_predicted_boxes():
    image = torch.zeros(3, 8, 8)
    truth = {"boxes": torch.tensor([[0.5, 0.5, 0.5, 0.5]]), "labels": torch.tensor([0])}
    found = {
        "boxes": torch.tensor([[0.0, 0.0, 4.0, 4.0], [5.0, 5.0, 7.0, 7.0]]),
        "scores": torch.tensor([0.9, 0.1]),
        "labels": torch.tensor([1, 2]),
    }
    drawn = draw_detections(image, truth, found, score_threshold=0.5, upscale=4)
    assert drawn.shape == (3, 32, 32) and drawn.dtype == torch.uint8
    assert drawn[1, 8, 8:24].max() == 255  # lime (0, 255, 0) edge of the true box
    assert drawn[0, 0, 0:16].max() == 255  # red edge of the confident prediction
    assert drawn[0, 20, 20:28].max() == 0  # the 0.1-score prediction is not drawn
