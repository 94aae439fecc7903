"""Train, resume, validate, test or predict any experiment from YAML.

    python train.py fit --config configs/reversal/base.yaml --config configs/presets/cpu.yaml
    python train.py fit --config ... --ckpt_path checkpoints/reversal/<run>/last.ckpt   # resume
    python train.py validate --config ... --ckpt_path checkpoints/reversal/<run>/last.ckpt
    python train.py fit --config ... --print_config                                   # resolved

See ``attn_lightning/cli.py`` for the defaults every run gets and how ``--ckpt_path`` treats
model arguments given on the command line.
"""

from attn_lightning.cli import main

if __name__ == "__main__":
    main()
