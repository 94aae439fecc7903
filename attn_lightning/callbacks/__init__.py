"""Lightning callbacks: random-feature redraw, run checkpoints, validation-batch logging
(sample tables, image grids, detections) and adapter export."""

from attn_lightning.callbacks.detections import DetectionImages
from attn_lightning.callbacks.images import ImageGrids
from attn_lightning.callbacks.training import (
    FeatureRedraw,
    RunCheckpoint,
    SamplePredictions,
    markdown_table,
    redraw_all_features,
    redraw_generator,
)
from attn_lightning.models.lora import AdapterExport

__all__ = [
    "AdapterExport",
    "DetectionImages",
    "FeatureRedraw",
    "ImageGrids",
    "RunCheckpoint",
    "SamplePredictions",
    "markdown_table",
    "redraw_all_features",
    "redraw_generator",
]
