"""The figures of ``trajectories``: training loss over the steps, and the learned coefficients.

Drawn from the runs whose records hold those curves; a record converted from the CSVs written
before run records holds no loss curve, so it is in the tables and not in the loss figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lab.results.curves import series
from lab.studies.reversal.traces import LOSS_TAG, RunTrace, coefficient_series

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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
