"""The ``bandwidth`` command and formula on the CPU: the bytes a call moves, the roofline with
fake timings, and the copy bandwidth measured into its folder."""

from __future__ import annotations

import pytest

from attn_lightning.records import read_csv
from lab.benchmark import main
from lab.benchmarks import bandwidth
from lab.benchmarks.contenders import Shape

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


def test_the_copy_bandwidth_is_measured_into_its_folder(tmp_path, capsys):
    argv = ["--device", "cpu", "--size-mb", "4", "--repeats", "2", "--warmup", "1"]
    assert main(["bandwidth", *argv, "--out", str(tmp_path / "bandwidth")]) == 0
    assert capsys.readouterr().out.startswith("copy bandwidth on cpu: ")
    meta, records = read_csv(tmp_path / "bandwidth" / "copy.csv")
    assert meta["timing"] == "time.perf_counter" and float(records[0]["gb_s"]) > 0
    assert bandwidth.read_copy(tmp_path / "bandwidth") == float(records[0]["gb_s"])
    assert bandwidth.read_copy(tmp_path / "elsewhere") is None
