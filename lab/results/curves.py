"""Training curves of a study's runs, read back from their run records' ``curves.csv``.

Rows are long-format, ``{variant, seed, optimizer_steps, <tag>}``. A record's ``step`` is the
logger's, the index of the optimiser step just taken (converted records store
``optimizer_steps - 1`` too), so ``optimizer_steps`` is that ``step + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from attn_lightning.records.files import markdown_table, write_csv
from lab.results.records import OK, RunResult, Scalars, run_scalars
from lab.results.tables import column


def series(scalars: Scalars, tag: str) -> list[tuple[int, float]]:
    """The values of ``tag``, or of ``tag_step`` (Lightning's name for a per-step log), or []."""
    for name in (tag, f"{tag}_step"):
        if name in scalars:
            return scalars[name]
    return []


def _shown_steps(steps: Sequence[int], max_columns: int) -> list[int]:
    """At most ``max_columns`` of ``steps``, evenly spaced, the last always among them."""
    stride = -(-len(steps) // max_columns)  # ceil
    return sorted({*steps[len(steps) - 1 :: -stride][:max_columns]})


def curves_table(
    rows: Sequence[dict[str, Any]],
    tag: str,
    *,
    max_columns: int | None = 8,
    digits: int | None = None,
) -> list[str]:
    """Markdown lines: ``tag`` (in its column's scale and digits, or ``digits``) per run after
    each shown number of optimiser steps (all with ``max_columns=None``); [] without rows."""
    if not rows:
        return []
    shown = column(tag.replace("val/", "test/")) if tag.startswith("val/") else column(tag)
    shown = shown if digits is None else replace(shown, digits=digits)
    steps = sorted({row["optimizer_steps"] for row in rows})
    steps = steps if max_columns is None else _shown_steps(steps, max_columns)
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


def append_curves(out: Path, results: Sequence[RunResult], tag: str) -> None:
    """Write ``<out>_curves.csv`` (every logged value of ``tag``, or ``tag_step``, of every
    finished run with a record folder) and append its table to ``<out>.md`` (written by
    ``write_tables``); nothing when no run logged ``tag``."""
    rows = [
        {"variant": r.variant, "seed": r.seed, "optimizer_steps": step + 1, tag: value}
        for r in results
        if r.status == OK and r.log_dir is not None
        for step, value in series(run_scalars(Path(r.log_dir)), tag)
    ]
    if not rows:
        return
    path = write_csv(out.with_name(out.name + "_curves.csv"), rows)
    lines = [
        f"`{tag}` per run after the number of optimiser steps in each column "
        f"(every logged value: `{path.name}`):\n",
        *curves_table(rows, tag),
        "",
    ]
    md = out.with_name(out.name + ".md")
    md.write_text(md.read_text().rstrip("\n") + "\n\n" + "\n".join(lines))
