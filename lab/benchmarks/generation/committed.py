"""A committed generation CSV's derived columns recomputed from its ``seconds``.

Files written before ``add_ratios`` divided unrounded rates keep ratios of rates rounded to 3
decimals (softmax's prefix recompute at 0.0403 images/s was 0.04: a 1 % error in every
``vs_softmax_recompute``). Their ``seconds`` (the best batch time, to the millisecond) is the
measurement; ``images_per_s`` = batch / seconds and both ratio columns follow from it, to
within 0.0005 s / seconds of each of the two rows a ratio divides. Nothing is timed again.
"""

from __future__ import annotations

from pathlib import Path

from attn_lightning.records import read_csv, write_csv
from lab.benchmarks.generation.throughput import Row, add_ratios, shown
from lab.benchmarks.generation.throughput_report import throughput_table


def _measured(row: dict[str, str]) -> Row:
    """A CSV row with its numbers typed and its rate recomputed from ``seconds``."""
    out: Row = dict(row)
    out["batch"] = int(row["batch"])
    for key in ("seconds", "seconds_median", "ms_per_pixel"):
        if row.get(key):
            out[key] = float(row[key])
    out["images_per_s"] = out["batch"] / out["seconds"]
    return out


def rewrite_ratios(path: Path, command: str) -> Path:
    """Recompute ``path``'s ``images_per_s`` and ratio columns from its ``seconds``; rewrite it
    and the table of the ``.md`` beside it (kept otherwise, with a line saying what changed).

    Raises:
        FileNotFoundError: naming ``path`` (or its ``.md``) when it does not exist.
        ValueError: when the CSV has no ``seconds``/``batch`` columns (not a generation CSV).
    """
    meta, rows = read_csv(path)
    if not rows or not {"seconds", "batch", "backend", "method"} <= set(rows[0]):
        raise ValueError(f"{path} is not a `benchmark generation` CSV (no seconds/batch columns)")
    page = path.with_suffix(".md")
    if not page.is_file():
        raise FileNotFoundError(f"no {page} beside {path}")
    typed = [_measured(r) for r in rows]
    add_ratios(typed)
    written = [shown(r) for r in typed]
    write_csv(path, written, meta, fields=list(rows[0]))
    lines = page.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    last = max(i for i, line in enumerate(lines) if line.startswith("|"))
    # Each of a ratio's two times is rounded to ±0.0005 s: its relative error is at most the sum.
    bound = 100 * 2 * 0.0005 / min(r["seconds"] for r in typed)
    note = (
        "Ratios and images/s recomputed from the `seconds` column (the best batch time, to the "
        f"millisecond: every ratio within {bound:.2g} %) by\n\n```bash\n"
        f"{command}\n```\n\nThe earlier file divided images/s rounded to 3 decimals.\n"
    )
    head = lines[:first]
    # A rewrite of a rewritten page replaces its note rather than adding a second one.
    start = next((i for i, line in enumerate(head) if line.startswith(note[:40])), len(head))
    text = [*head[:start], note, throughput_table(written), *lines[last + 1 :]]
    page.write_text("\n".join(text).rstrip("\n") + "\n")
    return path
