"""Deprecated alias: ``python -m attn_lightning.studies.image samples``."""

import sys

from attn_lightning.studies.arguments import renamed
from attn_lightning.studies.image import main

if __name__ == "__main__":
    renamed(
        "python -m attn_lightning.studies.image_samples",
        "python -m attn_lightning.studies.image samples",
    )
    main(["samples", *sys.argv[1:]])
