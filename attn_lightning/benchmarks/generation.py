"""Image generation throughput per backend, and the decode-latency plot of the image report.

    python -m attn_lightning.benchmarks.generation --image-size 28 --batch 32 \\
        --backends softmax linear performer:num_features=64 polynomial:form=sketch,sketch_size=32 \\
        --recompute softmax --out docs/results/image_throughput
    python -m attn_lightning.benchmarks.generation --decode-csv out/decode/decode_cpu.csv \\
        --decode-png docs/results/figures/decode_latency.png     # plot only

Throughput: a randomly initialised ``PixelTransformer`` (speed does not depend on the weights)
samples ``batch`` whole images of ``image_size²`` pixels, unconditionally, through
``models/generation.py``: ``step`` (recurrent state for kernel backends, KV cache for softmax) or,
for the backends named in ``--recompute``, prefix recompute (the uncached reference). Reports
images/s and ms per pixel (wall time of the whole batch / pixels) and the ratio to softmax's
KV-cached step in the same run. Writes ``<out>.csv`` and ``<out>.md``.
Decode plot: ms per decoded token against context length from the CSV that
``python -m attn_lightning.benchmark decode`` writes.
"""

from __future__ import annotations

import argparse
import csv
import logging
import platform
import shlex
import sys
import time
from pathlib import Path

import torch

from attn_lightning.attention import parse_attention_spec
from attn_lightning.benchmarks.report import read_csv
from attn_lightning.models.pixel import PixelTransformer, sample_pixels

log = logging.getLogger("attn_lightning.benchmarks.generation")


def measure(spec: str, method: str, *, args: argparse.Namespace) -> dict[str, float | str | int]:
    """Best of ``args.repeats`` timed batches of ``args.batch`` images."""
    torch.manual_seed(0)
    model = PixelTransformer(
        levels=args.levels,
        seq_len=args.image_size**2,
        d_model=args.d_model,
        num_heads=args.num_heads,
        num_layers=args.num_layers,
        d_ff=args.d_ff,
        attention=parse_attention_spec(spec),
    ).eval()
    observed = torch.empty(args.batch, 0, dtype=torch.long)
    times = []
    for repeat in range(args.repeats):
        generator = torch.Generator().manual_seed(repeat)
        start = time.perf_counter()
        sample_pixels(model, observed=observed, generator=generator, method=method)
        times.append(time.perf_counter() - start)
    seconds = min(times)
    row = {
        "backend": spec,
        "method": method,
        "batch": args.batch,
        "tokens": args.image_size**2,
        "seconds": round(seconds, 3),
        "images_per_s": round(args.batch / seconds, 3),
        "ms_per_pixel": round(1e3 * seconds / args.image_size**2, 4),
    }
    log.info("%-40s %-9s %.2f images/s", spec, method, row["images_per_s"])
    return row


def write_throughput(rows: list[dict], out: Path, command: str, args: argparse.Namespace) -> None:
    base = next(
        (r for r in rows if r["backend"].startswith("softmax") and r["method"] == "step"), None
    )
    for row in rows:
        row["vs_softmax_kv_cache"] = (
            round(row["images_per_s"] / base["images_per_s"], 2) if base else ""
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        f"Machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s). Randomly initialised "
        f"model: d_model={args.d_model}, heads={args.num_heads}, layers={args.num_layers}, "
        f"d_ff={args.d_ff}, levels={args.levels}; best of {args.repeats} batch(es).\n",
        "| backend | decoding | batch | pixels/image | seconds/batch | images/s "
        "| ms per pixel step | × softmax KV cache |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        method = {"step": "step (recurrent / KV cache)", "recompute": "prefix recompute"}
        lines.append(
            f"| `{r['backend']}` | {method[r['method']]} | {r['batch']} | {r['tokens']} "
            f"| {r['seconds']} | {r['images_per_s']} | {r['ms_per_pixel']} "
            f"| {r['vs_softmax_kv_cache']} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.benchmarks.generation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--backends", nargs="*", default=[], help="name[:key=value,...]")
    parser.add_argument("--recompute", nargs="*", default=[], help="backends also timed uncached")
    parser.add_argument("--out", type=Path, default=Path("out/image_throughput"))
    parser.add_argument("--image-size", "--image_size", type=int, default=28)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--levels", type=int, default=256)
    parser.add_argument("--d-model", "--d_model", type=int, default=64)
    parser.add_argument("--num-heads", "--num_heads", type=int, default=4)
    parser.add_argument("--num-layers", "--num_layers", type=int, default=2)
    parser.add_argument("--d-ff", "--d_ff", type=int, default=256)
    parser.add_argument(
        "--decode-csv", "--decode_csv", type=Path, help="CSV of `benchmark decode` to plot"
    )
    parser.add_argument(
        "--decode-png", "--decode_png", type=Path, default=Path("out/decode_latency.png")
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.decode_csv is not None:
        log.info("wrote %s", plot_decode(args.decode_csv, args.decode_png))
    jobs = [(spec, "step") for spec in args.backends]
    jobs += [(spec, "recompute") for spec in args.recompute]
    if jobs:
        rows = [measure(spec, method, args=args) for spec, method in jobs]
        command = "python -m attn_lightning.benchmarks.generation " + shlex.join(argv)
        write_throughput(rows, args.out, command, args)
        log.info("wrote %s.md and %s.csv", args.out, args.out)


if __name__ == "__main__":
    main()
