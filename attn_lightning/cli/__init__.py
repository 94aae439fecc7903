"""The training application behind ``train.py``: ``LightningCLI`` with this project's defaults
(``app``), its entry with one-line errors (``entry``, ``errors``), the checks of a command line
(answered before torch and Lightning load) and a checkpoint before anything is built
(``config_checks``, ``checkpoints``), run folders (``run_folders``) and what a run shows while
and after it runs (``progress``).

Importing this package loads none of them: ``train.py`` imports ``config_checks`` (standard
library and PyYAML only) and answers a typo'd subcommand or a bad config file before the ~11 s of
torch and Lightning imports. The names below load their module when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attn_lightning.cli.app import AttnLightningCLI, cli_options, main
    from attn_lightning.cli.config_checks import check_command_line
    from attn_lightning.cli.entry import command_line
    from attn_lightning.cli.run_folders import RunConfigSaver

# Each exported name -> the module of this package that defines it.
_HOMES = {
    "AttnLightningCLI": "app",
    "RunConfigSaver": "run_folders",
    "check_command_line": "config_checks",
    "cli_options": "app",
    "command_line": "entry",
    "main": "app",
}
__all__ = [
    "AttnLightningCLI",
    "RunConfigSaver",
    "check_command_line",
    "cli_options",
    "command_line",
    "main",
]


def __getattr__(name: str) -> Any:
    """``attn_lightning.cli.<name>`` from its module, imported on first use."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
