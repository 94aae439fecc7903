"""The training traces of runs whose logs are gone, read back from committed CSVs.

A long study outlives its logs: the TensorBoard folders of ``trajectories`` live in git-ignored
``logs/`` and ``sweeps/`` on one machine, and seeds are added in later sessions on another. What
``trajectories`` wrote of the earlier runs is committed as ``<prefix>_runs.csv``,
``<prefix>_spikes.csv`` and ``<prefix>_coefficients.csv``; ``read_committed`` reads those rows
back (numbers as numbers, empty cells as ``None``) so that the new runs' rows can be put beside
them and every table recomputed over all seeds. A (variant, seed) whose logs are read again
takes its rows from the logs: the committed ones are dropped. The loss curves are not in the
CSVs, so the figures show only the runs whose logs were read.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.results.files import read_csv

# The files of ``trajectories`` that hold rows, by kind; ``_bursts.csv`` is recomputed from spikes.
KINDS = ("runs", "spikes", "coefficients")
# Columns that stay text (every other non-empty cell is a number).
TEXT = frozenset({"variant", "top_group", "layer", "key"})


def _cell(key: str, text: str) -> Any:
    if text == "":
        return None
    if key in TEXT:
        return text
    try:
        return int(text)
    except ValueError:
        return float(text)


@dataclass
class CommittedTraces:
    """Rows of runs from committed CSVs, by kind (``runs``, ``spikes``, ``coefficients``)."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in KINDS})
    sources: list[Path] = field(default_factory=list)

    def runs(self) -> list[tuple[str, int]]:
        """The (variant, seed) of every committed run, in file order."""
        return [(r["variant"], r["seed"]) for r in self.rows["runs"]]


def read_committed(
    prefixes: Sequence[Path], exclude: Collection[tuple[str, int]], variants: Sequence[str] | None
) -> CommittedTraces:
    """The rows of ``<prefix>_{runs,spikes,coefficients}.csv`` for every run not in ``exclude``
    (runs whose logs were read) and, given ``variants`` (labels), of those variants only; a run in
    several prefixes keeps the first. A missing ``_coefficients.csv`` is no run's coefficients.

    Raises:
        FileNotFoundError: a prefix without ``_runs.csv`` or ``_spikes.csv``, naming it.
        ValueError: a number cell that does not parse, naming the file and column.
    """
    out = CommittedTraces()
    taken = set(exclude)
    for prefix in prefixes:
        kept: dict[str, list[dict[str, Any]]] = {}
        for kind in KINDS:
            path = prefix.with_name(f"{prefix.name}_{kind}.csv")
            if kind == "coefficients" and not path.is_file():
                kept[kind] = []
                continue
            if not path.is_file():
                raise FileNotFoundError(
                    f"--committed {prefix}: no {path.name} (a prefix names the files "
                    f"<prefix>_runs.csv, <prefix>_spikes.csv written by trajectories)"
                )
            _, rows = read_csv(path)
            try:
                kept[kind] = [{k: _cell(k, v) for k, v in row.items()} for row in rows]
            except ValueError as error:
                raise ValueError(f"{path}: a cell is not a number ({error})") from error
        new = {
            (r["variant"], r["seed"])
            for r in kept["runs"]
            if (r["variant"], r["seed"]) not in taken
            and (variants is None or r["variant"] in variants)
        }
        for kind in KINDS:
            out.rows[kind] += [r for r in kept[kind] if (r["variant"], r["seed"]) in new]
        taken |= new
        out.sources.append(prefix)
    return out


def merged(
    logged: Sequence[dict[str, Any]],
    committed: Sequence[dict[str, Any]],
    order: Sequence[str],
    within: str | None = None,
) -> list[dict[str, Any]]:
    """``logged`` and ``committed`` rows sorted by variant (in ``order``, others after), seed and
    then ``within`` (e.g. ``step``), keeping each run's rows in their order otherwise."""
    rank = {v: i for i, v in enumerate(order)}
    rows = [*logged, *committed]
    return sorted(
        rows,
        key=lambda r: (
            rank.get(r["variant"], len(rank)),
            r["seed"],
            r[within] if within is not None else 0,
        ),
    )
