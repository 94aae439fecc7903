"""The image-generation study: PNG grids of checkpoints (``samples``) and tables of its runs'
records (``tables``); ``python -m lab.studies.image`` (``cli``)."""

from lab.studies.image.cli import main

__all__ = ["main"]
