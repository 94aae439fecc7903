"""The LoRA study's command line: one subcommand per part, each with its own options; Lightning
quiet only while the runs train."""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.studies.lora.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[3]
PARTS = ("mlp", "variants", "transformer", "lrsweep", "report")


def test_lrsweep_shards_by_adaptation():
    parser = build_parser()
    assert parser.parse_args(["lrsweep", "--adaptations", "lora", "full"]).adaptations == [
        "lora",
        "full",
    ]
    assert parser.parse_args(["lrsweep"]).adaptations == ["before", "full", "lora", "lora_scratch"]
    with pytest.raises(SystemExit):
        parser.parse_args(["lrsweep", "--adaptations", "lora_scrach"])


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


def _commands() -> list[list[str]]:
    """Every ``python -m lab.studies.lora ...`` line of the docs and README."""
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
        assert parser.parse_args(args).part in PARTS, args


def test_python_m_runs_the_report_from_the_records(tmp_path):
    shutil.copytree(ROOT / "docs" / "results" / "lora", tmp_path / "lora")  # its run records
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "lab.studies.lora", "report"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "lora")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "lora_summary.csv").read_bytes()
    assert summary == (ROOT / "docs" / "results" / "lora_summary.csv").read_bytes()


def test_plan_estimates_from_the_runs_done(tmp_path, caplog):
    # The committed mlp records are all ok; the bases' checkpoints are not in this --work, so
    # the three bases (later runs load them) are to run again, at the records' mean time.
    with caplog.at_level(logging.INFO, logger="lab.studies.lora"):
        argv = ["mlp", "--plan", "--out", str(ROOT / "docs" / "results" / "lora")]
        main([*argv, "--work", str(tmp_path)])
        main([*argv, "--work", str(tmp_path), "--fresh"])  # --plan removes nothing
    assert "144 done, 3 to run; ~12 s per run (mean of the 147 runs done): ~0.0 h" in caplog.text
    assert "0 done, 147 to run; ~20 s per run (--seconds-per-run): ~0.8 h" in caplog.text
