"""The report of a sequence-reversal sweep: outcomes over seeds, steps to 99 %, loss spikes.

``report`` reads a page's run records (``runs.chosen_runs``), summarizes them per variant
(``summary``) and writes:

* ``<out>.md``: the tables of ``markdown`` and the validation curves;
* ``<out>.csv``: the summary, one row per variant;
* ``<out>_runs.csv``: one row per run;
* ``<out>_curves.csv``: ``val/token_acc`` at every validation of every run;
* ``<out>_paired.csv`` with ``control``: paired ``variant − control`` differences.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.records.files import write_csv
from lab.results.curves import curves_table
from lab.results.records import RunResult, run_label
from lab.results.tables import default_metrics
from lab.studies.reversal.dynamics import VAL_TAG
from lab.studies.reversal.markdown import (
    CHECKPOINT_FACTS,
    has_checkpoint_facts,
    paired_section,
    report_markdown,
)
from lab.studies.reversal.runs import DEFAULT_THRESHOLD, chosen_runs
from lab.studies.reversal.summary import paired_csv_rows, paired_rows, summarize_variant


def _run_row(run: RunResult, metrics: Sequence[str], checkpoint: bool) -> dict[str, Any]:
    row = {
        "variant": run.variant,
        "seed": run.seed,
        "status": run.status,
        **{k: run.value(k) for k in metrics},
        "steps_to_threshold": run.info.get("steps_to_threshold"),
        "spikes": run.info.get("spikes"),
        "fit_seconds": None if run.seconds is None else round(run.seconds, 1),
        "global_step": run.global_step,
        "max_grad_norm": run.info.get("max_grad_norm"),
    }
    return {**row, **{k: run.info.get(k) for k in CHECKPOINT_FACTS}} if checkpoint else row


def report(
    roots: Sequence[Path],
    out: Path,
    *,
    command: str,
    variants: Sequence[str] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    control: str | None = None,
) -> list[dict[str, Any]]:
    """Write the files of the module docstring; returns the summary rows.

    Args:
        roots: folders of run records (``runs.chosen_runs``).
        out: output path without extension.
        command: the command line shown in ``<out>.md``.
        variants: the variants and their order (``runs.chosen_runs``).
        threshold: test token accuracy of a converged run; ``val/token_acc`` of steps-to.
        control: a label (or spec): adds paired ``variant − control`` differences.

    Raises:
        FileNotFoundError: naming a folder of ``roots`` without run records.
    """
    names, runs = chosen_runs(roots, variants, threshold)
    summary = [summarize_variant(name, runs, threshold) for name in names]

    def sibling(suffix: str) -> Path:
        return out.with_name(out.name + suffix)

    write_csv(sibling(".csv"), summary)
    metrics = default_metrics(runs)
    # The header alone when the chosen variants have no runs yet.
    checkpoint = has_checkpoint_facts(runs)
    fields = list(_run_row(RunResult("", 0, None, ""), metrics, checkpoint))
    rows = [_run_row(r, metrics, checkpoint) for r in runs]
    write_csv(sibling("_runs.csv"), rows, fields=fields)
    # Long format, one row per validation; optimizer_steps = logged step + 1.
    curves = [
        {"variant": r.variant, "seed": r.seed, "optimizer_steps": step + 1, VAL_TAG: value}
        for r in runs
        for step, value in r.info.get("val_curve", [])
    ]
    text = report_markdown(summary, runs, threshold, command)
    if curves:
        write_csv(sibling("_curves.csv"), curves)
        table = "\n".join(curves_table(curves, VAL_TAG, max_columns=None, digits=1))
        text += "\nValidation token accuracy (%) per run after n optimiser steps (column n; "
        text += f"`<out>_curves.csv`):\n\n{table}\n"
    if control is not None:
        control_name = run_label(control)
        paired = paired_rows(runs, names, control_name)
        write_csv(sibling("_paired.csv"), paired_csv_rows(paired))
        text += paired_section(paired, control_name)
    sibling(".md").write_text(text)
    return summary
