"""Report of a sequence-reversal sweep (issue 14): outcomes over seeds, steps to 99 %, spikes.

    python -m attn_lightning.studies.reversal_report --experiment polynomial-len50 \\
        --out docs/results/polynomial_len50 [--variants LABEL ...] [--threshold 0.99] [--root .]

Reads the metrics files ``sweeps/<experiment>/<label>-s<seed>.json`` that ``studies.sweep``
wrote and each run's TensorBoard folder (the file's ``log_dir``), and writes ``<out>.md``
(summary, per-run table, validation curves, the command, the machine), ``<out>.csv`` (summary),
``<out>_runs.csv`` (one row per run) and ``<out>_curves.csv`` (validation token accuracy per run
and validation). Outcomes over seeds are bimodal (a run converges or
not), so the summary gives converged k/n and ``median [25th, 75th percentile]``
(``tables.median_iqr``) rather than mean ± std. Per variant:

* converged: runs with test token accuracy ≥ ``threshold``, of the runs with a metrics file;
* the test metrics (token, exact-sequence, greedy token / exact accuracy, loss);
* steps to ``threshold``: the first logged step whose ``val/token_acc`` ≥ ``threshold``, over
  the runs that reached it (how many did is its own column);
* loss spikes per run (``train/loss_spike`` flags of ``callbacks.gradients.GradientTracker``);
* gradients around spikes: for each spike, the global gradient norm at the last logged gradient
  step at or before it over the run's median global norm, and the group (attention,
  feedforward, embedding, other) whose norm is furthest above its own median at that step.

Gradient norms are logged every few steps (20 in the study), so a spike between two logs is
compared with the gradient up to 19 steps before it; the lag is reported with the ratio.
Folders under ``logs/<experiment>/`` without a metrics file (running, crashed or timed out)
are counted as "unfinished" and left out of everything else. The pure functions
(``steps_to_threshold``, ``spike_steps``, ``spike_gradients``) take ``{tag: [(step, value)]}``
as ``read_scalars`` returns it.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import platform
import re
import shlex
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import Scalars, read_scalars, series
from attn_lightning.results.paired import paired_delta
from attn_lightning.results.tables import column, format_median_iqr, median_iqr

log = logging.getLogger("attn_lightning.studies.reversal_report")

VAL_TAG = "val/token_acc"
SPIKE_TAG = "train/loss_spike"
NORM_TAG = "grad/global_norm"
GROUPS = ("attention", "feedforward", "embedding", "other")
CONVERGENCE_METRIC = "test/token_acc"
# Summary columns, in the order of the issue.
METRICS = (
    "test/token_acc",
    "test/exact_acc",
    "test/gen_token_acc",
    "test/gen_exact_acc",
    "test/loss",
)
RUN_FILE = re.compile(r"^(?P<label>.+)-s(?P<seed>\d+)$")
PROG = "python -m attn_lightning.studies.reversal_report"


# --- TensorBoard scalars -> numbers (pure functions) -------------------------------------------


def steps_to_threshold(scalars: Scalars, threshold: float, tag: str = VAL_TAG) -> int | None:
    """The first logged step whose ``tag`` ≥ ``threshold``; None if never (or never logged)."""
    return next((step for step, value in series(scalars, tag) if value >= threshold), None)


def spike_steps(scalars: Scalars) -> list[int] | None:
    """Steps flagged as loss spikes; None when the run logged no spike flags at all."""
    flags = series(scalars, SPIKE_TAG)
    if not flags:
        return None
    return [step for step, flag in flags if flag >= 0.5]


def max_grad_norm(scalars: Scalars) -> float | None:
    """The largest logged global gradient norm (before clipping); None if none was logged."""
    norms = [value for _, value in series(scalars, NORM_TAG)]
    return max(norms) if norms else None


def _finite_median(points: list[tuple[int, float]]) -> float | None:
    # A diverged run logs inf/nan norms; they would make the median meaningless.
    values = [v for _, v in points if math.isfinite(v)]
    return statistics.median(values) if values else None


def _ratio(value: float, median: float | None) -> float | None:
    return value / median if median else None


@dataclass(frozen=True)
class SpikeGradient:
    """The gradients logged at (or last before) a loss spike, relative to the run's medians.

    Attributes:
        spike_step: the flagged step.
        grad_step: the last gradient-norm step ≤ ``spike_step`` (lag = the difference).
        norm: global gradient norm at ``grad_step``.
        ratio: ``norm`` / the run's median global norm.
        group: the group with the largest norm / its own run median at ``grad_step``.
        group_ratio: that group's ratio.
    """

    spike_step: int
    grad_step: int
    norm: float
    ratio: float | None
    group: str | None
    group_ratio: float | None

    @property
    def lag(self) -> int:
        """Steps between the gradient log and the spike (0: the spike's own gradient)."""
        return self.spike_step - self.grad_step


def _value_at(points: list[tuple[int, float]], step: int) -> float | None:
    return next((v for s, v in points if s == step), None)


def _largest_group(scalars: Scalars, step: int) -> tuple[str | None, float | None]:
    best: tuple[str | None, float | None] = (None, None)
    for group in GROUPS:
        points = series(scalars, f"grad/{group}")
        value = _value_at(points, step)
        ratio = None if value is None else _ratio(value, _finite_median(points))
        # A non-finite ratio (inf/nan grads) is the most telling group, so it wins.
        if ratio is not None and (best[1] is None or not ratio <= best[1]):
            best = (group, ratio)
    return best


def spike_gradients(scalars: Scalars) -> list[SpikeGradient]:
    """One record per loss spike that has a gradient log at or before it (see the class)."""
    norms = series(scalars, NORM_TAG)
    median = _finite_median(norms)
    records = []
    for spike in spike_steps(scalars) or []:
        before = [(s, v) for s, v in norms if s <= spike]
        if not before:  # no gradient logged yet; the detector's warm-up makes this rare
            continue
        grad_step, norm = before[-1]
        group, group_ratio = _largest_group(scalars, grad_step)
        records.append(
            SpikeGradient(spike, grad_step, norm, _ratio(norm, median), group, group_ratio)
        )
    return records


# --- runs ---------------------------------------------------------------------------------------


@dataclass
class Run:
    """One (variant, seed) run: its metrics file and what its TensorBoard logs show.

    ``status``: ``ok`` (test metrics present), ``no test`` (metrics file without test metrics)
    or ``unfinished`` (a log folder without a metrics file). ``spikes`` is None when the run
    has no TensorBoard logs or logged no spike flags.
    """

    variant: str
    seed: int
    status: str
    test: dict[str, float] = field(default_factory=dict)
    fit_seconds: float | None = None
    global_step: int | None = None
    steps_to_threshold: int | None = None
    spikes: int | None = None
    spike_gradients: list[SpikeGradient] = field(default_factory=list)
    max_grad_norm: float | None = None
    val_curve: list[tuple[int, float]] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        """Whether the run wrote a metrics file."""
        return self.status != "unfinished"

    def converged(self, threshold: float) -> bool:
        """Test token accuracy ≥ ``threshold``."""
        value = self.test.get(CONVERGENCE_METRIC)
        return value is not None and value >= threshold


def _split_name(stem: str) -> tuple[str, int] | None:
    match = RUN_FILE.match(stem)
    return None if match is None else (match["label"], int(match["seed"]))


def load_run(path: Path, root: Path, experiment: str, threshold: float) -> Run | None:
    """Read one metrics file and its run's TensorBoard folder; None for a foreign file name."""
    name = _split_name(path.stem)
    if name is None:
        log.warning("skipping %s: not <label>-s<seed>.json", path)
        return None
    record = json.loads(path.read_text())
    test = {k: float(v) for k, v in record.get("test", {}).items()}
    run = Run(
        variant=name[0],
        seed=name[1],
        status="ok" if CONVERGENCE_METRIC in test else "no test",
        test=test,
        fit_seconds=record.get("fit_seconds"),
        global_step=record.get("global_step"),
    )
    log_dir = root / record.get("log_dir", f"logs/{experiment}/{path.stem}")
    if not log_dir.is_dir():
        log.warning("run %s: no TensorBoard folder %s", path.stem, log_dir)
        return run
    scalars = read_scalars(log_dir)
    spikes = spike_steps(scalars)
    run.steps_to_threshold = steps_to_threshold(scalars, threshold)
    run.spikes = None if spikes is None else len(spikes)
    run.spike_gradients = spike_gradients(scalars)
    run.max_grad_norm = max_grad_norm(scalars)
    run.val_curve = series(scalars, VAL_TAG)
    return run


def load_runs(root: Path, experiment: str, threshold: float) -> list[Run]:
    """Every run of ``sweeps/<experiment>``, plus log folders without a metrics file.

    Raises:
        FileNotFoundError: the folder holds no metrics file.
    """
    folder = root / "sweeps" / experiment
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(
            f"no runs in {folder.absolute()}: no <label>-s<seed>.json metrics files"
        )
    runs = [r for p in files if (r := load_run(p, root, experiment, threshold)) is not None]
    seen = {p.stem for p in files}
    logs = root / "logs" / experiment
    for log_dir in sorted(logs.iterdir()) if logs.is_dir() else []:
        name = _split_name(log_dir.name)
        if log_dir.is_dir() and name is not None and log_dir.name not in seen:
            runs.append(Run(name[0], name[1], "unfinished"))
    return sorted(runs, key=lambda r: (r.variant, r.seed))


# --- summary ------------------------------------------------------------------------------------


def _put_median_iqr(row: dict[str, Any], key: str, values: Sequence[float]) -> None:
    row[f"{key}_median"], row[f"{key}_q25"], row[f"{key}_q75"] = median_iqr(values)


def summarize_variant(name: str, runs: Sequence[Run], threshold: float) -> dict[str, Any]:
    """One summary row (see the module docstring) of one variant's runs."""
    done = [r for r in runs if r.finished]
    row: dict[str, Any] = {
        "variant": name,
        "runs": len(done),
        "unfinished": len(runs) - len(done),
        "converged": sum(r.converged(threshold) for r in done),
    }
    for key in METRICS:
        _put_median_iqr(row, key, [v for r in done if (v := r.test.get(key)) is not None])
    reached = [r.steps_to_threshold for r in done if r.steps_to_threshold is not None]
    row["reached"] = len(reached)
    _put_median_iqr(row, "steps_to_threshold", reached)
    spikes = [r.spikes for r in done if r.spikes is not None]
    _put_median_iqr(row, "spikes", spikes)
    row["spikes_max"] = max(spikes, default=None)
    records = [g for r in done for g in r.spike_gradients]
    ratios = [g.ratio for g in records if g.ratio is not None]
    row["spike_records"] = len(records)
    row["spike_grad_ratio_median"] = statistics.median(ratios) if ratios else None
    row["spike_grad_lag_median"] = statistics.median([g.lag for g in records]) if records else None
    groups = Counter(g.group for g in records if g.group is not None)
    # Ties go to the first group in GROUPS order, so the table does not depend on run order.
    top = max(GROUPS, key=lambda g: groups[g]) if groups else None
    row["spike_top_group"], row["spike_top_group_count"] = top, groups[top] if top else None
    _put_median_iqr(row, "fit_seconds", [r.fit_seconds for r in done if r.fit_seconds is not None])
    return row


def summarize(
    runs: Sequence[Run], variants: Sequence[str], threshold: float
) -> list[dict[str, Any]]:
    """One row per variant, in the order of ``variants`` (a variant without runs: zeros)."""
    return [summarize_variant(v, [r for r in runs if r.variant == v], threshold) for v in variants]


# --- tables -------------------------------------------------------------------------------------


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _iqr(row: dict[str, Any], key: str, *, scale: float = 1.0, digits: int = 2) -> str:
    cells = (row[f"{key}_median"], row[f"{key}_q25"], row[f"{key}_q75"])
    return format_median_iqr(*cells, scale=scale, digits=digits)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _head(titles: Sequence[str]) -> list[str]:
    return [_row(titles), "|" + "---|" * len(titles)]


def _outcome_table(summary: Sequence[dict[str, Any]]) -> list[str]:
    lines = _head(
        ["variant", "converged", "unfinished", *(column(k).title for k in METRICS), "fit s / run"]
    )
    for row in summary:
        cells = [f"`{row['variant']}`", f"{row['converged']}/{row['runs']}"]
        cells.append(str(row["unfinished"]))
        cells += [_iqr(row, k, scale=column(k).scale, digits=column(k).digits) for k in METRICS]
        cells.append(_iqr(row, "fit_seconds", digits=0))
        lines.append(_row(cells))
    return lines


def _dynamics_table(summary: Sequence[dict[str, Any]], threshold: float) -> list[str]:
    pct = f"{threshold * 100:g} %"
    lines = _head(
        [
            "variant",
            f"steps to {pct}",
            f"reached {pct}",
            "loss spikes / run",
            "max spikes / run",
            "spikes with a grad log",
            "grad norm / run median at spike",
            "lag (steps)",
            "top group at spike",
        ]
    )
    for row in summary:
        top = row["spike_top_group"]
        cells = [
            f"`{row['variant']}`",
            _iqr(row, "steps_to_threshold", digits=0),
            f"{row['reached']}/{row['runs']}",
            _iqr(row, "spikes", digits=1),  # counts are small: 0.5 must not read as 0
            "–" if row["spikes_max"] is None else str(row["spikes_max"]),
            str(row["spike_records"]),
            _num(row["spike_grad_ratio_median"]),
            _num(row["spike_grad_lag_median"], 0),
            "–" if top is None else f"{top} ({row['spike_top_group_count']})",
        ]
        lines.append(_row(cells))
    return lines


def _run_row(run: Run, metrics: Sequence[str]) -> dict[str, Any]:
    return {
        "variant": run.variant,
        "seed": run.seed,
        "status": run.status,
        **{k: run.test.get(k) for k in metrics},
        "steps_to_threshold": run.steps_to_threshold,
        "spikes": run.spikes,
        "fit_seconds": None if run.fit_seconds is None else round(run.fit_seconds, 1),
        "global_step": run.global_step,
        "max_grad_norm": run.max_grad_norm,
    }


def _runs_table(runs: Sequence[Run], threshold: float) -> list[str]:
    head = ["variant", "seed", "status", *(column(k).title for k in METRICS)]
    head += [f"step to {threshold * 100:g} %", "spikes", "max grad norm", "steps", "fit s"]
    lines = _head(head)
    for r in runs:
        cells = [f"`{r.variant}`", str(r.seed), r.status]
        for key in METRICS:
            value, c = r.test.get(key), column(key)
            cells.append("–" if value is None else f"{value * c.scale:.{c.digits}f}")
        cells += [
            "–" if r.steps_to_threshold is None else str(r.steps_to_threshold),
            "–" if r.spikes is None else str(r.spikes),
            _num(r.max_grad_norm, 3),
            "–" if r.global_step is None else str(r.global_step),
            _num(r.fit_seconds, 0),
        ]
        lines.append(_row(cells))
    return lines


def _curve_rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Long format: one row per run and validation, ``optimizer_steps`` = logged step + 1."""
    return [
        {"variant": r.variant, "seed": r.seed, "optimizer_steps": step + 1, VAL_TAG: value}
        for r in runs
        for step, value in r.val_curve
    ]


def _curves_table(runs: Sequence[Run]) -> list[str]:
    """Validation token accuracy (%) per run after each validation's optimiser steps."""
    steps = sorted({step for r in runs for step, _ in r.val_curve})
    if not steps:
        return []
    lines = _head(["variant", "seed", *(f"{step + 1}" for step in steps)])
    for r in runs:
        if not r.val_curve:
            continue
        values = dict(r.val_curve)
        cells = [f"{values[s] * 100:.1f}" if s in values else "–" for s in steps]
        lines.append(_row([f"`{r.variant}`", str(r.seed), *cells]))
    return lines


def _write_csv(
    path: Path, rows: Sequence[dict[str, Any]], fields: Sequence[str] | None = None
) -> None:
    fields = list(fields or dict.fromkeys(k for row in rows for k in row))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _test_metrics(runs: Sequence[Run]) -> list[str]:
    reported = {k for r in runs for k in r.test}
    return [k for k in METRICS if k in reported] + sorted(reported - set(METRICS))


def _markdown(
    summary: Sequence[dict[str, Any]], runs: Sequence[Run], threshold: float, command: str
) -> str:
    pct = f"{threshold * 100:g} %"
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        f"Machine running this report: {platform.platform()}, "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}.\n",
        "Cells are median [25th, 75th percentile] over the finished runs (quartiles "
        "interpolated linearly). Unfinished: a log folder without a metrics file (running, "
        "crashed or timed out), left out of every other column.\n",
        f"Test split, best-by-validation checkpoint. Converged: test token accuracy ≥ {pct}.\n",
        *_outcome_table(summary),
        "",
        f"Steps to {pct}: the first logged step with `val/token_acc` ≥ {threshold:g} (Lightning "
        f"logs the validation after n optimiser steps at step n − 1), over the runs that "
        f"reached it. Loss spike: a step's loss > 3× the median of the 50 before. At each "
        f"spike, the global gradient norm (before clipping) at the last gradient log at or "
        f"before it, over the run's median norm (median over all spikes; lag: median steps "
        f"between that log and the spike), and the group whose norm is furthest above its own "
        f"run median there (most frequent, with its count).\n",
        *_dynamics_table(summary, threshold),
        "",
        "Per run:",
        "",
        *_runs_table(runs, threshold),
    ]
    curves = _curves_table(runs)
    if curves:
        lines += [
            "",
            "Validation token accuracy (%) per run after n optimiser steps (column n; "
            "`<out>_curves.csv`):",
            "",
            *curves,
        ]
    return "\n".join(lines) + "\n"


# Paired Δ columns: (title, value of a run, scale, digits).
PAIRED = (
    ("Δ test loss", lambda r: r.test.get("test/loss"), 1.0, 5),
    ("Δ token acc (pp)", lambda r: r.test.get("test/token_acc"), 100.0, 2),
    ("Δ exact-seq acc (pp)", lambda r: r.test.get("test/exact_acc"), 100.0, 2),
    ("Δ steps to threshold", lambda r: r.steps_to_threshold, 1.0, 0),
)


def paired_rows(runs: Sequence[Run], names: Sequence[str], control: str) -> list[dict[str, Any]]:
    """Per variant, the paired ``variant − control`` of each ``PAIRED`` value over shared seeds.

    Steps-to pairs only the seeds where both runs reached the threshold. A cell is None when no
    seed is shared.
    """

    def values(name: str, value: Any) -> dict[int, float]:
        picked = {}
        for run in runs:
            if run.variant == name and run.finished and (v := value(run)) is not None:
                picked[run.seed] = float(v)
        return picked

    rows = []
    for name in names:
        if name == control:
            continue
        row: dict[str, Any] = {"variant": name, "control": control}
        for title, value, _, _ in PAIRED:
            row[title] = paired_delta(values(name, value), values(control, value))
        rows.append(row)
    return rows


def _paired_csv_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Numbers, scaled as shown: ``<title> mean|low|high|n`` per ``PAIRED`` column."""
    flat = []
    for row in rows:
        out: dict[str, Any] = {"variant": row["variant"], "control": row["control"]}
        for title, _, scale, _ in PAIRED:
            delta = row[title]
            for part in ("mean", "low", "high"):
                out[f"{title} {part}"] = None if delta is None else getattr(delta, part) * scale
            out[f"{title} n"] = None if delta is None else delta.n
        flat.append(out)
    return flat


def _paired_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    titles = ["variant", "control", *(title for title, *_ in PAIRED)]
    body = []
    for row in rows:
        cells = [f"`{row['variant']}`", f"`{row['control']}`"]
        for title, _, scale, digits in PAIRED:
            delta = row[title]
            cells.append("–" if delta is None else delta.format(scale=scale, digits=digits))
        body.append(_row(cells))
    return [*_head(titles), *body]


def _labels(variants: Sequence[str]) -> list[str]:
    # Imported here: ``runner`` loads torch and every attention backend, which reading files
    # does not need (the report starts in a second without them).
    from attn_lightning.studies.runner import run_label

    return [run_label(v) for v in variants]


def _default_command(
    experiment: str, out: Path, variants: Sequence[str] | None, threshold: float
) -> str:
    args = ["--experiment", experiment, "--out", str(out)]
    args += ["--variants", *variants] if variants else []
    args += [] if threshold == 0.99 else ["--threshold", f"{threshold:g}"]
    return f"{PROG} {shlex.join(args)}"


def report(
    experiment: str,
    out: Path,
    *,
    variants: Sequence[str] | None = None,
    threshold: float = 0.99,
    root: Path = Path(),
    command: str | None = None,
    control: str | None = None,
) -> list[dict[str, Any]]:
    """Write ``<out>.md``, ``<out>.csv`` (summary), ``<out>_runs.csv`` and ``<out>_curves.csv``
    (``val/token_acc`` at every validation of every run); returns the summary.

    Args:
        experiment: the sweep's experiment (``sweeps/<experiment>``, ``logs/<experiment>``).
        out: output path without extension (relative to ``root`` unless absolute).
        variants: labels (or attention specs, turned into labels) in table order; default: every
            label found, sorted. Runs of other variants are left out.
        threshold: test token accuracy of a converged run; ``val/token_acc`` of steps-to.
        root: the folder holding ``sweeps/`` and ``logs/`` (the sweep's working directory).
        command: the command line shown in ``<out>.md`` (default: the equivalent CLI call).
        control: a label (or spec): adds paired ``variant − control`` differences over the
            seeds both ran, mean [95 % t-interval], to ``<out>.md`` and ``<out>_paired.csv``.

    Raises:
        FileNotFoundError: ``sweeps/<experiment>`` holds no metrics file.
    """
    runs = load_runs(root, experiment, threshold)
    names = _labels(variants) if variants else sorted({r.variant for r in runs})
    missing = [n for n in names if not any(r.variant == n for r in runs)]
    if missing:
        log.warning("no runs of %s in sweeps/%s", ", ".join(missing), experiment)
    runs = [r for r in runs if r.variant in names]
    runs.sort(key=lambda r: (names.index(r.variant), r.seed))
    summary = summarize(runs, names, threshold)
    command = command or _default_command(experiment, out, variants, threshold)
    path = root / out  # an absolute ``out`` stays as it is
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_csv(path.with_name(path.name + ".csv"), summary)
    metrics = _test_metrics(runs)
    # The header alone when the chosen variants have no runs yet.
    fields = list(_run_row(Run("", 0, ""), metrics))
    runs_csv = path.with_name(path.name + "_runs.csv")
    _write_csv(runs_csv, [_run_row(r, metrics) for r in runs], fields)
    curve_fields = ["variant", "seed", "optimizer_steps", VAL_TAG]
    _write_csv(path.with_name(path.name + "_curves.csv"), _curve_rows(runs), curve_fields)
    text = _markdown(summary, runs, threshold, command)
    if control is not None:
        (control_name,) = _labels([control])
        paired = paired_rows(runs, names, control_name)
        _write_csv(path.with_name(path.name + "_paired.csv"), _paired_csv_rows(paired))
        text += (
            f"\nPaired differences, variant − `{control_name}`, over the seeds both ran: mean "
            "[95 % Student-t interval] (n seeds); steps to threshold over the seeds where both "
            "reached it.\n\n" + "\n".join(_paired_table(paired)) + "\n"
        )
    path.with_name(path.name + ".md").write_text(text)
    return summary


def build_parser() -> argparse.ArgumentParser:
    """The report CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--experiment", required=True, help="sweep experiment: reads sweeps/<experiment>/*.json")
    add("--out", required=True, type=Path, help="output path without extension")
    add("--variants", nargs="+", default=None, help="labels in table order (default: all)")
    add("--threshold", type=float, default=0.99, help="converged / steps-to token accuracy")
    add("--root", type=Path, default=Path(), help="folder holding sweeps/ and logs/")
    add("--control", default=None, help="label or spec: paired differences vs this variant")
    return parser


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run the report CLI; returns the summary rows."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # EventAccumulator logs each event file it moves on to (runs resumed or tested have two).
    logging.getLogger("tensorboard").setLevel(logging.WARNING)
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        summary = report(
            args.experiment,
            args.out,
            variants=args.variants,
            threshold=args.threshold,
            root=args.root,
            command=f"{PROG} {shlex.join(argv)}",
            control=args.control,
        )
    except FileNotFoundError as error:
        parser.error(str(error))
    log.info("wrote %s.md, %s.csv, %s_runs.csv", args.out, args.out, args.out)
    return summary


if __name__ == "__main__":
    main()
