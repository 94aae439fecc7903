"""Summary pages quote generated tables instead of retyping them. A block on a page

    <!-- include: polynomial_len50.md#table-2 -->
    | the table, copied |
    <!-- /include -->

holds a copy of a table of another page of the same folder or a folder under it
(``image_decode/decode_cpu.md#table-1``): ``#table-N`` is the page's N-th table
(from 1), ``#<slug>`` the first table under the heading whose slug (lower case, runs of other
characters than letters and digits as ``-``) it is. The copy is the builder's, never typed:

    python -m lab.results.includes docs/results           # refresh every block
    python -m lab.results.includes docs/results --check   # exit 1 naming the stale pages

A source page rebuilt from its records (``python -m lab.studies.sweep --plan ... --report-only``)
then refreshes the pages that quote it; the page tests check every block equals its source.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BLOCK = re.compile(r"(<!-- include: (\S+?) -->\n)(.*?)(<!-- /include -->)", re.DOTALL)
OPEN = "<!-- include:"


def _slug(heading: str) -> str:
    return re.sub(r"[^0-9a-z]+", "-", heading.lstrip("#").strip().lower()).strip("-")


def tables(text: str) -> list[tuple[str, str]]:
    """(slug of the heading above it or "", the table's lines) of every markdown table of a page,
    in order: a ``|`` line followed by a ``|---`` line, and the ``|`` lines after them."""
    lines, found, heading, i = text.splitlines(keepends=True), [], "", 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = _slug(lines[i])
        if lines[i].startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            found.append((heading, "".join(lines[i:j])))
            i = j
        else:
            i += 1
    return found


def quote(target: str, folder: Path) -> str:
    """The table ``target`` (``<page>.md#table-N`` or ``<page>.md#<heading slug>``) names, from
    ``folder``.

    Raises:
        ValueError: naming ``target`` when its page, table or heading is not there.
    """
    page, _, anchor = target.partition("#")
    path = folder / page
    if not page.endswith(".md") or not path.is_file():
        raise ValueError(f"include {target!r}: no page {path} (give <page>.md#table-N)")
    found = tables(path.read_text())
    if anchor.startswith("table-") and anchor[6:].isdigit():
        n = int(anchor[6:])
        if not 1 <= n <= len(found):
            raise ValueError(f"include {target!r}: {page} has tables 1 to {len(found)}")
        return found[n - 1][1]
    under = [table for heading, table in found if heading == anchor]
    if not under:
        headings = sorted({heading for heading, _ in found if heading})
        raise ValueError(
            f"include {target!r}: no table under a heading {anchor!r} in {page}; give "
            f"#table-1 to #table-{len(found)} or one of {headings}"
        )
    return under[0]


def fill(text: str, folder: Path) -> str:
    """``text`` with every include block's content replaced by the table it names in ``folder``.

    Raises:
        ValueError: naming the block when it is not closed or names no table there is.
    """
    filled = BLOCK.sub(lambda m: m[1] + quote(m[2], folder) + m[4], text)
    if text.count(OPEN) != len(BLOCK.findall(text)):
        raise ValueError("an include block is not closed by <!-- /include --> on its own line")
    return filled


def refresh(folder: Path, *, check: bool = False) -> list[Path]:
    """The pages of ``folder`` whose include blocks are not their sources' tables, rewritten
    with them unless ``check``."""
    stale = []
    for path in sorted(folder.glob("*.md")):
        text = path.read_text()
        if OPEN not in text:
            continue
        try:
            filled = fill(text, folder)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None
        if filled != text:
            stale.append(path)
            if not check:
                path.write_text(filled)
    return stale


def main(argv: list[str] | None = None) -> int:
    """The command (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m lab.results.includes", description=__doc__)
    parser.add_argument("folder", type=Path, help="the pages' folder, e.g. docs/results")
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    try:
        stale = refresh(args.folder, check=args.check)
    except ValueError as error:
        parser.error(str(error))
    for path in stale:
        print(f"{'stale' if args.check else 'refreshed'}: {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
