"""``python -m attn_lightning.cli``: ``train.py`` without the script, for an installed package.

    python -m attn_lightning.cli fit --config configs/reversal/base.yaml \\
        --config configs/presets/cpu.yaml

Takes what ``train.py`` takes (``fit | validate | test | predict``, ``--config``, ``--ckpt_path``,
``--print_config``) and runs the same ``command_line``; the study runner spawns runs this way.
"""

from attn_lightning.cli.entry import command_line

if __name__ == "__main__":
    command_line()
