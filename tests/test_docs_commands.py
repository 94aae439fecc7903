"""Every command line shown in the README and docs parses with its own parser.

A reader copies these; a renamed flag or module must not leave one that fails. Study and benchmark
commands go through the command's argparse parser (old module paths through their new one, as the
deprecated aliases run them); ``train.py`` commands through LightningCLI with ``--print_config``,
which parses every config file and flag without building anything. Lines with placeholders
(``<run>``, ``$VAR``, ``...``, ``[--flag]``) are templates, not commands, and are skipped.
"""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from pathlib import Path

import pytest

from attn_lightning.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    ROOT / "data" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "results").glob("*.md")),
]
# module -> (module with build_parser, arguments put first).
PARSERS = {
    "lab.benchmark": ("lab.benchmarks.cli", []),
    "lab.benchmarks.gpu_report": ("lab.benchmarks.gpu_report", []),
    "lab.studies.sweep": ("lab.studies.sweep", []),
    "attn_lightning.data.scenes": ("attn_lightning.data.scenes", []),
}
COMMAND = re.compile(r"python3?\s+(-m\s+(?:attn_lightning|lab)[\w.]*|train\.py)\s+(.*)")
PLACEHOLDER = re.compile(r"[<$]|\.\.\.|\[--|\|")


def _blocks(text: str) -> list[str]:
    """The fenced code blocks of a markdown page (fences toggle; inline code is not a block)."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in PAGES:
        for block in _blocks(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                match = COMMAND.search(line)
                if not match or PLACEHOLDER.search(match.group(2)):
                    continue
                target = match.group(1).removeprefix("-m").strip()
                where = f"{page.relative_to(ROOT)}: {line[:60]}"
                found.append((where, target, shlex.split(match.group(2))))
    return found


COMMANDS = _commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 50  # the pages above show this many; fewer means the scan broke


@pytest.mark.parametrize(("where", "target", "args"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_the_command_parses(where, target, args, monkeypatch):
    monkeypatch.chdir(ROOT)
    if target == "train.py":
        monkeypatch.setattr(sys, "argv", ["train.py"])
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--print_config"])
        assert exit_.value.code in (0, None), where
        return
    if target not in PARSERS:
        pytest.skip(f"{target} has no parser to check")
    module, first = PARSERS[target]
    parser = importlib.import_module(module).build_parser()
    try:
        parser.parse_args([*first, *args])
    except SystemExit as exit_:  # --help exits 0; a parse error exits 2
        assert exit_.code == 0, where
