"""What long reversal runs did while training: final loss, loss spikes, learned coefficients.

The thesis reviewer's long-run question: the thesis's "x⁸ beats softmax",
spiky losses and large learned coefficients came from ~10,000-step runs at losses near 4e-6.
The outcome tables (``report``) say where runs ended; this module reads each finished run's
record (``traces``: its ``curves.csv`` and ``spikes.csv``) for how it got there, and writes,
through ``results``:

* ``<out>_runs.csv``: one row per run: the final training loss (mean of ``train/loss_step``
  over the last ``tail`` steps), the lowest logged one, test loss, spike count, the largest
  spike (loss / running median) and the largest gradient norm;
* ``<out>_spikes.csv``: one row per loss spike (``spikes.csv``): its step, loss and ratio to the
  running median, the global gradient norm logged at or last before it (every 20 steps) with
  its ratio to the run's median norm, to the median of the norms logged in the ``RECENT`` steps
  before it, and the parameter group that stood out; and, from runs whose tracker measured the
  norm at every step, the norm at the spike's own step, its ratio to the median of the 50 steps
  before, and the previous step's ratio;
* ``<out>_bursts.csv``: the spikes grouped into bursts (``traces.burst_rows``: spikes less than
  100 steps apart), one row each with its steps, size and the gradient at its first spike;
* ``<out>_coefficients.csv``: every learned coefficient ``attention/<layer>/a<i>`` (the
  ``attention_diagnostics`` callback, every 50 steps) at the first log of each ``every`` steps
  and at the last, per run (not written when no run has one);
* ``<out>.md``: the tables per variant (medians over seeds with [min, max]), and the figures
  of ``trace_figures``.

A fresh run's record holds every logged point; one converted from the CSVs written before run
records holds what they kept (``traces``: no loss curve, coefficients every 250 steps).
Spikes are ``GradientTracker``'s: a step whose loss is above 3× the median of the 50 before.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import series
from attn_lightning.results.files import markdown_table, write_csv
from attn_lightning.studies.reversal.markdown import cell
from attn_lightning.studies.reversal.trace_figures import figures
from attn_lightning.studies.reversal.traces import (
    BURST_GAP,
    BURST_GRADIENT,
    LOGGED_GRADIENT,
    LOSS_TAG,
    RECENT,
    SPIKE_GRAD_TAGS,
    burst_rows,
    coefficient_rows,
    load_traces,
    run_row,
    spike_rows,
    value_at,
)

MAX_SPIKES = 40  # spike rows on the page (the CSV has all)


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
    header = ["variant", "runs", "seeds", f"final train loss (last {tail} steps)"]
    header += ["lowest logged train loss", "test loss", "spikes / run", "runs with a spike"]
    header += ["largest spike (× median)", "max grad norm"]
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
        cells = [_spread([value_at(p, s) for p in by_seed.values()], ".3f") for s in steps]
        end = _spread([p[-1][1] for p in by_seed.values()], ".3f")
        peak = _spread([max(abs(v) for _, v in p) for p in by_seed.values()], ".3f")
        body.append([f"`{variant}`", layer, key, len(by_seed), *cells, end, peak])
    header = ["variant", "layer", "a", "runs", *(f"step {s:,}" for s in steps)]
    header += ["end", "largest abs(a)"]
    return markdown_table(header, body)


def write_trajectories(
    runs_dirs: Sequence[Path],
    out: Path,
    *,
    variants: Sequence[str] | None = None,
    every: int = 250,
    tail: int = 500,
    steps: Sequence[int] = (0, 600, 2500, 5000),
    command: str = "",
) -> list[dict[str, Any]]:
    """Write the files of the module docstring from the run records under ``runs_dirs``;
    returns the per-run rows.

    Raises:
        FileNotFoundError: no ``ok`` run record under ``runs_dirs`` (of ``variants``).
    """
    traces, missing = load_traces(runs_dirs, variants)
    if not traces:
        where = ", ".join(str(d) for d in runs_dirs)
        raise FileNotFoundError(f"no finished run (an ok record.json) under {where}")
    per_run = [spike_rows(t) for t in traces]
    runs = [run_row(t, tail, rows) for t, rows in zip(traces, per_run, strict=True)]
    spikes = [row for rows in per_run for row in rows]
    coefficients = [row for t in traces for row in coefficient_rows(t, every)]
    meta = {"command": command} if command else {}
    # Logged values are float32 and converted records kept 6 digits: 6 significant digits say all.
    digits = 6
    write_csv(out.with_name(out.name + "_runs.csv"), runs, meta, float_digits=digits)
    spike_file = out.with_name(out.name + "_spikes.csv")
    write_csv(spike_file, spikes, meta, fields=list(_SPIKE_FIELDS), float_digits=digits)
    bursts = burst_rows(spikes)
    burst_fields = [*_BURST_FIELDS, *(f"first_{k}" for k in BURST_GRADIENT)]
    burst_file = out.with_name(out.name + "_bursts.csv")
    write_csv(burst_file, bursts, meta, fields=burst_fields, float_digits=digits)
    if coefficients:  # none without a learned-coefficient variant
        write_csv(
            out.with_name(out.name + "_coefficients.csv"), coefficients, meta, float_digits=digits
        )
    experiments = ", ".join(f"`{e}`" for e in dict.fromkeys(t.experiment for t in traces))
    lines = [f"# Training traces: {experiments}", "", "Regenerate with:", ""]
    lines += ["```bash", command, "```", ""]
    lines += [
        "Cells: median [min, max] over seeds (one run: its value). Spikes: a step's loss > 3× "
        "the median of the 50 steps before (`GradientTracker`); its size is loss / that median.",
        "",
        loss_table(runs, tail),
        "",
    ]
    if missing:
        names = _names([(r.variant, r.seed) for r in missing])
        lines += [f"Not in these tables (no ok record): {names}.", ""]
    converted = [(t.variant, t.seed) for t in traces if not series(t.scalars, LOSS_TAG)]
    if converted:
        lines += [
            "Records without a training-loss curve (converted from earlier `trajectories` CSVs: "
            "their loss, largest gradient norm and logged gradient at a spike as those had them; "
            f"not in the loss figure): {_names(converted)}.",
            "",
        ]
    if bursts:
        lines += [
            "## Spike bursts",
            "",
            f"Spikes less than {BURST_GAP} steps apart in a run are one burst "
            f"(`{burst_file.name}`). The gradient at the burst's first spike: the last "
            "`grad/global_norm` log at or "
            f"before it over the median of those in the {RECENT} steps before; where the tracker "
            "measured every step, that step's own norm over the median of the 50 steps before, "
            "and the previous step's.",
            "",
            _table(bursts, BURST_COLUMNS),
            "",
        ]
    if spikes:
        shown = sorted(spikes, key=lambda r: -(r["loss_over_median"] or math.inf))[:MAX_SPIKES]
        shown.sort(key=lambda r: (r["variant"], r["seed"], r["step"]))
        lines += [
            "## Loss spikes",
            "",
            f"All {len(spikes)} in `{spike_file.name}`"
            + (f"; here the {MAX_SPIKES} largest." if len(spikes) > MAX_SPIKES else "."),
            "",
            _table(shown, SPIKE_COLUMNS),
            "",
        ]
    if coefficients:
        lines += ["## Learned coefficients", "", coefficient_table(coefficients, steps), ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures(traces, out)]
    out.with_name(out.name + ".md").write_text("\n".join(lines).rstrip() + "\n")
    return runs


_RUN_FIELDS = ("variant", "seed")
_BURST_FIELDS = (*_RUN_FIELDS, "first_step", "last_step", "spikes", "max_loss", "max_over_median")
_SPIKE_FIELDS: tuple[str, ...] = (*_RUN_FIELDS, "step", "loss", "loss_over_median")
_SPIKE_FIELDS += (*LOGGED_GRADIENT, *SPIKE_GRAD_TAGS)


def _names(runs: Sequence[tuple[str, int]]) -> str:
    """``variant`` s0, s1; ``other`` s2 (seeds grouped per variant, in order)."""
    seeds: dict[str, list[int]] = {}
    for variant, seed in runs:
        seeds.setdefault(variant, []).append(seed)
    return "; ".join(f"`{v}` " + ", ".join(f"s{s}" for s in ss) for v, ss in seeds.items())


Column = tuple[str, Callable[[dict[str, Any]], str]]


def _number(key: str, fmt: str) -> Callable[[dict[str, Any]], str]:
    return lambda row: cell(row[key], fmt)


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    """A markdown table of ``rows``, one column per ``(title, cell function)``."""
    return markdown_table([t for t, _ in columns], ([cell(r) for _, cell in columns] for r in rows))


_RUN: list[Column] = [
    ("variant", lambda r: f"`{r['variant']}`"),
    ("seed", lambda r: str(r["seed"])),
]
# The gradient at a spike's own step (runs whose tracker measured every step; "–" before).
_AT_SPIKE = ("grad_at_spike_over_median", "grad_before_spike_over_median")
BURST_COLUMNS: list[Column] = [
    *_RUN,
    ("steps", lambda r: f"{r['first_step']}–{r['last_step']}"),
    ("spikes", lambda r: str(r["spikes"])),
    ("max loss", _number("max_loss", ".2e")),
    ("max × median", _number("max_over_median", ".3g")),
    (f"last grad log × median of {RECENT} steps", _number("first_grad_norm_over_recent", ".2f")),
    ("grad at first spike × median", _number(f"first_{_AT_SPIKE[0]}", ".2f")),
    ("step before × median", _number(f"first_{_AT_SPIKE[1]}", ".2f")),
]
SPIKE_COLUMNS: list[Column] = [
    *_RUN,
    ("step", lambda r: str(r["step"])),
    ("loss", _number("loss", ".2e")),
    ("× median", _number("loss_over_median", ".1f")),
    (
        "grad norm (step)",
        lambda r: "–" if r["grad_norm"] is None else f"{r['grad_norm']:.2e} ({r['grad_step']})",
    ),
    (f"× median of the {RECENT} steps before", _number("grad_norm_over_recent", ".1f")),
    ("grad norm at the spike", _number("grad_at_spike", ".2e")),
    ("× median", _number(_AT_SPIKE[0], ".1f")),
    ("step before × median", _number(_AT_SPIKE[1], ".1f")),
]
