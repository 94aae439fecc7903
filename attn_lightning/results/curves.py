"""Training curves of a study's runs, read back from their run records.

``curve_rows`` turns one logged tag (e.g. ``val/mAP``) of every finished run into long-format
rows ``{variant, seed, optimizer_steps, <tag>}`` for ``<out>_curves.csv``, from each run's
``curves.csv`` (``records.run_scalars``); ``curves_table`` shows them per run in a markdown
table of at most ``max_columns`` validation points (the CSV keeps all). A record's ``step`` is
the logger's, the index of the optimiser step just taken (converted records store
``optimizer_steps - 1`` too), so ``optimizer_steps`` is that ``step + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.files import markdown_table, write_csv
from attn_lightning.results.records import OK, RunResult, Scalars, run_scalars
from attn_lightning.results.tables import column

__all__ = [
    "Scalars",
    "append_curves",
    "curve_rows",
    "curves_table",
    "series",
    "write_curves",
]


def series(scalars: Scalars, tag: str) -> list[tuple[int, float]]:
    """The values of ``tag``, or of ``tag_step`` (Lightning's name for a per-step log), or []."""
    for name in (tag, f"{tag}_step"):
        if name in scalars:
            return scalars[name]
    return []


def curve_rows(results: Sequence[RunResult], tag: str) -> list[dict[str, Any]]:
    """One row per finished (``ok``) run and logged value of ``tag`` (or ``tag_step``), in the
    runs' order, from each run's record folder (``log_dir``); a run without one gives none."""
    rows = []
    for r in results:
        if r.status != OK or r.log_dir is None:
            continue
        for step, value in series(run_scalars(Path(r.log_dir)), tag):
            rows.append(
                {"variant": r.variant, "seed": r.seed, "optimizer_steps": step + 1, tag: value}
            )
    return rows


def _shown_steps(steps: Sequence[int], max_columns: int) -> list[int]:
    """At most ``max_columns`` of ``steps``, evenly spaced, the last always among them."""
    stride = -(-len(steps) // max_columns)  # ceil
    return sorted({*steps[len(steps) - 1 :: -stride][:max_columns]})


def curves_table(rows: Sequence[dict[str, Any]], tag: str, *, max_columns: int = 8) -> list[str]:
    """Markdown lines: ``tag`` (in its table column's scale) per run after each shown number of
    optimiser steps; [] without rows."""
    if not rows:
        return []
    shown = column(tag.replace("val/", "test/")) if tag.startswith("val/") else column(tag)
    steps = _shown_steps(sorted({row["optimizer_steps"] for row in rows}), max_columns)
    runs: dict[tuple[str, int], dict[int, float]] = {}
    for row in rows:
        runs.setdefault((row["variant"], row["seed"]), {})[row["optimizer_steps"]] = row[tag]
    body = []
    for (variant, seed), values in runs.items():
        cells = [
            f"{values[s] * shown.scale:.{shown.digits}f}" if s in values else "–" for s in steps
        ]
        body.append([f"`{variant}`", seed, *cells])
    return markdown_table(["variant", "seed", *(str(s) for s in steps)], body).splitlines()


def write_curves(out: Path, results: Sequence[RunResult], tag: str) -> list[str]:
    """Write ``<out>_curves.csv`` (every logged value of ``tag`` of every finished run) and
    return the markdown section that shows it; [] (and no file) when no run logged ``tag``."""
    rows = curve_rows(results, tag)
    if not rows:
        return []
    path = out.with_name(out.name + "_curves.csv")
    write_csv(path, rows)
    return [
        f"`{tag}` per run after the number of optimiser steps in each column "
        f"(every logged value: `{path.name}`):\n",
        *curves_table(rows, tag),
        "",
    ]


def append_curves(out: Path, results: Sequence[RunResult], tag: str) -> None:
    """``write_curves`` and its section appended to ``<out>.md`` (written by ``write_tables``)."""
    lines = write_curves(out, results, tag)
    if lines:
        md = out.with_name(out.name + ".md")
        md.write_text(md.read_text().rstrip("\n") + "\n\n" + "\n".join(lines))
