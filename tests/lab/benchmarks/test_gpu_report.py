"""The GPU report script without a GPU: its commands (dry run), its refusals, the stage loop on
stand-in stages (failure, timeout, spent budget, the stages' environment), and one real stage at
toy shapes on the CPU."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attn_lightning.attention.ops import fla_autotune
from attn_lightning.records import read_csv
from lab.benchmark import build_parser
from lab.benchmarks import gpu_report
from lab.benchmarks.gpu_report import CUDA, FAILURES_AT_ONCE, Stage, main

PY = sys.executable


def dry_run(capsys, *flags: str) -> dict[str, list[list[str]]]:
    """Stage name -> its command lines, as ``--dry-run`` prints them."""
    assert main(["--dry-run", *flags]) == 0
    found: dict[str, list[list[str]]] = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("# "):
            name = line[2:].split(":", 1)[0]
            found[name] = []
        else:
            found[name].append(shlex.split(line))
    return found


def test_the_dry_run_prints_every_stage_s_commands_in_order_of_value(tmp_path, capsys):
    found = dry_run(capsys, "--out", str(tmp_path))
    assert list(found) == [
        *("bandwidth", "anchor", "kernels", "normaliser", "profile", "model", "decode"),
        *("kernels-64k", "parity", "latency", "training"),
    ]
    assert not any(tmp_path.iterdir())  # printed, nothing run
    parser = build_parser()
    for name, commands in found.items():
        for argv in commands:
            assert argv[0] == PY and argv[1] == "-m"
            if argv[2] == "pytest":
                assert argv[3] == gpu_report.FLA_TESTS and f"--junitxml={tmp_path}" in argv[-1]
                continue
            args = parser.parse_args(argv[3:])  # a valid command line of its benchmark
            assert args.device == "cuda"
            assert args.out == (tmp_path / name if name != "model" else tmp_path / "model")
    anchor = parser.parse_args(found["anchor"][0][3:])
    assert anchor.contenders == ["fla-op", "fla-op-raw"] and anchor.dtype == "bfloat16"
    assert [str(s) for s in anchor.shapes[:2]] == ["2x4x32768x64", "1x32x16384x128"]  # targets'
    assert {(s.heads, s.head_dim, s.batch * s.n) for s in anchor.shapes} == {
        (32, 128, 16384),
        (4, 64, 65536),
        (16, 64, 32768),
    }
    assert "linear:triton" in parser.parse_args(found["kernels"][0][3:]).contenders
    for argv in found["model"]:  # one command per N, B·N = 64k tokens each
        args = parser.parse_args(argv[3:])
        assert args.batch * args.lengths[0] == 65536 and args.widths == [256]


def test_the_cpu_stages_are_the_same_at_toy_shapes(tmp_path, capsys):
    cpu = dry_run(capsys, "--cpu", "--out", str(tmp_path))
    cuda = dry_run(capsys, "--out", str(tmp_path))
    assert list(cpu) == list(cuda)[: len(cpu)] and "parity" not in cpu
    lines = [shlex.join(argv) for commands in cpu.values() for argv in commands]
    assert not any("cuda" in line for line in lines)
    assert not any("=fla" in line for line in lines)  # fla has no CPU kernel


def test_stages_keeps_the_named_ones_in_order_and_refuses_an_unknown_one(tmp_path, capsys):
    found = dry_run(capsys, "--stages", "decode", "anchor", "--out", str(tmp_path))
    assert list(found) == ["anchor", "decode"]
    with pytest.raises(SystemExit):
        main(["--dry-run", "--stages", "kernls"])
    assert "invalid choice: 'kernls'" in capsys.readouterr().err


def test_without_cuda_it_refuses_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        main(["--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert "needs CUDA" in err and "--cpu" in err and "--dry-run" in err
    assert not any(tmp_path.iterdir())
    with pytest.raises(SystemExit):
        main(["--cpu", "--budget-min", "0", "--out", str(tmp_path)])
    assert "--budget-min must be > 0, got 0" in capsys.readouterr().err


def python(code: str) -> tuple[str, ...]:
    return (PY, "-c", code)


def test_a_failed_or_timed_out_stage_is_recorded_and_the_next_runs(tmp_path, monkeypatch):
    pid_file = tmp_path / "grandchild.pid"
    # A stage whose grandchild would outlive it, then hangs (an autotune that never ends).
    hang = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    )
    env = f"import os; print(os.environ[{fla_autotune.ENV!r}], os.environ[{FAILURES_AT_ONCE!r}])"
    stages = (
        Stage("fails", "exits 3", (python("raise SystemExit(3)"),), 60),
        Stage("hangs", "hangs", (python(hang),), 3),
        Stage("env", "prints", (python(env), python("print('second')")), 60),
    )
    monkeypatch.setattr(gpu_report, "stages", lambda out, sizes: list(stages))
    began = time.monotonic()
    assert main(["--cpu", "--fla-autotune", "full", "--out", str(tmp_path)]) == 0
    assert time.monotonic() - began < 60  # the 3 s cap stopped the hung stage
    meta, rows = read_csv(tmp_path / "stages.csv")
    assert [(r["stage"], r["status"]) for r in rows] == [
        ("fails", "failed"),
        ("hangs", "timed out"),
        ("env", "done"),
    ]
    assert rows[0]["note"] == "exit 3; see logs/fails.log"
    assert meta["shapes"] == "toy shapes on the CPU" and meta["fla_autotune"] == "full"
    assert not alive(int(pid_file.read_text()))  # killed with its stage's process group
    log = (tmp_path / "logs" / "env.log").read_text().splitlines()
    assert log[0].startswith("$ ") and log[1] == "full 1" and log[3] == "second"
    page = (tmp_path / "gpu_report.md").read_text()
    assert page.startswith("# GPU report (toy shapes on the CPU")
    assert "| hangs | hangs | timed out |" in page


def alive(pid: int) -> bool:
    """Running (a killed orphan may linger as a zombie until its new parent reaps it)."""
    for _ in range(20):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in "ZX":
            return False
        time.sleep(0.1)
    return True


def test_once_the_budget_is_spent_the_rest_is_not_run(tmp_path, monkeypatch):
    stages = (
        Stage("long", "sleeps", (python("import time; time.sleep(60)"),), 100),
        Stage("next", "never", (python("print(1)"),), 100),
    )
    monkeypatch.setattr(gpu_report, "stages", lambda out, sizes: list(stages))
    assert main(["--cpu", "--budget-min", "0.05", "--out", str(tmp_path)]) == 0
    _, rows = read_csv(tmp_path / "stages.csv")
    assert [(r["status"], r["note"]) for r in rows] == [
        ("timed out", "timed out; see logs/long.log"),
        ("not run", "the budget was spent"),
    ]
    assert not (tmp_path / "logs" / "next.log").exists()


def test_the_cheapest_stage_for_real_on_the_cpu(tmp_path, capsys):
    # The whole path once: a subprocess of the benchmark CLI, its CSV, stages.csv and the page.
    assert main(["--cpu", "--stages", "bandwidth", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert text == (tmp_path / "gpu_report.md").read_text()
    assert "| bandwidth | the device's copy bandwidth | done |" in text
    assert float(read_csv(tmp_path / "bandwidth" / "copy.csv")[1][0]["gb_s"]) > 0
    assert "- **copy_bandwidth**: `" in text and "not measured (device" not in text
    assert "| decode per token at 64k context" in text  # every target, not measured here
    assert CUDA.shapes[0].n == 32768  # the CPU run did not touch the GPU shapes


@pytest.mark.parametrize("at_once", [True, False])
def test_under_the_report_a_test_failure_is_printed_when_it_happens(tmp_path, at_once):
    # A test stage killed at its timeout never reaches pytest's summary: the conftest prints each
    # failure as it happens when the report's variable is set (and only then).
    (tmp_path / "test_fails.py").write_text("def test_one():\n    assert 1 == 2, 'MARK'\n")
    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k != FAILURES_AT_ONCE}
    if at_once:
        env[FAILURES_AT_ONCE] = "1"
    argv = [PY, "-m", "pytest", str(tmp_path / "test_fails.py"), "-q", "-p", "tests.conftest"]
    done = subprocess.run(
        [*argv, "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    said = done.stdout + done.stderr
    assert ("FAILED NOW" in said and "MARK" in said.split("FAILED NOW", 1)[-1]) == at_once
