"""``python -m attn_lightning.studies.lora mlp|variants|transformer|lrsweep|report``."""

from attn_lightning.studies.lora.cli import main

if __name__ == "__main__":
    main()
