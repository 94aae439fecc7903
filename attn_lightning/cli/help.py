"""``train.py --help`` and ``train.py <subcommand> --help``: what a user needs first, the rest one
flag away.

LightningCLI's ``fit --help`` prints every option of the Trainer, the checkpoint and ten
always-on callbacks in full: 700-900 lines, the options a newcomer needs lost among them. Here
``--help`` shows this application's own options in full and one line per option group (its
options named); ``--help <group>`` shows one group in full and ``--help all`` everything, as
LightningCLI would. Nothing is hidden: every option still parses and ``--print_config`` shows
every value.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

DESCRIPTION = (
    "Train, resume, validate, test or predict an experiment from YAML configs: "
    "python train.py fit --config configs/<experiment>/base.yaml [--config <overlay>.yaml ...]. "
    "Add --help after a subcommand for its options."
)
SUBCOMMANDS = {
    "fit": "Train a task from its configs; resume a run with --ckpt_path <its last.ckpt>.",
    "validate": "Evaluate a checkpoint (--ckpt_path) on the validation split.",
    "test": "Evaluate a checkpoint (--ckpt_path) on the test split.",
    "predict": "Write a checkpoint's predictions on the test split to files.",
}
CKPT_PATH_HELP = {
    "fit": "Resume the run of this checkpoint (its last.ckpt) at its step, in its run folder "
    "(checkpoints/<experiment>/<run>/ names it; --run_name for another).",
    **{
        sub: f"The checkpoint to {sub} (a run's last.ckpt or best-step=N.ckpt; logs go beside "
        f"its run); its model arguments replace the config's. Required: 'initial' {sub}s the "
        f"initial (untrained) weights the config builds, on purpose."
        for sub in ("validate", "test", "predict")
    },
}
# Shown in full by ``<subcommand> --help`` (the rest by group).
MAIN = (
    "config",
    "print_config",
    "seed_everything",
    "experiment",
    "run_name",
    "ckpt_path",
    "threads",
    "metrics_file",
    "test_after_fit",
    "debug",
)
HELP_FLAGS = ("-h", "--help")


def help_request(args: Sequence[str], subcommands: Sequence[str]) -> tuple[str, str] | None:
    """``(subcommand, topic)`` for ``<subcommand> ... --help [topic]`` (topic "" when none)."""
    if not args or args[0] not in subcommands:
        return None
    for i, arg in enumerate(args):
        if arg in HELP_FLAGS:
            topic = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else ""
            return args[0], topic
    return None


def print_help(parser: Any, subcommand: str, topic: str) -> None:
    """Print the help of ``subcommand``'s ``parser`` for ``topic`` and exit 0 (2 for an unknown
    topic, naming the groups)."""
    groups = _groups(parser)
    if topic == "all":
        parser.print_help()
    elif topic in groups:
        sys.stdout.write(_format(parser, groups[topic], title=f"--{topic}.* options"))
    elif topic:
        sys.stderr.write(
            f"error: --help {topic}: no such option group; one of: all, {', '.join(groups)}\n"
        )
        raise SystemExit(2)
    else:
        sys.stdout.write(compact(parser, subcommand, groups))
    raise SystemExit(0)


def compact(parser: Any, subcommand: str, groups: dict[str, list[Any]]) -> str:
    """The short help: usage, the main options in full, one line per group."""
    main = [a for a in parser._actions if a.dest in MAIN]
    text = f"usage: train.py {subcommand} --config CONFIG [--config CONFIG ...] [options]\n\n"
    text += f"{SUBCOMMANDS.get(subcommand, '')}\n\n"
    text += _format(parser, main, title="options")
    # An option outside any group (e.g. fit's weights_only) is a group of one.
    single = [acts[0] for key, acts in groups.items() if len(acts) == 1 and key not in _HINTS]
    if single:
        text += "\n" + _format(parser, single, title="other options")
    text += (
        "\noption groups: --<group>.<option> VALUE on the command line or <group>: in a config;\n"
        f"`train.py {subcommand} --help <group>` shows one group in full, `--help all` all\n"
    )
    width = max(len(key) for key in groups) + 2
    for key, actions in groups.items():
        names = [a.dest.removeprefix(f"{key}.") for a in actions if a.dest != key]
        names = [n for n in names if not n.endswith("help")]
        if len(actions) == 1 and key not in _HINTS:
            continue
        listed = ", ".join(names[:6]) + (f", … ({len(names)} options)" if len(names) > 6 else "")
        text += f"  {key:<{width}}{_HINTS.get(key, listed)}\n"
    return text


# Groups whose options depend on the class chosen: how to list them.
_HINTS = {
    "model": "the task (class_path + init_args): --model.help <Task>, "
    "e.g. --model.help SequenceReversalTask",
    "data": "the DataModule: --data.help <DataModule>, e.g. --data.help SequenceReversalDataModule",
}


def _groups(parser: Any) -> dict[str, list[Any]]:
    """Option group -> its actions, for every top-level group of a subcommand's parser."""
    groups: dict[str, list[Any]] = {}
    for action in parser._actions:
        key = action.dest.split(".")[0]
        if key in MAIN or key == "help" or action.dest == "help":
            continue
        groups.setdefault(key, []).append(action)
    return groups


def _format(parser: Any, actions: list[Any], *, title: str) -> str:
    # jsonargparse's formatter reads its parser from a context (as in its own format_help).
    from jsonargparse._common import parser_context

    with parser_context(parent_parser=parser):
        formatter = parser._get_formatter()
        formatter.start_section(title)
        formatter.add_arguments(actions)
        formatter.end_section()
        return formatter.format_help()
