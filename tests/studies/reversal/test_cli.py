"""The reversal study's command line: ``report`` and its flags, and the documented commands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from attn_lightning.results.files import read_csv
from attn_lightning.studies.reversal.cli import build_parser, main
from tests.studies.reversal.fake_runs import EXPERIMENT, POLY

ROOT = Path(__file__).resolve().parents[3]


def _read_csv(path: Path) -> list[dict[str, str]]:
    return read_csv(path)[1]


def test_cli_variants_order_and_filter(study, tmp_path, capsys):
    out = tmp_path / "cli"
    runs = str(study / "logs" / EXPERIMENT)
    argv = ["report", "--runs", runs, "--out", str(out)]
    summary = main([*argv, "--variants", "softmax", POLY, "--threshold", "0.999"])
    assert [r["variant"] for r in summary] == ["softmax", POLY]
    # At 0.999 seed 1 (test 0.995) no longer converges; its validation reaches 0.999 at step
    # 149, seed 0's at 199.
    assert (summary[1]["converged"], summary[1]["reached"]) == (1, 2)
    assert summary[1]["steps_to_threshold_median"] == 174
    md = out.with_name("cli.md").read_text()
    command = f"python -m attn_lightning.studies.reversal report --runs {runs} --out {out}"
    assert f"```bash\n{command} --variants" in md and "--threshold 0.999" in md
    only = main([*argv, "--variants", "softmax"])
    assert [r["variant"] for r in only] == ["softmax"]
    assert POLY not in out.with_name("cli_runs.csv").read_text()


def test_cli_variants_accept_attention_specs(study, tmp_path):
    argv = ["report", "--runs", str(study / "logs"), "--out", str(tmp_path / "x")]
    summary = main([*argv, "--variants", "polynomial:degree=4,normalize=false"])
    assert [r["variant"] for r in summary] == [POLY] and summary[0]["runs"] == 3


def test_cli_error_names_the_missing_folder(study, tmp_path, capsys):
    argv = ["report", "--runs", str(study / "logs"), str(tmp_path / "nope")]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    assert f"--runs folder {tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_control_adds_paired_differences_over_shared_seeds(study, tmp_path):
    out = tmp_path / "paired"
    argv = ["report", "--runs", str(study / "logs"), "--out", str(out)]
    main([*argv, "--variants", "softmax", POLY, "--control", "softmax"])
    (row,) = _read_csv(out.with_name("paired_paired.csv"))
    # Only seed 0 finished in both (softmax seed 1 is unfinished): one pair, no interval.
    assert (row["variant"], row["control"], row["Δ test loss n"]) == (POLY, "softmax", "1")
    assert float(row["Δ test loss mean"]) == pytest.approx(0.01 - 0.001)
    assert float(row["Δ token acc (pp) mean"]) == pytest.approx((0.999 - 1.0) * 100)
    text = out.with_name("paired.md").read_text()
    assert f"| `{POLY}` | `softmax` | +0.00900 (n=1: 1+ 0− 0=) |" in text


def test_a_subcommand_is_required(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--runs", str(tmp_path), "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and "report" in capsys.readouterr().err


def _commands(module: str) -> list[list[str]]:
    """Every ``python -m <module> ...`` line of the docs and README (continuations joined)."""
    commands = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs" / "results").glob("*.md"))]:
        text = path.read_text().replace("\\\n", " ")
        for match in re.finditer(rf"python -m {re.escape(module)} ([^`\n]*)", text):
            line = re.sub(r"<[^>]*>", "X", match[1].split("#")[0])  # <placeholders>
            args = shlex.split(line)
            if any(a.startswith("--") for a in args):  # a bare subcommand names it, not a run
                commands.append(args)
    return commands


def test_every_documented_command_parses():
    commands = _commands("attn_lightning.studies.reversal")
    assert len(commands) >= 15  # the pages' commands
    parser = build_parser()
    for args in commands:
        if "--out" not in args:  # README's "--runs <...>" breaks the line before it
            args = [*args, "--out", "x"]
        assert parser.parse_args(args).command in ("report", "trajectories"), args
