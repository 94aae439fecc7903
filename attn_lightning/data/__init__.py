"""LightningDataModules, one per dataset family."""

from attn_lightning.data.reversal import ReversalDataset, SequenceReversalDataModule

__all__ = ["ReversalDataset", "SequenceReversalDataModule"]
