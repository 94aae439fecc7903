"""The seeds' and papers' published numbers, read from data files, never written into code.

A report that sets our numbers beside a paper's or a student's reads them from
``docs/references/<name>.csv``: a CSV with a ``# key: value`` header that cites the source
(``# source: …``) and one row per published figure, written and read by ``results.files``. The
folder is found as ``$ATTN_LIGHTNING_REFERENCES`` if set, else ``docs/references`` of the
checkout this package runs from, else ``docs/references`` under the current directory — so an
installed package run from a clone finds them, and a missing file is an error naming the path.
"""

from __future__ import annotations

import os
from pathlib import Path

from attn_lightning.records.files import read_csv

ENV = "ATTN_LIGHTNING_REFERENCES"


def reference(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The header (``source``, ...) and rows (strings) of ``docs/references/<name>.csv``.

    Raises:
        FileNotFoundError: naming the file and the variable that points elsewhere.
    """
    checkout = Path(__file__).resolve().parents[2] / "docs" / "references"
    folder = os.environ.get(ENV) or (checkout if checkout.is_dir() else Path("docs/references"))
    path = Path(folder) / f"{name}.csv"
    if not path.is_file():
        raise FileNotFoundError(
            f"no reference data {path} (the published numbers a report compares with); run "
            f"from a checkout of attn-lightning or set {ENV} to its docs/references folder"
        )
    return read_csv(path)
