"""What a reversal run's logged curves say about its training, read from its run record.

Pure functions of ``{tag: [(step, value), ...]}``, a run record's ``curves.csv`` as
``results.records.run_scalars`` returns it: steps to a validation accuracy, the checkpoint the
test split was evaluated on, loss spikes and the gradients around them. Loss spikes are the
``train/loss_spike`` flags of ``callbacks.gradients.GradientTracker``; gradient norms
(``grad/global_norm`` and one per parameter group) are logged every few steps (20 in the study),
so a spike between two logs is compared with the gradient up to 19 steps before it, and the lag
is reported with the ratio.

``load_trace`` reads a finished run's curves and spikes into a ``RunTrace``; the row functions
turn one trace into the lines of ``trajectories``' CSVs. A record converted from the CSVs
``trajectories`` wrote before run records holds, as ``converted/`` curve tags, the values whose
curves stayed with the logs (``converted/min_train_loss``, ``converted/<column>`` at a spike's
step, ``converted/top_group/<group>``); a value comes from the run's own curves when it has them.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.records.run_files import SPIKES, load_record
from lab.results.records import RunResult, Scalars, run_scalars, run_spikes
from lab.results.tables import series

VAL_TAG = "val/token_acc"
VAL_LOSS_TAG = "val/loss"  # what the checkpoint callback monitors (mode min)
SPIKE_TAG = "train/loss_spike"
NORM_TAG = "grad/global_norm"
GROUPS = ("attention", "feedforward", "embedding", "other")


def steps_to_threshold(scalars: Scalars, threshold: float) -> int | None:
    """The first logged step whose ``VAL_TAG`` ≥ ``threshold``; None if never (or never logged)."""
    return next((step for step, value in series(scalars, VAL_TAG) if value >= threshold), None)


def best_validation(scalars: Scalars) -> tuple[int, float] | None:
    """``(optimiser steps, value)`` of the lowest logged ``VAL_LOSS_TAG``; None if never logged.

    The checkpoint that ``ModelCheckpoint(monitor="val/loss", mode="min")`` keeps as best, so the
    one the test split is evaluated on: the first of equal values (it replaces only on a strict
    improvement), its steps the logged step + 1 — the N of its ``best-step=N.ckpt``. It matters
    where a run's loss dips after a spike burst: the best checkpoint can sit in that dip.
    """
    points = [p for p in series(scalars, VAL_LOSS_TAG) if math.isfinite(p[1])]
    if not points:
        return None
    step, value = min(points, key=lambda point: point[1])  # min keeps the first of ties
    return step + 1, value


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


def finite_median(points: Sequence[tuple[int, float]]) -> float | None:
    """The median of the finite values of ``points``; None without one (a diverged run logs
    inf/nan norms, which would make the median meaningless)."""
    values = [v for _, v in points if math.isfinite(v)]
    return statistics.median(values) if values else None


def _ratio(value: float, median: float | None) -> float | None:
    return value / median if median else None


@dataclass(frozen=True)
class SpikeGradient:
    """The gradients logged at (or last before) a loss spike, relative to the run's medians."""

    spike_step: int
    grad_step: int  # the last gradient-norm step <= spike_step
    norm: float  # the global gradient norm at grad_step
    ratio: float | None  # norm / the run's median global norm
    group: str | None  # the group whose norm is furthest above its own run median there
    group_ratio: float | None

    @property
    def lag(self) -> int:
        """Steps between the gradient log and the spike (0: the spike's own gradient)."""
        return self.spike_step - self.grad_step


def _largest_group(scalars: Scalars, step: int) -> tuple[str | None, float | None]:
    best: tuple[str | None, float | None] = (None, None)
    for group in GROUPS:
        points = series(scalars, f"grad/{group}")
        value = dict(points).get(step)
        ratio = None if value is None else _ratio(value, finite_median(points))
        # A non-finite ratio (inf/nan grads) is the most telling group, so it wins.
        if ratio is not None and (best[1] is None or not ratio <= best[1]):
            best = (group, ratio)
    return best


def spike_gradients(scalars: Scalars) -> list[SpikeGradient]:
    """One record per loss spike that has a gradient log at or before it (see the class)."""
    norms = series(scalars, NORM_TAG)
    median = finite_median(norms)
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


def curve_facts(scalars: Scalars, threshold: float) -> dict[str, Any]:
    """The facts whose curves ``scalars`` holds (``reversal_traces``); a fact without its curve
    is absent (``steps_to_threshold`` None: never reached)."""
    facts: dict[str, Any] = {}
    if VAL_TAG in scalars:
        facts["steps_to_threshold"] = steps_to_threshold(scalars, threshold)
        facts["val_curve"] = series(scalars, VAL_TAG)
    spikes = spike_steps(scalars)
    if spikes is not None:
        facts["spikes"] = len(spikes)
        facts["spike_gradients"] = spike_gradients(scalars)
    if (norm := max_grad_norm(scalars)) is not None:
        facts["max_grad_norm"] = norm
    if (best := best_validation(scalars)) is not None:
        facts["best_ckpt_step"] = best[0]
    if VAL_LOSS_TAG in scalars:
        facts["final_val_loss"] = scalars[VAL_LOSS_TAG][-1][1]
    return facts


LOSS_TAG = "train/loss"
CONVERTED = "converted/"  # a converted record's own curve tags (module docstring)
# The gradient logged at or last before a spike (``spike_gradients``), per spike row.
LOGGED_GRADIENT = (
    *("grad_step", "grad_norm", "grad_norm_over_median", "grad_norm_over_recent"),
    *("top_group", "top_group_over_median"),
)
# GradientTracker's gradient at the spike's own step (``spikes.csv``; NaN in runs logged before
# it measured every step): the norm, its ratio to the median of the steps before, the previous
# step's ratio.
SPIKE_GRAD_TAGS = {
    "grad_at_spike": "grad_norm",
    "grad_at_spike_over_median": "grad_ratio",
    "grad_before_spike_over_median": "prior_grad_ratio",
}
RECENT = 200  # steps of gradient logs a spike's gradient is compared with (10 logs at 20)
# a_i, and c = (‖γ‖/‖γ₀‖)², the LN scale's growth (QKNorm.scale_growth; absent from older logs).
COEFFICIENT = re.compile(r"^attention/(?P<layer>.+)/(?P<key>a\d+|c)$")


@dataclass
class RunTrace:
    """One finished ``run``'s training trace: its curves, and as ``spikes`` the rows of its
    ``spikes.csv`` (None without one)."""

    run: RunResult
    scalars: Scalars = field(repr=False)
    spikes: list[dict[str, Any]] | None = field(repr=False)
    experiment: str


def final_loss(scalars: Scalars, tail: int) -> float | None:
    """Mean logged training loss over the last ``tail`` steps of the run; None if none logged."""
    points = series(scalars, LOSS_TAG)
    if not points:
        return None
    last = points[-1][0]
    return statistics.fmean(v for s, v in points if s > last - tail)


def coefficient_series(scalars: Scalars) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """``{(layer, key): [(step, value), ...]}`` of every ``COEFFICIENT`` tag, by layer, then
    ``a0 < a1 < … < c`` (``c``, the kernel's scale, is logged after the a_i since 2026-11-26)."""
    found = {(m["layer"], m["key"]): p for t, p in scalars.items() if (m := COEFFICIENT.match(t))}
    keys = sorted(found, key=lambda k: (k[0], k[1] == "c", int(k[1][1:] or 0)))
    return {k: found[k] for k in keys}


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


def value_at(points: Sequence[tuple[int, float]], step: int) -> float | None:
    """The value logged at ``step`` or last before it; None before the first log."""
    before = [v for s, v in points if s <= step]
    return before[-1] if before else None


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value  # NaN in spikes.csv: not measured


def _over_recent(norms: Sequence[tuple[int, float]], grad: SpikeGradient) -> float | None:
    """The spike's gradient norm / the median of the norms logged in the ``RECENT`` steps before.

    A long run's own median norm is that of its converged phase (10⁻⁶ where the loss is 10⁻⁸),
    which makes every early norm look huge; the recent ones are the spike's own context.
    """
    median = finite_median([p for p in norms if grad.grad_step - RECENT <= p[0] < grad.grad_step])
    return grad.norm / median if median else None


def logged_gradients(scalars: Scalars) -> dict[int, tuple[Any, ...]]:
    """Per spike step, the gradient logged at or last before it (``LOGGED_GRADIENT`` values):
    from the run's ``grad/`` curves, else from a converted record's ``converted/`` tags."""
    norms = series(scalars, NORM_TAG)
    if norms:  # the run's own curves
        own = {}
        for g in spike_gradients(scalars):
            recent = _over_recent(norms, g)
            own[g.spike_step] = (g.grad_step, g.norm, g.ratio, recent, g.group, g.group_ratio)
        return own
    columns = [dict(scalars.get(CONVERTED + key, [])) for key in LOGGED_GRADIENT[:4]]
    groups = {g: dict(scalars.get(f"{CONVERTED}top_group/{g}", [])) for g in GROUPS}
    tops = {s: (g, ratio) for g, ratios in groups.items() for s, ratio in ratios.items()}
    return {
        step: (int(grad_step), *(c.get(step) for c in columns[1:]), *tops.get(step, (None, None)))
        for step, grad_step in columns[0].items()
    }


def spike_rows(trace: RunTrace) -> list[dict[str, Any]]:
    """One row per loss spike of a run (see ``<out>_spikes.csv`` in ``trajectories``)."""
    gradients = logged_gradients(trace.scalars)
    empty = (None,) * len(LOGGED_GRADIENT)
    return [
        {
            "variant": trace.run.variant,
            "seed": trace.run.seed,
            "step": spike["step"],
            "loss": _number(spike["loss"]),
            "loss_over_median": _number(spike["ratio"]),
            **dict(zip(LOGGED_GRADIENT, gradients.get(spike["step"], empty), strict=True)),
            **{key: _number(spike[column]) for key, column in SPIKE_GRAD_TAGS.items()},
        }
        for spike in trace.spikes or []
    ]


BURST_GAP = 100  # steps: spikes closer than this to the previous one are one burst


def burst_rows(spikes: Sequence[dict[str, Any]], gap: int = BURST_GAP) -> list[dict[str, Any]]:
    """Spikes grouped into bursts, one row each: a run's spikes within ``gap`` steps of the
    previous one belong to the same burst (``spikes``: ``spike_rows`` of any runs, in order).

    Flagged steps come in bursts (one instability flags tens to hundreds of steps until the
    running median catches up), so the count of flags says less than the count of bursts. Each
    row: its run, first and last step, spikes, the largest loss and size (× median), and the
    gradient before it as seen at its *first* spike (the columns of ``spike_rows``, with their
    ``first_`` prefix): whether anything stood out before the loss did.
    """
    bursts: list[list[dict[str, Any]]] = []
    for row in spikes:
        last = bursts[-1][-1] if bursts else {}
        same_run = (last.get("variant"), last.get("seed")) == (row["variant"], row["seed"])
        if same_run and row["step"] - last["step"] <= gap:
            bursts[-1].append(row)
        else:
            bursts.append([row])
    out = []
    for burst in bursts:
        first = burst[0]
        losses = [r["loss"] for r in burst if r["loss"] is not None]
        sizes = [r["loss_over_median"] for r in burst if r["loss_over_median"] is not None]
        out.append(
            {
                "variant": first["variant"],
                "seed": first["seed"],
                "first_step": first["step"],
                "last_step": burst[-1]["step"],
                "spikes": len(burst),
                "max_loss": max(losses) if losses else None,
                "max_over_median": max(sizes) if sizes else None,
                **{f"first_{key}": first[key] for key in BURST_GRADIENT},
            }
        )
    return out


# The gradient columns of a burst's first spike (``spike_rows`` keys).
BURST_GRADIENT = ("grad_step", "grad_norm_over_recent", *SPIKE_GRAD_TAGS)


def run_row(trace: RunTrace, tail: int, spikes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run's line of ``<out>_runs.csv``; ``spikes``: its ``spike_rows``."""
    losses = [v for _, v in series(trace.scalars, LOSS_TAG)]
    sizes = [r["loss_over_median"] for r in spikes if r["loss_over_median"] is not None]
    final, norm = final_loss(trace.scalars, tail), max_grad_norm(trace.scalars)

    def converted(key: str) -> float | None:  # a converted record's value (module docstring)
        points = trace.scalars.get(CONVERTED + key)
        return points[-1][1] if points else None

    return {
        "variant": trace.run.variant,
        "seed": trace.run.seed,
        "steps": trace.run.global_step,
        "final_train_loss": converted(f"final_train_loss_last{tail}") if final is None else final,
        "min_train_loss": min(losses) if losses else converted("min_train_loss"),
        "test_loss": trace.run.value("test/loss"),
        "spikes": None if trace.spikes is None else len(spikes),
        "largest_spike": max(sizes) if sizes else None,
        "max_grad_norm": converted("max_grad_norm") if norm is None else norm,
    }


def coefficient_rows(trace: RunTrace, every: int) -> list[dict[str, Any]]:
    """The run's lines of ``<out>_coefficients.csv`` (long format)."""
    return [
        {"variant": trace.run.variant, "seed": trace.run.seed, "layer": layer, "key": key}
        | {"step": step, "value": value}
        for (layer, key), points in coefficient_series(trace.scalars).items()
        for step, value in thin(points, every)
    ]


def load_trace(run: RunResult) -> RunTrace:
    """The trace of a finished run (``reversal.chosen_runs``) from its record folder."""
    folder = Path(str(run.log_dir))
    spikes = run_spikes(folder) if (folder / SPIKES).is_file() else None
    return RunTrace(run, run_scalars(folder), spikes, str(load_record(folder).get("experiment")))
