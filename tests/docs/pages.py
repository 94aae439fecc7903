"""Read a results page's hand-laid table and the committed CSVs behind it, for tests that
recompute the table from the CSVs (a page edited without its data, or data without its page,
fails)."""

from __future__ import annotations

from pathlib import Path

from attn_lightning.records.files import read_csv

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def page_table(page: str, header: str, *, whole: bool = False) -> list[list[str]]:
    """The body rows (cells stripped) of the first table on ``docs/results/<page>`` whose header
    line starts with ``header`` (is ``header`` with ``whole``)."""
    lines = (RESULTS / page).read_text().splitlines()
    start = next(
        i for i, line in enumerate(lines) if (line == header if whole else line.startswith(header))
    )
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def runs(name: str) -> list[dict[str, str]]:
    """The rows of ``docs/results/<name>.csv``."""
    return read_csv(RESULTS / f"{name}.csv")[1]


def values(rows: list[dict[str, str]], backend: str, key: str) -> list[float]:
    """``key`` of ``backend``'s finished runs, in seed order."""
    chosen = [r for r in rows if r["backend"] == backend and r["status"] == "ok"]
    return [float(r[key]) for r in sorted(chosen, key=lambda r: int(r["seed"]))]
