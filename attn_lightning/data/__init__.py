"""LightningDataModules, one per dataset family."""

from attn_lightning.data.detection import DetectionDataModule
from attn_lightning.data.domains import DomainImageDataModule
from attn_lightning.data.images import load_images
from attn_lightning.data.pixels import PixelDataModule
from attn_lightning.data.recall import AssociativeRecallDataModule
from attn_lightning.data.reversal import (
    ReversalDataset,
    SequenceReversalDataModule,
    ShiftedReversalDataModule,
)
from attn_lightning.data.scenes import SceneSpec, SyntheticScenes

__all__ = [
    "AssociativeRecallDataModule",
    "DetectionDataModule",
    "DomainImageDataModule",
    "PixelDataModule",
    "ReversalDataset",
    "SceneSpec",
    "SequenceReversalDataModule",
    "ShiftedReversalDataModule",
    "SyntheticScenes",
    "load_images",
]
