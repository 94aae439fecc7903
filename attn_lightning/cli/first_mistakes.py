"""The mistakes ``train.py`` answers before it loads torch and Lightning.

Importing ``lightning.pytorch`` takes ~11 s on a laptop-class CPU (torchmetrics pulls in
torchvision's models, transformers and scipy); a typo'd subcommand, a config path that does not
exist or a YAML syntax error should not wait for it. ``answer_first_mistakes`` finds those with
the standard library and PyYAML alone and prints the same one ``error:`` line (exit 2) that the
CLI prints for any configuration error; everything else is left to LightningCLI. Nothing here
imports torch or Lightning (``tests/cli/test_first_mistakes.py`` checks it).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Sequence

from attn_lightning.cli.config_checks import read_configs
from attn_lightning.cli.help import SUBCOMMANDS

DEBUG_ENV = "ATTN_LIGHTNING_DEBUG"
HINT = "run with --help for the options, or add --debug for the full report"


def debug_requested(args: Sequence[str] | None) -> bool:
    """``--debug`` on the command line or ``ATTN_LIGHTNING_DEBUG`` set to a true value."""
    if os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes"):
        return True
    return args is not None and any(a == "--debug" or a == "--debug=true" for a in args)


def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word`` (difflib ratio ≥ 0.6), or None."""
    match = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return match[0] if match else None


def first_mistake(args: Sequence[str]) -> str | None:
    """An unknown subcommand (``args[0]`` when it is not an option) or the first config file's
    mistake (``read_configs``), as one message; None when neither."""
    if args and not args[0].startswith("-") and args[0] not in SUBCOMMANDS:
        guess = nearest(args[0], SUBCOMMANDS)
        return f"unknown subcommand {args[0]!r}; one of: {', '.join(SUBCOMMANDS)}" + (
            f" (did you mean {guess!r}?)" if guess else ""
        )
    return read_configs(args)[1]


def answer_first_mistakes(args: Sequence[str]) -> None:
    """Exit 2 with one ``error:`` line if ``args`` hold one of the ``first_mistake``s (unless
    ``--debug`` asks for LightningCLI's full report); return otherwise."""
    if debug_requested(args):
        return
    message = first_mistake(args)
    if message:
        sys.stderr.write(f"error: {message}\n{HINT}\n")
        raise SystemExit(2)
