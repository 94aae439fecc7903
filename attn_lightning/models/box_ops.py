"""Box formats in one place: DETR's normalised (cx, cy, w, h) and the pixel formats around it.

Boxes inside the model, the matcher and the targets are ``cxcywh`` normalised to [0, 1] of the
image; metrics and drawings want corners (``xyxy``) in pixels; COCO files want ``xywh`` (corner +
size) in pixels of the original image. Every conversion goes through torchvision's
``box_convert``; the scaling to pixels is here, once.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.ops import box_convert


def cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """``(…, 4)`` centre + size -> corners, in the same units."""
    return box_convert(boxes, in_fmt="cxcywh", out_fmt="xyxy")


def xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """``(…, 4)`` corners -> centre + size, in the same units."""
    return box_convert(boxes, in_fmt="xyxy", out_fmt="cxcywh")


def xywh_to_cxcywh(boxes: Tensor) -> Tensor:
    """``(…, 4)`` COCO's corner + size -> centre + size, in the same units."""
    return box_convert(boxes, in_fmt="xywh", out_fmt="cxcywh")


def cxcywh_to_xywh(boxes: Tensor) -> Tensor:
    """``(…, 4)`` centre + size -> COCO's corner + size, in the same units."""
    return box_convert(boxes, in_fmt="cxcywh", out_fmt="xywh")


def pixel_scale(
    height: int | float, width: int | float, device: torch.device | None = None
) -> Tensor:
    """``[w, h, w, h]`` (float32): multiplies normalised boxes into pixels of an h×w image."""
    return torch.tensor([width, height, width, height], dtype=torch.float32, device=device)


def to_pixel_corners(boxes: Tensor, height: int, width: int) -> Tensor:
    """Normalised ``cxcywh`` boxes ``(…, 4)`` -> ``xyxy`` in pixels of an h×w image (float32)."""
    return cxcywh_to_xyxy(boxes.float()) * pixel_scale(height, width, boxes.device)


def to_coco_xywh(corners: Tensor, scale_x: float = 1.0, scale_y: float = 1.0) -> Tensor:
    """Pixel ``xyxy`` boxes ``(N, 4)`` -> COCO ``xywh``, rescaled by (scale_x, scale_y) (e.g.
    from the model's input size to the original image's)."""
    scale = torch.tensor([scale_x, scale_y, scale_x, scale_y], dtype=corners.dtype)
    return box_convert(corners * scale.to(corners.device), in_fmt="xyxy", out_fmt="xywh")


__all__ = [
    "cxcywh_to_xywh",
    "cxcywh_to_xyxy",
    "pixel_scale",
    "to_coco_xywh",
    "to_pixel_corners",
    "xywh_to_cxcywh",
    "xyxy_to_cxcywh",
]
