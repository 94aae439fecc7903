"""One LightningModule per experiment; YAML selects them by class_path."""

from attn_lightning.tasks.adaptation import AdaptedTask
from attn_lightning.tasks.base import AttentionTask
from attn_lightning.tasks.classification import ImageClassificationTask
from attn_lightning.tasks.detection import DetectionTask
from attn_lightning.tasks.image import ImageGenerationTask
from attn_lightning.tasks.lora_mlp import LoRAClassifierTask
from attn_lightning.tasks.lora_reversal import LoRAReversalTask
from attn_lightning.tasks.recall import AssociativeRecallTask
from attn_lightning.tasks.reversal import SequenceReversalTask

__all__ = [
    "AdaptedTask",
    "AssociativeRecallTask",
    "AttentionTask",
    "DetectionTask",
    "ImageClassificationTask",
    "ImageGenerationTask",
    "LoRAClassifierTask",
    "LoRAReversalTask",
    "SequenceReversalTask",
]
