"""``python -m attn_lightning.studies.image``: the study's command line (``cli``)."""

from attn_lightning.studies.image.cli import main

if __name__ == "__main__":
    main()
