"""The recall study's report kinds (plans ``configs/studies/recall_*.yaml``). ``recall``: for
each variant, the learning rate chosen on validation, test recall at it over seeds, and the
recurrent state each layer keeps after the whole sequence — the x-axis of the Based paper's
recall-vs-state figure (Arora et al. 2024) — as a table sorted by state and a figure.
``recall_widths``: the same per model width, from one plan's records per width, the figure a line
per variant through its widths on the state axis.

A variant's runs are labelled ``<overlay>,lr=<lr>`` by the plan's grid; ``<overlay>`` is the stem
of its config overlay under ``overlays``. The state is the model's own count
(``TransformerEncoder.state_sizes``: floats per batch row, every head, at the data's ``seq_len``),
built from the plan's config stack and the overlay, so it is what the runs trained, not a formula
retyped here.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from attn_lightning.records import markdown_table, write_csv
from lab.results.records import RunResult, load_runs, record_folders
from lab.results.tables import format_median_iqr, median_iqr, records_machine_line


def state_floats(configs: Sequence[str]) -> tuple[int, ...]:
    """Floats each layer keeps to decode after the data's ``seq_len`` tokens, per batch row, of
    the model ``train.py`` builds from ``configs`` (nothing trained)."""
    from attn_lightning.cli.app import main  # builds Lightning's CLI: only when a page is written

    args = [part for config in configs for part in ("--config", config)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli = main(args, run=False)
    encoders = [m for m in cli.model.modules() if hasattr(m, "state_sizes")]
    if len(encoders) != 1:
        raise ValueError(f"{configs}: expected one encoder with state_sizes, found {len(encoders)}")
    return tuple(encoders[0].state_sizes(seq_len=cli.datamodule.seq_len))


def _by_lr(runs: Sequence[RunResult]) -> dict[str, dict[float, list[RunResult]]]:
    grouped: dict[str, dict[float, list[RunResult]]] = {}
    for run in runs:
        name, _, rest = run.variant.partition(",")
        if not rest.startswith("lr="):
            raise ValueError(f"run {run.variant!r}: expected a label '<overlay>,lr=<lr>'")
        grouped.setdefault(name, {}).setdefault(float(rest[3:]), []).append(run)
    return grouped


def chosen_lr(per_lr: dict[float, list[RunResult]], select: str) -> float:
    """The learning rate of the highest mean ``select`` over the seeds that have it at every
    learning rate (a plan's ``select:`` seeds; ties: the smaller), so that the seeds run only at
    the chosen rate do not choose it again.

    Raises:
        ValueError: no seed has ``select`` at every learning rate.
    """
    seeds = [{r.seed for r in runs if r.value(select) is not None} for runs in per_lr.values()]
    tuning = set.intersection(*seeds)
    if not tuning:
        raise ValueError(f"no seed has {select} at every learning rate {sorted(per_lr)}")

    def score(lr: float) -> float:
        return fmean(
            v for r in per_lr[lr] if r.seed in tuning and (v := r.value(select)) is not None
        )

    return max(sorted(per_lr), key=lambda lr: (score(lr), -lr))


def recall_rows(
    runs: Sequence[RunResult],
    *,
    configs: Sequence[str],
    overlays: str,
    select: str,
    metric: str,
    threshold: float,
    also: Sequence[str],
) -> list[dict[str, Any]]:
    """A row per variant of one setting's ``runs``: the learning rate chosen on ``select``, the
    seeds run at it, their ``metric`` and ``also`` values, and the state of the model the plan's
    ``configs`` and the variant's overlay build; sorted by state.

    Raises:
        FileNotFoundError: a variant's overlay file missing.
        ValueError: a run label without its learning rate.
    """
    rows: list[dict[str, Any]] = []
    grouped = _by_lr(runs)
    rates = len({lr for per_lr in grouped.values() for lr in per_lr})  # the grid, as far as run
    for name, per_lr in grouped.items():
        overlay = Path(overlays) / f"{name}.yaml"
        if not overlay.is_file():
            raise FileNotFoundError(f"variant {name!r}: no overlay {overlay.as_posix()}")
        lr = chosen_lr(per_lr, select)
        chosen = sorted(per_lr[lr], key=lambda r: r.seed)
        values = [v for r in chosen if (v := r.value(metric)) is not None]
        layers = state_floats([*configs, overlay.as_posix()])
        rows.append(
            {
                "variant": name,
                "state_floats_per_layer": " / ".join(str(n) for n in layers),
                "state_floats": sum(layers),
                "lr": lr,
                "rates": f"{len(per_lr)}/{rates}",  # < rates: the variant's grid is unfinished
                "seeds": " ".join(str(r.seed) for r in chosen),
                "converged": sum(v >= threshold for v in values),
                metric: values,
                **{key: [v for r in chosen if (v := r.value(key)) is not None] for key in also},
            }
        )
    return sorted(rows, key=lambda row: (row["state_floats"], row["variant"]))


def _ok_runs(roots: Sequence[Path]) -> list[RunResult]:
    for root in roots:
        record_folders(root, required=True)
    return [r for root in roots for r in load_runs(root) if r.status == "ok"]


def write_recall(
    roots: Sequence[Path],
    out: Path,
    *,
    command: str,
    configs: Sequence[str],
    overlays: str,
    select: str = "val/query_acc",
    metric: str = "test/query_acc",
    threshold: float = 0.99,
    also: Sequence[str] = ("test/example_acc",),
) -> list[Path]:
    """Write ``<out>.md``, ``<out>.csv`` and ``<out>.png`` from the ok runs under ``roots``.

    Raises:
        FileNotFoundError: no run record under ``roots``, or a variant's overlay file missing.
        ValueError: a run label without its learning rate.
    """
    runs = _ok_runs(roots)
    rows = recall_rows(
        runs,
        configs=configs,
        overlays=overlays,
        select=select,
        metric=metric,
        threshold=threshold,
        also=also,
    )
    machine = records_machine_line(runs)
    return [
        _write_page(
            rows,
            out,
            command=command,
            select=select,
            metric=metric,
            also=also,
            threshold=threshold,
            machine=machine,
        ),
        _write_csv(rows, out, metric=metric, also=also),
        _write_figure(rows, out, metric=metric),
    ]


def _cell(values: Sequence[float]) -> str:
    return format_median_iqr(*median_iqr(values), digits=3)


def _chosen_cells(row: dict[str, Any], metric: str) -> list[str]:
    """A row's chosen rate and the seeds run at it: lr, rates run, seeds, converged, median
    [IQR] and the value per seed."""
    values = row[metric]
    return [f"{row['lr']:g}", row["rates"], row["seeds"], f"{row['converged']}/{len(values)}",
            _cell(values), " / ".join(f"{v:.3f}" for v in values)]  # fmt: skip


def _write_page(
    rows: Sequence[dict[str, Any]],
    out: Path,
    *,
    command: str,
    select: str,
    metric: str,
    also: Sequence[str],
    threshold: float,
    machine: str | None,
) -> Path:
    header = ["variant", "state floats per layer", "state floats", "lr (chosen)", "rates run",
              "seeds", f"{metric} ≥ {threshold}", f"{metric}, median [IQR]", "per seed",
              *(f"{key}, median [IQR]" for key in also)]  # fmt: skip
    body = [
        [
            f"`{row['variant']}`",
            row["state_floats_per_layer"],
            f"{row['state_floats']:,}",
            *_chosen_cells(row, metric),
            *(_cell(row[key]) for key in also),
        ]
        for row in rows
    ]
    text = "\n".join(
        [
            f"Regenerate with:\n\n```bash\n{command}\n```\n",
            *([f"{machine}\n"] if machine else []),
            f"Recall against the recurrent state, sorted by state. Per variant, the learning rate "
            f"with the highest mean `{select}` over the seeds run at every rate (never a test "
            f"metric; ties: the smaller); `{metric}` at it over every seed run there; "
            "rates run: the learning rates it has runs at, of those any variant has (fewer: its "
            "grid is unfinished, the choice provisional). State: the "
            "floats each layer keeps to decode the next token after the whole sequence, per batch "
            "row, every head — the KV cache for softmax (2·N·D a head) and exact polynomial "
            "attention, F·Dv + F for a feature map of F features — counted by the model the runs "
            "trained (`TransformerEncoder.state_sizes`). Figure: `" + out.name + ".png`.\n",
            markdown_table(header, body),
            "",
        ]
    )
    path = out.with_suffix(".md")
    path.write_text(text)
    return path


def _write_csv(
    rows: Sequence[dict[str, Any]], out: Path, *, metric: str, also: Sequence[str]
) -> Path:
    flat = [
        {**row, **{key: " ".join(f"{v:.4f}" for v in row[key]) for key in (metric, *also)}}
        for row in rows
    ]
    return write_csv(out.with_suffix(".csv"), flat)


def _write_figure(rows: Sequence[dict[str, Any]], out: Path, *, metric: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(6, 4))
    seen: dict[int, int] = {}  # labels of variants with one state stacked downwards
    for row in rows:
        median, q25, q75 = median_iqr(row[metric])
        if median is None or q25 is None or q75 is None:
            continue
        ax.errorbar(row["state_floats"], median, yerr=[[median - q25], [q75 - median]], fmt="o")
        below = seen[row["state_floats"]] = seen.get(row["state_floats"], -1) + 1
        ax.annotate(row["variant"], (row["state_floats"], median), textcoords="offset points",
                    xytext=(4, 4 - 11 * below), fontsize=8)  # fmt: skip
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("recurrent state (floats per sequence, all layers)")
    ax.set_ylabel(f"{metric} (median, IQR bars)")
    ax.set_ylim(0, 1.05)
    path = out.with_name(out.name + ".png")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def write_recall_widths(
    roots: Sequence[Path],
    out: Path,
    *,
    command: str,
    widths: dict[int, list[str]],
    overlays: str,
    select: str = "val/query_acc",
    metric: str = "test/query_acc",
    threshold: float = 0.99,
) -> list[Path]:
    """Recall against model width and state, a line per variant through its widths:
    ``<out>.md``, ``.csv`` and ``.png`` from one records folder per width,
    ``roots[i]`` the runs of the i-th of ``widths`` (width -> the config stack its plan trained).
    Each width's learning rate is chosen on its own validation, as its own page does.

    Raises:
        ValueError: not one folder per width; a run label without its learning rate.
        FileNotFoundError: a folder without records, or a variant's overlay file missing.
    """
    if len(roots) != len(widths):
        raise ValueError(
            f"runs: one records folder per width, in the order of widths {list(widths)}; "
            f"got {len(roots)} folders: {[r.as_posix() for r in roots]}"
        )
    rows, runs = [], []
    for (width, configs), root in zip(widths.items(), roots, strict=True):
        ran = _ok_runs([root])
        runs += ran
        found = recall_rows(
            ran,
            configs=configs,
            overlays=overlays,
            select=select,
            metric=metric,
            threshold=threshold,
            also=(),
        )
        rows += [{"width": width, **row} for row in found]
    first: dict[str, int] = {}  # variants in the order of their state at their smallest width
    for row in sorted(rows, key=lambda r: (r["width"], r["state_floats"], r["variant"])):
        first.setdefault(row["variant"], len(first))
    rows.sort(key=lambda r: (first[r["variant"]], r["width"]))
    header = [
        "variant",
        "width",
        "state floats",
        "lr (chosen)",
        "rates run",
        "seeds",
        f"{metric} ≥ {threshold}",
        f"{metric}, median [IQR]",
        "per seed",
    ]
    body = [
        [f"`{r['variant']}`", str(r["width"]), f"{r['state_floats']:,}", *_chosen_cells(r, metric)]
        for r in rows
    ]
    machine = records_machine_line(runs)
    text = "\n".join(
        [
            f"Regenerate with:\n\n```bash\n{command}\n```\n",
            *([f"{machine}\n"] if machine else []),
            "Recall against model width and recurrent state: a row per variant and width, the "
            f"learning rate chosen per width on `{select}` as on each width's own page (rates "
            "run: fewer than the grid's, the choice provisional); state as there (floats per "
            f"batch row, all layers). Figure: `{out.name}.png`, a line per variant.\n",
            markdown_table(header, body),
            "",
        ]
    )
    page = out.with_suffix(".md")
    page.write_text(text)
    flat = [{**r, metric: " ".join(f"{v:.4f}" for v in r[metric])} for r in rows]
    return [page, write_csv(out.with_suffix(".csv"), flat), _write_width_figure(rows, out, metric)]


def _write_width_figure(rows: Sequence[dict[str, Any]], out: Path, metric: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        points = [
            (r["state_floats"], median, r["width"])
            for r in rows
            if r["variant"] == variant and (median := median_iqr(r[metric])[0]) is not None
        ]
        if not points:
            continue
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=variant)
        for x, y, width in points:
            ax.annotate(str(width), (x, y), textcoords="offset points", xytext=(3, -9), fontsize=7)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("recurrent state (floats per sequence, all layers); points: model width")
    ax.set_ylabel(f"{metric} (median over seeds)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, loc="center right")
    path = out.with_name(out.name + ".png")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path
