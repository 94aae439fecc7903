"""Every relative link and image on the results pages resolves to a committed file (the sample
grids of image_completion.md, the generated tables a page links to): a renamed or deleted file
fails here, not on a reader's screen."""

from __future__ import annotations

import re

import pytest

from tests.docs.pages import RESULTS

LINK = re.compile(r"\]\(([^)\s#]+)")
PAGES = sorted(path.name for path in RESULTS.glob("*.md"))


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    targets = [t for t in LINK.findall((RESULTS / page).read_text()) if "://" not in t]
    missing = [t for t in targets if not (RESULTS / t).exists()]
    assert not missing, f"{page}: links to no file: {missing}"


def test_the_pages_do_link_their_figures():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (RESULTS / "image_completion.md").read_text())
    assert len(images) >= 20 and all(t.startswith("figures/") for t in images)
