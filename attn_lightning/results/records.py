"""The one run record of every study: ``RunResult``, and its per-run CSV read back.

A study's run is a (variant, seed) pair trained through ``train.py``; ``studies.runner`` turns its
metrics file into a ``RunResult`` and ``results.tables.write_tables`` writes the ``<out>_runs.csv``
that ``read_runs_csv`` reads back (for a study continued once the metrics files are gone).
Extra per-run facts a study needs (a learning rate, a rank, a base seed) go in ``info``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.results.files import read_csv

# A run a study asked for but neither trained nor found (``--skip-runs`` without its metrics
# file): not a failure, so tables leave it out of every count and name it apart.
NOT_RUN = "not run"
# A run stopped part-way by Ctrl-C or SIGTERM after saving its ``last.ckpt`` (train.py exits 130
# or 143): not a failure either; ``--resume`` continues it.
STOPPED = "stopped"


@dataclass
class RunResult:
    """One (variant, seed) run: ``status`` is ``ok``, ``crashed``, ``timeout``, ``dry-run``,
    ``NOT_RUN`` or ``STOPPED``."""

    variant: str
    seed: int
    seconds: float | None
    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    global_step: int | None = None
    log_dir: str | None = None  # the run's TensorBoard folder (its metrics file says which)
    info: dict[str, Any] = field(default_factory=dict)  # a study's own per-run facts

    def value(self, key: str) -> float | None:
        """The run's final value of ``key`` (fit, validate and test metrics), or None."""
        return self.metrics.get(key)


def read_runs_csv(path: Path, *, label: str = "variant") -> list[RunResult]:
    """The runs of a ``<out>_runs.csv`` that ``write_tables`` wrote, read back as ``RunResult``.

    For a study continued over more seeds once the metrics files of its earlier runs are gone
    (they live in the git-ignored ``sweeps/``; the CSV is committed). A run read back has the
    CSV's columns as its metrics and no log folder. Raises ``FileNotFoundError`` naming the path.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no per-run CSV {path} (a study's <out>_runs.csv)")
    results = []
    fixed = {label, "seed", "status", "seconds", "global_step"}  # the rest are metrics
    _, rows = read_csv(path)
    for row in rows:
        metrics = {k: float(v) for k, v in row.items() if k not in fixed and v not in ("", None)}
        results.append(
            RunResult(
                variant=row[label],
                seed=int(row["seed"]),
                seconds=float(row["seconds"]) if row.get("seconds") else None,
                status=row["status"],
                metrics=metrics,
                global_step=int(row["global_step"]) if row.get("global_step") else None,
            )
        )
    return results
