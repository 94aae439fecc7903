"""PNG figures (matplotlib, Agg backend: no display needed).

Scaling figures are 2×2 grids: rows = full / causal mask, columns = forward / forward+backward,
one line per backend; skipped points appear as hollow markers at their extrapolated estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MODE_TITLES = {"fwd": "forward", "fwdbwd": "forward + backward"}


def _grid(rows: Sequence[Any]) -> tuple[list[bool], list[str]]:
    causal = sorted({r.causal for r in rows})
    modes = [m for m in MODE_TITLES if any(r.mode == m for r in rows)]
    return causal, modes


def _series(rows: Sequence[Any], causal: bool, mode: str) -> dict[str, list[Any]]:
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
            series = _series(rows, causal, mode)
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
