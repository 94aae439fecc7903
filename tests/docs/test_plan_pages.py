"""Pages are artifacts of their records. Every plan under ``configs/studies/`` (found, not listed:
a plan added there is covered) is run with ``--report-only`` into a temporary folder, as by
another machine, and gives back each of its pages (the plan's own and its ``pages:``) with every
file beside it as committed, byte for byte, its "Regenerate with" line included. Every include
block of a page (``lab.results.includes``) is the table it quotes: the summary pages' tables are
copies of generated ones, never retyped numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from lab.results.includes import OPEN, fill
from lab.studies.sweep import PLANS, main
from tests.elsewhere import pass_for_another_machine

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
TEXT = (".md", ".csv")  # compared byte for byte; figures need only be committed


def _pages() -> dict[str, Path]:
    """page -> its plan, as the page's command names it (relative to the checkout)."""
    pages: dict[str, Path] = {}
    for plan in sorted((ROOT / PLANS).glob("*.yaml")):
        spec = yaml.safe_load(plan.read_text()) or {}
        own = Path(spec.get("out", plan.stem)).name
        for page in (own, *(spec.get("pages") or {})):
            pages.setdefault(str(page), PLANS / plan.name)
    return pages


PAGES = _pages()
QUOTING = sorted(p.name for p in RESULTS.glob("*.md") if OPEN in p.read_text())


def _page_of(name: str) -> str | None:
    """The page a written file belongs to: the longest page name it extends (``<page>.md``,
    ``<page>.csv``, ``<page>_runs.csv``, ``<page>_loss.png``, ...)."""
    owners = [p for p in PAGES if name.startswith((f"{p}.", f"{p}_"))]
    return max(owners, key=len, default=None)


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every plan run with ``--report-only`` into one temporary folder, as by another machine
    (a page's machine line is its records')."""
    into = tmp_path_factory.mktemp("pages")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # the plans' paths are the checkout's
        pass_for_another_machine(patch)
        for plan in sorted(set(PAGES.values())):
            main(["--plan", str(plan), "--report-only", "--into", str(into)])
    return into


def test_the_plans_are_found():
    assert len(PAGES) >= 30 and {"polynomial_len50_10k_traces", "optimization_digits"} <= set(PAGES)


def test_every_written_file_belongs_to_a_page(rebuilt):
    assert [name for name in sorted(p.name for p in rebuilt.iterdir()) if not _page_of(name)] == []


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_is_rebuilt_from_its_committed_records(page, rebuilt):
    files = sorted(p.name for p in rebuilt.iterdir() if _page_of(p.name) == page)
    assert f"{page}.md" in files, f"{PAGES[page]} wrote no {page}.md"
    for name in files:
        committed = RESULTS / name
        assert committed.is_file(), f"{name}: rebuilt but not committed"
        if name.endswith(TEXT):
            assert (rebuilt / name).read_bytes() == committed.read_bytes(), name
    command = f"python -m lab.studies.sweep --plan {PAGES[page].as_posix()}\n"
    assert command in (RESULTS / f"{page}.md").read_text()


def test_a_changed_record_changes_the_rebuilt_page(tmp_path, monkeypatch):
    """The page is read from the records: one test metric edited in a copy shows on it."""
    results = tmp_path / "results" / "optimization_digits"
    shutil.copytree(RESULTS / "optimization_digits", results)
    record = results / "runs" / "pool-s4" / "record.json"
    data = json.loads(record.read_text())
    data["metrics"]["test"]["test/acc"] = 0.501
    record.write_text(json.dumps(data))
    monkeypatch.chdir(ROOT)
    plan = PLANS / "optimization_digits.yaml"
    main(["--plan", str(plan), "--out", str(results), "--report-only", "--into", str(tmp_path)])
    assert "| `pool` | 4 | ok | 800 | 50.10 |" in (tmp_path / "optimization_digits.md").read_text()


def test_the_summary_pages_quote_generated_tables():
    assert {"polynomial.md", "sequence_reversal.md", "image_completion.md"} <= set(QUOTING)


@pytest.mark.parametrize("page", QUOTING)
def test_every_include_is_the_table_it_quotes(page):
    text = (RESULTS / page).read_text()
    assert fill(text, RESULTS) == text, "stale: python -m lab.results.includes docs/results"
