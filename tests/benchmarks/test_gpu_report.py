"""``gpu-report`` without a GPU: its refusal, its stage runner (budget, hung children, SIGTERM),
its plan's command lines, reading results back, the targets, the anchor and a CPU smoke run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
import torch

from attn_lightning.benchmark import build_parser, main
from attn_lightning.benchmarks import report, scaling
from attn_lightning.benchmarks.decode import DecodeRow
from attn_lightning.benchmarks.gpu_report import anchor, collect, pack, page, plan, select
from attn_lightning.benchmarks.gpu_report.child import ANCHOR
from attn_lightning.benchmarks.gpu_report.runner import Stage, run_stages
from attn_lightning.benchmarks.model_step import Row as StepRow

PY = sys.executable


def sleeper(name: str, seconds: float, **kwargs) -> Stage:
    return Stage(name, "sleeps", (PY, "-c", f"import time; time.sleep({seconds})"), **kwargs)


# ------------------------------------------------------------------ the command line
@pytest.mark.skipif(torch.cuda.is_available(), reason="refusal is for machines without CUDA")
def test_without_cuda_it_refuses_in_one_line_naming_smoke(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["gpu-report", "--budget-minutes", "1", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "needs a CUDA device" in err and "--smoke" in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing started


def test_budget_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["gpu-report", "--smoke", "--budget-minutes", "0", "--out", str(tmp_path)])
    assert "--budget-minutes must be > 0, got 0.0" in capsys.readouterr().err


def test_an_unknown_stage_is_refused_naming_the_plan_s_stages(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["gpu-report", "--smoke", "--stages", "parity", "lantency", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "unknown stage(s) ['lantency']" in err and "latency-float32-b1" in err
    assert not (tmp_path / "logs").exists()  # nothing started


def test_stages_keeps_the_named_ones_in_the_plan_s_order(tmp_path):
    stages = plan.cuda_plan(tmp_path, 8, tmp_path)
    kept = select(stages, ["decode", "parity", "anchor"])
    assert [s.name for s in kept] == ["parity", "anchor", "decode"]
    assert select(stages, None) == stages


# ------------------------------------------------------------------ the runner
def test_each_stage_runs_with_the_given_environment(tmp_path):
    probe = "import os; print(os.environ.get('PROBE_VALUE'))"
    stage = Stage("env", "prints PROBE_VALUE", (PY, "-c", probe))
    run_stages(
        [stage], budget_s=60, out=tmp_path, min_stage_s=0.1, env={**os.environ, "PROBE_VALUE": "7"}
    )
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


def test_a_hung_stage_is_killed_at_its_share_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    # The stage starts a grandchild that would outlive it, then hangs.
    code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    )
    hung = Stage("hung", "hangs", (PY, "-c", code), weight=1)
    began = time.monotonic()
    results, stopped = run_stages(
        [hung, sleeper("after", 0)], budget_s=6, out=tmp_path, min_stage_s=0.5, grace_s=1
    )
    assert time.monotonic() - began < 20
    assert stopped is None
    assert [r.status for r in results] == ["timed out", "done"]
    assert "killed at its budget share" in results[0].note
    assert not alive(int(pid_file.read_text()))
    assert (tmp_path / "logs" / "hung.log").read_text().startswith("$ ")


def test_a_failing_stage_does_not_stop_the_next_and_skips_are_recorded(tmp_path):
    fail = Stage("fail", "exits 3", (PY, "-c", "raise SystemExit(3)"))
    skip = Stage("skip", "never", (), skip="needs CUDA")
    results, _ = run_stages(
        [fail, skip, sleeper("ok", 0)], budget_s=60, out=tmp_path, min_stage_s=0.1
    )
    assert [(r.status, r.returncode) for r in results] == [
        ("failed", 3),
        ("skipped", None),
        ("done", 0),
    ]
    assert results[1].note == "needs CUDA"


def test_a_stage_whose_share_is_too_small_is_not_started(tmp_path):
    results, _ = run_stages(
        [sleeper("tiny", 0, weight=0.01), sleeper("big", 0, weight=100)],
        budget_s=5,
        out=tmp_path,
        min_stage_s=1,
    )
    assert results[0].status == "not run" and "budget spent" in results[0].note
    assert results[1].status == "done"


def test_sigterm_stops_the_run_not_the_caller(tmp_path):
    previous = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        results, stopped = run_stages(
            [sleeper("long", 60), sleeper("next", 0)],
            budget_s=120,
            out=tmp_path,
            min_stage_s=0.1,
            grace_s=1,
        )
    finally:
        timer.cancel()
    assert stopped == "SIGTERM"
    assert [r.status for r in results] == ["stopped", "not run"]
    assert "SIGTERM" in results[1].note
    assert signal.getsignal(signal.SIGTERM) is previous


# ------------------------------------------------------------------ the plan
def test_cuda_plan_runs_in_order_of_value_and_its_jobs_parse(tmp_path):
    stages = plan.cuda_plan(tmp_path, 20, tests_root=tmp_path)
    names = [s.name for s in stages]
    assert names[:6] == [
        "parity",
        "latency-bfloat16-tokens",
        "anchor",
        "latency-bfloat16-heads32",
        "model-bfloat16",
        "decode",
    ]
    assert names[-1] == "training"
    parser = build_parser()
    jobs = [
        *plan.latency_jobs(tmp_path, "bfloat16", "tokens", 1.0),
        *plan.model_jobs(tmp_path, 2.0),
        *plan.many_heads_jobs(tmp_path, 1.0),
        *plan.decode_jobs(tmp_path),
    ]
    for job in jobs:
        args = parser.parse_args(job)  # every job is a valid command line of its command
        assert args.device == "cuda"
    labels = {spec.label for job in jobs[:5] for spec in parser.parse_args(job).backends}
    fp32 = plan.latency_jobs(tmp_path, "float32", "tokens", 1.0)
    fp32_labels = {spec.label for job in fp32 for spec in parser.parse_args(job).backends}
    for family in plan.FAMILIES:
        assert {plan.label(family, "torch"), plan.label(family, "fla")} <= fp32_labels
        # bf16: fla only where F = Dv (it refuses the rest: attention/ops/fla.py)
        assert (plan.label(family, "fla") in labels) == (family == "linear")
        assert plan.label(family, "torch") in labels
    for job in plan.anchor_jobs(tmp_path, 1.0):
        assert job[0] == ANCHOR
        anchor.build_parser().parse_args(job[1:])
    for job in plan.model_jobs(tmp_path, 2.0)[:-1]:  # B·N = 64k tokens
        args = parser.parse_args(job)
        assert args.batch * args.lengths[0] == plan.TOKENS


@pytest.mark.parametrize("at_once", [True, False])
def test_under_the_report_a_test_failure_is_printed_when_it_happens(tmp_path, at_once):
    # A stage killed at its share never reaches pytest's summary: the conftest prints each
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
    stages = {s.name: s for s in plan.cuda_plan(tmp_path, 20, tests_root=None)}
    assert stages["parity"].skip and stages["training"].skip
    assert not stages["anchor"].skip


# ------------------------------------------------------------------ results and targets
def point(backend, ms, *, n=page.TARGET_N, dtype="bfloat16", protocol="constant-tokens", heads=4):
    return scaling.Row(protocol, backend, True, "fwdbwd", n, 65536 // n, heads, 64, dtype, ms=ms)


def test_rows_come_back_typed_and_the_targets_are_judged(tmp_path):
    rows = [point("softmax", 50.0), point(page.LINEAR_FLA, 8.0), point(anchor.LABEL, 7.0)]
    report.write_csv(tmp_path / "latency" / "a.csv", rows[:2], {"k": "v"})
    report.write_csv(tmp_path / "anchor" / "b.csv", rows[2:], {})
    back = collect.latency_rows(tmp_path)
    assert back == rows
    speed, overhead = page.attention_target(back)
    assert speed.verdict == "met" and "6.25×" in speed.measured
    assert overhead.verdict == "met" and "1.14×" in overhead.measured
    slow = page.attention_target([point("softmax", 10.0), point(page.LINEAR_FLA, 8.0)])
    assert [t.verdict for t in slow] == ["not met", "not measured"]
    (torch_kernel,) = page.attention_target(
        [*rows, point(page.LINEAR_TORCH, 5.0)], page.LINEAR_TORCH
    )
    assert torch_kernel.verdict == "met" and "torch kernel" in torch_kernel.what
    # Rows at H = 32 (the many-heads stage) neither judge the H = 4 target nor share its table.
    many = [point("softmax", 50.0, heads=32), point(page.LINEAR_FLA, 1.0, heads=32)]
    assert page.attention_target(many)[0].verdict == "not measured"
    text = "\n".join(page._latency_section([*rows[:2], *many], tmp_path, caption=""))
    assert "## Per call: constant-tokens, bfloat16, H = 4" in text
    assert "## Per call: constant-tokens, bfloat16, H = 32" in text


def test_model_and_decode_targets():
    def step(backend, n, ms):
        return StepRow("reversal", 256, 2, 4, backend, n, 65536 // n, "bfloat16", step_ms=ms)

    rows = [step("softmax", 2048, 10), step(page.LINEAR_FLA, 2048, 12)]
    rows += [step("softmax", 4096, 20), step(page.LINEAR_FLA, 4096, 15)]
    assert page.model_target(rows).verdict == "met"
    assert "faster from N = 4096" in page.model_target(rows).measured
    assert page.model_target(rows[:2]).verdict == "not met"
    decoded = [
        DecodeRow("softmax", 65536, 1, 4, 64, 2.0),
        DecodeRow(page.LINEAR_FLA, 65536, 1, 4, 64, 0.1),
    ]
    assert page.decode_target(decoded).verdict == "met"
    assert page.decode_target(decoded[:1]).verdict == "not measured"


def test_pack_holds_every_file(tmp_path):
    out = tmp_path / "report"
    (out / "logs").mkdir(parents=True)
    (out / "logs" / "a.log").write_text("x")
    (out / "gpu_report.md").write_text("y")
    with tarfile.open(pack(out)) as tar:
        assert sorted(tar.getnames()) == ["report/gpu_report.md", "report/logs/a.log"]


# ------------------------------------------------------------------ the anchor on CPU
def test_anchor_computes_linear_attention_and_is_timed_like_a_backend(tmp_path, monkeypatch):
    from attn_lightning.attention import build_attention
    from attn_lightning.attention.ops import fla
    from tests.attention.ops.test_fla import fla_naive

    monkeypatch.setattr(fla, "chunk_op", lambda: fla_naive().naive_recurrent_linear_attn)
    q, k, v = (
        torch.randn(2, 3, 20, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)
    )
    want = build_attention("linear", head_dim=8, implementation="torch")(q, k, v, causal=True)
    torch.testing.assert_close(anchor.FlaOp()(q, k, v, causal=True), want, rtol=1e-4, atol=1e-5)
    flags = "--device cpu --dtype float32 --protocol small-batch --batch 1 --heads 2 --head-dim 8"
    flags += f" --lengths 16 32 --repeats 1 --warmup 0 --budget 0.1 --out {tmp_path} --tag a"
    assert anchor.main(flags.split()) == 0
    _, records = report.read_csv(tmp_path / "a.csv")
    assert {(r["backend"], r["mode"], r["n"]) for r in records} == {
        (anchor.LABEL, mode, n) for mode in ("fwd", "fwdbwd") for n in ("16", "32")
    }
    assert all(r["ms"] for r in records)


# ------------------------------------------------------------------ the whole command
@pytest.mark.slow
def test_smoke_run_of_named_stages_passes_the_autotune_mode_to_them(tmp_path, capsys):
    out = tmp_path / "some"
    argv = ["gpu-report", "--smoke", "--stages", "decode", "--fla-autotune", "reduced"]
    assert main([*argv, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| decode |" in text and "| parity |" not in text and "| model-float32 |" not in text
    assert "- **fla_autotune**: `reduced`" in text and "- **stages**: `decode`" in text
    assert os.environ.get("ATTN_LIGHTNING_FLA_AUTOTUNE") != "reduced"


def test_smoke_run_writes_the_page_and_one_archive(tmp_path, capsys):
    out = tmp_path / "smoke"
    assert main(["gpu-report", "--smoke", "--budget-minutes", "5", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# GPU report (CPU smoke run")
    assert "| anchor | fla's own op | skipped |" in text
    assert "- parity: " in text and " 0 failed, 0 errors" in text
    for stage in ("latency-float32-b1", "model-float32", "decode"):
        assert f"| {stage} |" in text and (out / "logs" / f"{stage}.log").is_file()
    assert "## Per call: small-batch, float32" in text and "## Decode" in text
    _, versions = report.read_csv(out / "versions.csv")
    assert {"torch", "fla-core", "triton"} <= {r["what"] for r in versions}
    with tarfile.open(out / "gpu_report.tar.gz") as tar:
        names = tar.getnames()
    assert "smoke/gpu_report.md" in names and "smoke/versions.csv" in names
    assert any(n.startswith("smoke/latency/") and n.endswith(".csv") for n in names)
