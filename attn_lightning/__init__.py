"""attn-lightning: train the same experiments with different attention mechanisms."""

__version__ = "0.1.0"
