"""What long reversal runs did while training: final loss, loss spikes, learned coefficients.

The thesis reviewer's long-run question: the thesis's "x⁸ beats softmax",
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
  ``RECENT`` steps before it, and the parameter group that stood out; and, from runs whose
  tracker measured the norm at every step, the norm at the spike's own step, its ratio to the
  median of the 50 steps before, and the previous step's ratio (``grad/norm_at_spike*``);
* ``<out>_bursts.csv``: the spikes grouped into bursts (``traces.burst_rows``: spikes less than
  100 steps apart), one row each with its steps, size and the gradient at its first spike;
* ``<out>_coefficients.csv``: every learned coefficient ``attention/<layer>/a<i>`` (the
  ``attention_diagnostics`` callback, every 50 steps) at the first log of each ``every`` steps
  and at the last, per run (not written when no run has one);
* ``<out>.md``: the tables per variant (medians over seeds with [min, max]), and the figures
  ``<out>_loss.png`` (training loss, log scale) and ``<out>_coefficients.png``.

``committed`` (``--committed PREFIX``) adds the rows of earlier output whose runs' logs are gone
(``committed_traces``): a study continued in a later session reports every seed; the figures
show only the runs read from logs.

Spikes are ``GradientTracker``'s: a step whose loss is above 3× the median of the 50 before.
"""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import series
from attn_lightning.results.files import markdown_table, write_csv
from attn_lightning.studies.reversal.committed_traces import (
    CommittedTraces,
    merged,
    read_committed,
)
from attn_lightning.studies.reversal.traces import (
    BURST_GAP,
    BURST_GRADIENT,
    LOSS_TAG,
    RECENT,
    SPIKE_GRAD_TAGS,
    RunTrace,
    burst_rows,
    coefficient_rows,
    coefficient_series,
    load_traces,
    run_row,
    spike_rows,
    value_at,
)
from attn_lightning.studies.runner import run_label

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
        cells = [_spread([value_at(p, s) for p in by_seed.values()], ".3f") for s in steps]
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
                        # a_i in C0…; c (the kernel's scale) in black, dashed
                        style = ("k", "--") if key == "c" else (f"C{int(key[1:]) % 10}", "-")
                        ax.plot(
                            steps,
                            values,
                            lw=0.7,
                            color=style[0],
                            linestyle=style[1],
                            label=key if first else None,
                        )
            ax.set_title(f"{variant}: {layer}", fontsize=8)
            ax.set_xlabel("optimiser step", fontsize=7)
            ax.legend(fontsize=6, ncol=5)
        fig.tight_layout()
        paths.append(out.with_name(out.name + "_coefficients.png"))
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


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
    committed: Sequence[Path] = (),
) -> list[dict[str, Any]]:
    """Write the files of the module docstring; returns the per-run rows.

    ``committed``: prefixes of earlier ``trajectories`` CSVs whose runs' logs are gone; their
    rows join the tables (``committed_traces``), a run read from logs here replacing its own.

    Raises:
        FileNotFoundError: no finished run with a TensorBoard folder; a committed prefix
            without its CSVs.
    """
    traces, missing = load_traces(root, experiment, variants)
    if not traces:
        raise FileNotFoundError(
            f"no finished run of sweeps/{experiment} under {root.absolute()} has a TensorBoard "
            "folder to read"
        )
    per_run = [spike_rows(t) for t in traces]  # one pass over each run's gradient logs
    runs = [run_row(t, tail, rows) for t, rows in zip(traces, per_run, strict=True)]
    spikes = [row for rows in per_run for row in rows]
    coefficients = [row for t in traces for row in coefficient_rows(t, every)]
    old, kept = CommittedTraces(), []
    if committed:
        labels = None if variants is None else [run_label(v) for v in variants]
        old = read_committed(committed, {(t.variant, t.seed) for t in traces}, labels)
        order = labels or list(dict.fromkeys(r["variant"] for r in [*runs, *old.rows["runs"]]))
        runs = merged(runs, old.rows["runs"], order)
        spikes = merged(spikes, old.rows["spikes"], order, within="step")
        coefficients = merged(coefficients, old.rows["coefficients"], order)
        kept = [(r["variant"], r["seed"]) for r in merged([], old.rows["runs"], order)]
        missing = [r for r in missing if (r.variant, r.seed) not in set(kept)]
    meta = {"command": command} if command else {}
    # TensorBoard keeps float32: 6 significant digits say all it holds.
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
    if kept:
        sources = ", ".join(f"`{p.name}_runs.csv`" for p in old.sources)
        lines += [
            f"Runs whose logs are gone, their rows read back from {sources} as committed: "
            f"{_names(kept)}. The figures show only the runs read from logs here: "
            f"{_names([(t.variant, t.seed) for t in traces])}.",
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
        lines += [
            "## Learned coefficients",
            "",
            coefficient_table(coefficients, steps),
            "",
        ]
    lines += [f"![{p.stem}]({p.name})" for p in figures]
    out.with_name(out.name + ".md").write_text("\n".join(lines).rstrip() + "\n")
    return runs


_BURST_FIELDS = (
    "variant",
    "seed",
    "first_step",
    "last_step",
    "spikes",
    "max_loss",
    "max_over_median",
)
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
    *SPIKE_GRAD_TAGS,
)


def _names(runs: Sequence[tuple[str, int]]) -> str:
    """``variant`` s0, s1; ``other`` s2 (seeds grouped per variant, in order)."""
    seeds: dict[str, list[int]] = {}
    for variant, seed in runs:
        seeds.setdefault(variant, []).append(seed)
    return "; ".join(f"`{v}` " + ", ".join(f"s{s}" for s in ss) for v, ss in seeds.items())


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


Column = tuple[str, Callable[[dict[str, Any]], str]]


def _number(key: str, fmt: str) -> Callable[[dict[str, Any]], str]:
    return lambda row: _fmt(row[key], fmt)


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
