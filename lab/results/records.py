"""The one reader of run records: ``RunResult``, built from a run folder's ``record.json``.

A run (``train.py``, alone or a study's (variant, seed)) writes ``record.json``, ``curves.csv``
and ``spikes.csv`` in its log folder (``docs/run_record.md``); every table reads runs through
``load_run`` / ``load_runs`` and their curves through ``run_scalars``. A study's finished records
are committed under ``docs/results/<study>/runs/`` (``publish_run``), so a study continues on
another machine from them (``find_ok``) instead of from logs that stayed behind. A study's
per-run facts beyond the record (a learning rate, a rank, a backend) are its tags, read back in
``RunResult.info``.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.records.run_files import CURVES, RECORD, SPIKES, load_record, read_rows

# A run a study asked for but neither trained nor found (``--skip-runs`` without its record):
# not a failure, so tables leave it out of every count and name it apart.
NOT_RUN = "not run"
# A run stopped part-way by Ctrl-C or SIGTERM after saving its ``last.ckpt`` (train.py exits 130
# or 143): not a failure either; ``--resume`` continues it.
STOPPED = "stopped"
OK = "ok"
# A run's logged scalars by tag, as (step, value) points sorted by step.
Scalars = dict[str, list[tuple[int, float]]]

RESULTS = Path("docs/results")  # the checkout's committed results (studies run from its root)
CURVES_GZ = CURVES + ".gz"
# Characters a run's folder name may not hold ("@" stays: committed detection runs have it).
UNSAFE = re.compile(r"[^A-Za-z0-9._@-]+")
GZIP_OVER = 200_000  # bytes: a published curves.csv larger than this is gzipped
# Tags every study run carries that are not a study's own per-run facts (RunResult has them).
_OWN_TAGS = ("study", "variant", "seed")


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
    log_dir: str | None = None  # the run's record folder
    info: dict[str, Any] = field(default_factory=dict)  # a study's own per-run facts (its tags)

    def value(self, key: str) -> float | None:
        """The run's final value of ``key`` (fit, validate and test metrics), or None."""
        return self.metrics.get(key)


def run_label(name: str) -> str:
    """A file-name-safe label: ``polysketch:sketch=learned`` -> ``polysketch_sketch-learned``.

    Any other character outside ``[A-Za-z0-9._@-]`` (a grid's list value: brackets, quotes,
    spaces) becomes ``_``, and a digest of ``name`` is added so that two names never share a
    label (``x=[a, b]`` -> ``x-_a_b_-1f6c2e``); a label stays the same from run to run.
    """
    label = name.replace(":", "_").replace("=", "-").replace(",", "_").replace("/", "-")
    if UNSAFE.search(label) is None:
        return label
    return f"{UNSAFE.sub('_', label)}-{hashlib.sha1(name.encode()).hexdigest()[:6]}"


def run_folder(variant: str, seed: int | str) -> str:
    """A study run's folder name (``--run_name``): ``<run_label(variant)>-s<seed>`` (``seed``
    may be a placeholder, ``runner.SEED``)."""
    return f"{run_label(variant)}-s{seed}"


def load_run(folder: Path) -> RunResult:
    """The ``RunResult`` of the run record in ``folder``.

    Raises:
        FileNotFoundError: naming ``folder/record.json`` when it does not exist.
        ValueError: naming it when it is not a readable record or has no seed.
    """
    return _result(folder, load_record(folder))


def _result(folder: Path, record: dict[str, Any]) -> RunResult:
    tags = dict(record.get("tags") or {})
    seed = record.get("seed")
    if seed is None:
        seed = tags.get("seed")
    if seed is None:
        raise ValueError(f"{folder / RECORD} has no seed (neither 'seed' nor a 'seed' tag)")
    metrics = record.get("metrics") or {}
    stages = (metrics.get(stage) or {} for stage in ("fit", "validate", "test"))
    merged = {key: value for stage in stages for key, value in stage.items()}  # test wins
    return RunResult(
        variant=str(tags.get("variant", record.get("run", folder.name))),
        seed=int(seed),
        seconds=record.get("fit_seconds"),
        status=str(record.get("status", "crashed")),
        metrics=merged,
        global_step=record.get("global_step"),
        log_dir=str(folder),
        info={k: v for k, v in tags.items() if k not in _OWN_TAGS},
    )


def record_folders(root: Path, *, required: bool = False) -> list[Path]:
    """Every folder under ``root`` (at any depth) that holds a ``record.json``, sorted; with
    ``required``, a FileNotFoundError naming ``root`` when there is none."""
    found = sorted(path.parent for path in root.rglob(RECORD)) if root.is_dir() else []
    if required and not found:
        what = "holds no run record (record.json)" if root.is_dir() else "does not exist"
        raise FileNotFoundError(f"runs folder {root} {what}")
    return found


def load_runs(root: Path, /, **tags: Any) -> list[RunResult]:
    """The runs of every record folder under ``root`` whose tags equal ``tags``, by (variant,
    seed). ``[]`` when ``root`` does not exist."""
    runs = []
    for folder in record_folders(root):
        record = load_record(folder)
        if all((record.get("tags") or {}).get(k) == v for k, v in tags.items()):
            runs.append(_result(folder, record))
    return sorted(runs, key=lambda r: (r.variant, r.seed))


def runs_of(roots: Sequence[Path], jobs: Iterable[tuple[str, int]]) -> list[RunResult]:
    """The runs of ``jobs`` (variant, seed) from the records under ``roots`` alone (the first
    folder's where two hold one), in job order; a job without a record is ``NOT_RUN``."""
    found = {(r.variant, r.seed): r for root in reversed(roots) for r in load_runs(root)}
    return [found.get(job) or RunResult(job[0], job[1], None, NOT_RUN) for job in jobs]


def find_ok(roots: Iterable[Path], variant: str, seed: int, /, **tags: Any) -> RunResult | None:
    """The first ``ok`` run of (``variant``, ``seed``) under ``roots`` (with ``tags``), or None:
    the run a study does not train again."""
    for root in roots:
        for run in load_runs(root, **tags):
            if run.variant == variant and run.seed == seed and run.status == OK:
                return run
    return None


def run_scalars(folder: Path) -> Scalars:
    """The run's ``curves.csv`` (or ``curves.csv.gz``) by tag: ``{tag: [(step, value), ...]}``
    sorted by step; ``{}`` when it has none."""
    scalars: Scalars = {}
    for row in read_rows(folder, CURVES):
        scalars.setdefault(row["tag"], []).append((int(row["step"]), float(row["value"])))
    return {tag: sorted(points) for tag, points in scalars.items()}


def run_spikes(folder: Path) -> list[dict[str, Any]]:
    """The rows of the run's ``spikes.csv`` (``step`` an int, the rest floats); ``[]`` when it
    has none."""
    return [
        {k: int(v) if k == "step" else float(v) for k, v in row.items()}
        for row in read_rows(folder, SPIKES)
    ]


def folder_name(name: str, what: str) -> str:
    """``name`` if it is one folder's name (a ValueError naming it and ``what`` it is, if not)."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"{what} {name!r} is not a folder name (a word like 'warm_start')")
    return name


def study_runs_dir(study: str, results: Path = RESULTS) -> Path:
    """Where a study's finished run records are committed: ``docs/results/<study>/runs/``."""
    return results / folder_name(study, "study") / "runs"


def publish_run(
    folder: Path, study: str, results: Path = RESULTS, *, group: str | None = None
) -> Path:
    """Copy a finished run's ``record.json``, ``spikes.csv`` and ``curves.csv`` (gzipped when over
    ``GZIP_OVER`` bytes) to ``study_runs_dir(study)/[<group>/]<folder name>/``; returns that
    folder. ``group`` keeps apart the runs of one study that share names (its tasks, its pages).

    Raises:
        FileNotFoundError: naming ``folder/record.json`` when ``folder`` holds no record.
    """
    load_record(folder)  # a clear error before anything is copied
    target = study_runs_dir(study, results)
    target = (target if group is None else target / folder_name(group, "group")) / folder.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / RECORD, target / RECORD)
    if (folder / SPIKES).is_file():
        shutil.copyfile(folder / SPIKES, target / SPIKES)
    curves = folder / CURVES
    for stale in (target / CURVES, target / CURVES_GZ):
        stale.unlink(missing_ok=True)
    if curves.is_file() and curves.stat().st_size > GZIP_OVER:
        # mtime=0: the same curves give the same bytes (no spurious git diff on a re-publish).
        (target / CURVES_GZ).write_bytes(gzip.compress(curves.read_bytes(), mtime=0))
    elif curves.is_file():
        shutil.copyfile(curves, target / CURVES)
    elif (folder / CURVES_GZ).is_file():
        shutil.copyfile(folder / CURVES_GZ, target / CURVES_GZ)
    return target
