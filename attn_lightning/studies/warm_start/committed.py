"""The warm-start tables rebuilt from a committed ``<out>_runs.csv``, once the runs' metrics
files (git-ignored ``sweeps/``) are gone.

``tables.write`` keeps every run's backend, condition, seed, status, seconds, steps and test
metrics in ``<out>_runs.csv``; reading that file back gives the same ``RunResult`` values the
tables were made from, so the condition and paired tables can be written again (for a change
in how they are summarised) without training anything.
"""

from __future__ import annotations

from pathlib import Path

from attn_lightning.results.files import read_csv
from attn_lightning.results.records import RunResult

# The per-run facts of ``tables.write``'s runs CSV that are not metrics.
FACTS = ("variant", "backend", "condition", "seed", "status", "seconds", "global_step")


def read_runs(path: Path) -> list[RunResult]:
    """The runs of a warm-start ``<out>_runs.csv``, backend and condition in ``info``.

    Raises:
        FileNotFoundError: naming ``path`` when it does not exist.
        ValueError: when the file lacks a column of ``FACTS`` (not a warm-start runs CSV).
    """
    _, rows = read_csv(path)
    missing = [c for c in FACTS if rows and c not in rows[0]]
    if missing:
        raise ValueError(
            f"{path} is not a warm-start runs CSV: no column {', '.join(missing)} "
            f"(expected {', '.join(FACTS)} and the metrics)"
        )
    runs = []
    for row in rows:
        metrics = {k: float(v) for k, v in row.items() if k not in FACTS and v not in ("", None)}
        run = RunResult(
            variant=row["variant"],
            seed=int(row["seed"]),
            seconds=float(row["seconds"]) if row["seconds"] else None,
            status=row["status"],
            metrics=metrics,
            global_step=int(row["global_step"]) if row["global_step"] else None,
        )
        run.info.update(backend=row["backend"], condition=row["condition"])
        runs.append(run)
    return runs
