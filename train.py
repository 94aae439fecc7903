"""Train, resume, validate, test or predict any experiment from YAML.

    python train.py fit --config configs/reversal/base.yaml --config configs/presets/cpu.yaml
    python train.py fit --config ... --ckpt_path checkpoints/reversal/<run>/last.ckpt   # resume
    python train.py validate --config ... --ckpt_path checkpoints/reversal/<run>/last.ckpt
    python train.py fit --config ... --print_config                                   # resolved

See ``attn_lightning/cli/app.py`` for the defaults every run gets and how ``--ckpt_path`` treats
model arguments given on the command line. Configuration errors are one ``error:`` line (exit 2);
``--debug`` shows the full report. A typo'd subcommand or a config file that is missing or not
YAML is answered before torch and Lightning load (``attn_lightning/cli/config_checks.py``).
"""

import sys

from attn_lightning.cli.config_checks import answer_first_mistakes

if __name__ == "__main__":
    answer_first_mistakes(sys.argv[1:])
    from attn_lightning.cli.entry import command_line  # torch and Lightning: seconds to import

    command_line()
