"""polynomial.md's two CPU benchmark tables, recomputed from their committed latency CSVs under
``docs/figures/``: the speed-up over SDPA against N (``polynomial_small-batch{,_long}.csv``), with
the memory and GEMM-rate readings under it, and the before/after multiples of SDPA's time
(``polynomial_speedup_{before,after}.csv``)."""

from __future__ import annotations

from attn_lightning.records.files import read_csv
from tests.docs.pages import RESULTS, page_table

PAGE = "polynomial.md"
FIGURES = RESULTS.parent / "figures"
MASKS = {"full": "False", "causal": "True"}
ROWS = {
    "`polynomial` (exact, tiled)": "polynomial",
    "`polysketch` (random)": "polysketch",
    "`polysketch` learned sketch": "polysketch:sketch=learned",
    "`polysketch` local b = 64": "polysketch:local_block=64",
}


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _latency(name: str) -> tuple[dict[str, str], dict[tuple[str, str, int], dict[str, str]]]:
    """The file's header and its rows by (backend, causal, n)."""
    meta, rows = read_csv(FIGURES / f"{name}.csv")
    return meta, {(r["backend"], r["causal"], int(r["n"])): r for r in rows}


def _speedup(
    rows: dict[tuple[str, str, int], dict[str, str]], backend: str, causal: str, n: int
) -> float:
    """SDPA's ms over the backend's at the same point."""
    return float(rows[("softmax", causal, n)]["ms"]) / float(rows[(backend, causal, n)]["ms"])


def _shows(cell: str, *values: float) -> bool:
    """``cell`` (``0.42×``, or ``1.6× / 1.8×`` for two runs) is ``values`` rounded to the
    decimals it shows (one at least)."""
    shown = [c.strip().removesuffix("×") for c in cell.strip("*").split(" / ")]
    if len(shown) != len(values):
        return False
    for number, value in zip(shown, values, strict=True):
        decimals = len(number.partition(".")[2])
        if f"{value:.{decimals}f}" != number or not decimals:
            return False
    return True


def test_speedup_table_is_the_small_batch_csvs():
    _, first = _latency("polynomial_small-batch")
    _, long = _latency("polynomial_small-batch_long")
    table = page_table(PAGE, "| backend | mask | N=256 | 1,024 | 4,096 | 8,192 | 16,384 |")
    assert len(table) == 2 * len(ROWS)
    for label, mask, *cells in table:
        backend, causal = ROWS[label], MASKS[mask]
        for cell, n in zip(cells[:2], (256, 1024), strict=True):
            assert _shows(cell, _speedup(first, backend, causal, n)), (label, mask, n)
        at_4096 = [_speedup(first, backend, causal, 4096)]
        if (backend, causal, 4096) in long:  # the second run, 15 minutes later
            at_4096.append(_speedup(long, backend, causal, 4096))
            for cell, n in zip(cells[3:], (8192, 16384), strict=True):
                assert _shows(cell, _speedup(long, backend, causal, n)), (label, mask, n)
        else:
            # not in the second run: 16,384 is the first run's note
            note = first[(backend, causal, 16384)]
            if backend == "polynomial":
                assert note["note"].startswith("too slow"), label
                est = float(note["est_ms"]) / 1000
                budget = float(first[("softmax", "False", 16384)]["est_ms"]) / 1000
                end = (
                    f"too slow (est. {est:.0f} s vs {budget:.0f} s)"
                    if mask == "full"
                    else "too slow"
                )
            else:
                # the old memory estimate skipped it (N² growth assumed for every backend)
                assert note["note"].startswith("OOM (est."), label
                end = "not measured"
            assert cells[3:] == ["–", end], (label, mask)
        assert _shows(cells[2], *at_4096), (label, mask)


def test_speedup_readings_are_the_small_batch_csvs():
    page = _page()
    first_meta, first = _latency("polynomial_small-batch")
    long_meta, long = _latency("polynomial_small-batch_long")
    gflops = [float(m["fp32_matmul_gflops"]) for m in (first_meta, long_meta)]
    assert f"GEMM rate moved from {gflops[0]:.0f} to {gflops[1]:.0f} GFLOP/s" in page
    mib = {(b, c): float(r["peak_mb"]) for (b, c, n), r in long.items() if n == 16384}
    sdpa = mib[("softmax", "True")]
    sketch = [mib[("polysketch", c)] / 1024 for c in ("False", "True")]
    local = sorted(mib[("polysketch:local_block=64", c)] / 1024 for c in ("False", "True"))
    assert (
        f"at N = 16,384: SDPA {sdpa:.0f} MiB, polysketch {sketch[0]:.1f} GiB (non-causal) / "
        f"{sketch[1]:.1f} GiB (causal), local {local[0]:.1f}–{local[1]:.1f} GiB"
    ) in page
    at_4096 = {(b, c): float(r["peak_mb"]) for (b, c, n), r in first.items() if n == 4096}

    def span(backend: str, scale: float, digits: int) -> str:
        low, high = sorted(at_4096[(backend, c)] / scale for c in ("False", "True"))
        return f"{low:.{digits}f}–{high:.{digits}f}"

    assert (
        f"at 4,096: SDPA {at_4096[('softmax', 'False')]:.0f} MiB, exact polynomial "
        f"{span('polynomial', 1, 0)} MiB, polysketch {span('polysketch', 1024, 1)} GiB, learned "
        f"sketch {span('polysketch:sketch=learned', 1024, 1)} GiB"
    ) in page
    times = sorted(mib[("polysketch", c)] / sdpa for c in ("False", "True"))
    assert f"{times[0]:.0f}–{times[1]:.0f}× SDPA's memory at 16,384" in page
    learned = sorted(
        float(first[("polysketch:sketch=learned", c, n)]["ms"])
        / float(first[("polysketch", c, n)]["ms"])
        for c in ("False", "True")
        for n in (256, 1024, 4096)
    )
    assert (
        f"costs {learned[0]:.1f}–{learned[-1]:.1f}× the random sketch at every N measured" in page
    )


def test_before_after_table_is_the_speedup_csvs():
    before, after = (_latency(f"polynomial_speedup_{w}")[1] for w in ("before", "after"))
    table = {row[0]: row[1:] for row in page_table(PAGE, "| backend | N = 256 | 513 | 1,024 |")}
    labels = {
        "`polynomial` (power kernel; code unchanged)": "polynomial",
        "`polynomial:learned_coefficients=true`": "polynomial:learned_coefficients=true",
        "`polysketch:sketch_size=64` (kernel form at 256 and 513)": "polysketch:sketch_size=64",
    }
    assert table.keys() == labels.keys()

    def multiple(rows: dict[tuple[str, str, int], dict[str, str]], backend: str, n: int) -> float:
        return float(rows[(backend, "True", n)]["ms"]) / float(rows[("softmax", "True", n)]["ms"])

    for label, backend in labels.items():
        for cell, n in zip(table[label], (256, 513, 1024), strict=True):
            was, now = cell.split(" → ")
            assert _shows(was, multiple(before, backend, n)), (label, n)
            assert _shows(now, multiple(after, backend, n)), (label, n)
    moved = max(
        abs(multiple(after, b, n) / multiple(before, b, n) - 1)
        for b, n in [("polynomial", n) for n in (256, 513, 1024)]
        + [("polysketch:sketch_size=64", 1024)]
    )
    assert f"ratios moved by up to {100 * moved:.0f} %" in _page()
