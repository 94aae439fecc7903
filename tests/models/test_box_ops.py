"""Box formats: every conversion between DETR's normalised cxcywh and the pixel formats."""

from __future__ import annotations

import torch

from attn_lightning.models.box_ops import (
    cxcywh_to_xywh,
    cxcywh_to_xyxy,
    pixel_scale,
    to_coco_xywh,
    to_pixel_corners,
    xywh_to_cxcywh,
    xyxy_to_cxcywh,
)


def test_conversions_by_hand():
    box = torch.tensor([[0.5, 0.25, 0.2, 0.1]])  # cx, cy, w, h
    torch.testing.assert_close(cxcywh_to_xyxy(box), torch.tensor([[0.4, 0.2, 0.6, 0.3]]))
    torch.testing.assert_close(cxcywh_to_xywh(box), torch.tensor([[0.4, 0.2, 0.2, 0.1]]))
    torch.testing.assert_close(xyxy_to_cxcywh(cxcywh_to_xyxy(box)), box)
    torch.testing.assert_close(xywh_to_cxcywh(cxcywh_to_xywh(box)), box)


def test_pixels_are_width_for_x_and_height_for_y():
    assert pixel_scale(48, 96).tolist() == [96.0, 48.0, 96.0, 48.0]
    box = torch.tensor([[0.5, 0.5, 0.5, 0.25]], dtype=torch.float64)
    corners = to_pixel_corners(box, 48, 96)
    assert corners.dtype == torch.float32
    assert corners.tolist() == [[24.0, 18.0, 72.0, 30.0]]


def test_coco_boxes_rescale_to_the_original_image():
    corners = torch.tensor([[4.0, 8.0, 12.0, 16.0]])  # in a 32² input
    assert to_coco_xywh(corners, 96 / 32, 48 / 32).tolist() == [[12.0, 12.0, 24.0, 12.0]]
