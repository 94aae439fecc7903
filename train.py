"""Train, resume, validate, test or predict any experiment from YAML.

    python train.py fit --config configs/reversal/base.yaml --config configs/presets/cpu.yaml
    python train.py fit --config ... --ckpt_path checkpoints/reversal/<run>/last.ckpt   # resume
    python train.py validate --config ... --ckpt_path checkpoints/reversal/<run>/last.ckpt
    python train.py fit --config ... --print_config                                   # resolved

See ``attn_lightning/cli/app.py`` for the defaults every run gets and how ``--ckpt_path`` treats
model arguments given on the command line. Configuration errors are one ``error:`` line (exit 2);
``--debug`` shows the full report.
"""

from attn_lightning.cli import command_line

if __name__ == "__main__":
    command_line()
