"""``python -m attn_lightning.cli``: ``train.py`` without the script, for an installed package.

    python -m attn_lightning.cli fit --config configs/reversal/base.yaml \\
        --config configs/presets/cpu.yaml

Takes what ``train.py`` takes (``fit | validate | test | predict``, ``--config``, ``--ckpt_path``,
``--print_config``) and runs the same ``command_line``, answering the first mistakes before torch
and Lightning load as ``train.py`` does; the study runner spawns runs this way.
"""

import sys

from attn_lightning.cli.config_checks import answer_first_mistakes

if __name__ == "__main__":
    answer_first_mistakes(sys.argv[1:])
    from attn_lightning.cli.entry import command_line  # torch and Lightning: seconds to import

    command_line()
