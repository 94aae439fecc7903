"""Per-seed and paired-by-seed tables from folders of run records: a plan page's ``paired``
report (``studies.sweep``; ``configs/studies/image28_mnist5k.yaml``).

One row per backend (``mean ± std``, every seed's value, fit time per seed) and one per backend
other than ``control`` (its Δ on every seed both ran, the sign count with its sign-test p, a
Student-t interval): ``results.paired``. For unimodal outcomes (bits/dim); the reversal
study's bimodal ones have their own tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attn_lightning.records.files import markdown_records, write_csv
from lab.results.paired import SEED_INTERVAL_NOTE, delta_rows, seed_rows
from lab.results.records import load_runs

DEFAULT_METRICS = ("test/bits_per_dim", "test/completion_bpd")


def write_paired(
    roots: Sequence[Path],
    out: Path,
    *,
    command: str,
    control: str | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    variants: Sequence[str] | None = None,
) -> list[Path]:
    """Write ``<out>.md``, ``<out>.csv`` and (with a ``control``) ``<out>_deltas.csv`` from the
    records under ``roots``; returns them. ``variants``: the table's rows in order (default:
    every variant recorded); ``command``: the page's "regenerate with" line.

    Raises:
        FileNotFoundError: no run record under ``roots``.
        ValueError: a variant or metric the records do not have, naming what they have.
    """
    where = ", ".join(f"`{root.as_posix()}/`" for root in roots)
    runs = [run for root in roots for run in load_runs(root)]
    if not runs:
        raise FileNotFoundError(f"no run records (record.json) under {where}")
    present = list(dict.fromkeys(r.variant for r in runs))
    names = list(variants) if variants else present
    unknown = [n for n in names + ([control] if control else []) if n not in present]
    if unknown:
        raise ValueError(f"{where} has no runs of {unknown}; it has {present}")
    reported = {k for r in runs for k in r.metrics}
    missing = [m for m in metrics if m not in reported]
    if missing:
        raise ValueError(f"{where} has no metric {missing}; it has {sorted(reported)}")
    per_variant = seed_rows(runs, names, metrics, label="backend")
    paired = delta_rows(runs, names, control, metrics, label="backend") if control else []
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        f"From the run records in {where} (finished runs only), no training. "
        "Mean ± std over seeds, every seed's value beside it; fit time is `train.py`'s own.\n",
        markdown_records(per_variant),
    ]
    if paired:
        lines += [
            "",
            f"Paired by seed (the same seed: the same data order and initialisation stream): "
            f"each backend's value minus `{control}`'s on every seed both finished, how many "
            f"Δ are positive / negative, and the mean Δ [{SEED_INTERVAL_NOTE}].\n",
            markdown_records(paired),
        ]
    written = [write_csv(out.with_name(out.name + ".csv"), per_variant)]  # makes the folder
    if paired:
        written.append(write_csv(out.with_name(out.name + "_deltas.csv"), paired))
    page = out.with_name(out.name + ".md")
    page.write_text("\n".join(lines) + "\n")
    return [page, *written]
