"""image_completion.md's older generation-speed tables, recomputed from their committed benchmark
CSVs: the trained 784-token checkpoints on CPU (``image28_generation_cpu{,_max}.csv``), the
random-weight throughput of §3 (``image_throughput_{small,paper}.csv``) and the decode latency
of §4 (``image_decode/decode_cpu.csv``). Ratios are divided from the CSVs' seconds (the ratio
columns of the §3 CSVs were divided from rounded rates)."""

from __future__ import annotations

import csv

from tests.docs.pages import RESULTS, page_table, runs

PAGE = "image_completion.md"
SOFTMAX = "softmax"


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _shows(cell: str, value: float, suffix: str = "") -> bool:
    """``cell`` is ``value`` rounded to the decimals the cell shows (bold and ``suffix`` aside)."""
    number = cell.strip("*").removesuffix(suffix)
    decimals = len(number.partition(".")[2])
    return f"{value:.{decimals}f}" == number


def _column(name: str, key: str = "seconds") -> dict[tuple[str, str, int], float]:
    """(backend's first word, method, batch) -> ``key`` (seconds of one batch, images/s)."""
    return {
        (r["backend"].split(":")[0], r["method"], int(r["batch"])): float(r[key])
        for r in runs(name)
    }


def test_trained_checkpoint_generation_table_is_its_csvs():
    seconds = _column("image28_generation_cpu") | _column("image28_generation_cpu_max")
    rate = {key: key[2] / s for key, s in seconds.items()}
    table = {row[0]: row[1:] for row in page_table(PAGE, "| decoding | batch 1: images/s |")}
    recompute = rate[(SOFTMAX, "recompute", 1)]
    cells = table["softmax, prefix recompute (uncached)"]
    assert cells[0] == f"{recompute:.2g} ({seconds[(SOFTMAX, 'recompute', 1)]:.0f} s/image)"
    assert _shows(cells[1], recompute / rate[(SOFTMAX, "step", 1)]) and cells[2] == "1.0"
    # its batch 32 would take 32 images × the batch-1 seconds
    assert 32 * seconds[(SOFTMAX, "recompute", 1)] / 60 > 50
    assert cells[3:] == ["not run (est. > 50 min)", "–", "not run", "–"]
    for label, backend in (
        ("softmax, preallocated KV cache", SOFTMAX),
        ("linear, recurrent", "linear"),
        ("performer (m = 64), recurrent", "performer"),
        ("polysketch (r = 32), recurrent", "polysketch"),
    ):
        cells = table[label]
        ours = {b: rate[(backend, "step", b)] for b in (1, 32, 128)}
        kv = {b: rate[(SOFTMAX, "step", b)] for b in (1, 32, 128)}
        assert _shows(cells[0], ours[1]) and _shows(cells[1], ours[1] / kv[1]), label
        assert cells[2] == f"{ours[1] / recompute:.0f}", label
        for i, batch in ((3, 32), (5, 128)):
            assert _shows(cells[i], ours[batch]), (label, batch)
            assert _shows(cells[i + 1], ours[batch] / kv[batch]), (label, batch)
    page = _page()
    linear = {b: rate[("linear", "step", b)] / rate[(SOFTMAX, "step", b)] for b in (1, 32, 128)}
    per_image = [seconds[(b, m, 1)] for b, m in ((SOFTMAX, "recompute"), (SOFTMAX, "step"),
                                                  ("linear", "step"))]  # fmt: skip
    assert (
        "ours is {:.0f} / {:.1f} / {:.1f} s, i.e. linear **{:.0f}× uncached but {:.2f}× cached**"
    ).format(*per_image, rate[("linear", "step", 1)] / recompute, linear[1]) in page
    assert {f"{linear[b]:.1f}" for b in (32, 128)} == {"2.0"}
    assert "at batch 32 and 128 linear is 2.0× cached softmax" in page


def test_random_weight_throughput_table_is_its_csvs():
    small, paper = _column("image_throughput_small"), _column("image_throughput_paper")
    # images/s = batch / seconds, as the CSVs' rate (recomputed once from the seconds) and
    # ratios are
    measured = {
        size: {key: key[2] / s for key, s in _column(f"image_throughput_{size}").items()}
        for size in ("small", "paper")
    }
    table = {
        row[0]: row[1:] for row in page_table(PAGE, "| backend | images/s, trained-size model")
    }
    kv_small, kv_paper = small[(SOFTMAX, "step", 32)], paper[(SOFTMAX, "step", 32)]
    cells = table["softmax, prefix recompute (no cache)"]
    recompute = small[(SOFTMAX, "recompute", 32)]
    assert _shows(cells[0], measured["small"][(SOFTMAX, "recompute", 32)])
    assert _shows(cells[1], kv_small / recompute)
    # not run at the paper size: the small model's recompute / cache time ratio, applied there
    hours = kv_paper * recompute / kv_small / 3600
    assert cells[2:] == [f"not run (≈ {hours:.1f} h at the small model's recompute ÷ cache)", "–"]
    for label, backend in (
        ("softmax, KV cache (baseline)", SOFTMAX),
        ("linear, recurrent", "linear"),
        ("performer (m = 64), recurrent", "performer"),
        ("polynomial sketch (r = 32), recurrent", "polysketch"),
    ):
        cells = table[label]
        s, p = small[(backend, "step", 32)], paper[(backend, "step", 32)]
        key = (backend, "step", 32)
        assert _shows(cells[0], measured["small"][key]) and _shows(cells[1], kv_small / s), label
        assert _shows(cells[2], measured["paper"][key]) and _shows(cells[3], kv_paper / p), label
    page = _page()
    big, little = kv_paper / paper[("linear", "step", 32)], kv_small / small[("linear", "step", 32)]
    assert f"met at the paper's model size ({big:.1f}×), not met at the small model" in page
    assert f"not met at the small model we trained ({little:.2f}×)" in page
    assert (
        f"Here linear is {recompute / small[('linear', 'step', 32)]:.0f}× uncached softmax" in page
    )
    assert f"| {little:.2f}× (trained-size model), {big:.2f}× (paper-size model) |" in page


def test_decode_latency_table_is_decode_cpu_csv():
    lines = (RESULTS / "image_decode" / "decode_cpu.csv").read_text().splitlines()
    rows = list(
        csv.reader(line for line in lines if line and not line.startswith(("#", "backend,")))
    )
    ms: dict[str, list[float]] = {}
    for backend, _context, *_, value, _note in rows:
        ms.setdefault(backend, []).append(float(value))
    table = {row[0]: row[1:] for row in page_table(PAGE, "| backend | T = 1k | 2k |")}
    for label, backend in (
        ("softmax (KV cache)", SOFTMAX),
        ("linear", "linear"),
        ("performer", "performer"),
        ("polynomial sketch", "polysketch:sketch=random,norm=fixed"),
    ):
        cells, values = table[label], ms[backend]
        assert len(values) == 7 and len(cells) == 8, label
        assert all(_shows(c, v) for c, v in zip(cells, values, strict=False)), label
        ratio = values[-1] / values[0]
        assert _shows(cells[-1], ratio, "×") and cells[-1].strip("*").count(".") == (ratio < 10), (
            label
        )
    linear = ms["linear"][-1] / ms["linear"][0]
    assert (
        f"**Target: linear latency at 64k ≤ 1.2× its latency at 1k — met** ({linear:.2f}×;"
        in _page()
    )
    assert f"| linear decode latency at 64k ≤ 1.2× at 1k | {linear:.2f}× | yes |" in _page()
