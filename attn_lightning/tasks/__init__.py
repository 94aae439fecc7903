"""One LightningModule per experiment; YAML selects them by class_path."""

from attn_lightning.tasks.base import AttentionTask, resolve_attention
from attn_lightning.tasks.reversal import SequenceReversalTask

__all__ = ["AttentionTask", "SequenceReversalTask", "resolve_attention"]
