"""The files of a run record (``record.json``, ``curves.csv``, ``spikes.csv``): their names, the
schema version, and writing and reading them.

The layout is documented field by field in ``docs/run_record.md``; the run writes the files
through ``callbacks.RunRecord``. Every write goes to a temporary file beside its target
(``.<name>.<pid>.partial``, the checkpoints' convention, which ``callbacks.is_partial`` and the
CLI's run folders recognise) and is renamed over it: a reader, or a run killed mid-write, sees
the old file or the new one, never half of one.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attn_lightning.records.files import write_csv

log = logging.getLogger("attn_lightning")

PARTIAL = ".partial"  # as callbacks.resume.PARTIAL (this layer cannot import that one)
SCHEMA = 1  # record.json's "schema": raised when a field changes meaning or is removed
RECORD = "record.json"
CURVES = "curves.csv"
SPIKES = "spikes.csv"
RUN_RECORD_FILES = (RECORD, CURVES, SPIKES)
CURVE_COLUMNS = ("step", "tag", "value")
SPIKE_COLUMNS = ("step", "loss", "ratio", "total", "grad_norm", "grad_ratio", "prior_grad_ratio")

Curves = dict[tuple[int, str], float]  # (step, tag) -> the last value logged there
Spikes = dict[int, tuple[float, ...]]  # step -> the SPIKE_COLUMNS after "step"


def write_atomic(path: Path, write: Callable[[Path], Any]) -> None:
    """Call ``write`` on a temporary path in ``path``'s folder, then ``os.replace`` it onto
    ``path``."""
    partial = path.with_name(f".{path.name}.{os.getpid()}{PARTIAL}")
    try:
        write(partial)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def load_record(folder: Path) -> dict[str, Any]:
    """The ``record.json`` in ``folder``, for a reader (``results.records``): a missing or
    unreadable record is an error.

    Raises:
        FileNotFoundError: naming ``folder/record.json`` when it does not exist.
        ValueError: naming it when it is not JSON or not a JSON object.
    """
    path = folder / RECORD
    if not path.is_file():
        raise FileNotFoundError(f"no run record {path} (a run folder holds record.json)")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"run record {path} is not valid JSON: {error}") from error
    if not isinstance(record, dict):
        raise ValueError(f"run record {path} is not a JSON object (got {type(record).__name__})")
    return record


def read_record(folder: Path) -> dict[str, Any]:
    """The ``record.json`` in ``folder`` for the run writing it: {} when there is none or it
    cannot be read (a record is never a reason for a run to fail: the bad one is replaced, with a
    warning)."""
    try:
        return load_record(folder)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log.warning("%s: starting a new one", error)
        return {}


def write_record(folder: Path, record: Mapping[str, Any]) -> None:
    """``record.json`` (sorted keys; NaN/inf as JSON's ``NaN``/``Infinity``, which Python's
    ``json`` and pandas read back)."""
    text = json.dumps(record, indent=2, sort_keys=True, default=str) + "\n"
    write_atomic(folder / RECORD, lambda path: path.write_text(text, encoding="utf-8"))


def read_curves(folder: Path, *, up_to_step: int) -> Curves:
    """The rows of ``curves.csv`` at steps <= ``up_to_step`` (a resumed run logs the later ones
    again; a step it does not reach again is no longer part of the run)."""
    return {
        (int(row["step"]), row["tag"]): float(row["value"])
        for row in _rows(folder, CURVES)
        if int(row["step"]) <= up_to_step
    }


def read_spikes(folder: Path, *, up_to_step: int) -> Spikes:
    """The rows of ``spikes.csv`` at steps <= ``up_to_step`` (as ``read_curves``)."""
    return {
        int(row["step"]): tuple(float(row[c]) for c in SPIKE_COLUMNS[1:])
        for row in _rows(folder, SPIKES)
        if int(row["step"]) <= up_to_step
    }


def write_curves(folder: Path, curves: Curves) -> None:
    """``curves.csv``: ``step,tag,value``, one row per (step, tag), by step then tag."""
    rows = [{"step": s, "tag": t, "value": v} for (s, t), v in sorted(curves.items())]
    write_atomic(folder / CURVES, lambda path: write_csv(path, rows, fields=CURVE_COLUMNS))


def write_spikes(folder: Path, spikes: Spikes) -> None:
    """``spikes.csv``: one row per spike, by step (a header only when there was none)."""
    rows = [
        dict(zip(SPIKE_COLUMNS, (step, *values), strict=True))
        for step, values in sorted(spikes.items())
    ]
    write_atomic(folder / SPIKES, lambda path: write_csv(path, rows, fields=SPIKE_COLUMNS))


def read_rows(folder: Path, name: str) -> list[dict[str, str]]:
    """The rows of ``folder/name``, or of ``name.gz`` (a published run's large curves); [] when
    there is neither."""
    path = folder / name
    if path.is_file():
        text = path.read_text(encoding="utf-8")
    elif path.with_name(f"{name}.gz").is_file():
        text = gzip.decompress(path.with_name(f"{name}.gz").read_bytes()).decode("utf-8")
    else:
        return []
    return list(csv.DictReader(io.StringIO(text)))


def _rows(folder: Path, name: str) -> list[dict[str, str]]:
    try:
        return read_rows(folder, name)
    except (OSError, ValueError) as error:
        log.warning("%s is unreadable (%s): the resumed run starts it again", folder / name, error)
        return []
