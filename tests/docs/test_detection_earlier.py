"""detection_earlier.md (the superseded 21 Nov runs): no committed CSV holds them (the sweeps
wrote under the git-ignored ``sweeps/``), so the page's own per-run tables are the record. The
summary rows must be their mean ± std (within the rounding of both tables) and the readings the
tables' numbers; a hand edit of one table alone fails."""

from __future__ import annotations

import statistics

import pytest

from tests.docs.pages import RESULTS

PAGE = "detection_earlier.md"
SUMMARY = "| variant | runs ok | test mAP | test AP50 | test AP75 | attention params |"
PER_RUN = "| variant | seed | status | steps | test mAP |"
COST = "| config | attention params | ms / image (1st, 30 calls) |"
# per-run metrics have 4 decimals and seconds none; the summary 3 decimals and seconds none
METRIC_TOLERANCE = 0.0005 + 0.00005
SECONDS_TOLERANCE = 0.5 + 0.5


def _tables() -> list[tuple[list[list[str]], list[list[str]]]]:
    """(summary rows, per-run rows) of section 1 (500 steps) and section 2 (2,000 steps)."""
    lines = (RESULTS / PAGE).read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith(SUMMARY):
            rows = _body(lines, i)
            j = next(k for k in range(i, len(lines)) if lines[k].startswith(PER_RUN))
            found.append((rows, _body(lines, j)))
            i = j
        i += 1
    return found


def _body(lines: list[str], header: int) -> list[list[str]]:
    rows = []
    for line in lines[header + 2 :]:
        line = line.strip()  # the cost table sits indented in a bullet
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _mean_std(cell: str) -> tuple[float, float]:
    mean, std = cell.split(" ± ")
    return float(mean), float(std)


def test_summaries_are_their_per_run_rows():
    tables = _tables()
    assert [len(summary) for summary, _ in tables] == [7, 1]
    for summary, per_run in tables:
        for row in summary:
            runs = [r for r in per_run if r[0] == row[0] and r[2] == "ok"]
            assert row[1] == f"{len(runs)}/3", row[0]
            for column, metric in ((2, 4), (3, 5), (4, 6)):
                values = [float(r[metric]) for r in runs]
                mean, std = _mean_std(row[column])
                assert mean == pytest.approx(statistics.fmean(values), abs=METRIC_TOLERANCE)
                assert std == pytest.approx(statistics.stdev(values), abs=METRIC_TOLERANCE)
            seconds = statistics.fmean(float(r[8]) for r in runs)
            assert float(row[-1]) == pytest.approx(seconds, abs=SECONDS_TOLERANCE), row[0]


def test_readings_are_the_tables():
    page = " ".join((RESULTS / PAGE).read_text().split())
    (short, _), (long, _) = _tables()
    rows = {r[0].strip("`"): r for r in short}
    for name in rows:
        assert f"({rows[name][2]})" in page or f"{rows[name][2]} with" in page, name
    (softmax,) = long
    assert f"**test mAP {softmax[2]}** (AP50 {softmax[3].split()[0]}, AP75 " in page
    params = {name: int(r[5].replace(",", "")) for name, r in rows.items()}
    total = int(rows["softmax"][6].replace(",", ""))
    removed = params["softmax"] - params["optimization_encoder_self"]
    assert f"removes {removed:,} attention parameters" in page
    assert f"{100 * removed / total:.0f} % of the model" in page
    lines = (RESULTS / PAGE).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(COST))
    cost = _body(lines, start)
    first = {r[0].strip("`"): float(r[2]) for r in cost}
    second = {r[0].strip("`"): float(r[3]) for r in cost}
    for name, row in rows.items():
        # the 1st measurement is section 1's cost column, at 2 decimals (1.795 -> 1.80)
        assert first[name] == pytest.approx(float(row[7]), abs=0.005 + 1e-9), name
    everywhere = [m["optimization_all"] / m["softmax"] for m in (first, second)]
    assert f"forward pass was {min(everywhere):.1f}–{max(everywhere):.1f}× slower" in page
    single = [m[f"optimization_{s}"] / m["softmax"] for m in (first, second)
              for s in ("encoder_self", "decoder_self", "decoder_cross")]  # fmt: skip
    assert f"ranged from {min(single):.1f}× to {max(single):.1f}× of softmax's time" in page
