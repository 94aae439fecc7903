"""The training application behind ``train.py``: ``LightningCLI`` with this project's defaults
(``app``) and the checks of a command line before it is parsed (``config_checks``)."""

from attn_lightning.cli.app import AttnLightningCLI, RunConfigSaver, cli_options, main
from attn_lightning.cli.config_checks import MOVED_CLASS_PATHS, check_command_line

__all__ = [
    "MOVED_CLASS_PATHS",
    "AttnLightningCLI",
    "RunConfigSaver",
    "check_command_line",
    "cli_options",
    "main",
]
