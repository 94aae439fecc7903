"""``train.py predict`` per experiment: a tiny fit, then predict from its checkpoint through the
CLI, and the files each task writes under ``logs/<experiment>/<run>/predictions/``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from attn_lightning.cli import main
from attn_lightning.data.scenes import SceneSpec, SyntheticScenes, write_coco
from attn_lightning.tasks.detection import DetectionTask

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
DEBUG = CONFIGS / "presets" / "debug.yaml"
SPLIT_SIZES = [
    "--data.init_args.train_size=32",
    "--data.init_args.val_size=16",
    "--data.init_args.test_size=20",
]


pytestmark = pytest.mark.usefixtures("cli_workdir")


def fit_then_predict(tmp: Path, experiment: str, *options: str, predict: tuple[str, ...] = ()):
    """Fit ``configs/<experiment>/base.yaml`` for a few steps, predict the whole test split from
    its last checkpoint; return the predict CLI and its predictions folder."""
    common = ["--config", str(CONFIGS / experiment / "base.yaml"), "--config", str(DEBUG)]
    common += [
        *options,
        "--trainer.enable_progress_bar=false",
        f"--trainer.logger.init_args.save_dir={tmp / 'logs'}",
        f"--checkpoint.root={tmp / 'checkpoints'}",
    ]
    fit = ["--run_name=fit", "--trainer.max_steps=2", "--trainer.limit_train_batches=2"]
    main(["fit", *common, *fit])
    ckpt = tmp / "checkpoints" / "debug" / "fit" / "last.ckpt"
    cli = main(
        [
            "predict",
            *common,
            "--run_name=predict",
            f"--ckpt_path={ckpt}",
            "--trainer.limit_predict_batches=1.0",
            *predict,
        ]
    )
    folder = tmp / "logs" / "debug" / "predict" / "predictions"
    assert cli.trainer.log_dir == str(folder.parent)
    return cli, folder


def _writer(cli):
    (writer,) = [c for c in cli.trainer.callbacks if hasattr(c, "written")]
    return writer


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def _tokens(text: str) -> torch.Tensor:
    return torch.tensor([int(t) for t in text.split()])


def _check_reversal(cli, folder: Path, *, shift: int) -> None:
    assert _writer(cli).written == [folder / "predictions.csv"]
    rows = _rows(folder / "predictions.csv")
    test = cli.datamodule.datasets["test"]
    assert [int(r["index"]) for r in rows] == list(range(len(test))) == list(range(20))
    for row, source, target in zip(rows, test.source, test.target, strict=True):
        assert torch.equal(_tokens(row["source"]), source)
        assert torch.equal(_tokens(row["target"]), target)
        assert torch.equal(target, (source.flip(0) + shift) % 10)
        assert row["correct"] == str(int(torch.equal(_tokens(row["prediction"]), target)))
    greedy = cli.model.predict_reversal(test.source[:3])
    for row, expected in zip(rows[:3], greedy, strict=True):
        assert torch.equal(_tokens(row["prediction"]), expected)


def test_reversal_writes_greedy_predictions_csv(tmp_path):
    cli, folder = fit_then_predict(
        tmp_path,
        "reversal",
        *SPLIT_SIZES,
        "--data.init_args.seq_len=6",
        "--data.init_args.batch_size=8",
    )
    _check_reversal(cli, folder, shift=0)


def test_recall_writes_each_query_its_answer_and_the_truth(tmp_path):
    cli, folder = fit_then_predict(
        tmp_path, "recall", *SPLIT_SIZES, "--data.init_args.batch_size=8"
    )
    assert _writer(cli).written == [folder / "predictions.csv"]
    rows = _rows(folder / "predictions.csv")
    examples = cli.datamodule.datasets["test"].examples
    assert len(rows) == 20 * 4  # one row per query: 4 pairs, each key queried once
    logits = cli.model(examples.inputs, examples.positions)  # (20, 4, V)
    for i, row in enumerate(rows):
        index, position = int(row["index"]), int(row["position"])
        assert index == i // 4 and position == int(examples.positions[index, i % 4])
        assert int(row["query"]) == int(examples.inputs[index, position])
        key = examples.inputs[index].tolist().index(int(row["query"]))  # where the pair stands
        assert int(row["distance"]) == position - (key + 1)  # after the key's value
        assert int(row["target"]) == int(examples.labels[index, position])
        assert int(row["prediction"]) == int(logits[index, i % 4].argmax())
        assert row["correct"] == str(int(row["prediction"] == row["target"]))


def test_lora_reversal_writes_shifted_targets(tmp_path):
    cli, folder = fit_then_predict(
        tmp_path,
        "lora_reversal",
        *SPLIT_SIZES,
        "--model.init_args.adaptation=lora_scratch",  # no base checkpoint needed
        "--data.init_args.seq_len=6",
        "--data.init_args.batch_size=8",
    )
    _check_reversal(cli, folder, shift=1)


def test_lora_classifier_writes_class_probabilities(tmp_path):
    cli, folder = fit_then_predict(tmp_path, "lora", "--data.init_args.batch_size=64")
    rows = _rows(folder / "predictions.csv")
    test = cli.datamodule.datasets["test"]
    assert len(rows) == len(test)
    assert list(rows[0]) == ["index", "label", "prediction", *(f"p_{c}" for c in range(10))]
    labels = test.tensors[1]
    for index, row in enumerate(rows):
        assert int(row["index"]) == index and int(row["label"]) == int(labels[index])
        p = torch.tensor([float(row[f"p_{c}"]) for c in range(10)])
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-5)
        assert int(p.argmax()) == int(row["prediction"])
    logits = cli.model(test.tensors[0][:4])
    assert [int(r["prediction"]) for r in rows[:4]] == logits.argmax(-1).tolist()


def test_image_writes_completion_and_sample_grids_and_tensors(tmp_path):
    cli, folder = fit_then_predict(
        tmp_path,
        "image",
        "--model.init_args.net.d_model=16",
        "--model.init_args.net.d_ff=32",
        "--model.init_args.net.num_layers=1",
        "--data.init_args.batch_size=8",
        predict=("--trainer.limit_predict_batches=2",),  # sampling is the slow part
    )
    names = ["completions.pt", "completions.png", "samples.pt", "samples.png"]
    assert _writer(cli).written == [folder / name for name in names]
    for name in ("completions.png", "samples.png"):
        with Image.open(folder / name) as image:
            image.load()
            assert image.size[0] > 0 and image.size[1] > 0
    saved = torch.load(folder / "completions.pt", weights_only=True)
    test = cli.datamodule.datasets["test"]
    assert saved["index"].tolist() == list(range(16))
    assert torch.equal(saved["pixels"], test.pixels[:16])
    k = saved["observed_pixels"]
    assert k == cli.model.observed_pixels and saved["completion"].shape == (16, 64)
    assert torch.equal(saved["completion"][:, :k], saved["pixels"][:, :k])
    samples = torch.load(folder / "samples.pt", weights_only=True)["samples"]
    assert samples.shape == (16, 64) and samples.min() >= 0 and samples.max() < 256


DETECTION = [*SPLIT_SIZES, "--data.init_args.batch_size=8"]


def _check_coco_results(results: list, image_ids: set[int], categories: set[int], size: int):
    assert {r["image_id"] for r in results} == image_ids
    for r in results:
        assert set(r) == {"image_id", "category_id", "bbox", "score"}
        x, y, w, h = r["bbox"]
        assert w >= 0 and h >= 0 and x >= -0.01 and y >= -0.01
        assert x + w <= size + 0.01 and y + h <= size + 0.01
        assert r["category_id"] in categories and 0 <= r["score"] <= 1


def test_detection_writes_coco_results_json(tmp_path):
    cli, folder = fit_then_predict(tmp_path, "detection", *DETECTION)
    results = json.loads((folder / "detections.json").read_text())
    queries = cli.model.hparams["net"]["num_queries"]
    assert len(results) == 20 * queries
    _check_coco_results(results, set(range(20)), {1, 2, 3}, size=48)


def test_detection_on_a_coco_folder_maps_back_ids_and_sizes(tmp_path):
    # A COCO folder whose category ids are not labels + 1: predictions must use its own ids.
    root = tmp_path / "coco"
    for index, split in enumerate(("train", "val", "test")):
        scenes = SyntheticScenes(
            size=6, seed=index, spec=SceneSpec(image_size=48, min_size=9, max_size=21)
        )
        path = write_coco(scenes, root, split)
        data = json.loads(path.read_text())
        for item in data["annotations"] + data["categories"]:
            key = "category_id" if "category_id" in item else "id"
            item[key] *= 10
        path.write_text(json.dumps(data))
    _, folder = fit_then_predict(
        tmp_path,
        "detection",
        "--data.init_args.source=coco",
        f"--data.init_args.root={root}",
        "--data.init_args.scenes.image_size=32",  # model input 32², boxes written in the files' 48²
        "--data.init_args.batch_size=4",
    )
    results = json.loads((folder / "detections.json").read_text())
    _check_coco_results(results, set(range(6)), {10, 20, 30}, size=48)
    from faster_coco_eval import COCO

    truth = COCO(str(root / "annotations" / "instances_test.json"))
    assert len(truth.loadRes(results).getAnnIds()) == len(results)


def test_detection_boxes_scale_to_the_original_image(tmp_path):
    found = {
        "boxes": torch.tensor([[4.0, 8.0, 12.0, 16.0]]),  # xyxy in the 32² input
        "scores": torch.tensor([0.75]),
        "labels": torch.tensor([1]),
        "image_id": torch.tensor(7),
        "input_size": torch.tensor([32, 32]),
        "orig_size": torch.tensor([48, 96]),  # (H, W) of the original image
    }
    task = DetectionTask(num_classes=2, category_ids=[10, 20])
    (path,) = task.save_predictions([found], [0], tmp_path)
    (result,) = json.loads(path.read_text())
    assert result == {
        "image_id": 7,
        "category_id": 20,
        "bbox": [12.0, 12.0, 24.0, 12.0],
        "score": 0.75,
    }


def test_detection_category_ids_default_to_label_plus_one_and_must_match_the_classes():
    assert DetectionTask(num_classes=3).category_ids == [1, 2, 3]
    with pytest.raises(ValueError, match=r"category_ids has 2 ids for num_classes=3"):
        DetectionTask(num_classes=3, category_ids=[4, 5])
