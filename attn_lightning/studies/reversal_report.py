"""Deprecated alias: ``python -m attn_lightning.studies.reversal report``."""

import sys

from attn_lightning.studies.arguments import renamed
from attn_lightning.studies.reversal.cli import main

if __name__ == "__main__":
    renamed(
        "python -m attn_lightning.studies.reversal_report",
        "python -m attn_lightning.studies.reversal report",
    )
    main(["report", *sys.argv[1:]])
