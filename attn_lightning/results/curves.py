"""Training curves of a study's runs, read back from their TensorBoard folders.

A run's metrics file names its ``log_dir``; ``read_scalars`` loads every scalar of that folder
and ``curve_rows`` turns one tag (e.g. ``val/mAP``) of every finished run into long-format rows
``{variant, seed, optimizer_steps, <tag>}`` for ``<out>_curves.csv``; ``curves_table`` shows them
per run in a markdown table of at most ``max_columns`` validation points (the CSV keeps all).
Validation scalars are logged at the index of the step just taken, so ``optimizer_steps`` is
that index + 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.files import markdown_table, read_csv, write_csv
from attn_lightning.results.records import RunResult
from attn_lightning.results.tables import column

Scalars = dict[str, list[tuple[int, float]]]


def read_scalars(log_dir: Path) -> Scalars:
    """Every scalar of a run's TensorBoard folder: ``{tag: [(step, value), ...]}`` by step.

    ``size_guidance={"scalars": 0}`` keeps every event (the default keeps a sample of 10,000,
    which would drop spike flags). A step logged twice (a resumed run's event files overlap)
    keeps its last value.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    scalars: Scalars = {}
    for tag in accumulator.Tags()["scalars"]:
        by_step = {event.step: float(event.value) for event in accumulator.Scalars(tag)}
        scalars[tag] = sorted(by_step.items())
    return scalars


def series(scalars: Scalars, tag: str) -> list[tuple[int, float]]:
    """The values of ``tag``, or of ``tag_step`` (Lightning's name for a per-step log), or []."""
    for name in (tag, f"{tag}_step"):
        if name in scalars:
            return scalars[name]
    return []


def curve_rows(
    results: Sequence[RunResult], tag: str, earlier: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """One row per finished run and logged value of ``tag``, in the runs' order. A run without
    a log folder (read back from an earlier CSV) takes its rows from ``earlier`` (an earlier
    ``<out>_curves.csv``, ``read_curve_rows``); one with neither gives none."""
    rows = []
    for r in results:
        if r.status != "ok":
            continue
        if r.log_dir is None or not Path(r.log_dir).is_dir():
            rows += [e for e in earlier if (e["variant"], int(e["seed"])) == (r.variant, r.seed)]
            continue
        for step, value in series(read_scalars(Path(r.log_dir)), tag):
            rows.append(
                {"variant": r.variant, "seed": r.seed, "optimizer_steps": step + 1, tag: value}
            )
    return rows


def read_curve_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of an earlier ``<out>_curves.csv`` (numbers as numbers); [] when it is absent."""
    if not path.is_file():
        return []
    _, rows = read_csv(path)
    return [
        {
            k: (v if k == "variant" else int(v) if k in ("seed", "optimizer_steps") else float(v))
            for k, v in row.items()
        }
        for row in rows
    ]


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


def write_curves(
    out: Path, results: Sequence[RunResult], tag: str, earlier: Sequence[dict[str, Any]] = ()
) -> list[str]:
    """Write ``<out>_curves.csv`` (every logged value of ``tag`` of every finished run, runs
    read back from a CSV taking theirs from ``earlier``) and return the markdown section that
    shows it; [] (and no file) when no run logged ``tag``."""
    rows = curve_rows(results, tag, earlier)
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


def append_curves(
    out: Path, results: Sequence[RunResult], tag: str, earlier: Sequence[dict[str, Any]] = ()
) -> None:
    """``write_curves`` and its section appended to ``<out>.md`` (written by ``write_tables``)."""
    lines = write_curves(out, results, tag, earlier)
    if lines:
        md = out.with_name(out.name + ".md")
        md.write_text(md.read_text().rstrip("\n") + "\n\n" + "\n".join(lines))
