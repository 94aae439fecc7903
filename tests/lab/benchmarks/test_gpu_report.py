"""The GPU report without a GPU: its commands parse, the budget skips what does not fit and a
failed or hung stage is recorded, not fatal, and the page from a fixture folder."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attn_lightning.attention.ops import fla_autotune
from attn_lightning.records import read_csv, write_csv
from lab.benchmark import build_parser
from lab.benchmarks import gpu_report
from lab.benchmarks.gpu_report import FAILURES_AT_ONCE, main
from lab.benchmarks.race import KernelRow

ROOT = Path(__file__).resolve().parents[3]
FIRST_RUN = ROOT / "docs" / "results" / "gpu_report_2026-11-26"


def test_every_command_is_one_its_benchmark_parses(tmp_path, capsys):
    assert main(["--dry-run", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0][2:] for line in lines[::2]] == [s[0] for s in gpu_report.STAGES]
    parser = build_parser()
    for argv in (shlex.split(line) for line in lines[1::2]):
        if argv[2] == "pytest":
            assert argv[3] == "tests/attention/test_fla_cuda.py" and str(tmp_path) in argv[-1]
            continue
        args = parser.parse_args(argv[3:])
        assert args.device == "cuda" and args.out.parent == tmp_path
    assert not any(tmp_path.iterdir())  # printed, nothing run


def test_without_cuda_a_budget_or_a_folder_it_refuses_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    wrong = [(["--out", str(tmp_path)], "needs CUDA"), (["--budget-min", "0"], "> 0, got 0")]
    for argv, said in [*wrong, (["--page", str(tmp_path / "none")], "none: not a folder")]:
        with pytest.raises(SystemExit):
            main(argv)
        assert said in capsys.readouterr().err.splitlines()[-1] and not any(tmp_path.iterdir())


def test_the_budget_skips_what_does_not_fit_and_a_failure_is_not_fatal(tmp_path, monkeypatch):
    said = f"import os; print('ran', *map(os.environ.get, {[FAILURES_AT_ONCE, fla_autotune.ENV]}))"
    stages = (  # a budget of 12 s
        ("fails", 20, "exits 3", "raise SystemExit(3)"),
        ("hangs", 2, "sleeps past its cap", "import time; time.sleep(60)"),
        ("big", 600, "needs more than is left", "print('never')"),
        ("small", 20, "fits", said),
    )
    monkeypatch.setattr(gpu_report, "STAGES", stages)
    monkeypatch.setattr(gpu_report, "command", lambda name, line, out: [sys.executable, "-c", line])
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.delenv(fla_autotune.ENV, raising=False)
    assert main(["--budget-min", "0.2", "--out", str(tmp_path)]) == 0
    meta, rows = read_csv(tmp_path / "stages.csv")
    assert [r["status"] for r in rows] == ["failed", "timed out", "skipped", "done"]
    assert rows[0]["note"] == "exit 3; see logs/fails.log" and meta["fla_autotune"] == "reduced"
    assert not (tmp_path / "logs" / "big.log").exists()
    assert (tmp_path / "logs" / "small.log").read_text().splitlines()[1] == "ran 1 reduced"
    page = (tmp_path / "gpu_report.md").read_text()
    assert "| hangs | sleeps past its cap | timed out | 2 | timed out; see logs/hangs.log |" in page
    assert "| big | needs more than is left | skipped | 0 |" in page and "cap 600 s |" in page


def test_the_page_from_a_fixture_folder(tmp_path, capsys):
    for folder in ("decode", "model", "parity"):  # what the first run's stages wrote
        shutil.copytree(FIRST_RUN / folder, tmp_path / folder)
    timed = [("fla-op", 3.0, ""), ("flash", 9.0, ""), ("linear:fla", 3.3, "")]  # at 2x4x32768x64
    timed += [("linear:torch", 4.43, ""), ("linear:auto", 4.5, "auto: torch")]
    timed += [("linear:triton", 0.35791394, "")]
    rows = [KernelRow(c, 2, 4, 32768, 64, "bfloat16", ms=ms, kernel=k) for c, ms, k in timed]
    write_csv(tmp_path / "anchor" / "race.csv", rows[:1])
    write_csv(tmp_path / "kernels" / "race.csv", rows[1:])
    write_csv(tmp_path / "bandwidth" / "copy.csv", [{"gb_s": 3000.0}])
    decoded = [{"backend": "softmax", "ms": 6.74}, {"backend": "linear", "ms": 0.47}]
    write_csv(tmp_path / "decode" / "b1.csv", [d | {"context": 65536} for d in decoded])
    stage = {"stage": "kernels", "what": "w", "status": "done", "seconds": 3, "note": ""}
    write_csv(tmp_path / "stages.csv", [stage], {"gpu": "H100"})
    assert main(["--page", str(tmp_path)]) == 0
    page = capsys.readouterr().out
    assert page == (tmp_path / "gpu_report.md").read_text() and page.startswith("# GPU report\n")
    ends = ("| met |", "| not met |", "| not measured |")
    verdicts = [x.rsplit(" | ", 2)[1:] for x in page.splitlines() if x.endswith(ends)]
    assert verdicts == [
        ["3.3 / 3 ms = 1.10× (2x4x32768x64)", "met |"],  # our fla path vs fla's op
        ["9 / 4.5 ms = 2.00× (torch)", "not met |"],  # auto vs flash at 32k (auto took torch)
        ["–", "not measured |"],  # ... and at H 32, D 128
        ["4.43 / 0.358 ms = 12.38× (2x4x32768x64: torch / triton)", "not met |"],  # auto's rule
        ["–", "not measured |"],  # the torch kernel vs 2026-11-28: none of its shapes
        ["–", "not measured |"],  # the first run's model step has no plain linear row
        ["6.74 / 0.47 ms = 14.35× (KV cache / linear)", "met |"],
        ["0.358 / 0.0895 ms = 4.00× (roofline at 3,000 GB/s copy)", "met |"],
    ]
    assert "- **gpu**: `H100`" in page and "- **copy_bandwidth**: `3,000 GB/s (median)`" in page
    assert "| kernels | w | done | 3 |  |" in page and "## model: `model/model_b1.md`" in page
    assert "- parity: 7 passed, 2 failed, 0 skipped (test_bf16_mixed" in page  # the committed XML
    assert "## decode: `decode/decode_cuda_b1.md`\n\n### ms per decoded token" in page


@pytest.mark.parametrize("at_once", [True, False])
def test_under_the_report_a_test_failure_is_printed_when_it_happens(tmp_path, at_once):
    # A test stage killed at its timeout never reaches pytest's summary: the conftest prints each
    # failure as it happens when the report's variable is set (and only then).
    (tmp_path / "test_fails.py").write_text("def test_one():\n    assert 1 == 2, 'MARK'\n")
    env = {k: v for k, v in os.environ.items() if k != FAILURES_AT_ONCE}
    env |= {FAILURES_AT_ONCE: "1"} if at_once else {}
    argv = [sys.executable, "-m", "pytest", str(tmp_path / "test_fails.py"), "-q", "-p"]
    argv += ["tests.conftest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    said = done.stdout + done.stderr
    assert done.returncode == 1
    assert ("FAILED NOW" in said and "MARK" in said.split("FAILED NOW", 1)[-1]) == at_once
