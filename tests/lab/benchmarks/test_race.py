"""The ``race``, ``profile`` and ``bandwidth`` commands on the CPU: a row per (shape, contender),
written after every point; a contender that fails or cannot run costs its own row only; the bytes a
call moves, the roofline with fake timings, and the copy bandwidth measured into its folder."""

from __future__ import annotations

import itertools

import pytest

from attn_lightning.records import read_csv
from lab.benchmark import main
from lab.benchmarks import contenders as calls
from lab.benchmarks import race
from lab.benchmarks.race import typed

H4_32K = calls.Shape(2, 4, 32768, 64)
TINY = "--device cpu --dtype float32 --repeats 3 --warmup 1"


def test_race_writes_a_row_per_shape_and_contender(tmp_path):
    argv = f"--shapes 1x2x16x8 2x2x8x8 --contenders linear:torch fla-op flash {TINY}"
    assert main(["race", *argv.split(), "--out", str(tmp_path), "--tag", "k"]) == 0
    meta, records = read_csv(tmp_path / "k.csv")
    assert meta["timing"] == "time.perf_counter" and meta["dtype"] == "float32"
    got = [typed(race.KernelRow, r) for r in records]
    assert [(str(r.shape), r.contender) for r in got] == [
        (s, c) for s in ("1x2x16x8", "2x2x8x8") for c in ("linear:torch", "fla-op", "flash")
    ]
    torch_rows = [r for r in got if r.contender == "linear:torch"]
    assert all(r.ms and r.repeats == 3 and r.min_ms <= r.ms <= r.max_ms for r in torch_rows)
    assert all(r.rel_err == 0.0 and r.first_ms is not None for r in torch_rows)
    assert all(
        r.ms is None and r.note.startswith("not run: needs CUDA")
        for r in got
        if r.contender == "fla-op"
    )
    assert "| fla-op | not run: needs CUDA" in (tmp_path / "k.md").read_text()


def test_a_failing_contender_costs_its_row_only(tmp_path, monkeypatch):
    def broken(shape, device, dtype):
        raise RuntimeError("Triton compilation failed")

    monkeypatch.setitem(calls.CONTENDERS, "flash", ("broken", broken))
    argv = f"--shapes 1x2x16x8 --contenders flash linear:torch {TINY} --out {tmp_path}"
    assert main(["race", *argv.split()]) == 0
    _, records = read_csv(tmp_path / "race.csv")
    assert records[0]["note"] == "RuntimeError: Triton compilation failed"
    assert records[1]["ms"] != ""


def test_the_files_are_rewritten_after_every_point(tmp_path, monkeypatch):
    seen = []
    real = race.measure

    def spy(label, shape, **kwargs):
        if (tmp_path / "race.csv").is_file():
            seen.append(len(read_csv(tmp_path / "race.csv")[1]))
        return real(label, shape, **kwargs)

    monkeypatch.setattr(race, "measure", spy)
    argv = f"--shapes 1x2x16x8 --contenders flash linear:torch normaliser:old {TINY}"
    main(["race", *argv.split(), "--out", str(tmp_path)])
    assert seen == [1, 2]  # a run killed before its third point keeps the first two


def test_profile_ranks_each_contender_s_top_operators(tmp_path):
    argv = (
        f"--shape 1x2x16x8 --contenders linear:torch linear:fla {TINY.replace(' --repeats 3', '')}"
    )
    assert main(["profile", *argv.split(), "--top", "4", "--out", str(tmp_path)]) == 0
    meta, records = read_csv(tmp_path / "top_kernels.csv")
    assert meta["ranked_by"] == "CPU self time"
    rows = [typed(race.KernelShare, r) for r in records]
    ranked = [r for r in rows if r.contender == "linear:torch"]
    assert [r.rank for r in ranked] == [1, 2, 3, 4]
    assert all(a.ms_per_call >= b.ms_per_call for a, b in itertools.pairwise(ranked))
    assert 0 < sum(r.share for r in ranked) <= 1 + 1e-9
    (fla_row,) = [r for r in rows if r.contender == "linear:fla"]
    assert fla_row.note.startswith("not run: needs CUDA")
    assert "| linear:fla |  | not run: needs CUDA" in (tmp_path / "top_kernels.md").read_text()


def test_each_shape_s_reference_is_computed_once(tmp_path, monkeypatch):
    asked = []
    real = calls.reference

    def counting(kind, shape, device, dtype):
        asked.append((kind, str(shape)))
        return real(kind, shape, device, dtype)

    monkeypatch.setattr(calls, "reference", counting)
    argv = f"--shapes 1x2x16x8 2x2x8x8 --contenders linear:torch linear:auto flash {TINY}"
    main(["race", *argv.split(), "--out", str(tmp_path)])
    assert asked == [("linear", "1x2x16x8"), ("linear", "2x2x8x8")]
    _, records = read_csv(tmp_path / "race.csv")
    assert [r["rel_err"] != "" for r in records] == [True, True, False] * 2


def test_bytes_moved_is_eight_tensors_at_the_call_s_dtype():
    # Issue 47's count: q, k, v, out and their gradients in bf16, 8 x 33.5 MB at H 4, D 64, 64k.
    assert race.bytes_moved(H4_32K, "bfloat16") == 8 * 2 * 4 * 32768 * 64 * 2 == 268_435_456
    assert race.bytes_moved(H4_32K, "float32") == 2 * 268_435_456
    with pytest.raises(ValueError, match="dtype 'int8': expected one of"):
        race.bytes_moved(H4_32K, "int8")


def test_roofline_with_fake_timings():
    # 268.4 MB at 3,000 GB/s: 0.0895 ms; a call of 0.358 ms is 4x from it, at 750 GB/s.
    assert race.roofline_ms(H4_32K, "bfloat16", 3000.0) == pytest.approx(0.08947848)
    assert 0.35791394 / race.roofline_ms(H4_32K, "bfloat16", 3000.0) == pytest.approx(4.0)


def test_the_copy_bandwidth_is_measured_into_its_folder(tmp_path, capsys):
    argv = ["--device", "cpu", "--size-mb", "4", "--repeats", "2", "--warmup", "1"]
    assert main(["bandwidth", *argv, "--out", str(tmp_path / "bandwidth")]) == 0
    assert capsys.readouterr().out.startswith("copy bandwidth on cpu: ")
    meta, records = read_csv(tmp_path / "bandwidth" / "copy.csv")
    assert meta["timing"] == "time.perf_counter" and float(records[0]["gb_s"]) > 0
    assert race.read_copy(tmp_path / "bandwidth") == float(records[0]["gb_s"])
    assert race.read_copy(tmp_path / "elsewhere") is None
