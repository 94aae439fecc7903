"""``gpu-report`` without a GPU: its refusal, its stage runner (estimates, timeouts, hung children,
SIGTERM, the page after each stage), its plan's command lines and a dry run of the command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from attn_lightning.records import read_csv
from lab.benchmark import build_parser, main
from lab.benchmarks.gpu_report import bandwidth, kernels, plan, profile
from lab.benchmarks.gpu_report.child import COPY, KERNELS, PROFILE
from lab.benchmarks.gpu_report.command import DEFAULT_BUDGET_S, RESERVE_S, pack, select
from lab.benchmarks.gpu_report.runner import Stage, run_stages

PY = sys.executable


def sleeper(name: str, seconds: float, **kwargs) -> Stage:
    return Stage(name, "sleeps", (PY, "-c", f"import time; time.sleep({seconds})"), **kwargs)


# ------------------------------------------------------------------ the command line
def test_without_cuda_it_refuses_in_one_line_naming_the_dry_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        main(["gpu-report", "--budget-s", "60", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "needs a CUDA device" in err and "--dry-run" in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing started


def test_budget_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["gpu-report", "--dry-run", "--budget-s", "0", "--out", str(tmp_path)])
    assert "--budget-s must be > 0, got 0" in capsys.readouterr().err


def test_the_first_report_s_budget_in_minutes_still_parses(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["gpu-report", "--dry-run", "--budget-minutes", "0", "--out", str(tmp_path)])
    assert "--budget-s must be > 0, got 0" in capsys.readouterr().err


def test_an_unknown_stage_is_refused_naming_the_plan_s_stages(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["gpu-report", "--smoke", "--stages", "anchor", "kernls", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "unknown stage(s) ['kernls']" in err and "normaliser" in err
    assert not (tmp_path / "logs").exists()  # nothing started


def test_stages_keeps_the_named_ones_in_the_plan_s_order(tmp_path):
    stages = plan.cuda_plan(tmp_path, tmp_path)
    kept = select(stages, ["decode", "kernels", "anchor"])
    assert [s.name for s in kept] == ["anchor", "kernels", "decode"]
    assert select(stages, None) == stages


# ------------------------------------------------------------------ the runner
def test_each_stage_runs_with_the_given_environment(tmp_path):
    probe = "import os; print(os.environ.get('PROBE_VALUE'))"
    stage = Stage("env", "prints PROBE_VALUE", (PY, "-c", probe), estimate_s=1)
    run_stages([stage], budget_s=60, out=tmp_path, env={**os.environ, "PROBE_VALUE": "7"})
    assert (tmp_path / "logs" / "env.log").read_text().splitlines()[-1] == "7"
    assert "PROBE_VALUE" not in os.environ  # the caller's environment is left alone


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


def test_a_hung_stage_is_killed_at_its_timeout_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    # The stage starts a grandchild that would outlive it, then hangs (an autotune that never ends).
    code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    )
    hung = Stage("hung", "hangs", (PY, "-c", code), estimate_s=1, timeout_s=3)
    began = time.monotonic()
    results, stopped = run_stages(
        [hung, sleeper("after", 0, estimate_s=1)], budget_s=100, out=tmp_path, grace_s=1
    )
    assert time.monotonic() - began < 20  # the budget was 100 s: the timeout stopped it
    assert stopped is None
    assert [r.status for r in results] == ["timed out", "done"]
    assert "killed at its timeout, 3 s" in results[0].note
    assert not alive(int(pid_file.read_text()))
    assert (tmp_path / "logs" / "hung.log").read_text().startswith("$ ")


def test_a_stage_running_past_the_budget_is_killed_at_its_end(tmp_path):
    results, _ = run_stages(
        [sleeper("long", 60, estimate_s=1, timeout_s=100)], budget_s=2, out=tmp_path, grace_s=1
    )
    assert results[0].status == "timed out" and "end of the budget" in results[0].note


def test_a_failing_stage_does_not_stop_the_next_and_skips_are_recorded(tmp_path):
    fail = Stage("fail", "exits 3", (PY, "-c", "raise SystemExit(3)"), estimate_s=1)
    skip = Stage("skip", "never", (), skip="needs CUDA")
    results, _ = run_stages([fail, skip, sleeper("ok", 0, estimate_s=1)], budget_s=60, out=tmp_path)
    assert [(r.status, r.returncode) for r in results] == [
        ("failed", 3),
        ("skipped", None),
        ("done", 0),
    ]
    assert results[1].note == "needs CUDA"


def test_a_stage_that_would_not_fit_is_not_started_and_a_cheaper_one_after_it_is(tmp_path):
    seen = []
    results, _ = run_stages(
        [sleeper("big", 0, estimate_s=500), sleeper("small", 0, estimate_s=1)],
        budget_s=30,
        out=tmp_path,
        after=lambda done: seen.append([(r.name, r.status) for r in done]),
    )
    assert results[0].status == "not run" and "would not fit: est. 500 s" in results[0].note
    assert results[1].status == "done"
    assert not (tmp_path / "logs" / "big.log").exists()
    # ``after`` ran once, after the stage that ran, with every result so far.
    assert seen == [[("big", "not run"), ("small", "done")]]


def test_sigterm_stops_the_run_not_the_caller(tmp_path):
    previous = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        results, stopped = run_stages(
            [sleeper("long", 60, estimate_s=1, timeout_s=100), sleeper("next", 0, estimate_s=1)],
            budget_s=120,
            out=tmp_path,
            grace_s=1,
        )
    finally:
        timer.cancel()
    assert stopped == "SIGTERM"
    assert [r.status for r in results] == ["stopped", "not run"]
    assert "SIGTERM" in results[1].note
    assert signal.getsignal(signal.SIGTERM) is previous


# ------------------------------------------------------------------ the plan
def test_cuda_plan_anchor_first_every_job_parses_and_the_targets_fit_the_default_budget(tmp_path):
    stages = plan.cuda_plan(tmp_path, tests_root=tmp_path)
    names = [s.name for s in stages]
    assert names[:7] == [
        "anchor",
        "kernels",
        "normaliser",
        "profile",
        "model",
        "decode",
        "kernels-64k",
    ]
    # The stages that measure issue 48's targets fit the default budget by their estimates.
    assert sum(s.estimate_s for s in stages[:6]) <= DEFAULT_BUDGET_S - RESERVE_S
    assert all(s.estimate_s < s.timeout_s for s in stages)
    parser = build_parser()
    anchor = kernels.build_parser().parse_args(
        plan.kernel_job(tmp_path, "a", plan.SHAPES, plan.ANCHOR, plan.CUDA)[1:]
    )
    assert anchor.contenders == ["fla-op", "fla-op-raw"] and anchor.dtype == "bfloat16"
    assert set(plan.TARGET_SHAPES) <= set(anchor.shapes) and anchor.shapes[:2] == list(
        plan.TARGET_SHAPES
    )
    assert anchor.repeats >= 5 and anchor.device == "cuda"
    regimes = {(s.heads, s.head_dim, s.batch * s.n) for s in anchor.shapes}
    assert regimes == {(32, 128, 16384), (4, 64, 65536), (16, 64, 32768)}
    job = plan.profile_job(tmp_path, plan.CUDA)
    assert (
        job[0] == PROFILE and profile.build_parser().parse_args(job[1:]).shape == plan.PROFILE_SHAPE
    )
    for job in [*plan.model_jobs(tmp_path, plan.CUDA), plan.decode_job(tmp_path, plan.CUDA)]:
        assert parser.parse_args(job).device == "cuda"  # a valid command line of its command
    for job in plan.model_jobs(tmp_path, plan.CUDA):
        args = parser.parse_args(job)
        assert args.batch * args.lengths[0] == plan.TOKENS and args.widths == [256]
    for job in plan.latency_jobs(tmp_path):
        parser.parse_args(job)


def test_the_dry_plan_is_the_same_stages_on_the_cpu(tmp_path):
    dry, cuda = plan.dry_plan(tmp_path, tmp_path), plan.cuda_plan(tmp_path, tmp_path)
    assert [s.name for s in dry] == [s.name for s in cuda][: len(dry)]
    assert all("--device cuda" not in " ".join(s.argv) for s in dry)
    model = plan.model_jobs(tmp_path, plan.DRY)[0]
    assert not any(b.endswith("=fla") for b in model)  # fla has no CPU kernel


def test_a_triton_row_has_its_slot_in_the_plan():
    assert "linear:triton" in plan.LINEAR  # issue 47: timed the day the registry has it


def test_every_stage_that_times_kernels_measures_the_copy_bandwidth_first(tmp_path):
    for sizes, device in ((plan.CUDA, "cuda"), (plan.DRY, "cpu")):
        stages = {s.name: s for s in plan.plan(tmp_path, tmp_path, sizes)}
        for name in ("anchor", "kernels", "normaliser", "kernels-64k"):
            first = json.loads(stages[name].argv[-1])[0]
            assert first[0] == COPY
            args = bandwidth.build_parser().parse_args(first[1:])
            assert args.device == device and args.out == tmp_path / "bandwidth"
        assert json.loads(stages["profile"].argv[-1])[0][0] != COPY


@pytest.mark.parametrize("at_once", [True, False])
def test_under_the_report_a_test_failure_is_printed_when_it_happens(tmp_path, at_once):
    # A stage killed at its timeout never reaches pytest's summary: the conftest prints each
    # failure as it happens when the report's variable is set (and only then).
    (tmp_path / "test_fails.py").write_text("def test_one():\n    assert 1 == 2, 'MARK'\n")
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != plan.FAILURES_AT_ONCE}
    if at_once:
        env[plan.FAILURES_AT_ONCE] = "1"
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


def test_without_tests_the_test_stages_are_skipped(tmp_path):
    stages = {s.name: s for s in plan.cuda_plan(tmp_path, tests_root=None)}
    assert stages["parity"].skip and stages["training"].skip
    assert not stages["anchor"].skip


def test_pack_holds_every_file(tmp_path):
    out = tmp_path / "report"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "a.log").write_text("x")
    (out / "gpu_report.md").write_text("y")
    pack(out)
    with tarfile.open(pack(out)) as tar:  # packing again leaves the first archive out
        assert sorted(tar.getnames()) == ["report/gpu_report.md", "report/logs/a.log"]


# ------------------------------------------------------------------ the whole command, dry
def test_dry_run_writes_the_page_after_each_stage_and_one_archive(tmp_path, capsys):
    out = tmp_path / "dry"
    argv = ["gpu-report", "--dry-run", "--stages", "kernels", "profile", "--out", str(out)]
    assert main([*argv, "--fla-autotune", "reduced"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# GPU report (dry run on the CPU")
    assert "| kernels | flash and linear on each kernel, every shape | done |" in text
    assert "| profile |" in text and "| anchor |" not in text
    assert "## Targets" in text and "not measured" in text
    assert "## Per call, H 2, D 8, B·N 32" in text
    assert "not run: needs CUDA" in text  # linear:fla, a CUDA-only contender, says so
    assert "## Top kernels by device time" in text
    assert "- **copy_bandwidth**: `" in text and "## Achieved bandwidth" in text
    assert "| flash | 1x2x32x8 | float32 |" in text  # the formula's row, a CPU copy bandwidth
    assert "## auto's choice" in text  # the torch kernel only, on the CPU
    # Skipped with its reason: not in this checkout's registry, or (once it is) needs CUDA.
    assert (
        "| linear:triton: linear, fused Triton kernel (ours, elu+1 in its loads) | not run: "
        in text
    )
    assert "- **fla_autotune**: `reduced`" in text
    assert os.environ.get("ATTN_LIGHTNING_FLA_AUTOTUNE") != "reduced"
    _, rows = read_csv(out / "kernels" / "kernels.csv")
    assert {r["contender"] for r in rows} == set(plan.LINEAR)
    assert (out / "profile" / "top_kernels.md").is_file()
    with tarfile.open(out / "gpu_report.tar.gz") as tar:
        names = tar.getnames()
    assert {"dry/gpu_report.md", "dry/kernels/kernels.csv", "dry/profile/top_kernels.csv"} <= set(
        names
    )


@pytest.mark.slow
def test_dry_run_of_every_stage(tmp_path, capsys):
    out = tmp_path / "all"
    assert main(["gpu-report", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for stage in ("anchor", "kernels", "normaliser", "profile", "model", "decode", "kernels-64k"):
        assert f"| {stage} |" in text and (out / "logs" / f"{stage}.log").is_file()
        assert f"| {stage} | " in text.split("## Stages", 1)[1]
    assert "- parity: " in text and " 0 failed, 0 errors" in text
    assert "## Training step" in text and "## Decode" in text
    assert "| failed |" not in text
    _, versions = read_csv(out / "versions.csv")
    assert {"torch", "fla-core", "triton"} <= {r["what"] for r in versions}
    assert KERNELS == "kernels"
