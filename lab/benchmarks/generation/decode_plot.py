"""The decode-latency figure (``generation --decode-csv``): ms per decoded token against context
length, from the CSV that ``python -m lab.benchmark decode`` writes."""

from __future__ import annotations

from pathlib import Path

from attn_lightning.records import read_csv


def plot_decode(csv_path: Path, png: Path) -> Path:
    """Log-log plot of ms per decoded token against context length, one line per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, rows = read_csv(csv_path)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for backend in dict.fromkeys(r["backend"] for r in rows):
        points = [(int(r["context"]), float(r["ms"])) for r in rows if r["backend"] == backend]
        points = [p for p in points if p[1] == p[1]]  # drop NaN (skipped points)
        ax.plot(*zip(*points, strict=True), marker="o", label=backend)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length T (tokens already decoded)")
    ax.set_ylabel("ms per decoded token (one step)")
    first = rows[0]
    ax.set_title(
        f"decode latency, B={first['batch']}, H={first['heads']}, D={first['head_dim']}, "
        f"{meta.get('device', '')}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png
