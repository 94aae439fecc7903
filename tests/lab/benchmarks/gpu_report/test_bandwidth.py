"""Achieved bandwidth on the CPU: the bytes formula, the roofline with fake timings, the copy job
measured once per report, and the page's header, rows and issue 47's roofline target."""

from __future__ import annotations

import pytest

from attn_lightning.records import read_csv, write_csv
from lab.benchmarks.gpu_report import bandwidth, page, targets
from lab.benchmarks.gpu_report.calls import Shape
from lab.benchmarks.gpu_report.runner import StageResult
from tests.lab.benchmarks.gpu_report.test_targets import row

H4_32K = Shape(2, 4, 32768, 64)


def test_bytes_moved_is_eight_tensors_at_the_call_s_dtype():
    # Issue 47's count: q, k, v, out and their gradients in bf16, 8 x 33.5 MB at H 4, D 64, 64k.
    assert bandwidth.bytes_moved(H4_32K, "bfloat16") == 8 * 2 * 4 * 32768 * 64 * 2 == 268_435_456
    assert bandwidth.bytes_moved(H4_32K, "float32") == 2 * 268_435_456
    with pytest.raises(ValueError, match="dtype 'int8': expected one of"):
        bandwidth.bytes_moved(H4_32K, "int8")


def test_roofline_and_achieved_with_fake_timings():
    # 268.4 MB at 3,000 GB/s: 0.0895 ms; a call of 0.358 ms is 4x from it, at 750 GB/s.
    assert bandwidth.roofline_ms(H4_32K, "bfloat16", 3000.0) == pytest.approx(0.08947848)
    a = bandwidth.achieved("linear:triton", H4_32K, "bfloat16", 0.35791394, 3000.0)
    assert a.gb_s == pytest.approx(750.0) and a.times_roofline == pytest.approx(4.0)
    unknown = bandwidth.achieved("flash", H4_32K, "bfloat16", 1.0, None)
    assert unknown.roofline_ms is None and unknown.times_roofline is None
    assert unknown.gb_s == pytest.approx(268.435456)


def test_the_copy_job_measures_once_per_report(tmp_path):
    argv = ["--device", "cpu", "--size-mb", "4", "--repeats", "2", "--warmup", "1"]
    assert bandwidth.main([*argv, "--out", str(tmp_path / "bandwidth")]) == 0
    meta, records = read_csv(tmp_path / "bandwidth" / "copy.csv")
    assert meta["timing"] == "time.perf_counter" and float(records[0]["gb_s"]) > 0
    write_csv(tmp_path / "bandwidth" / "copy.csv", [{"gb_s": 1234.5}], {})
    bandwidth.main([*argv, "--out", str(tmp_path / "bandwidth")])  # a later stage keeps it
    assert bandwidth.read_copy(tmp_path) == 1234.5
    assert bandwidth.read_copy(tmp_path / "elsewhere") is None


def test_roofline_target_met_not_met_and_not_measured():
    fast = [row("linear:triton", H4_32K, 0.35791394)]
    assert targets.roofline(fast, 3000.0).verdict == "met"
    assert "0.358 ms / 0.0895 ms roofline = 4.00×" in targets.roofline(fast, 3000.0).measured
    slow = [row("linear:triton", H4_32K, 0.5)]
    assert targets.roofline(slow, 3000.0).verdict == "not met"
    assert targets.roofline(fast, None).measured == "no copy bandwidth"
    absent = [row("linear:triton", H4_32K, None, note="not run: needs CUDA (a Triton kernel)")]
    found = targets.roofline(absent, 3000.0)
    assert found.verdict == "not measured" and found.measured.startswith("not run: needs CUDA")


def test_page_prints_the_copy_bandwidth_and_each_attention_row_s_bandwidth(tmp_path):
    rows = [
        row("flash", H4_32K, 9.0),
        row("linear:triton", H4_32K, 0.35791394),
        row("linear:torch", H4_32K, None, note="OOM"),
        row("normaliser:new", H4_32K, 0.98),  # other tensors: the formula is not theirs
    ]
    write_csv(tmp_path / "kernels" / "kernels.csv", rows, {})
    write_csv(tmp_path / "bandwidth" / "copy.csv", [{"gb_s": 3000.0}], {})
    text = page.write_page(tmp_path, {}, [StageResult("kernels", "k", "done", 1.0)], dry_run=False)
    assert "- **copy_bandwidth**: `3,000 GB/s (device-to-device copy" in text
    section = text.split("## Achieved bandwidth vs the memory roofline (copy bandwidth: 3,000")[1]
    assert "bytes moved = 8 · B·H·N·D · bytes per element" in section
    assert "| flash | 2x4x32768x64 | bfloat16 | 268.4 | 9 | 30 | 0.0895 | 100.58× |" in section
    assert "| linear:triton | 2x4x32768x64 | bfloat16 | 268.4 | 0.358 | 750 | 0.0895 | 4.00× |" in (
        section
    )
    assert "normaliser" not in section.split("##")[0] and "| linear:torch |" not in section
    assert "| triton kernel within 5× of the memory roofline at H 4 D 64 N 32,768" in text


def test_without_a_copy_bandwidth_the_rows_still_have_their_gb_s(tmp_path):
    write_csv(tmp_path / "kernels" / "kernels.csv", [row("flash", H4_32K, 9.0)], {})
    text = page.write_page(tmp_path, {}, [], dry_run=True)
    assert "copy bandwidth: not measured" in text and "| flash | 2x4x32768x64 | bfloat16 |" in text
