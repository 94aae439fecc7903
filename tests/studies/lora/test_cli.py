"""The LoRA study's command line: one subcommand per part, and the old spellings (``--part``,
``--methods``) still working with one notice each."""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from attn_lightning.studies.lora.cli import build_parser, main, quiet_lightning, subcommand_argv

ROOT = Path(__file__).resolve().parents[3]
PARTS = ("mlp", "variants", "transformer", "lrsweep", "report")


def test_old_part_flag_is_the_subcommand_with_one_notice():
    for old in (["--part", "mlp", "--seeds", "0"], ["--seeds", "0", "--part=mlp"]):
        with pytest.warns(FutureWarning) as notices:
            argv = subcommand_argv(old)
        assert argv == ["mlp", "--seeds", "0"] and len(notices) == 1
        assert str(notices[0].message) == (
            f"python -m attn_lightning.studies.lora {shlex.join(old)} is deprecated; "
            "use python -m attn_lightning.studies.lora mlp --seeds 0"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling gives no notice
        assert subcommand_argv(["mlp", "--seeds", "0"]) == ["mlp", "--seeds", "0"]
    with pytest.warns(FutureWarning):
        assert build_parser().parse_args(subcommand_argv(["--part", "report"])).part == "report"


def test_methods_is_adaptations_with_one_notice():
    old = ["--part", "lrsweep", "--methods", "lora", "full", "--methods=before"]
    with pytest.warns(FutureWarning, match="use .* lrsweep --adaptations lora full") as notes:
        argv = subcommand_argv(old)
    assert argv == ["lrsweep", "--adaptations", "lora", "full", "--adaptations=before"]
    assert len(notes) == 1
    parser = build_parser()
    assert parser.parse_args(argv[:4]).adaptations == ["lora", "full"]
    assert parser.parse_args(["lrsweep"]).adaptations == ["before", "full", "lora", "lora_scratch"]
    with pytest.raises(SystemExit), pytest.warns(FutureWarning):
        parser.parse_args(subcommand_argv(["lrsweep", "--methods", "lora_scrach"]))


def test_a_part_is_required_and_takes_its_own_options(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x"])
    with pytest.raises(SystemExit):
        parser.parse_args(["report", "--plan"])  # report runs nothing
    with pytest.raises(SystemExit):
        parser.parse_args(["transformer", "--heads", "lora"])  # an lrsweep option
    args = parser.parse_args(["transformer", "--seeds", "3", "--transformer-ranks", "2"])
    assert (args.seeds, args.transformer_ranks, args.out) == ([3], [2], "docs/results/lora")


def test_old_and_new_spellings_plan_the_same(tmp_path, caplog):
    argv = ["--plan", "--out", str(tmp_path / "lora"), "--work", str(tmp_path)]
    caplog.set_level("INFO", logger="attn_lightning.studies.lora")
    main(["lrsweep", *argv])
    new = caplog.text
    caplog.clear()
    with pytest.warns(FutureWarning):
        main(["--part", "lrsweep", *argv])
    assert caplog.text == new and "1443 runs planned" in new


def _commands() -> list[list[str]]:
    """Every ``python -m attn_lightning.studies.lora ...`` line of the docs and README."""
    commands = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs" / "results").glob("*.md"))]:
        text = path.read_text().replace("\\\n", " ")
        for match in re.finditer(r"python -m attn_lightning\.studies\.lora\b([^`\n]*)", text):
            commands.append(shlex.split(match[1].split("#")[0]))
    return commands


def test_every_documented_command_parses():
    commands = [c for c in _commands() if c]  # README names the module without arguments
    assert len(commands) >= 7
    parser = build_parser()
    for args in commands:
        assert parser.parse_args(subcommand_argv(args)).part in PARTS, args


def test_python_m_runs_the_report_and_the_old_flag_says_so_once(tmp_path):
    shutil.copytree(ROOT / "docs" / "results" / "lora", tmp_path / "lora")  # its run records
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "attn_lightning.studies.lora", "--part", "report"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "lora")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (notice,) = [line for line in done.stderr.splitlines() if "deprecated" in line]  # one line
    assert notice.endswith(
        f"python -m attn_lightning.studies.lora --part report --out {tmp_path / 'lora'} is "
        f"deprecated; use python -m attn_lightning.studies.lora report --out {tmp_path / 'lora'}"
    )
    summary = (tmp_path / "lora_summary.csv").read_bytes()
    assert summary == (ROOT / "docs" / "results" / "lora_summary.csv").read_bytes()


def test_lightning_is_quiet_only_while_the_runs_train():
    lightning = logging.getLogger("lightning.pytorch")
    lightning.setLevel(logging.INFO)
    with quiet_lightning():
        assert lightning.level == logging.WARNING
    assert lightning.level == logging.INFO
    lightning.setLevel(logging.NOTSET)
