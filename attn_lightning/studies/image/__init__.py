"""The image-generation study: PNG grids of trained checkpoints (``samples``).

``python -m attn_lightning.studies.image samples ...`` (``cli``).
"""

from attn_lightning.studies.image.cli import main

__all__ = ["main"]
