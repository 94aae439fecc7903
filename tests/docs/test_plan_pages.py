"""The pages of the plans' ``pages:`` sections (the reversal study's outcome and trajectories
pages, the image study's paired page, the LoRA study's pages) are rebuilt from their committed
run records alone by their plan's own command: every plan run with ``--report-only`` into a
temporary folder gives back each page and every CSV beside it byte for byte, its "Regenerate
with" line included (the plan command, which ``--report-only`` and ``--into`` leave out)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.studies.sweep import PLANS, main
from tests.docs.pages import RESULTS
from tests.elsewhere import pass_for_another_machine

ROOT = RESULTS.parents[1]
# page -> its plan, as the page's command names it (relative to the checkout)
PAGES = {
    page: PLANS / plan.name
    for plan in sorted((ROOT / PLANS).glob("*.yaml"))
    for page in (yaml.safe_load(plan.read_text()).get("pages") or {})
}
# The files of a page: <page>.md, <page>.csv and <page>_<what>.csv.
WHAT = ("runs", "curves", "paired", "deltas", "spikes", "bursts", "coefficients", "summary")
WHAT += tuple(f"{part}_runs" for part in ("mlp", "variants", "transformer", "lrsweep"))
WHAT += ("lrsweep_summary",)  # the LoRA pages


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every plan with pages, run with ``--report-only`` into one temporary folder, as by
    another machine (the pages' machine lines are their records')."""
    into = tmp_path_factory.mktemp("pages")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)  # the plans' paths are the checkout's
        pass_for_another_machine(patch)
        for plan in sorted(set(PAGES.values())):
            main(["--plan", str(plan), "--report-only", "--into", str(into)])
    return into


def _files(folder: Path, page: str) -> list[str]:
    names = [f"{page}.md", f"{page}.csv", *(f"{page}_{what}.csv" for what in WHAT)]
    return [name for name in names if (folder / name).is_file()]


def test_every_page_is_found():
    assert len(PAGES) >= 16 and "polynomial_len50_10k_traces" in PAGES


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_is_rebuilt_from_its_committed_records(page, rebuilt):
    files = _files(rebuilt, page)
    assert f"{page}.md" in files and files == _files(RESULTS, page)
    for name in files:
        assert (rebuilt / name).read_bytes() == (RESULTS / name).read_bytes(), name
    command = f"python -m lab.studies.sweep --plan {PAGES[page]}\n"
    assert command in (RESULTS / f"{page}.md").read_text()
