"""Deprecated alias: ``python -m attn_lightning.studies.detection probe``."""

import sys

from attn_lightning.studies.arguments import renamed
from attn_lightning.studies.detection import main

if __name__ == "__main__":
    renamed(
        "python -m attn_lightning.studies.detection_probe",
        "python -m attn_lightning.studies.detection probe",
    )
    main(["probe", *sys.argv[1:]])
