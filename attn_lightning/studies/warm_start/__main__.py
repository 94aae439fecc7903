"""``python -m attn_lightning.studies.warm_start run ...``."""

from attn_lightning.studies.warm_start.cli import main

if __name__ == "__main__":
    main()
