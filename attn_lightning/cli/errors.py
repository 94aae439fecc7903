"""Configuration and input errors as one ``error: …`` line (exit 2), with the nearest valid name.

jsonargparse reports a typo'd option inside a class's init args as a ten-line "does not validate
against any of the Union subtypes" block, and a constructor's ``ValueError`` surfaces as a
traceback; a user needs one line that names the value, what is allowed and the likely fix.
``--debug`` (or ``ATTN_LIGHTNING_DEBUG=1``) keeps the full report and the traceback.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from attn_lightning.cli.config_checks import HINT, config_files, key_location, nearest


def accepted_options(cls: type) -> list[str]:
    """Keyword names a class accepts: its ``__init__`` and, through ``**kwargs``, its parents'."""
    names: list[str] = []
    for klass in inspect.getmro(cls):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names += [
            p.name for p in params if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return [n for n in dict.fromkeys(names) if n != "self"]


def class_options(class_path: str) -> list[str]:
    """``accepted_options`` of the class a dotted path names ([] when it does not import)."""
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return []
    return accepted_options(cls)


def group_options(class_path: str, group: str) -> list[str]:
    """The field names of a class's dataclass-typed argument ``group`` (e.g. a task's ``net``
    spec), or [] when the argument is not a dataclass."""
    import dataclasses
    import typing

    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an unimportable class or unresolvable hints: no suggestion
        return []
    kind = hints.get(group)
    return [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else []


def _nested_hint(class_path: str, dotted: str, where: str = "") -> str | None:
    """``option 'd_modl' of net is not accepted; did you mean 'd_model'?`` for ``net.d_modl``
    (``where``: `` in <file>:<line>`` after "accepted")."""
    group, _, option = dotted.partition(".")
    options = group_options(class_path, group) if option else []
    if not options:
        return None
    guess = nearest(option, options)
    hint = f"did you mean {guess!r}?" if guess else f"allowed: {', '.join(options)}"
    return f"option {option!r} of {group} is not accepted{where}; {hint}"


def _in_file(files: Sequence[Path], section: re.Match[str] | None, dotted: str) -> str:
    """`` in <file>:<line>`` of the config file that sets ``dotted`` in a class's section (under
    its ``init_args`` or directly), or "" (a flag, or no section)."""
    if section is None:
        return ""
    for key in (f"{section.group(1)}.init_args.{dotted}", f"{section.group(1)}.{dotted}"):
        found = key_location(files, key)
        if found:
            return f" in {found[0]}:{found[1]}"
    return ""


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (\S+)")
_GROUP_OPTION = re.compile(r"Group '([^']+)' does not accept option '([^']+)'")
_KEY = re.compile(r'Parser key "([^"]+)"')
_PROBLEM = re.compile(r"^(\s*)- Problem with given class_path '([^']+)':\s*$")
_NOT_ACCEPTED = re.compile(r"Option '([^']+)' is not accepted")
_EXPECTED = re.compile(r"Expected a <class '(\w+)'>")
_GIVEN = re.compile(r"(?:Given value|Got value): (.*)")


def _class_problem(message: str) -> tuple[str, str] | None:
    """``(class_path, the block of lines under it)`` of the first "Problem with given
    class_path" entry of a union error, or None."""
    lines = message.splitlines()
    for i, line in enumerate(lines):
        match = _PROBLEM.match(line)
        if match:
            indent = len(match.group(1))
            block = []
            for inner in lines[i + 1 :]:
                if inner.strip() and len(inner) - len(inner.lstrip()) <= indent:
                    break
                block.append(inner.strip())
            return match.group(2), "\n".join(block)
    return None


_REQUIRED = re.compile(r"the following arguments are required: (.*)")


def _no_experiment(message: str) -> str | None:
    """A command line that names no task or DataModule: the fix is an experiment's config."""
    required = _REQUIRED.search(message)
    missing = (
        [m.strip().rpartition(".")[2] for m in required.group(1).split(",")] if required else []
    )
    if not {"model", "data"} & set(missing):
        return None
    found = sorted(p.parent.name for p in Path("configs").glob("*/base.yaml"))
    which = f" (here: {', '.join(found)})" if found else ""
    return (
        f"no task or data given ({', '.join(missing)}): start from an experiment's config, "
        f"--config configs/<experiment>/base.yaml{which}, e.g. --config configs/reversal/base.yaml"
    )


_NOT_ACCEPTED_KEY = re.compile(
    r"(?:Subcommand '[^']+'|Group '([^']+)') does not accept option '([^']+)'"
)


def _unknown_key(message: str, options: Iterable[str], files: Sequence[Path]) -> str | None:
    """A config key no option has (``trainr.max_steps`` in a YAML file), worded as the same typo
    given as a flag is, with the file and line that set it."""
    match = _NOT_ACCEPTED_KEY.search(message)
    if not match:
        return None
    key = f"{match.group(1)}.{match.group(2)}" if match.group(1) else match.group(2)
    flags = [o for o in options if o.startswith("--")]
    guess = nearest(f"--{key}", flags)
    depth = _first_unknown_part(key, flags)
    found = key_location(files, key, depth)
    where = f" in {found[0]}:{found[1]}" if found else ""
    tail = f"; did you mean {guess[2:]}?" if guess else ""
    return f"unrecognized key {key}{where}{tail}"


def _first_unknown_part(key: str, flags: Sequence[str]) -> int:
    """Which part of a dotted ``key`` (from 1) no flag has: 1 for ``trainr.max_steps``, 2 for
    ``trainer.max_stesp``; the file's line of that part is where the typo is."""
    parts = key.split(".")
    for depth in range(1, len(parts)):
        prefix = "--" + ".".join(parts[:depth])
        if not any(f == prefix or f.startswith(prefix + ".") for f in flags):
            return depth
    return len(parts)


def condense(message: str, option_strings: Iterable[str] = (), files: Sequence[Path] = ()) -> str:
    """One line for a jsonargparse error message, with a suggestion where a name is misspelt
    (and, for a key of a config file, the ``files`` given with ``--config`` that sets it)."""
    no_experiment = _no_experiment(message)
    if no_experiment:
        return no_experiment
    unrecognized = _UNRECOGNIZED.search(message)
    problem = _class_problem(message)
    unknown_key = _unknown_key(message, option_strings, files) if problem is None else None
    if unknown_key:
        return unknown_key
    section = _KEY.search(message)
    nested = None
    if problem is not None and unrecognized:
        nested = _nested_hint(problem[0], unrecognized.group(1).split("=")[0].lstrip("-"))
    elif problem is not None and (group := _GROUP_OPTION.search(problem[1])):
        dotted = f"{group.group(1)}.{group.group(2)}"
        nested = _nested_hint(problem[0], dotted, _in_file(files, section, dotted))
    if problem is not None and nested is not None:
        where = f"{section.group(1)} ({problem[0]})" if section else problem[0]
        return f"{where}: {nested}"
    if unrecognized:
        flag = unrecognized.group(1).split("=")[0]
        guess = nearest(flag, [o for o in option_strings if o.startswith("--")])
        tail = f"; did you mean {guess}?" if guess else ""
        return f"unrecognized argument {flag}{tail}"
    if problem is None:
        return " ".join(message.split())
    class_path, block = problem
    where = f"{section.group(1)} ({class_path})" if section else class_path
    rejected = _NOT_ACCEPTED.search(block)
    if rejected:
        options = class_options(class_path)
        # A model size misspelt at the task level may mean a field of its ``net`` spec.
        in_spec = {f: f"net.{f}" for f in group_options(class_path, "net") if f not in options}
        guess = nearest(rejected.group(1), [*options, *in_spec])
        guess = in_spec.get(guess, guess) if guess else None
        hint = f"did you mean {guess!r}?" if guess else f"allowed: {', '.join(options)}"
        in_file = _in_file(files, section, rejected.group(1))
        return f"{where}: option {rejected.group(1)!r} is not accepted{in_file}; {hint}"
    keys, expected, given = _KEY.findall(block), _EXPECTED.findall(block), _GIVEN.findall(block)
    if keys and expected:
        got = f"; got {given[-1]}" if given else ""
        return f"{where}: {keys[-1]} expects {' or '.join(dict.fromkeys(expected))}{got}"
    return f"{where}: {' '.join(block.split())}"


def one_line(error: BaseException) -> str:
    """``error`` as ``Type: message`` on one line (a ValueError needs no type name)."""
    text = " ".join(str(error).split())
    if isinstance(error, ValueError):
        return text
    return f"{type(error).__name__}: {text}"


# What Lightning raises for a trainer option it refuses while the Trainer is built (a GPU that is
# not there, devices 0, max_steps -5; torch_xla missing for a TPU): a configuration error.
TRAINER_ERRORS = (MisconfigurationException, ValueError, TypeError, ImportError)
_NO_GPU = re.compile(r"No supported gpu backend|`(CUDA|MPS)Accelerator` can not run")
_DEVICES = re.compile(r"Trainer\(devices=|`devices` selected with")
# A trainer argument as Lightning names it: `max_steps`, Trainer(devices=...), "value -1 for x".
_ARGUMENT = re.compile(r"`(\w+)`|Trainer\((\w+)=|value \S+ for (\w+)")


def trainer_error(error: BaseException, trainer: Mapping[str, Any]) -> str:
    """One line for Lightning's refusal of the trainer options ``trainer`` (the Trainer's
    arguments as configured): the option, its value and the fix.

    A few refusals have their own wording (no GPU, a device count); any other names the first
    trainer option Lightning's message mentions, with its value, then Lightning's reason.
    """
    message = " ".join(str(error).split())
    accelerator = trainer.get("accelerator")
    if _NO_GPU.search(message):
        devices = trainer.get("devices")
        one = "" if devices in (None, 1, "1", "auto") else " --trainer.devices 1"
        return (
            f"no GPU found (trainer.accelerator {accelerator}): use --trainer.accelerator cpu"
            f"{one} or configs/presets/cpu.yaml (stacked last, in place of a GPU preset)"
        )
    if _DEVICES.search(message):
        return (
            f"trainer.devices {trainer.get('devices')} is not a device count for the "
            f"{accelerator or 'auto'} accelerator: use --trainer.devices 1 (a count >= 1, a "
            "list of GPU ids, or auto)"
        )
    for match in _ARGUMENT.finditer(message):
        name = next(group for group in match.groups() if group)
        if name in trainer:
            reason = message.replace("`", "").rstrip(".")
            if name in ("max_steps", "max_epochs"):
                reason += f"; use --trainer.{name} N (N >= 0) or -1 for no limit"
            return f"trainer.{name} {trainer[name]}: {reason}"
    # Lightning's "this configuration is wrong" needs no type name; an ImportError's does.
    plain = isinstance(error, MisconfigurationException)
    return f"trainer: {message if plain else one_line(error)}"


@contextmanager
def trainer_refusals(trainer: Mapping[str, Any]) -> Iterator[None]:
    """Lightning's refusal of a trainer option (``TRAINER_ERRORS``) raised in the block, while the
    Trainer is built from ``trainer``, as a ValueError of one line (``trainer_error``)."""
    try:
        yield
    except TRAINER_ERRORS as error:
        raise ValueError(trainer_error(error, trainer)) from error


class AppArgumentParser(LightningArgumentParser):
    """``LightningArgumentParser`` whose errors are one line and a hint, not the usage text.

    Internal parsers that must raise (``exit_on_error=False``, used by jsonargparse to try
    union subtypes) and ``--debug`` keep jsonargparse's own behaviour.
    """

    debug: bool = False  # set from the command line by ``cli.main``

    def parse_args(  # type: ignore[override]  # as jsonargparse's own
        self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any
    ) -> Any:
        # Kept for ``error``: the config files a key it rejects may come from.
        self._given = [str(a) for a in (sys.argv[1:] if args is None else args)]
        return super().parse_args(args, *rest, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or self.debug:
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        options = list(getattr(parser, "_option_string_actions", {}))
        files = config_files(getattr(self, "_given", []))
        sys.stderr.write(f"error: {condense(message, options, files)}\n{HINT}\n")
        self.exit(2)


def constructor_error(error: BaseException) -> BaseException:
    """The first exception in the chain not raised by jsonargparse itself (else ``error``):
    jsonargparse wraps a constructor's ValueError (unknown backend, bad option) in its report."""
    current: BaseException | None = error
    while current is not None and _raised_in(current, "jsonargparse"):
        current = current.__cause__ or current.__context__
    return current if current is not None else error


def _raised_in(error: BaseException, package: str) -> bool:
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith(package)
