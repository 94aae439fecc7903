"""Checks of the command line before LightningCLI parses it, with the standard library and PyYAML
alone: an unknown subcommand, config files that are missing or not YAML mappings, lone overlays.

Importing ``lightning.pytorch`` takes ~11 s on a laptop-class CPU; a typo'd subcommand, a config
path that does not exist or a YAML syntax error should not wait for it, and jsonargparse reports a
bad config as a long "does not validate against any of the Union subtypes" block that names
neither the file nor the fix. ``answer_first_mistakes`` prints the same one ``error:`` line (exit
2) that the CLI prints for any configuration error, naming both. Nothing here imports torch or
Lightning (``tests/cli/test_config_checks.py`` checks it).
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from attn_lightning.cli.help import SUBCOMMANDS


def config_files(args: Sequence[str]) -> list[Path]:
    """The files given with ``--config``/``-c`` (either ``--config X`` or ``--config=X``)."""
    files: list[Path] = []
    for i, arg in enumerate(args):
        if arg in ("--config", "-c") and i + 1 < len(args):
            files.append(Path(args[i + 1]))
        elif arg.startswith("--config="):
            files.append(Path(arg.split("=", 1)[1]))
    return files


def key_location(files: Sequence[Path], key: str, depth: int = 0) -> tuple[Path, int] | None:
    """The first of ``files`` whose YAML sets the dotted ``key`` (``trainer.max_steps`` as
    ``trainer: {max_steps: …}`` or as a dotted key), and the line (from 1) of its part number
    ``depth`` (from 1; 0: the last part)."""
    parts = key.split(".")
    for path in files:
        try:
            node = yaml.compose(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        lines = _key_lines(node, parts)
        if lines is not None:
            return path, lines[depth - 1 if depth else -1]
    return None


def _key_lines(node: Any, parts: list[str]) -> list[int] | None:
    """The line of each of ``parts`` in a composed YAML mapping, or None if it lacks them."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for name, value in node.value:
        named = str(name.value).split(".")
        if parts[: len(named)] != named:
            continue
        here = [int(name.start_mark.line) + 1] * len(named)
        if len(named) == len(parts):
            return here
        deeper = _key_lines(value, parts[len(named) :])
        if deeper is not None:
            return here + deeper
    return None


def read_configs(args: Sequence[str]) -> tuple[list[tuple[Path, Any]], str | None]:
    """The ``--config`` files of ``args`` read as YAML, and the first one's mistake (None: none).

    A mistake is a file that does not exist, a YAML syntax error (``path:line:column``: the
    parser names only "<unicode string>") or a file that is not a mapping of options. A value
    that is itself a YAML mapping is a config given inline (``--config '{trainer: …}'``), which
    LightningCLI reads: not read here.
    """
    loaded: list[tuple[Path, Any]] = []
    for path in config_files(args):
        if not path.is_file():
            if _inline(str(path)):
                continue
            what = "is a folder, not a file" if path.is_dir() else "does not exist"
            return loaded, f"config file {path} {what}"
        try:
            tree = yaml.safe_load(path.read_text())
        except yaml.YAMLError as error:  # jsonargparse names "<unicode string>", not the file
            return loaded, yaml_error(path, error)
        if not isinstance(tree, Mapping):
            what = "is empty" if tree is None else f"holds a {type(tree).__name__}"
            return loaded, (
                f"{path} {what}; a config is a YAML mapping of options, "
                f"e.g. 'trainer: {{max_steps: 100}}'"
            )
        loaded.append((path, tree))
    return loaded, None


def _inline(value: str) -> bool:
    """Whether a ``--config`` value is a YAML mapping itself rather than a path."""
    try:
        return isinstance(yaml.safe_load(value), Mapping)
    except yaml.YAMLError:
        return False


def check_command_line(args: Sequence[str]) -> str | None:
    """The first mistake in ``args`` and its configs as one message, or None.

    Finds a config file's mistake (``read_configs``) and a backend/variant overlay given without
    the experiment's ``base.yaml`` that names the task.
    """
    loaded, message = read_configs(args)
    if message:
        return message
    message = _short_help_name(args)
    if message:
        return message
    return _lone_overlay(loaded, args)


def yaml_error(path: Path, error: yaml.YAMLError) -> str:
    """``path:line:column: problem`` for a YAML syntax error (lines counted from 1)."""
    mark = getattr(error, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    return f"{where}: YAML syntax error: {problem}" + (f" ({context})" if context else "")


# Where ``--model.help`` / ``--data.help`` look up a class given by its name alone.
HELP_PACKAGES = {"model": "attn_lightning.tasks", "data": "attn_lightning.data"}


def _help_names(args: Sequence[str]) -> Iterator[tuple[int, str, str, str]]:
    """``(index, flag, package, name)`` of each class name without a dot given to
    ``--model.help`` or ``--data.help``, ``args[index]`` being the name or ``<flag>=<name>``."""
    for i, arg in enumerate(args):
        for section, package in HELP_PACKAGES.items():
            flag = f"--{section}.help"
            at, name = (i + 1, args[i + 1]) if arg == flag and i + 1 < len(args) else (i, None)
            if arg.startswith(flag + "="):
                name = arg.split("=", 1)[1]
            if name is not None and "." not in name:
                yield at, flag, package, name


def expand_help_names(args: Sequence[str]) -> list[str]:
    """``--model.help SequenceReversalTask`` -> ``--model.help attn_lightning.tasks.Sequence…``
    (jsonargparse takes only a dotted path there); other arguments unchanged."""
    out = list(args)
    for i, flag, package, name in _help_names(args):
        if name in _exported(package):
            out[i] = f"{flag}={package}.{name}" if out[i].startswith(flag) else f"{package}.{name}"
    return out


def _short_help_name(args: Sequence[str]) -> str | None:
    """An unknown class name given to ``--model.help``/``--data.help`` (after expansion)."""
    for _, flag, package, name in _help_names(expand_help_names(args)):
        return f"{flag}: unknown class {name!r}; one of: {', '.join(_exported(package))}"
    return None


def _exported(package: str) -> list[str]:
    """The classes a package exports (``__all__``)."""
    import importlib

    module = importlib.import_module(package)
    return [n for n in getattr(module, "__all__", []) if isinstance(getattr(module, n), type)]


def _lone_overlay(loaded: list[tuple[Path, Any]], args: Sequence[str]) -> str | None:
    """A model/data section with init_args but no class_path in any config or flag."""
    flags = " ".join(args)
    for section in ("model", "data"):
        named = any(
            isinstance(tree, Mapping)
            and isinstance(tree.get(section), Mapping | str)
            and (isinstance(tree[section], str) or "class_path" in tree[section])
            for _, tree in loaded
        )
        if named or f"--{section} " in flags or f"--{section}=" in flags:
            continue
        if f"--{section}.class_path" in flags:
            continue
        for path, tree in loaded:
            if isinstance(tree, Mapping) and isinstance(tree.get(section), Mapping):
                base = path.parent / "base.yaml"
                fix = (
                    f"--config {base} --config {path}"
                    if base.is_file() and base != path
                    else f"a config that sets {section}.class_path before {path}"
                )
                return (
                    f"{path} sets {section} options but no config names {section}.class_path: "
                    f"it is an overlay; stack it on its experiment's base config: {fix}"
                )
    return None


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
