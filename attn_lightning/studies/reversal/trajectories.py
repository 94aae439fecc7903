"""What long reversal runs did while training: final loss, loss spikes, learned coefficients.

The thesis reviewer's long-run question (issue 28, item 9): the thesis's "x⁸ beats softmax",
spiky losses and large learned coefficients came from ~10,000-step runs at losses near 4e-6.
The outcome tables (``report``) say where runs ended; this module reads each finished run's
TensorBoard folder for how it got there, and writes, through ``results``:

* ``<out>_runs.csv``: one row per run: the final training loss (mean of ``train/loss_step``
  over the last ``tail`` steps), the lowest logged one, test loss, spike count, the largest
  spike (loss / running median) and the largest gradient norm;
* ``<out>_spikes.csv``: one row per loss spike: its step, loss and ratio to the running median
  (``train/loss_at_spike``, ``train/loss_spike_ratio``; absent from runs logged before the
  tracker wrote them), and the global gradient norm logged at or last before it (every 20
  steps), with its ratio to the run's median norm, to the median of the norms logged in the
  ``RECENT`` steps before it, and the parameter group that stood out;
* ``<out>_coefficients.csv``: every learned coefficient ``attention/<layer>/a<i>`` (the
  ``attention_diagnostics`` callback, every 50 steps) at the first log of each ``every`` steps
  and at the last, per run (not written when no run has one);
* ``<out>.md``: the tables per variant (medians over seeds with [min, max]), and the figures
  ``<out>_loss.png`` (training loss, log scale) and ``<out>_coefficients.png``.

Spikes are ``GradientTracker``'s: a step whose loss is above 3× the median of the 50 before.
"""

from __future__ import annotations

import math
import platform
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import Scalars, read_scalars, series
from attn_lightning.results.files import markdown_table, write_csv
from attn_lightning.results.records import RunResult
from attn_lightning.studies.reversal.dynamics import (
    NORM_TAG,
    SpikeGradient,
    max_grad_norm,
    spike_gradients,
    spike_steps,
)
from attn_lightning.studies.reversal.runs import load_runs

LOSS_TAG = "train/loss"
SPIKE_LOSS_TAG = "train/loss_at_spike"
SPIKE_RATIO_TAG = "train/loss_spike_ratio"
MAX_SPIKES = 40  # spike rows on the page (the CSV has all)
RECENT = 200  # steps of gradient logs a spike's gradient is compared with (10 logs at 20)
COEFFICIENT = re.compile(r"^attention/(?P<layer>.+)/(?P<key>a\d+)$")


@dataclass
class RunTrace:
    """One finished run's training trace (see the module docstring)."""

    variant: str
    seed: int
    steps: int | None
    test_loss: float | None
    scalars: Scalars = field(repr=False)


def final_loss(scalars: Scalars, tail: int) -> float | None:
    """Mean logged training loss over the last ``tail`` steps of the run; None if none logged."""
    points = series(scalars, LOSS_TAG)
    if not points:
        return None
    last = points[-1][0]
    values = [v for s, v in points if s > last - tail]
    return statistics.fmean(values)


def coefficient_series(scalars: Scalars) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """``{(layer, key): [(step, a), ...]}`` for every ``attention/<layer>/a<i>`` tag."""
    out = {}
    for tag, points in scalars.items():
        match = COEFFICIENT.match(tag)
        if match:
            out[(match["layer"], match["key"])] = points
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], int(kv[0][1][1:]))))


def thin(points: Sequence[tuple[int, float]], every: int) -> list[tuple[int, float]]:
    """The first point of each ``every``-step bucket, and the last point."""
    if every < 1:
        raise ValueError(f"every must be >= 1 step, got {every}")
    kept: list[tuple[int, float]] = []
    for step, value in points:
        if not kept or step // every != kept[-1][0] // every:
            kept.append((step, value))
    if points and kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


def _at(points: Sequence[tuple[int, float]], step: int) -> float | None:
    """The value logged at ``step`` or last before it; None before the first log."""
    before = [v for s, v in points if s <= step]
    return before[-1] if before else None


def spike_rows(trace: RunTrace) -> list[dict[str, Any]]:
    """One row per loss spike of a run (see ``<out>_spikes.csv`` in the module docstring)."""
    norms = series(trace.scalars, NORM_TAG)
    losses = dict(series(trace.scalars, SPIKE_LOSS_TAG))
    ratios = dict(series(trace.scalars, SPIKE_RATIO_TAG))
    gradients = {g.spike_step: g for g in spike_gradients(trace.scalars)}
    rows = []
    for step in spike_steps(trace.scalars) or []:
        grad = gradients.get(step)
        rows.append(
            {
                "variant": trace.variant,
                "seed": trace.seed,
                "step": step,
                "loss": losses.get(step),
                "loss_over_median": ratios.get(step),
                "grad_step": None if grad is None else grad.grad_step,
                "grad_norm": None if grad is None else grad.norm,
                "grad_norm_over_median": None if grad is None else grad.ratio,
                "grad_norm_over_recent": None if grad is None else _over_recent(norms, grad),
                "top_group": None if grad is None else grad.group,
                "top_group_over_median": None if grad is None else grad.group_ratio,
            }
        )
    return rows


def _over_recent(norms: Sequence[tuple[int, float]], grad: SpikeGradient) -> float | None:
    """The spike's gradient norm / the median of the norms logged in the ``RECENT`` steps before.

    A long run's own median norm is that of its converged phase (10⁻⁶ where the loss is 10⁻⁸),
    which makes every early norm look huge; the recent ones are the spike's own context.
    """
    before = [v for s, v in norms if grad.grad_step - RECENT <= s < grad.grad_step]
    finite = [v for v in before if math.isfinite(v)]
    median = statistics.median(finite) if finite else None
    return grad.norm / median if median else None


def run_row(trace: RunTrace, tail: int) -> dict[str, Any]:
    """The run's line of ``<out>_runs.csv``."""
    losses = [v for _, v in series(trace.scalars, LOSS_TAG)]
    spikes = spike_rows(trace)
    sizes = [r["loss_over_median"] for r in spikes if r["loss_over_median"] is not None]
    return {
        "variant": trace.variant,
        "seed": trace.seed,
        "steps": trace.steps,
        "final_train_loss": final_loss(trace.scalars, tail),
        "min_train_loss": min(losses) if losses else None,
        "test_loss": trace.test_loss,
        "spikes": None if spike_steps(trace.scalars) is None else len(spikes),
        "largest_spike": max(sizes) if sizes else None,
        "max_grad_norm": max_grad_norm(trace.scalars),
    }


def coefficient_rows(trace: RunTrace, every: int) -> list[dict[str, Any]]:
    """The run's lines of ``<out>_coefficients.csv`` (long format)."""
    rows = []
    for (layer, key), points in coefficient_series(trace.scalars).items():
        for step, value in thin(points, every):
            rows.append(
                {
                    "variant": trace.variant,
                    "seed": trace.seed,
                    "layer": layer,
                    "key": key,
                    "step": step,
                    "value": value,
                }
            )
    return rows


def _spread(values: Sequence[float | None], fmt: str) -> str:
    """``median [min, max]`` (one value: itself); ``–`` for none."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "–"
    if len(finite) == 1:
        return format(finite[0], fmt)
    low, mid, high = min(finite), statistics.median(finite), max(finite)
    return f"{mid:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


def loss_table(rows: Sequence[dict[str, Any]], tail: int) -> str:
    """Per variant: runs, final / lowest training loss, test loss, spikes, largest spike."""
    body = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == variant]
        spiking = sum(1 for r in mine if r["spikes"])
        body.append(
            [
                f"`{variant}`",
                len(mine),
                ", ".join(str(r["seed"]) for r in mine),
                _spread([r["final_train_loss"] for r in mine], ".2e"),
                _spread([r["min_train_loss"] for r in mine], ".2e"),
                _spread([r["test_loss"] for r in mine], ".2e"),
                _spread([r["spikes"] for r in mine if r["spikes"] is not None], ".0f"),
                f"{spiking}/{len(mine)}",
                _spread([r["largest_spike"] for r in mine], ".1f"),
                _spread([r["max_grad_norm"] for r in mine], ".2f"),
            ]
        )
    header = [
        "variant",
        "runs",
        "seeds",
        f"final train loss (last {tail} steps)",
        "lowest logged train loss",
        "test loss",
        "spikes / run",
        "runs with a spike",
        "largest spike (× median)",
        "max grad norm",
    ]
    return markdown_table(header, body)


def coefficient_table(rows: Sequence[dict[str, Any]], steps: Sequence[int]) -> str:
    """Per variant, layer and coefficient: the value at each of ``steps`` (the log at or last
    before it), at the end, and the largest |a| over the run, each median [min, max] over seeds."""
    groups: dict[tuple[str, str, str], dict[int, list[tuple[int, float]]]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r["layer"], r["key"]), {}).setdefault(
            r["seed"], []
        ).append((r["step"], r["value"]))
    body = []
    for (variant, layer, key), by_seed in groups.items():
        cells = [_spread([_at(p, s) for p in by_seed.values()], ".3f") for s in steps]
        end = _spread([p[-1][1] for p in by_seed.values()], ".3f")
        peak = _spread([max(abs(v) for _, v in p) for p in by_seed.values()], ".3f")
        body.append([f"`{variant}`", layer, key, len(by_seed), *cells, end, peak])
    header = [
        "variant",
        "layer",
        "a",
        "runs",
        *(f"step {s:,}" for s in steps),
        "end",
        "largest abs(a)",
    ]
    return markdown_table(header, body)


def _figures(traces: Sequence[RunTrace], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    variants = list(dict.fromkeys(t.variant for t in traces))
    colours = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for trace in traces:
        points = series(trace.scalars, LOSS_TAG)
        if points:
            steps, values = zip(*points, strict=True)
            first = trace is next(t for t in traces if t.variant == trace.variant)
            label = trace.variant if first else None
            ax.plot(steps, values, lw=0.6, color=colours[trace.variant], label=label)
    ax.set_yscale("log")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("training loss (logged every 20 steps)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out.with_name(out.name + "_loss.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    learned = [(t, coefficient_series(t.scalars)) for t in traces]
    learned = [(t, c) for t, c in learned if c]
    panels = list(dict.fromkeys((t.variant, layer) for t, c in learned for layer, _ in c))
    if panels:
        fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), squeeze=False)
        for ax, (variant, layer) in zip(axes[:, 0], panels, strict=True):
            for trace, coefficients in learned:
                if trace.variant != variant:
                    continue
                for (lay, key), points in coefficients.items():
                    if lay == layer:
                        steps, values = zip(*points, strict=True)
                        first = trace is next(t for t, _ in learned if t.variant == variant)
                        colour = f"C{int(key[1:]) % 10}"
                        ax.plot(steps, values, lw=0.7, color=colour, label=key if first else None)
            ax.set_title(f"{variant}: {layer}", fontsize=8)
            ax.set_xlabel("optimiser step", fontsize=7)
            ax.legend(fontsize=6, ncol=5)
        fig.tight_layout()
        paths.append(out.with_name(out.name + "_coefficients.png"))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def load_traces(
    root: Path, experiment: str, variants: Sequence[str] | None = None
) -> tuple[list[RunTrace], list[RunResult]]:
    """The finished runs' traces, and the runs left out (unfinished, or no TensorBoard folder)."""
    traces, missing = [], []
    for run in load_runs(root, experiment, threshold=0.99):
        if variants is not None and run.variant not in variants:
            continue
        log_dir = root / (run.log_dir or f"logs/{experiment}/{run.variant}-s{run.seed}")
        if run.status == "unfinished" or not log_dir.is_dir():
            missing.append(run)
            continue
        scalars = read_scalars(log_dir)
        traces.append(
            RunTrace(run.variant, run.seed, run.global_step, run.value("test/loss"), scalars)
        )
    if variants is not None:
        order = {v: i for i, v in enumerate(variants)}
        traces.sort(key=lambda t: (order[t.variant], t.seed))
    return traces, missing


def write_trajectories(
    experiment: str,
    out: Path,
    *,
    root: Path = Path(),
    variants: Sequence[str] | None = None,
    every: int = 250,
    tail: int = 500,
    steps: Sequence[int] = (0, 600, 2500, 5000),
    command: str = "",
) -> list[dict[str, Any]]:
    """Write the files of the module docstring; returns the per-run rows.

    Raises:
        FileNotFoundError: no finished run with a TensorBoard folder.
    """
    traces, missing = load_traces(root, experiment, variants)
    if not traces:
        raise FileNotFoundError(
            f"no finished run of sweeps/{experiment} under {root.absolute()} has a TensorBoard "
            "folder to read"
        )
    runs = [run_row(t, tail) for t in traces]
    spikes = [row for t in traces for row in spike_rows(t)]
    coefficients = [row for t in traces for row in coefficient_rows(t, every)]
    meta = {"command": command} if command else {}
    # TensorBoard keeps float32: 6 significant digits say all it holds.
    digits = 6
    write_csv(out.with_name(out.name + "_runs.csv"), runs, meta, float_digits=digits)
    spike_file = out.with_name(out.name + "_spikes.csv")
    write_csv(spike_file, spikes, meta, fields=list(_SPIKE_FIELDS), float_digits=digits)
    if coefficients:  # none without a learned-coefficient variant
        write_csv(
            out.with_name(out.name + "_coefficients.csv"), coefficients, meta, float_digits=digits
        )
    figures = _figures(traces, out)
    lines = [
        f"# Training traces: `{experiment}`",
        "",
        "Regenerate with:",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Machine running this report: {platform.platform()}.",
        "",
        "Cells: median [min, max] over seeds (one run: its value). Spikes: a step's loss > 3× "
        "the median of the 50 steps before (`GradientTracker`); its size is loss / that median.",
        "",
        loss_table(runs, tail),
        "",
    ]
    if missing:
        names = ", ".join(f"`{r.variant}` s{r.seed}" for r in missing)
        lines += [f"Not in these tables (unfinished, or no TensorBoard folder): {names}.", ""]
    if spikes:
        shown = sorted(spikes, key=lambda r: -(r["loss_over_median"] or math.inf))[:MAX_SPIKES]
        shown.sort(key=lambda r: (r["variant"], r["seed"], r["step"]))
        lines += [
            "## Loss spikes",
            "",
            f"All {len(spikes)} in `{spike_file.name}`"
            + (f"; here the {MAX_SPIKES} largest." if len(spikes) > MAX_SPIKES else "."),
            "",
            markdown_table(
                [
                    *("variant", "seed", "step", "loss", "× median"),
                    *("grad norm (step)", f"× median of the {RECENT} steps before"),
                ],
                (
                    [
                        f"`{r['variant']}`",
                        r["seed"],
                        r["step"],
                        _fmt(r["loss"], ".2e"),
                        _fmt(r["loss_over_median"], ".1f"),
                        "–"
                        if r["grad_norm"] is None
                        else f"{r['grad_norm']:.2e} ({r['grad_step']})",
                        _fmt(r["grad_norm_over_recent"], ".1f"),
                    ]
                    for r in shown
                ),
            ),
            "",
        ]
    if coefficients:
        lines += [
            "## Learned coefficients",
            "",
            coefficient_table(coefficients, steps),
            "",
        ]
    lines += [f"![{p.stem}]({p.name})" for p in figures]
    out.with_name(out.name + ".md").write_text("\n".join(lines).rstrip() + "\n")
    return runs


_SPIKE_FIELDS = (
    "variant",
    "seed",
    "step",
    "loss",
    "loss_over_median",
    "grad_step",
    "grad_norm",
    "grad_norm_over_median",
    "grad_norm_over_recent",
    "top_group",
    "top_group_over_median",
)


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)
