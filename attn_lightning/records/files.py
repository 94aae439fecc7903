"""The one writer and reader of result files: CSV (with a provenance header) and markdown tables.

CSV files may start with ``# key: value`` lines (the environment a result was measured in, read
back with ``read_csv`` or ``pandas.read_csv(path, comment="#")``); markdown files show the same
as a bullet list (``markdown_meta``). Studies and benchmarks never open a ``csv.writer`` or join
``|`` cells themselves: they hand rows to ``write_csv`` and ``markdown_table``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any


def _cell(value: Any, float_digits: int | None) -> Any:
    if value is None:
        return ""
    if float_digits is not None and isinstance(value, float):
        return f"{value:.{float_digits}g}"
    return value


def write_csv(
    path: Path,
    rows: Iterable[Any],
    meta: Mapping[str, str] | None = None,
    *,
    fields: Sequence[str] | None = None,
    float_digits: int | None = None,
) -> Path:
    """Write ``rows`` (dataclasses or mappings) as CSV under an optional ``# key: value`` header.

    Args:
        path: the file (its folder is created).
        rows: the records; ``None`` is written as an empty cell.
        meta: provenance lines written before the header (``environment``).
        fields: the columns in order (default: every key of the rows, first seen first); keys a
            row lacks are empty, keys not in ``fields`` are dropped.
        float_digits: significant digits of floats (default: Python's shortest round-trip repr).

    Returns:
        ``path``.
    """
    records = [asdict(r) if is_dataclass(r) and not isinstance(r, type) else dict(r) for r in rows]
    columns = (
        list(fields) if fields is not None else list(dict.fromkeys(k for r in records for k in r))
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        for key, value in (meta or {}).items():
            fh.write(f"# {key}: {value}\n")
        if columns:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore", restval="")
            writer.writeheader()
            writer.writerows({k: _cell(v, float_digits) for k, v in r.items()} for r in records)
    return path


def read_csv(path: Path) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The ``# key: value`` header and the rows (as strings) of a file from ``write_csv``.

    Raises:
        FileNotFoundError: naming ``path`` when it does not exist.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no CSV file {path}")
    meta: dict[str, str] = {}
    body = []
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            key, _, value = line[2:].partition(": ")
            meta[key] = value
        else:
            body.append(line)
    return meta, list(csv.DictReader(body))


def markdown_meta(meta: Mapping[str, str]) -> str:
    """The provenance of a result as a markdown bullet list (``- **key**: `value` ``)."""
    return "\n".join(f"- **{key}**: `{value}`" for key, value in meta.items())


def markdown_table(header: Sequence[str], body: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table; ``None`` cells print empty, ``|`` inside a cell is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cells in body:
        text = ("" if c is None else str(c).replace("|", "\\|") for c in cells)
        lines.append("| " + " | ".join(text) + " |")
    return "\n".join(lines)


def markdown_records(rows: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of records with the same keys (the keys are the header); "" for none."""
    if not rows:
        return ""
    header = list(rows[0])
    return markdown_table(header, ([row.get(k) for k in header] for row in rows))
