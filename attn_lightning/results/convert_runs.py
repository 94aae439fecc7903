"""A one-off converter: a committed ``<out>_runs.csv`` (the layout before run records) into one
run record folder per row, ``docs/results/<study>/runs/<run>/``.

    python -m attn_lightning.results.convert_runs docs/results/warm_start_digits_runs.csv \\
        --study warm_start --group digits --tags task=digits

(``--group`` puts the folders under ``runs/<group>/``: runs of one study that share names.)
Each row becomes a schema-1 ``record.json`` (``docs/run_record.md``) holding what the row has:

- ``run``: ``<label>-s<seed>`` as the study runner names runs (``--name`` columns instead of
  the label when the label alone repeats a seed), ``experiment`` (``--experiment``, default the
  study), ``seed``, ``status`` (``ok`` without a status column), ``fit_seconds`` (the
  ``fit_seconds`` or ``seconds`` column), ``global_step``;
- ``metrics``: every numeric column (``test/...`` under ``test``, ``val/...`` under
  ``validate``, the rest under ``fit``), each cell read back exactly (an integer cell as an int,
  any other as the float its text spells, which writes back as the same text when the CSV was
  written with Python's shortest repr);
- ``tags``: ``study``, ``variant`` (the ``--label`` column's cell), ``seed``, every
  non-numeric column (and ``--tag-columns``) with its cell, and ``--tags key=value``;
- ``source``: ``{"converted_from": <the CSV's path>, "holds": ["metrics"] (+ "curves"),
  "header": <its "# key: value" lines>}``. A converted run has no ``command``, ``git_commit``,
  ``environment``, ``best_checkpoint`` (all null) and no ``spikes.csv``.

``--curves`` adds a ``<out>_curves.csv`` (``<label>,seed,<optimizer_steps|step>`` and one column
per logged value) as each run's ``curves.csv`` (``step,tag,value``, the cells' own text).
Layouts differ by options, never by per-file code: ``--label backend`` / ``method``,
``--name part domain method rank``, ``--tag-columns rank``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.files import read_csv
from attn_lightning.results.records import (
    GZIP_OVER,
    RESULTS,
    folder_name,
    run_folder,
    study_runs_dir,
)
from attn_lightning.results.run_files import CURVE_COLUMNS, CURVES, SCHEMA, write_record

log = logging.getLogger("attn_lightning.results.convert_runs")

SECONDS = ("fit_seconds", "seconds")  # the fit-time column, first found
STEP_COLUMNS = ("optimizer_steps", "step")  # a curves CSV's step column, first found
_INT = re.compile(r"[+-]?\d+")


def cell_value(text: str) -> int | float | str:
    """A CSV cell as JSON keeps it: an int, else a float, else the text."""
    if _INT.fullmatch(text.strip()):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def _is_number(text: str) -> bool:
    return not isinstance(cell_value(text), str)


def _split(key: str) -> str:
    if key.startswith("test/"):
        return "test"
    if key.startswith("val/"):
        return "validate"
    return "fit"


def convert_runs(
    runs_csv: Path,
    study: str,
    *,
    label: str = "variant",
    name: Sequence[str] = (),
    tag_columns: Sequence[str] = (),
    tags: Mapping[str, Any] | None = None,
    curves: Path | None = None,
    experiment: str | None = None,
    results: Path = RESULTS,
    group: str | None = None,
) -> list[Path]:
    """Write one record folder per row of ``runs_csv`` under ``study_runs_dir(study,
    results)`` (under its ``group`` folder when given: runs of the study that share names, e.g.
    its tasks) (module doc); returns the folders in row order.

    Raises:
        FileNotFoundError: naming ``runs_csv`` (or ``curves``) when it does not exist.
        ValueError: naming the CSV and the column when ``label``, ``seed`` or a ``name`` column is
            missing, or naming the run when two rows get the same folder name.
    """
    meta, rows = read_csv(runs_csv)
    columns = list(rows[0]) if rows else []
    naming = list(name) or [label]
    for needed in {label, "seed", *naming, *tag_columns}:
        if rows and needed not in columns:
            raise ValueError(
                f"{runs_csv} has no column {needed!r} (its columns: {', '.join(columns)}); "
                "--label / --name / --tag-columns choose them"
            )
    seconds = next((c for c in SECONDS if c in columns), None)
    fixed = {label, "seed", "status", "global_step", *(() if seconds is None else (seconds,))}
    free = [c for c in columns if c not in fixed]
    metric_columns = [
        c
        for c in free
        if c not in tag_columns and all(_is_number(r[c]) for r in rows if r[c] not in ("", None))
    ]
    tag_cols = [c for c in free if c not in metric_columns]
    by_run = _curves(curves, label) if curves is not None else {}
    holds = ["metrics", *(["curves"] if curves is not None else [])]
    target = study_runs_dir(study, results)
    if group is not None:
        target = target / folder_name(group, "group")
    folders: list[Path] = []
    seen: set[str] = set()
    for row in rows:
        seed = int(row["seed"])
        run = run_folder("_".join(row[c] for c in naming), seed)
        if run in seen:
            raise ValueError(
                f"{runs_csv}: two rows are run {run!r}; name runs by more columns (--name)"
            )
        seen.add(run)
        metrics: dict[str, dict[str, Any]] = {"fit": {}, "validate": {}, "test": {}}
        for c in metric_columns:
            if row[c] not in ("", None):
                metrics[_split(c)][c] = cell_value(row[c])
        record = {
            "schema": SCHEMA,
            "experiment": experiment or study,
            "run": run,
            "variant": None,
            "seed": seed,
            "tags": {
                "study": study,
                "variant": row[label],
                "seed": seed,
                **{c: cell_value(row[c]) if c in tag_columns else row[c] for c in tag_cols},
                **(tags or {}),
            },
            "status": row.get("status") or "ok",
            "subcommand": "fit",
            "command": None,
            "git_commit": None,
            "environment": None,
            "fit_seconds": float(row[seconds]) if seconds and row[seconds] else None,
            "global_step": int(row["global_step"]) if row.get("global_step") else None,
            "best_checkpoint": None,
            "metrics": metrics,
            "subcommands": {},
            "source": {"converted_from": str(runs_csv), "holds": holds, "header": meta},
        }
        folder = target / run
        folder.mkdir(parents=True, exist_ok=True)
        write_record(folder, record)
        _write_curves(folder, by_run.get((row[label], seed), []))
        folders.append(folder)
    log.info("wrote %d run records under %s from %s", len(folders), target, runs_csv)
    return folders


def _curves(path: Path, label: str) -> dict[tuple[str, int], list[tuple[int, str, str]]]:
    """(label, seed) -> its (step, tag, value text) rows, from a wide ``<out>_curves.csv``."""
    _, rows = read_csv(path)
    columns = list(rows[0]) if rows else []
    step = next((c for c in STEP_COLUMNS if c in columns), None)
    if rows and (step is None or label not in columns or "seed" not in columns):
        raise ValueError(
            f"{path} is not a curves CSV with columns {label!r}, 'seed' and one of "
            f"{', '.join(STEP_COLUMNS)} (its columns: {', '.join(columns)})"
        )
    found: dict[tuple[str, int], list[tuple[int, str, str]]] = {}
    for row in rows:
        key = (row[label], int(row["seed"]))
        for tag in columns:
            if tag not in (label, "seed", step) and row[tag] not in ("", None):
                found.setdefault(key, []).append((int(row[str(step)]), tag, row[tag]))
    return found


def _write_curves(folder: Path, rows: list[tuple[int, str, str]]) -> None:
    for stale in (folder / CURVES, folder / f"{CURVES}.gz"):
        stale.unlink(missing_ok=True)
    if not rows:
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CURVE_COLUMNS)
    writer.writerows(sorted(rows))  # by step, then tag (a (step, tag) appears once)
    text = buffer.getvalue().encode("utf-8")
    if len(text) > GZIP_OVER:
        (folder / f"{CURVES}.gz").write_bytes(gzip.compress(text, mtime=0))
    else:
        (folder / CURVES).write_bytes(text)


def _tag(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--tags takes key=value, got {text!r}")
    return key, cell_value(value)


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """The command line (module doc); returns the record folders written."""
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.results.convert_runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs", type=Path, help="a committed <out>_runs.csv")
    parser.add_argument("--study", required=True, help="records go to docs/results/<study>/runs/")
    parser.add_argument("--label", default="variant", help="the column naming the variant")
    parser.add_argument("--name", nargs="+", default=[], help="columns naming the run folder")
    parser.add_argument("--tag-columns", nargs="+", default=[], help="numeric columns as tags")
    parser.add_argument("--tags", nargs="+", type=_tag, default=[], help="key=value tags")
    parser.add_argument("--curves", type=Path, help="the study's <out>_curves.csv")
    parser.add_argument("--experiment", help="the records' experiment (default: the study)")
    parser.add_argument("--group", help="a folder under runs/ (runs that share names)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: docs/results")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return convert_runs(
        args.runs,
        args.study,
        label=args.label,
        name=args.name,
        tag_columns=args.tag_columns,
        tags=dict(args.tags),
        curves=args.curves,
        experiment=args.experiment,
        results=args.results,
        group=args.group,
    )


if __name__ == "__main__":
    main()
