"""``python -m attn_lightning.studies.detection``: the study's command line (``cli``)."""

from attn_lightning.studies.detection.cli import main

if __name__ == "__main__":
    main()
