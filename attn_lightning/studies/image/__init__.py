"""The image-generation study: PNG grids of checkpoints (``samples``) and tables of its runs'
records (``tables``); ``python -m attn_lightning.studies.image`` (``cli``)."""

from attn_lightning.studies.image.cli import main

__all__ = ["main"]
