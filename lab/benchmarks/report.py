"""Benchmark tables and figures: scaling, FLOPs, whole-step and crossover tables; PNG figures.

The generic writers (CSV with a ``# key: value`` provenance header, markdown tables, the
environment) are ``attn_lightning.records``'; this module lays benchmark rows out, writes a
benchmark's ``<tag>.csv`` / ``<tag>.md`` pair (``write_report``) and draws its figures
(matplotlib, Agg backend). Scaling figures are 2×2 grids (rows = full / causal mask, columns =
forward / forward+backward, one line per backend); skipped points are hollow markers at their
extrapolated estimate.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import torch

from attn_lightning.records import environment as _environment
from attn_lightning.records import files
from attn_lightning.records.environment import command_line
from attn_lightning.records.files import markdown_meta, markdown_table, read_csv
from lab.benchmarks import flop_count

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = [
    "environment",
    "markdown_meta",
    "markdown_table",
    "read_csv",
    "write_csv",
    "write_report",
]

PROG = "python -m lab.benchmark"

log = logging.getLogger("lab.benchmark")


def environment(
    device: torch.device, *, command: str | None = None, **settings: Any
) -> dict[str, str]:
    """``results.environment`` with the benchmark CLI's command line (default: this process's
    arguments after ``PROG``)."""
    return _environment(device, command=command or command_line(PROG), **settings)


def write_csv(path: Path, rows: Iterable[Any], meta: Mapping[str, str]) -> Path:
    """``results.files.write_csv`` with floats at 6 significant digits (timings)."""
    return files.write_csv(path, rows, meta, float_digits=6)


def write_report(
    out: Path, tag: str, meta: Mapping[str, str], rows: Sequence[Any], tables: str
) -> None:
    """``<out>/<tag>.csv`` (the rows under the provenance header) and ``<out>/<tag>.md`` (a
    title, the provenance as a list, then ``tables``); ``out`` is created."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / f"{tag}.csv", rows, meta)
    text = f"# {tag}\n\n{markdown_meta(meta)}\n\n{tables}\n"
    (out / f"{tag}.md").write_text(text)
    log.info("wrote %s and %s", out / f"{tag}.csv", out / f"{tag}.md")


def _fmt(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _skipped_cell(r: Any, value: str) -> str:
    """A skipped time shows its (upper-bound) estimate; memory shows only OOM notes."""
    if r is None:
        return ""
    if value == "peak_mb":
        return r.note if r.note.startswith("OOM") else "–"
    if r.est_ms is not None and value == "step_ms":  # a model_step.Row: seconds per step
        return f"too slow (est. {_fmt(r.est_ms / 1e3)} s)"
    if r.est_ms is not None:
        per = r.batch if value == "ms_per_sample" else 1
        return f"too slow (est. {_fmt(r.est_ms / per)})"
    return r.note or "n/a"


def scaling_table(
    rows: Sequence[Any], *, mode: str, value: str = "ms", baseline: str | None = "softmax"
) -> str:
    """One row per (backend, causal), one column per N for ``mode``.

    ``value`` is ``ms``, ``ms_per_sample`` or ``peak_mb``. Time cells read
    ``12.3 (4.1×) [35 GF/s]``: the value, the speed-up over ``baseline`` at the same
    (causal, mode, N) and, for feature-map backends, the achieved GFLOP/s of the minimal
    linear-attention work. Skipped points show their note.
    """
    rows = [r for r in rows if r.mode == mode]
    lengths = sorted({r.n for r in rows})
    index = {(r.backend, r.causal, r.n): r for r in rows}
    body = []
    for backend, causal in dict.fromkeys((r.backend, r.causal) for r in rows):
        cells: list[str] = []
        for n in lengths:
            r = index.get((backend, causal, n))
            got = None if r is None else getattr(r, value)
            if r is None or got is None:
                cells.append(_skipped_cell(r, value))
                continue
            cell = _fmt(got)
            base = index.get((baseline, causal, n))
            if value != "peak_mb" and base is not None and base.ms and backend != baseline:
                cell += f" ({base.ms / r.ms:.2g}×)"
            if value != "peak_mb" and r.gflops is not None:
                cell += f" [{r.gflops:.0f} GF/s]"
            cells.append(cell)
        body.append([backend, "causal" if causal else "full", *cells])
    return markdown_table(["backend", "mask", *(f"N={n}" for n in lengths)], body)


def flops_table(rows: Sequence[Any]) -> str:
    """Forward FLOPs per call (``Row.fwd_flops``): one row per (backend, mask), one column per N.

    Cells read ``1.2 GFLOP [35 GF/s]``: the counted forward FLOPs of one call (whole batch) and,
    where the forward point was measured, the rate they were done at (FLOPs / forward time).
    ``n/a``: no formula for that backend. The count is the same on fwd and fwdbwd rows.
    """
    lengths = sorted({r.n for r in rows})
    by_point: dict[tuple[str, bool, int], Any] = {}
    for r in rows:  # the forward row when there is one: it carries the forward time
        key = (r.backend, r.causal, r.n)
        if key not in by_point or r.mode == "fwd":
            by_point[key] = r
    body = []
    for backend, causal in dict.fromkeys((r.backend, r.causal) for r in rows):
        cells = []
        for n in lengths:
            r = by_point.get((backend, causal, n))
            if r is None:
                cells.append("")
                continue
            cell = flop_count.format_flops(r.fwd_flops)
            if r.fwd_flops and r.mode == "fwd" and r.ms:
                cell += f" [{r.fwd_flops / (r.ms * 1e-3) / 1e9:.3g} GF/s]"
            cells.append(cell)
        body.append([backend, "causal" if causal else "full", *cells])
    return markdown_table(["backend", "mask", *(f"N={n}" for n in lengths)], body)


def crossover(times: Mapping[int, float], baseline: Mapping[int, float]) -> int | None:
    """Smallest N from which ``times`` (N -> time) < ``baseline`` at every larger N measured
    by both; None when the backend is not faster at the largest N measured by both."""
    found = None
    for n in sorted(set(times) & set(baseline), reverse=True):
        if times[n] >= baseline[n]:
            break
        found = n
    return found


def _series(rows: Sequence[Any], value: str) -> dict[tuple[str, int, str], dict[int, float]]:
    """(model, width, backend) -> {N: value} over the measured points."""
    out: dict[tuple[str, int, str], dict[int, float]] = {}
    for r in rows:
        series = out.setdefault((r.model, r.width, r.backend), {})
        if getattr(r, value) is not None:
            series[r.n] = getattr(r, value)
    return out


def model_step_table(rows: Sequence[Any], *, baseline: str = "softmax") -> str:
    """Training-step rows (``model_step.Row``): one row per (model, width, backend), N columns.

    Cells read ``12.3k (0.8×) [41%]``: tokens/s, the end-to-end speed-up over ``baseline`` at the
    same point, and the share of the step spent inside the attention backends. Skipped points
    show their estimate or note.
    """
    lengths = sorted({r.n for r in rows})
    index = {(r.model, r.width, r.backend, r.n): r for r in rows}
    body = []
    for model, width, backend in _series(rows, "step_ms"):
        cells = []
        for n in lengths:
            r = index.get((model, width, backend, n))
            if r is None or r.step_ms is None:
                cells.append(_skipped_cell(r, "step_ms"))
                continue
            cell = f"{_fmt(r.tokens_per_s / 1e3)}k"
            base = index.get((model, width, baseline, n))
            if backend != baseline and base is not None and base.step_ms:
                cell += f" ({base.step_ms / r.step_ms:.2g}×)"
            cells.append(cell + f" [{100 * r.attn_share:.0f}%]")
        body.append([model, width, backend, *cells])
    return markdown_table(["model", "width", "backend", *(f"N={n}" for n in lengths)], body)


def crossover_table(rows: Sequence[Any], *, baseline: str = "softmax") -> str:
    """Per (model, width, backend): the end-to-end and attention-only crossover N vs ``baseline``.

    End-to-end compares whole training steps; attention-only compares the time inside the
    backends in the same steps. The speed-ups are at the largest N both measured.
    """
    steps, attention = _series(rows, "step_ms"), _series(rows, "attn_ms")
    body = []
    for key in steps:
        model, width, backend = key
        base_key = (model, width, baseline)
        if backend == baseline or base_key not in steps:
            continue
        cells: list[Any] = [model, width, backend]
        for series in (steps, attention):
            base, mine = series[base_key], series[key]
            common = sorted(set(base) & set(mine))
            n = crossover(mine, base)
            cells.append("none" if n is None else f"N={n}")
            cells.append(
                f"{base[common[-1]] / mine[common[-1]]:.2g}× at N={common[-1]}" if common else ""
            )
        body.append(cells)
    header = ["model", "width", "backend", "end-to-end crossover", "end-to-end speed-up"]
    return markdown_table([*header, "attention-only crossover", "attention speed-up"], body)


MODE_TITLES = {"fwd": "forward", "fwdbwd": "forward + backward"}


def _grid(rows: Sequence[Any]) -> tuple[list[bool], list[str]]:
    causal = sorted({r.causal for r in rows})
    modes = [m for m in MODE_TITLES if any(r.mode == m for r in rows)]
    return causal, modes


def _panel(rows: Sequence[Any], causal: bool, mode: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in rows:
        if r.causal == causal and r.mode == mode:
            out.setdefault(r.backend, []).append(r)
    return out


def _save(fig: Any, path: Path, caption: str) -> Path:
    fig.text(0.01, 0.005, caption, fontsize=6, color="0.4", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def scaling_figure(
    rows: Sequence[Any],
    path: Path,
    *,
    value: str,
    ylabel: str,
    title: str,
    caption: str,
    baseline: str = "softmax",
    per_sample: bool = False,
) -> Path | None:
    """Log–log ``value`` against N.

    ``value``: ``time`` (ms per call, or per sample with ``per_sample``), ``peak_mb``, or
    ``speedup`` (baseline time / backend time at the same point).
    """
    causal_flags, modes = _grid(rows)
    if not modes:
        return None
    time_key = "ms_per_sample" if per_sample else "ms"
    fig, axes = plt.subplots(
        len(causal_flags),
        len(modes),
        squeeze=False,
        figsize=(5.2 * len(modes), 3.8 * len(causal_flags)),
    )
    for i, causal in enumerate(causal_flags):
        for j, mode in enumerate(modes):
            ax = axes[i][j]
            series = _panel(rows, causal, mode)
            base = {r.n: r.ms for r in series.get(baseline, [])}
            for backend, points in series.items():
                if value == "speedup":
                    if backend == baseline:
                        continue
                    xy = [(r.n, base[r.n] / r.ms) for r in points if r.ms and base.get(r.n)]
                else:
                    key = time_key if value == "time" else value
                    xy = [(r.n, getattr(r, key)) for r in points if getattr(r, key) is not None]
                if not xy:
                    continue
                (line,) = ax.plot(*zip(*xy), marker="o", ms=3, label=backend)
                if value == "time":
                    scale = {r.n: r.batch if time_key == "ms_per_sample" else 1 for r in points}
                    est = [(r.n, r.est_ms / scale[r.n]) for r in points if r.est_ms is not None]
                    before = [(n, y) for n, y in xy if est and n < est[0][0]]
                    if est:
                        est = before[-1:] + est  # the dotted line starts at the last measurement
                        ax.plot(
                            *zip(*est), ls=":", marker="o", mfc="none", ms=4, color=line.get_color()
                        )
            if value == "speedup":
                ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{'causal' if causal else 'full'} · {MODE_TITLES[mode]}", fontsize=9)
            ax.set_xlabel("sequence length N")
            ax.set_ylabel(ylabel if value != "time" or time_key == "ms" else ylabel + " / sample")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path, caption)


def band_figure(
    panels: Sequence[dict[str, Any]], path: Path, *, title: str, caption: str, ncols: int = 2
) -> Path:
    """Panels of curves with shaded spread.

    Each panel: ``{"title", "xlabel", "ylabel", "xlog", "ylog", "curves": [{"label", "x", "y",
    "lo", "hi"}]}``; ``lo``/``hi`` (optional) bound the shaded band.
    """
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, figsize=(5.2 * ncols, 3.8 * nrows))
    for ax, panel in zip(axes.flat, panels):
        for curve in panel["curves"]:
            (line,) = ax.plot(
                curve["x"],
                curve["y"],
                marker=curve.get("marker", "o"),
                ms=3,
                label=curve["label"],
                ls=curve.get("ls", "-"),
            )
            if curve.get("lo") is not None:
                ax.fill_between(
                    curve["x"], curve["lo"], curve["hi"], alpha=0.2, color=line.get_color(), lw=0
                )
        if panel.get("xlog"):
            ax.set_xscale("log", base=2)
        if panel.get("ylog"):
            ax.set_yscale("log")
        ax.set_title(panel["title"], fontsize=9)
        ax.set_xlabel(panel["xlabel"])
        ax.set_ylabel(panel["ylabel"])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path, caption)


def model_step_figure(rows: Sequence[Any], path: Path, *, title: str, caption: str) -> Path:
    """Training-step rows (``model_step.Row``): one column per (model, width).

    Top row: tokens/s against N per backend, the band spanning the fastest and slowest timed
    step. Bottom row: the share of the step spent inside the attention backends.
    """
    groups = list(dict.fromkeys((r.model, r.width) for r in rows))
    top, bottom = [], []
    for model, width in groups:
        speed, share = [], []
        for backend in dict.fromkeys(r.backend for r in rows):
            points = [
                r
                for r in rows
                if (r.model, r.width, r.backend) == (model, width, backend) and r.step_ms
            ]
            if not points:
                continue
            x = [r.n for r in points]
            tokens = [r.batch * r.n * 1e3 for r in points]  # tokens per step, ms → s
            speed.append(
                {
                    "label": backend,
                    "x": x,
                    "y": [r.tokens_per_s for r in points],
                    "lo": [t / r.step_ms_max for t, r in zip(tokens, points)],
                    "hi": [t / r.step_ms_min for t, r in zip(tokens, points)],
                }
            )
            share.append({"label": backend, "x": x, "y": [r.attn_share for r in points]})
        name = f"{model}, width {width}"
        top.append(
            {"title": name, "xlabel": "N", "ylabel": "tokens/s", "xlog": True, "ylog": True}
            | {"curves": speed}
        )
        bottom.append(
            {"title": name, "xlabel": "N", "ylabel": "attention share of the step", "xlog": True}
            | {"curves": share}
        )
    return band_figure(top + bottom, path, title=title, caption=caption, ncols=max(1, len(groups)))
