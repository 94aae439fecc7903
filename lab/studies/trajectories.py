"""The ``trajectories`` report kind: what long reversal runs did while training (final loss,
loss spikes and their bursts, learned coefficients), from each finished run's record
(``reversal_traces``), where the ``reversal`` outcome tables say only where runs ended.

Writes ``<out>_runs.csv`` (per run), ``<out>_spikes.csv`` (per loss spike: its size and the
gradient before and at it), ``<out>_bursts.csv``, ``<out>_coefficients.csv`` (each learned
coefficient every ``every`` steps and at the end; only with a learned-coefficient variant) and
``<out>.md`` (the tables per variant, median [min, max] over seeds, and the ``figures``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_lightning.records.files import markdown_table, write_csv
from lab.results.tables import series
from lab.studies.reversal import chosen_runs, finished
from lab.studies.reversal_traces import (
    BURST_GAP,
    BURST_GRADIENT,
    LOGGED_GRADIENT,
    LOSS_TAG,
    RECENT,
    SPIKE_GRAD_TAGS,
    RunTrace,
    burst_rows,
    coefficient_rows,
    coefficient_series,
    load_trace,
    run_row,
    spike_rows,
    value_at,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

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
        seeds = ", ".join(str(r["seed"]) for r in mine)
        spread = [_spread([r[key] for r in mine], fmt) for key, fmt in _LOSS_FORMATS.items()]
        spiking = f"{sum(1 for r in mine if r['spikes'])}/{len(mine)}"
        body.append([f"`{variant}`", len(mine), seeds, *spread[:4], spiking, *spread[4:]])
    header = ["variant", "runs", "seeds", f"final train loss (last {tail} steps)"]
    header += ["lowest logged train loss", "test loss", "spikes / run", "runs with a spike"]
    header += ["largest spike (× median)", "max grad norm"]
    return markdown_table(header, body)


_LOSS_FORMATS = dict(final_train_loss=".2e", min_train_loss=".2e", test_loss=".2e", spikes=".0f")
_LOSS_FORMATS |= dict(largest_spike=".1f", max_grad_norm=".2f")


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
    command: str,
    variants: Sequence[str] | None = None,
    every: int = 250,
    tail: int = 500,
    steps: Sequence[int] = (0, 600, 2500, 5000),
) -> list[dict[str, Any]]:
    """Write the files of the module docstring from the run records under ``runs_dirs``;
    returns the per-run rows.

    Raises:
        FileNotFoundError: no ``ok`` run record under ``runs_dirs`` (of ``variants``).
    """
    recorded = chosen_runs(runs_dirs, variants)[1]
    traces = [load_trace(r) for r in recorded if finished(r)]
    if not traces:
        where = ", ".join(str(d) for d in runs_dirs)
        raise FileNotFoundError(f"no finished run (an ok record.json) under {where}")
    per_run = [spike_rows(t) for t in traces]
    runs = [run_row(t, tail, rows) for t, rows in zip(traces, per_run, strict=True)]
    spikes = [row for rows in per_run for row in rows]
    coefficients = [row for t in traces for row in coefficient_rows(t, every)]

    def write(suffix: str, rows: list[dict[str, Any]], fields: Sequence[str] | None = None) -> Path:
        # Logged values are float32, converted records kept 6 digits: 6 significant digits say all.
        path = out.with_name(out.name + suffix)
        return write_csv(path, rows, {"command": command}, fields=fields, float_digits=6)

    write("_runs.csv", runs)
    spike_file = write("_spikes.csv", spikes, _SPIKE_FIELDS)
    bursts = burst_rows(spikes)
    burst_file = write("_bursts.csv", bursts, _BURST_FIELDS)
    if coefficients:  # none without a learned-coefficient variant
        write("_coefficients.csv", coefficients)
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
    if missing := [(r.variant, r.seed) for r in recorded if not finished(r)]:
        lines += [f"Not in these tables (no ok record): {_names(missing)}.", ""]
    converted = [(t.run.variant, t.run.seed) for t in traces if not series(t.scalars, LOSS_TAG)]
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
_BURST_FIELDS: tuple[str, ...] = (*_RUN_FIELDS, "first_step", "last_step", "spikes", "max_loss")
_BURST_FIELDS += ("max_over_median", *(f"first_{key}" for key in BURST_GRADIENT))
_SPIKE_FIELDS: tuple[str, ...] = (*_RUN_FIELDS, "step", "loss", "loss_over_median")
_SPIKE_FIELDS += (*LOGGED_GRADIENT, *SPIKE_GRAD_TAGS)


def _names(runs: Sequence[tuple[str, int]]) -> str:
    """``variant`` s0, s1; ``other`` s2 (seeds grouped per variant, in order)."""
    seeds: dict[str, list[int]] = {}
    for variant, seed in runs:
        seeds.setdefault(variant, []).append(seed)
    return "; ".join(f"`{v}` " + ", ".join(f"s{s}" for s in ss) for v, ss in seeds.items())


def _cell(template: str, row: dict[str, Any]) -> str:
    try:
        return template.format(**row)
    except TypeError:  # None under a number format: not measured
        return "–"


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A markdown table of ``rows``, one column per ``(title, str.format template of a row)``."""
    return markdown_table(
        [t for t, _ in columns], ([_cell(c, r) for _, c in columns] for r in rows)
    )


_RUN = (("variant", "`{variant}`"), ("seed", "{seed}"))
BURST_COLUMNS = (
    *_RUN,
    ("steps", "{first_step}–{last_step}"),
    ("spikes", "{spikes}"),
    ("max loss", "{max_loss:.2e}"),
    ("max × median", "{max_over_median:.3g}"),
    (f"last grad log × median of {RECENT} steps", "{first_grad_norm_over_recent:.2f}"),
    # The gradient at a spike's own step (runs whose tracker measured every step; "–" before).
    ("grad at first spike × median", "{first_grad_at_spike_over_median:.2f}"),
    ("step before × median", "{first_grad_before_spike_over_median:.2f}"),
)
SPIKE_COLUMNS = (
    *_RUN,
    ("step", "{step}"),
    ("loss", "{loss:.2e}"),
    ("× median", "{loss_over_median:.1f}"),
    ("grad norm (step)", "{grad_norm:.2e} ({grad_step})"),
    (f"× median of the {RECENT} steps before", "{grad_norm_over_recent:.1f}"),
    ("grad norm at the spike", "{grad_at_spike:.2e}"),
    ("× median", "{grad_at_spike_over_median:.1f}"),
    ("step before × median", "{grad_before_spike_over_median:.1f}"),
)


def _save(fig: Figure, out: Path, suffix: str) -> Path:
    import matplotlib.pyplot as plt

    path = out.with_name(out.name + suffix)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figures(traces: Sequence[RunTrace], out: Path) -> list[Path]:
    """Write ``<out>_loss.png`` (training loss, log scale) and ``<out>_coefficients.png`` (one
    panel per variant and layer), each only when some run has its curves; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    variants = dict.fromkeys(t.run.variant for t in traces)
    colours = {v: f"C{i % 10}" for i, v in enumerate(variants)}
    losses = [(t, series(t.scalars, LOSS_TAG)) for t in traces]
    losses = [(t, points) for t, points in losses if points]
    if losses:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        labelled: set[str] = set()
        for trace, points in losses:
            steps, values = zip(*points, strict=True)
            variant = trace.run.variant
            label = None if variant in labelled else variant
            labelled.add(variant)
            ax.plot(steps, values, lw=0.6, color=colours[variant], label=label)
        ax.set_yscale("log")
        ax.set_xlabel("optimiser step")
        ax.set_ylabel("training loss (logged every 20 steps)")
        ax.legend(fontsize=7)
        paths.append(_save(fig, out, "_loss.png"))
    learned = [(t, coefficient_series(t.scalars)) for t in traces]
    learned = [(t, c) for t, c in learned if c]
    panels = list(dict.fromkeys((t.run.variant, layer) for t, c in learned for layer, _ in c))
    if panels:
        fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.6 * len(panels)), squeeze=False)
        for ax, (variant, layer) in zip(axes[:, 0], panels, strict=True):
            labelled = set()
            for trace, coefficients in learned:
                for (lay, key), points in coefficients.items():
                    if trace.run.variant != variant or lay != layer:
                        continue
                    steps, values = zip(*points, strict=True)
                    # a_i in C0…; c (the kernel's scale) in black, dashed
                    colour, style = ("k", "--") if key == "c" else (f"C{int(key[1:]) % 10}", "-")
                    label = None if key in labelled else key
                    labelled.add(key)
                    ax.plot(steps, values, lw=0.7, color=colour, linestyle=style, label=label)
            ax.set_title(f"{variant}: {layer}", fontsize=8)
            ax.set_xlabel("optimiser step", fontsize=7)
            ax.legend(fontsize=6, ncol=5)
        paths.append(_save(fig, out, "_coefficients.png"))
    return paths
