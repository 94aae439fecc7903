"""The reversal study's command line: ``report`` and its flags, and the old module path."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
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
    argv = ["report", "--experiment", EXPERIMENT, "--out", str(out), "--root", str(study)]
    summary = main([*argv, "--variants", "softmax", POLY, "--threshold", "0.999"])
    assert [r["variant"] for r in summary] == ["softmax", POLY]
    # At 0.999 seed 1 (test 0.995) no longer converges; its validation reaches 0.999 at step
    # 149, seed 0's at 199.
    assert (summary[1]["converged"], summary[1]["reached"]) == (1, 2)
    assert summary[1]["steps_to_threshold_median"] == 174
    md = out.with_name("cli.md").read_text()
    command = "python -m attn_lightning.studies.reversal report --experiment poly --out"
    assert f"```bash\n{command} {out} --root" in md and "--threshold 0.999" in md
    only = main([*argv, "--variants", "softmax"])
    assert [r["variant"] for r in only] == ["softmax"]
    assert POLY not in out.with_name("cli_runs.csv").read_text()


def test_cli_variants_accept_attention_specs(study, tmp_path):
    argv = ["report", "--experiment", EXPERIMENT, "--out", str(tmp_path / "x")]
    argv += ["--root", str(study)]
    summary = main([*argv, "--variants", "polynomial:degree=4,normalize=false"])
    assert [r["variant"] for r in summary] == [POLY] and summary[0]["runs"] == 3


def test_cli_error_names_the_missing_folder(tmp_path, capsys):
    argv = ["report", "--experiment", "nope", "--out", str(tmp_path / "x")]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--root", str(tmp_path)])
    assert exit_info.value.code == 2
    assert str(tmp_path / "sweeps" / "nope") in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_control_adds_paired_differences_over_shared_seeds(study, tmp_path):
    out = tmp_path / "paired"
    argv = ["report", "--experiment", EXPERIMENT, "--out", str(out), "--root", str(study)]
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
        main(["--experiment", EXPERIMENT, "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2 and "report" in capsys.readouterr().err


def _python_m(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    command = [sys.executable, "-m", module, *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_old_module_path_still_runs_the_report_with_one_notice(study, tmp_path):
    out = tmp_path / "old"
    argv = ["--experiment", EXPERIMENT, "--out", str(out), "--root", str(study)]
    old = _python_m("attn_lightning.studies.reversal_report", *argv, "--variants", "softmax")
    assert old.returncode == 0, old.stderr
    notices = [line for line in old.stderr.splitlines() if "FutureWarning" in line]
    assert len(notices) == 1 and "warnings.warn(" not in old.stderr  # one line
    assert notices[0].endswith(
        "python -m attn_lightning.studies.reversal_report is deprecated; "
        "use python -m attn_lightning.studies.reversal report"
    )
    assert [r["variant"] for r in _read_csv(out.with_name("old.csv"))] == ["softmax"]
    new = _python_m("attn_lightning.studies.reversal", "report", *argv[:4], "--help")
    assert new.returncode == 0 and "--control" in new.stdout and "FutureWarning" not in new.stderr


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
    new, old = (
        _commands("attn_lightning.studies.reversal"),
        _commands("attn_lightning.studies.reversal_report"),
    )
    assert len(new) >= 8  # the pages' commands (the old spelling may remain in other pages)
    parser = build_parser()
    for args in [*new, *(["report", *args] for args in old)]:
        if "--out" not in args:  # README's "--experiment <...>" breaks the line before it
            args = [*args, "--out", "x"]
        assert parser.parse_args(args).command in ("report", "tables", "trajectories"), args
