"""The training application behind ``train.py``: ``LightningCLI`` with this project's defaults
(``app``), its entry with one-line errors (``entry``, ``errors``), the checks of a command line
and a checkpoint before anything is built (``config_checks``, ``checkpoints``), run folders
(``run_folders``) and what a run shows while and after it runs (``progress``)."""

from attn_lightning.cli.app import AttnLightningCLI, cli_options, main
from attn_lightning.cli.config_checks import MOVED_CLASS_PATHS, check_command_line
from attn_lightning.cli.entry import command_line
from attn_lightning.cli.run_folders import RunConfigSaver

__all__ = [
    "MOVED_CLASS_PATHS",
    "AttnLightningCLI",
    "RunConfigSaver",
    "check_command_line",
    "cli_options",
    "command_line",
    "main",
]
