"""Synthetic shape scenes, the COCO writer, and the COCO loader on the written set."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.data.detection import (
    CocoScenes,
    DetectionDataModule,
    SyntheticScenes,
    main,
    write_coco,
)

SCENES = {"image_size": 32, "num_classes": 5, "min_size": 6, "max_size": 14}


def test_scenes_are_deterministic_from_the_seed():
    a, b = SyntheticScenes(size=6, seed=3, **SCENES), SyntheticScenes(size=6, seed=3, **SCENES)
    c = SyntheticScenes(size=6, seed=4, **SCENES)
    assert torch.equal(a.images, b.images)
    assert all(torch.equal(x, y) for x, y in zip(a.boxes, b.boxes, strict=True))
    assert not torch.equal(a.images, c.images)


def test_targets_are_valid_and_object_counts_in_range():
    data = SyntheticScenes(size=40, seed=0, min_objects=0, max_objects=3, **SCENES)
    counts = [len(lab) for lab in data.labels]
    assert min(counts) == 0 and max(counts) <= 3  # images without objects occur
    for i in range(len(data)):
        image, target = data[i]
        assert image.shape == (3, 32, 32) and image.min() >= 0 and image.max() <= 1
        boxes = target["boxes"]
        assert boxes.shape == (counts[i], 4) and target["labels"].dtype == torch.int64
        assert ((target["labels"] >= 0) & (target["labels"] < 5)).all()
        assert (boxes[:, 2:] > 0).all()
        assert (boxes[:, :2] - boxes[:, 2:] / 2 >= 0).all()
        assert (boxes[:, :2] + boxes[:, 2:] / 2 <= 1 + 1e-6).all()


def test_box_is_the_tight_box_of_the_drawn_object():
    data = SyntheticScenes(size=10, seed=1, min_objects=1, max_objects=1, **SCENES)
    for i in range(len(data)):
        image, target = data[i]
        # Objects are drawn at >= 0.4 in every channel, the canvas stays below 0.15.
        ys, xs = (image.min(dim=0).values >= 0.4).nonzero(as_tuple=True)
        x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
        expected = torch.tensor([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0]) / 32
        torch.testing.assert_close(target["boxes"][0], expected.float())


def test_coco_round_trip_through_torchvision_loader(tmp_path):
    data = SyntheticScenes(size=5, seed=2, min_objects=0, max_objects=3, **SCENES)
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
    dm = DetectionDataModule(source="coco", root=str(tmp_path), image_size=32, batch_size=2)
    dm.setup("fit")
    images, targets = next(iter(dm.val_dataloader()))
    assert images.shape == (2, 3, 32, 32) and len(targets) == 2
    assert dm.num_classes == 3 and len(dm.datasets["test"]) == 2
    synthetic = DetectionDataModule(
        image_size=32, min_size=6, max_size=14, train_size=4, val_size=3, test_size=2, batch_size=2
    )
    synthetic.setup("fit")
    ref_images, _ = next(iter(synthetic.val_dataloader()))
    torch.testing.assert_close(images, ref_images, atol=0.5 / 255 + 1e-6, rtol=0)


def test_missing_coco_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"COCO split 'val' not found.*Nothing is down"):
        CocoScenes(root=tmp_path / "absent", split="val", image_size=32)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_classes": 6}, r"num_classes must be in 1\.\.5"),
        ({"min_objects": 3, "max_objects": 2}, "min_objects <= max_objects"),
        ({"max_size": 40}, "max_size <= image_size"),
    ],
)
def test_bad_scene_options_fail_clearly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SyntheticScenes(size=1, seed=0, **{**SCENES, **kwargs})


def test_bad_source_fails_clearly():
    with pytest.raises(ValueError, match="unknown source 'voc'; allowed: synthetic, coco"):
        DetectionDataModule(source="voc")
