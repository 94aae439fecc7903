"""``python -m attn_lightning.studies.reversal report ...``: the reversal study's command line."""

from attn_lightning.studies.reversal.cli import main

if __name__ == "__main__":
    main()
