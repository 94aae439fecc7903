"""A study's tables (mean ± std over seeds per variant) and its runs' curves: markdown and CSV.

Every study formats its cells here: ``mean ± std`` over the runs that finished, or, for outcomes
that split into modes (a run converges or not), ``median [25th, 75th percentile]``; a metric's
title, scale (100 for percentages) and decimals are its ``column`` (``KNOWN``). Unless the caller
names them, the columns are the ``test/`` metrics the runs reported, so each task gets its own.
Curves are long rows ``{variant, seed, optimizer_steps, <tag>}``: a record's ``step`` is the
logger's, the optimiser step just taken, so ``optimizer_steps`` is ``step + 1``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import machine_line
from attn_lightning.records.files import markdown_table, write_csv
from attn_lightning.records.run_files import load_record
from lab.results.records import NOT_RUN, OK, STOPPED, RunResult, Scalars, run_scalars


@dataclass(frozen=True)
class Column:
    """How a metric is shown: ``title``, value × ``scale`` with ``digits`` decimals."""

    key: str
    title: str
    scale: float = 1.0
    digits: int = 4


# Display of the metrics the tasks log; greedy = decoded with generate().
KNOWN = {
    c.key: c
    for c in (
        Column("test/token_acc", "token acc (%)", 100, 2),
        Column("test/exact_acc", "exact-seq acc (%)", 100, 2),
        Column("test/gen_token_acc", "greedy token acc (%)", 100, 2),
        Column("test/gen_exact_acc", "greedy exact-seq (%)", 100, 2),
        Column("test/acc", "test acc (%)", 100, 2),
        Column("test/mAP", "test mAP", 1, 3),
        Column("test/AP50", "test AP50", 1, 3),
        Column("test/AP75", "test AP75", 1, 3),
        Column("val/mAP", "val mAP", 1, 3),
        Column("test/bits_per_dim", "test bits/dim", 1, 4),
        Column("test/completion_bpd", "test completion bits/dim", 1, 4),
        Column("test/loss", "test loss", 1, 4),
    )
}


@dataclass(frozen=True)
class Convergence:
    """A run converged when ``metric`` ≥ ``threshold`` (``direction="max"``) or ≤ (``"min"``)."""

    metric: str
    threshold: float
    direction: str = "max"

    def __post_init__(self) -> None:
        if self.direction not in ("max", "min"):
            raise ValueError(f"direction must be 'max' or 'min', got {self.direction!r}")

    def converged(self, value: float | None) -> bool:
        """Whether a run with final ``value`` (None: not reported) converged."""
        if value is None:
            return False
        return value >= self.threshold if self.direction == "max" else value <= self.threshold

    def describe(self) -> str:
        """The failure condition in words, e.g. ``test/token_acc < 0.99``."""
        return f"{self.metric} {'<' if self.direction == 'max' else '>'} {self.threshold}"


def column(key: str, digits: int = 4) -> Column:
    """The display of ``key``: from ``KNOWN``, else the key itself with ``digits`` decimals."""
    return KNOWN.get(key, Column(key, key, digits=digits))


def default_metrics(results: Iterable[RunResult]) -> list[str]:
    """The ``test/`` metrics any run reported: known ones in ``KNOWN`` order, then the rest."""
    reported = {k for r in results for k in r.metrics if k.startswith("test/")}
    return [k for k in KNOWN if k in reported] + sorted(reported - set(KNOWN))


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample std of ``values``: std 0 for one value, ``(None, None)`` for none."""
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def number_format(value: float, digits: int) -> str:
    """The format spec of a cell around ``value``: ``digits`` decimals, or 3 significant
    figures (``.2e``) where those decimals would show a nonzero value as 0 (a converged run's
    test loss, 4e-6, is not 0.0000)."""
    return ".2e" if value and abs(value) < 0.5 * 10.0**-digits else f".{digits}f"


def format_number(value: float | None, *, scale: float = 1.0, digits: int = 2) -> str:
    """One value × ``scale`` (``number_format``); ``–`` for None."""
    return "–" if value is None else f"{value * scale:{number_format(value * scale, digits)}}"


def format_mean_std(
    mean: float | None, std: float | None, *, scale: float = 1.0, digits: int = 2
) -> str:
    """``mean ± std`` of values × ``scale`` with ``digits`` decimals (``number_format`` of the
    mean); ``–`` without a mean."""
    if mean is None:
        return "–"
    spec = number_format(mean * scale, digits)
    return f"{mean * scale:{spec}} ± {(std or 0.0) * scale:{spec}}"


def median_iqr(values: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """Median, 25th and 75th percentile of ``values``; ``(None, None, None)`` for no values.

    Quartiles by ``statistics.quantiles(..., method="inclusive")``: linear interpolation between
    the sorted values (numpy's default ``percentile``), so they stay within the observed range;
    one value is its own median and quartiles. For bimodal outcomes (a run converges or not)
    where mean ± std describes neither mode.
    """
    if not values:
        return None, None, None
    if len(values) == 1:  # quantiles() needs two points before Python 3.13
        return values[0], values[0], values[0]
    q25, median, q75 = statistics.quantiles(values, n=4, method="inclusive")
    return median, q25, q75


def format_median_iqr(
    median: float | None,
    q25: float | None,
    q75: float | None,
    *,
    scale: float = 1.0,
    digits: int = 2,
) -> str:
    """``median [q25, q75]`` of values × ``scale`` with ``digits`` decimals (``number_format``
    of the median); ``–`` without one."""
    if median is None or q25 is None or q75 is None:
        return "–"
    spec = number_format(median * scale, digits)
    return f"{median * scale:{spec}} [{q25 * scale:{spec}}, {q75 * scale:{spec}}]"


def summary_cell(row: Mapping[str, Any], key: str, *, iqr: bool = False, digits: int = 4) -> str:
    """The cell of ``key`` in a summary row, in ``column(key, digits)``'s scale and decimals:
    ``mean ± std`` of its ``_mean`` and ``_std``, or with ``iqr`` ``median [q25, q75]`` of its
    ``_median``, ``_q25`` and ``_q75``."""
    shown = column(key, digits)
    if iqr:
        spread = (row[f"{key}_median"], row[f"{key}_q25"], row[f"{key}_q75"])
        return format_median_iqr(*spread, scale=shown.scale, digits=shown.digits)
    mean, std = row[f"{key}_mean"], row[f"{key}_std"]
    return format_mean_std(mean, std, scale=shown.scale, digits=shown.digits)


def summarize(
    results: Sequence[RunResult],
    *,
    metrics: Sequence[str] | None = None,
    convergence: Convergence | None = None,
    label: str = "backend",
) -> list[dict[str, Any]]:
    """One row per variant: run counts, ``<metric>_mean``/``_std`` and wall time of the ok runs.

    With ``convergence`` the row also counts the ``not_converged`` ok runs; ``metrics`` defaults
    to ``default_metrics(results)``.
    """
    keys = list(metrics) if metrics is not None else default_metrics(results)
    rows = []
    for name in dict.fromkeys(r.variant for r in results):
        runs = [r for r in results if r.variant == name]
        ok = [r for r in runs if r.status == "ok"]
        row: dict[str, Any] = {label: name, "runs": len(runs), "crashed": len(runs) - len(ok)}
        if convergence is not None:
            metric_of = convergence.metric
            row["not_converged"] = sum(not convergence.converged(r.value(metric_of)) for r in ok)
        for key in keys:
            mean, std = mean_std([v for r in ok if (v := r.value(key)) is not None])
            row[f"{key}_mean"], row[f"{key}_std"] = mean, std
        row["seconds_mean"], row["seconds_std"] = mean_std(
            [r.seconds for r in ok if r.seconds is not None]
        )
        rows.append(row)
    return rows


def records_machine_line(results: Sequence[RunResult], *, jobs: int = 1) -> str | None:
    """``Machine: <platform>, <device>, Python <version>; runs one after another.`` of the
    finished runs (a converted run's ``machine`` tag, else its record's environment; all of
    them, ``Machines: A; B; ...``, when they ran on several); None when no run says."""
    machines: dict[str, None] = {}
    for run in results:
        if "machine" in run.info:
            machines[str(run.info["machine"])] = None
        elif run.status == OK and run.log_dir is not None:
            try:
                env = load_record(Path(run.log_dir)).get("environment")
            except (FileNotFoundError, ValueError):
                continue
            if env:
                device = env.get("device_name") or env["device"]
                machines[f"{env['platform']}, {device}, Python {env['python']}"] = None
    if not machines:
        return None
    pace = "runs one after another" if jobs <= 1 else f"{jobs} runs at a time"
    return f"Machine{'s' if len(machines) > 1 else ''}: {'; '.join(machines)}; {pace}."


def run_rows(
    results: Sequence[RunResult], keys: Sequence[str], *, label: str, info: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The ``<out>_runs.csv`` rows: per run its variant (as ``label``), the ``info`` tags named,
    seed, status, seconds, steps and the value of each of ``keys``."""
    return [
        {
            label: r.variant,
            **{tag: r.info.get(tag) for tag in info},
            "seed": r.seed,
            "status": r.status,
            "seconds": None if r.seconds is None else round(r.seconds, 1),
            "global_step": r.global_step,
            **{k: r.value(k) for k in keys},
        }
        for r in results
    ]


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, bool | str):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,g}"


def write_tables(
    out: Path,
    results: Sequence[RunResult],
    *,
    command: str,
    metrics: Sequence[str] | None = None,
    convergence: Convergence | None = None,
    label: str = "backend",
    jobs: int = 1,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    notes: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Write ``<out>.md`` (summary, per-run table, ``command``), ``<out>.csv`` (the summary
    rows, returned) and ``<out>_runs.csv``; ``extra``: per variant, more summary columns (title ->
    value, e.g. model costs); ``notes``: lines under the summary; ``jobs``: runs at once."""
    # Where the runs ran (their records'; this machine's when none says; none before a run:
    # a plan committed before its runs rebuilds the same page anywhere).
    machine = records_machine_line(results, jobs=jobs) or (
        machine_line(jobs=jobs)
        if any(r.status != NOT_RUN for r in results)
        else "Machine: none yet."
    )
    # Asked for but never trained, or stopped part-way: named under the table, counted nowhere.
    for status, why in (
        (NOT_RUN, "Not run yet (no run record)"),
        (STOPPED, "Stopped part-way after saving `last.ckpt` (`--resume` continues them)"),
    ):
        seeds: dict[str, list[int]] = {}
        for r in results:
            if r.status == status:
                seeds.setdefault(r.variant, []).append(r.seed)
        if seeds:
            listed = "; ".join(f"`{v}` seeds {' '.join(map(str, s))}" for v, s in seeds.items())
            notes = [*notes, f"{why}: {listed}."]
    results = [r for r in results if r.status not in (NOT_RUN, STOPPED)]
    keys = list(metrics) if metrics is not None else default_metrics(results)
    if convergence is not None and convergence.metric not in keys:
        keys.append(convergence.metric)
    columns = [column(k) for k in keys]
    summary = summarize(results, metrics=keys, convergence=convergence, label=label)
    extra = extra or {}
    for row in summary:
        row.update(extra.get(row[label], {}))
    write_csv(out.with_name(out.name + ".csv"), summary)  # makes out's folder
    write_csv(out.with_name(out.name + "_runs.csv"), run_rows(results, keys, label=label))
    extra_titles = list(dict.fromkeys(t for cells in extra.values() for t in cells))
    failed = "" if convergence is None else f'"not converged" = {convergence.describe()}; '
    head = [label, "runs", *(["not converged"] if convergence else []), "crashed"]
    head += [c.title for c in columns] + ["wall time / run (s)", *extra_titles]
    body = []
    for row in summary:
        cells = [f"`{row[label]}`", str(row["runs"])]
        cells += [str(row["not_converged"])] if convergence else []
        cells.append(str(row["crashed"]))
        cells += [summary_cell(row, k) for k in keys]
        cells.append(summary_cell(row, "seconds", digits=0))
        cells += [_cell(row.get(t)) for t in extra_titles]
        body.append(cells)
    per_run = []
    for r in results:
        cells = [f"`{r.variant}`", str(r.seed), r.status, str(r.global_step or "–")]
        for c in columns:
            cells.append(format_number(r.value(c.key), scale=c.scale, digits=c.digits))
        cells.append("–" if r.seconds is None else f"{r.seconds:.0f}")
        per_run.append(cells)
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        machine + "\n",
        f"Test split, best-by-validation checkpoint. Mean ± std over seeds; {failed}"
        "crashed runs are excluded from the means.\n",
        markdown_table(head, body),
        *(f"\n{note}" for note in notes),
        "",
        "Per run:",
        "",
        markdown_table(
            [label, "seed", "status", "steps", *(c.title for c in columns), "seconds"], per_run
        ),
    ]
    out.with_name(out.name + ".md").write_text("\n".join(lines) + "\n")
    return summary


def series(scalars: Scalars, tag: str) -> list[tuple[int, float]]:
    """The values of ``tag``, or of ``tag_step`` (Lightning's name for a per-step log), or []."""
    for name in (tag, f"{tag}_step"):
        if name in scalars:
            return scalars[name]
    return []


def _shown_steps(steps: Sequence[int], max_columns: int) -> list[int]:
    """At most ``max_columns`` of ``steps``, evenly spaced, the last always among them."""
    stride = -(-len(steps) // max_columns)  # ceil
    return sorted({*steps[len(steps) - 1 :: -stride][:max_columns]})


def curves_table(
    rows: Sequence[dict[str, Any]],
    tag: str,
    *,
    max_columns: int | None = 8,
    digits: int | None = None,
) -> list[str]:
    """Markdown lines: ``tag`` (in its column's scale and digits, or ``digits``) per run after
    each shown number of optimiser steps (all with ``max_columns=None``); [] without rows."""
    if not rows:
        return []
    shown = column(tag.replace("val/", "test/")) if tag.startswith("val/") else column(tag)
    shown = shown if digits is None else replace(shown, digits=digits)
    steps = sorted({row["optimizer_steps"] for row in rows})
    steps = steps if max_columns is None else _shown_steps(steps, max_columns)
    runs: dict[tuple[str, int], dict[int, float]] = {}
    for row in rows:
        runs.setdefault((row["variant"], row["seed"]), {})[row["optimizer_steps"]] = row[tag]
    body = []
    for (variant, seed), values in runs.items():
        cells = [
            f"{values[s] * shown.scale:.{shown.digits}f}" if s in values else "–" for s in steps
        ]
        body.append([f"`{variant}`", seed, *cells])
    return markdown_table(["variant", "seed", *(str(s) for s in steps)], body).splitlines()


def append_curves(out: Path, results: Sequence[RunResult], tag: str) -> None:
    """Write ``<out>_curves.csv`` (every logged value of ``tag``, or ``tag_step``, of every
    finished run with a record folder) and append its table to ``<out>.md`` (written by
    ``write_tables``); nothing when no run logged ``tag``."""
    rows = [
        {"variant": r.variant, "seed": r.seed, "optimizer_steps": step + 1, tag: value}
        for r in results
        if r.status == OK and r.log_dir is not None
        for step, value in series(run_scalars(Path(r.log_dir)), tag)
    ]
    if not rows:
        return
    path = write_csv(out.with_name(out.name + "_curves.csv"), rows)
    lines = [
        f"`{tag}` per run after the number of optimiser steps in each column "
        f"(every logged value: `{path.name}`):\n",
        *curves_table(rows, tag),
        "",
    ]
    md = out.with_name(out.name + ".md")
    md.write_text(md.read_text().rstrip("\n") + "\n\n" + "\n".join(lines))
