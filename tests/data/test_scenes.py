"""Synthetic shape scenes: determinism, valid targets, tight boxes, option errors."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.data.scenes import SceneSpec, SyntheticScenes

SCENES = {"image_size": 32, "num_classes": 5, "min_size": 6, "max_size": 14}


def test_scenes_are_deterministic_from_the_seed():
    a, b = (
        SyntheticScenes(size=6, seed=3, spec=SceneSpec(**SCENES)),
        SyntheticScenes(size=6, seed=3, spec=SceneSpec(**SCENES)),
    )
    c = SyntheticScenes(size=6, seed=4, spec=SceneSpec(**SCENES))
    assert torch.equal(a.images, b.images)
    assert all(torch.equal(x, y) for x, y in zip(a.boxes, b.boxes, strict=True))
    assert not torch.equal(a.images, c.images)


def test_targets_are_valid_and_object_counts_in_range():
    data = SyntheticScenes(size=40, seed=0, spec=SceneSpec(min_objects=0, max_objects=3, **SCENES))
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
    data = SyntheticScenes(size=10, seed=1, spec=SceneSpec(min_objects=1, max_objects=1, **SCENES))
    for i in range(len(data)):
        image, target = data[i]
        # Objects are drawn at >= 0.4 in every channel, the canvas stays below 0.15.
        ys, xs = (image.min(dim=0).values >= 0.4).nonzero(as_tuple=True)
        x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
        expected = torch.tensor([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0]) / 32
        torch.testing.assert_close(target["boxes"][0], expected.float())


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
        SceneSpec(**{**SCENES, **kwargs})
