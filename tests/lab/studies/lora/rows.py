"""Per-run rows (the columns of the LoRA study's ``*_runs.csv``) written as the committed run
records the study reads: the tests' way to give the report runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attn_lightning.records.run_files import SCHEMA, write_record
from lab.results.records import RunResult, run_folder
from lab.studies.lora.records import METRICS, load_parts

RUN_COLUMNS = ("seed", "status", "seconds")


def write_rows(out: Path, rows: list[dict[str, Any]]) -> None:
    """One record per row under ``<out>/runs/<part>/``: ``method`` as the
    ``adaptation`` tag, the study's metrics as fit metrics, the other columns as tags (empty
    metric cells left out)."""
    for row in rows:
        tags = {k: v for k, v in row.items() if k not in (*METRICS, *RUN_COLUMNS, "method")}
        tags["adaptation"] = row["method"]
        variant = "-".join(str(tags.get(k, "")) for k in ("domain", "adaptation", "rank"))
        variant += "".join(f"-{tags[k]}" for k in ("head", "lr", "base_lr") if tags.get(k))
        metrics = {k: row[k] for k in METRICS if row.get(k) not in (None, "")}
        seed = int(row["seed"])
        folder = out / "runs" / row["part"] / run_folder(variant, seed)
        folder.mkdir(parents=True, exist_ok=True)
        record = {
            "schema": SCHEMA,
            "run": folder.name,
            "seed": seed,
            "tags": {"study": out.name, "variant": variant, "seed": seed, **tags},
            "status": row.get("status", "ok"),
            "fit_seconds": float(row["seconds"]) if row.get("seconds") not in (None, "") else None,
            "metrics": {"fit": metrics},
        }
        write_record(folder, record)


def as_runs(out: Path, rows: list[dict[str, Any]]) -> list[RunResult]:
    """``rows`` as the report reads them: written as records and read back."""
    write_rows(out, rows)
    return [run for runs in load_parts([out / "runs"]).values() for run in runs]
