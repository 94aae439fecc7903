"""The COCO writer, the COCO loader on the written set, and the detection DataModule."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from attn_lightning.data.detection import CocoScenes, DetectionDataModule
from attn_lightning.data.scenes import SceneSpec, SyntheticScenes, main, write_coco

SCENES = SceneSpec(image_size=32, num_classes=5, min_size=6, max_size=14)


def test_coco_round_trip_through_torchvision_loader(tmp_path):
    data = SyntheticScenes(size=5, seed=2, spec=replace(SCENES, min_objects=0))
    write_coco(data, tmp_path, "val")
    coco = CocoScenes(root=tmp_path, split="val", image_size=32)
    assert len(coco) == len(data) and coco.categories == data.categories
    for i in range(len(data)):
        (image, target), (ref_image, ref) = coco[i], data[i]
        torch.testing.assert_close(image, ref_image, atol=0.5 / 255 + 1e-6, rtol=0)
        torch.testing.assert_close(target["boxes"], ref["boxes"], atol=1e-5, rtol=0)
        assert torch.equal(target["labels"], ref["labels"])


def test_datamodule_reads_the_written_coco_folder(tmp_path):
    main(
        [
            "--out",
            str(tmp_path),
            "--sizes",
            "4",
            "3",
            "2",
            "--options",
            '{"image_size": 32, "min_size": 6, "max_size": 14}',
        ]
    )
    small = SceneSpec(image_size=32, min_size=6, max_size=14)
    dm = DetectionDataModule(source="coco", root=str(tmp_path), scenes=small, batch_size=2)
    dm.setup("fit")
    images, targets = next(iter(dm.val_dataloader()))
    assert images.shape == (2, 3, 32, 32) and len(targets) == 2
    assert dm.num_classes == 3 and len(dm.datasets["test"]) == 2
    assert dm.category_ids == [1, 2, 3]  # write_coco's ids: label + 1
    assert targets[0]["orig_size"].tolist() == [32, 32]  # the file's size, for prediction files
    synthetic = DetectionDataModule(
        scenes=small, train_size=4, val_size=3, test_size=2, batch_size=2
    )
    synthetic.setup("fit")
    ref_images, _ = next(iter(synthetic.val_dataloader()))
    torch.testing.assert_close(images, ref_images, atol=0.5 / 255 + 1e-6, rtol=0)


def test_missing_coco_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"COCO split 'val' not found.*Nothing is down"):
        CocoScenes(root=tmp_path / "absent", split="val", image_size=32)


def test_bad_source_fails_clearly():
    with pytest.raises(ValueError, match="unknown source 'voc'; allowed: synthetic, coco"):
        DetectionDataModule(source="voc")


def test_category_ids_come_from_the_annotations_before_setup(tmp_path):
    data = SyntheticScenes(size=2, seed=0, spec=SCENES)
    write_coco(data, tmp_path, "train")
    path = tmp_path / "annotations" / "instances_train.json"
    tree = json.loads(path.read_text())
    for category in tree["categories"]:
        category["id"] *= 10
    path.write_text(json.dumps(tree))
    dm = DetectionDataModule(source="coco", root=str(tmp_path), scenes=SceneSpec(num_classes=4))
    assert dm.category_ids == [10, 20, 30, 40, 50] and dm.num_classes == 5
    assert DetectionDataModule(scenes=SceneSpec(num_classes=2)).category_ids == [1, 2]
    absent = DetectionDataModule(source="coco", root=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match=r"instances_train\.json not found"):
        _ = absent.num_classes
