"""The reversal tables rebuilt from committed per-run CSVs, once the runs' own files are gone.

A sweep's ``<out>_runs.csv`` (``studies.sweep``, label column ``backend``) or a report's
(``report``, label column ``variant``) keeps every run's test metrics; the metrics files and
TensorBoard folders they came from live in git-ignored ``sweeps/`` and ``logs/``. ``tables`` reads
one or more such CSVs back (``results.records.read_runs_csv``) and writes the outcome tables
outcomes over seeds deserve — converged k/n and ``median [IQR]`` — with the per-run values and,
given a control, the paired per-seed Δ with sign counts and an interval of the mean
(``results.paired.seed_deltas``: bootstrap from five seeds up, Student-t below). What only the
logs held (validation curves, the gradients at loss spikes) is not in the CSVs and not in these
tables; steps to the threshold and spike counts are, when the CSV is a report's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.environment import machine_line
from attn_lightning.results.files import read_csv, write_csv
from attn_lightning.results.records import RunResult, read_runs_csv
from attn_lightning.studies.reversal.markdown import (
    RUNS_CAPTION,
    outcome_table,
    paired_section,
    runs_table,
)
from attn_lightning.studies.reversal.summary import paired_csv_rows, paired_rows, summarize
from attn_lightning.studies.runner import run_label

# Per-run facts of a report's CSV: read back into ``RunResult.info`` (not metrics).
FACTS = ("steps_to_threshold", "spikes", "max_grad_norm", "best_ckpt_step", "final_val_loss")
FLOAT_FACTS = {"max_grad_norm", "final_val_loss"}
SECONDS = ("fit_seconds", "seconds")


def read_runs(path: Path) -> list[RunResult]:
    """The runs of a sweep's or a report's ``<out>_runs.csv``, facts in ``info``.

    Raises:
        FileNotFoundError: naming the path.
    """
    _, rows = read_csv(path)
    label = "variant" if not rows or "variant" in rows[0] else "backend"
    runs = read_runs_csv(path, label=label)
    for run in runs:
        run.variant = run_label(run.variant)
        for key in FACTS:
            value = run.metrics.pop(key, None)
            if value is not None:
                run.info[key] = value if key in FLOAT_FACTS else int(value)
        for key in SECONDS:
            value = run.metrics.pop(key, None)
            run.seconds = run.seconds if value is None else value
    return runs


def tables(
    paths: Sequence[Path],
    out: Path,
    *,
    command: str,
    variants: Sequence[str] | None = None,
    control: str | None = None,
    threshold: float = 0.99,
    paired_only: bool = False,
) -> list[dict[str, Any]]:
    """Write ``<out>.md`` and ``<out>.csv`` (summary) and, with ``control``,
    ``<out>_paired.csv``, from the runs of ``paths``; returns the summary.

    With ``paired_only`` only ``<out>_paired.csv`` is written and the paired section at the end
    of an existing ``<out>.md`` (a report's page, whose other tables came from logs that are
    gone) is replaced, with the command that recomputed it.

    Args:
        paths: committed ``<name>_runs.csv`` files; a (variant, seed) in several keeps the first
            finished one (else the first).
        out: output path without extension.
        command: the command line shown in ``<out>.md``.
        variants: labels (or attention specs) in table order (default: as first seen).
        control: a label (or spec) for paired ``variant − control`` differences.
        threshold: test token accuracy of a converged run.
    """
    seen: dict[tuple[str, int], RunResult] = {}
    for path in paths:
        for run in read_runs(path):
            key = (run.variant, run.seed)
            # A run still going when one CSV was written and finished in another: the finished.
            if key not in seen or (seen[key].status != "ok" and run.status == "ok"):
                seen[key] = run
    names = [run_label(v) for v in variants] if variants else list({k[0]: 0 for k in seen})
    runs = sorted(
        (r for r in seen.values() if r.variant in names),
        key=lambda r: (names.index(r.variant), r.seed),
    )
    summary = summarize(runs, names, threshold)
    if paired_only:
        _replace_paired(out, runs, names, control, command)
        return summary
    write_csv(out.with_name(out.name + ".csv"), summary)
    sources = ", ".join(f"`{p.name}`" for p in paths)
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        machine_line() + "\n",
        f"Rebuilt from the committed per-run CSVs {sources} (the runs' logs are not kept). Cells "
        "are median [25th, 75th percentile] over the finished runs; converged: test token "
        f"accuracy ≥ {threshold * 100:g} %.\n",
        *outcome_table(summary),
        "",
        RUNS_CAPTION,
        "",
        *runs_table(runs, threshold),
    ]
    text = "\n".join(lines) + "\n"
    if control is not None:
        paired = paired_rows(runs, names, run_label(control))
        write_csv(out.with_name(out.name + "_paired.csv"), paired_csv_rows(paired))
        text += paired_section(paired, run_label(control))
    out.with_name(out.name + ".md").write_text(text)
    return summary


PAIRED_HEAD = "\nPaired differences, variant − "


def _replace_paired(
    out: Path, runs: Sequence[RunResult], names: Sequence[str], control: str | None, command: str
) -> None:
    if control is None:
        raise ValueError("the paired section needs --control")
    page = out.with_name(out.name + ".md")
    if not page.is_file():
        raise FileNotFoundError(f"no report page {page} whose paired section to replace")
    text = page.read_text()
    kept = text[: text.index(PAIRED_HEAD)] if PAIRED_HEAD in text else text
    paired = paired_rows(runs, names, run_label(control))
    write_csv(out.with_name(out.name + "_paired.csv"), paired_csv_rows(paired))
    section = paired_section(paired, run_label(control))
    page.write_text(
        kept.rstrip("\n") + "\n" + section + f"\nRecomputed from the per-run CSV with:\n\n"
        f"```bash\n{command}\n```\n"
    )
