"""Image generation throughput per backend, the histogram baseline, and the decode-latency plot.

    python -m attn_lightning.benchmarks.generation --image-size 28 --batch 32 \\
        --backends softmax linear performer:num_features=64 polynomial:form=sketch,sketch_size=32 \\
        --recompute softmax --out docs/results/image_throughput
    python -m attn_lightning.benchmarks.generation --checkpoints \\
        checkpoints/image/<softmax-run>/last.ckpt checkpoints/image/<linear-run>/last.ckpt \\
        --batches 1 32 max [--memory-budget-gb 8] --out docs/results/image_throughput_trained
    python -m attn_lightning.benchmarks.generation --histogram --image-size 28 --levels 256
    python -m attn_lightning.benchmarks.generation --decode-csv out/decode/decode_cpu.csv \\
        --decode-png docs/results/figures/decode_latency.png     # plot only

Throughput: a ``PixelTransformer`` samples ``batch`` whole images of ``image_size²`` pixels,
unconditionally (no observed pixels, temperature 1), through ``models/generation.py``: ``step``
(recurrent state for kernel backends, a preallocated KV cache for softmax) or prefix recompute
(the uncached reference). ``--backends``: randomly initialised models of the given sizes (speed
does not depend on the weights), ``--recompute`` names the specs also timed uncached.
``--checkpoints``: the trained ``ImageGenerationTask`` checkpoints, each labelled by its backend
spec and run folder, timed at every ``--batches`` entry with ``step`` and, for softmax and the
backends or runs named in ``--recompute``, prefix recompute. ``max`` is the largest batch that
fits: the peak memory of a batch of 4 is measured, and the batch doubles from 32 while the
projected peak stays within ``--memory-budget-gb`` (and ``--max-batch-limit``); a run that still
runs out of memory is retried at half the batch. Reports images/s and ms per pixel (wall time of
the whole batch / pixels), and each row's ratio to softmax's step (KV-cached) and to softmax's
prefix recompute (uncached) at the same requested batch (the first softmax model given). Writes
``<out>.csv`` and ``<out>.md``.
Histogram: bits/dim of an independent per-pixel histogram fitted on the training split
(``data.pixels.histogram_bits_per_dim``), on all pixels and on the held-out completion pixels.
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from attn_lightning.attention import parse_attention_spec
from attn_lightning.benchmarks.measure import is_out_of_memory, peak_bytes, time_calls
from attn_lightning.benchmarks.report import read_csv
from attn_lightning.cli.checkpoints import CheckpointError, load_checkpoint, saved_class
from attn_lightning.data.pixels import PixelDataModule, histogram_bits_per_dim
from attn_lightning.models.pixel import PixelTransformer, sample_pixels
from attn_lightning.tasks.image import DEFAULT_OBSERVED_FRACTION, ImageGenerationTask

log = logging.getLogger("attn_lightning.benchmarks.generation")

Row = dict[str, Any]
IMAGE_TASK = "attn_lightning.tasks.ImageGenerationTask"
PAPER = (
    "Katharopoulos et al. 2020 (arXiv 2006.16236), MNIST "
    "generation with 8 layers, 8 heads × 32, FFN 1024, 10 logistics: images/s on a GPU "
    "softmax 0.45, softmax with KV cache 7.56, linear 142.8, i.e. linear **317×** uncached and "
    "**≈19×** cached softmax; batch-1 seconds/image on CPU softmax 72.6, cached softmax 7.4, "
    "linear 5.5, i.e. 13× uncached and 1.35× cached."
)
PROBE_BATCH = 4  # images whose peak memory sizes the `max` batch (memory is linear in batch)
FIRST_MAX = 32  # `max` doubles from here


def format_attention_spec(attention: Mapping[str, Any]) -> str:
    """A backend dict in the command-line spelling: ``{"name": "performer", "num_features":
    64}`` -> ``"performer:num_features=64"`` (the inverse of ``parse_attention_spec``)."""

    def value(v: Any) -> str:
        return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    options = [f"{k}={value(v)}" for k, v in attention.items() if k != "name"]
    return str(attention["name"]) + (":" + ",".join(options) if options else "")


def load_pixel_model(path: str | Path) -> tuple[PixelTransformer, dict[str, Any]]:
    """The trained model (eval mode, CPU) of an ``ImageGenerationTask`` checkpoint, and what
    labels it: ``backend`` (spec), ``name`` (backend name), ``run`` (run folder), ``step``
    (global step) and ``model`` (its sizes).

    Raises:
        CheckpointError: the file is missing, corrupt, or not an image-generation checkpoint;
            the message names the path.
    """
    path = Path(path)
    try:
        checkpoint = load_checkpoint(path)
    except CheckpointError as err:  # its messages name the training CLI's flag
        raise CheckpointError(str(err).replace("--ckpt_path", "--checkpoints", 1)) from None
    foreign = CheckpointError(f"--checkpoints {str(path)!r} is not an image-generation checkpoint")
    class_path = saved_class(checkpoint, "hyper_parameters")
    if class_path is not None and class_path.rsplit(".", 1)[-1] != "ImageGenerationTask":
        raise CheckpointError(f"{foreign} (its task is {class_path})")
    # LightningCLI adds "_class_path" / "_instantiator" entries: not constructor arguments.
    hparams = {k: v for k, v in checkpoint.get("hyper_parameters", {}).items() if k[:1] != "_"}
    try:
        task = ImageGenerationTask(**hparams)
        task.load_state_dict(checkpoint["state_dict"])
    except (TypeError, ValueError, RuntimeError) as err:  # other hparams, missing/extra weights
        reason = " ".join(str(err).split())[:160]
        raise CheckpointError(f"{foreign} ({type(err).__name__}: {reason})") from None
    sizes = ("image_size", "levels", "d_model", "num_heads", "num_layers", "d_ff", "output")
    info = {
        "backend": format_attention_spec(task.attention_config),
        "name": task.attention_config["name"],
        "run": path.parent.name,
        "step": checkpoint.get("global_step", ""),
        "model": " ".join(f"{k}={task.hparams[k]}" for k in sizes),
    }
    return task.net.eval(), info


def time_generation(
    model: PixelTransformer, *, batch: int, method: str, repeats: int, device: torch.device
) -> float:
    """Best of ``repeats`` wall times (s) of sampling ``batch`` whole images unconditionally."""
    observed = torch.empty(batch, 0, dtype=torch.long, device=device)
    # Sampling draws on the model's device: a CPU generator would copy every step's probabilities.
    generator = torch.Generator(device=device)
    seed = iter(range(repeats))

    def sample() -> None:
        generator.manual_seed(next(seed))
        sample_pixels(model, observed=observed, generator=generator, method=method)

    return min(time_calls(sample, repeats=repeats, device=device))


def largest_batch(
    model: PixelTransformer,
    *,
    method: str,
    device: torch.device,
    budget_bytes: float,
    limit: int,
) -> int:
    """The batch for ``max``: from ``FIRST_MAX``, doubled while the peak memory projected from
    a ``PROBE_BATCH`` probe stays within ``budget_bytes`` and ``limit``; halved below
    ``FIRST_MAX`` if even that would not fit (at least 1)."""
    observed = torch.empty(PROBE_BATCH, 0, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    probe = peak_bytes(
        lambda: sample_pixels(model, observed=observed, generator=generator, method=method),
        device=device,
    )
    if probe is None:
        log.warning("peak memory not measurable here; `max` batch falls back to %d", FIRST_MAX)
        return min(FIRST_MAX, limit)
    # Counting the call's fixed allocations per image overestimates a large batch's need: safe.
    per_image = max(probe, 1) / PROBE_BATCH
    batch = min(FIRST_MAX, limit)
    while batch > 1 and batch * per_image > budget_bytes:
        batch //= 2
    while 2 * batch <= limit and 2 * batch * per_image <= budget_bytes:
        batch *= 2
    return batch


def _row(backend: str, method: str, batch: int, tokens: int, seconds: float) -> Row:
    return {
        "backend": backend,
        "method": method,
        "batch": batch,
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "images_per_s": round(batch / seconds, 3),
        "ms_per_pixel": round(1e3 * seconds / tokens, 4),
    }


def measure(spec: str, method: str, *, args: argparse.Namespace) -> Row:
    """Best of ``args.repeats`` timed batches of ``args.batch`` images of a random model."""
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = PixelTransformer(
        levels=args.levels,
        seq_len=args.image_size**2,
        d_model=args.d_model,
        num_heads=args.num_heads,
        num_layers=args.num_layers,
        d_ff=args.d_ff,
        attention=parse_attention_spec(spec),
    ).eval()
    model.to(device)
    seconds = time_generation(
        model, batch=args.batch, method=method, repeats=args.repeats, device=device
    )
    row = _row(spec, method, args.batch, args.image_size**2, seconds)
    log.info("%-40s %-9s %.2f images/s", spec, method, row["images_per_s"])
    return row


def measure_checkpoint(
    path: Path, loaded: tuple[PixelTransformer, dict[str, Any]], *, args: argparse.Namespace
) -> list[Row]:
    """Rows of one trained checkpoint (``loaded``: what ``load_pixel_model(path)`` returns):
    ``step`` (and prefix recompute for softmax or a backend or run named in ``--recompute``) at
    every ``--batches`` entry."""
    device = torch.device(args.device)
    model, info = loaded
    model.to(device)
    methods = ["step"] if model.supports_recurrence else []
    if info["name"] == "softmax" or {info["name"], info["backend"], info["run"]} & set(
        args.recompute
    ):
        methods.append("recompute")
    if not model.supports_recurrence:
        log.warning("%s: a backend without recurrence; step not timed", path)
    labels = {"run": info["run"], "train_step": info["step"], "model": info["model"]}
    rows = []
    for requested in args.batches:
        for method in methods:
            batch = (
                largest_batch(
                    model,
                    method=method,
                    device=device,
                    budget_bytes=args.memory_budget_gb * 2**30,
                    limit=args.max_batch_limit,
                )
                if requested == "max"
                else int(requested)
            )
            if method == "recompute" and batch > args.recompute_max_batch:
                log.info(
                    "%s: prefix recompute at batch %d skipped (--recompute-max-batch %d)",
                    path,
                    batch,
                    args.recompute_max_batch,
                )
                continue
            while True:
                try:
                    seconds = time_generation(
                        model, batch=batch, method=method, repeats=args.repeats, device=device
                    )
                    break
                except (RuntimeError, MemoryError) as err:
                    if requested != "max" or batch == 1 or not is_out_of_memory(err):
                        raise
                    log.warning("%s %s: out of memory at batch %d, halving", path, method, batch)
                    batch //= 2
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
            row = {**_row(info["backend"], method, batch, model.seq_len, seconds), **labels}
            row["requested_batch"] = requested
            row["checkpoint"] = str(path)
            log.info(
                "%-40s %-9s batch %-5s %.2f images/s",
                f"{info['backend']} ({info['run']})",
                method,
                batch,
                row["images_per_s"],
            )
            rows.append(row)
    return rows


def add_ratios(rows: list[Row]) -> None:
    """``vs_softmax_kv_cache`` / ``vs_softmax_recompute``: images/s over the first softmax
    model's step / prefix recompute at the same requested batch ("" where there is none)."""

    def key(row: Row) -> str:
        return str(row.get("requested_batch", row["batch"]))

    def is_softmax(row: Row) -> bool:
        return str(row["backend"]).split(":")[0] == "softmax"

    softmax_model = next((r.get("checkpoint") for r in rows if is_softmax(r)), None)
    for column, method in (("vs_softmax_kv_cache", "step"), ("vs_softmax_recompute", "recompute")):
        base = {
            key(r): r["images_per_s"]
            for r in reversed(rows)  # the first softmax row of each batch wins
            if is_softmax(r) and r["method"] == method and r.get("checkpoint") == softmax_model
        }
        for row in rows:
            ref = base.get(key(row))
            row[column] = round(row["images_per_s"] / ref, 2) if ref else ""


def write_throughput(rows: list[Row], out: Path, command: str, args: argparse.Namespace) -> None:
    add_ratios(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    checkpoint_mode = any("run" in r for r in rows)
    if checkpoint_mode:
        trained = dict.fromkeys(f"`{r['checkpoint']}`: {r['model']}" for r in rows)
        models = "Trained checkpoints (`train step`: global step) — " + "; ".join(trained)
    else:
        models = (
            f"Randomly initialised model: d_model={args.d_model}, heads={args.num_heads}, "
            f"layers={args.num_layers}, d_ff={args.d_ff}, levels={args.levels}"
        )
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        f"Machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"torch {torch.__version__}, device {args.device}, {torch.get_num_threads()} thread(s). "
        f"{models}; unconditional sampling, temperature 1; best of {args.repeats} batch(es). "
        "× softmax KV cache / × softmax recompute: images/s over softmax's step (preallocated KV "
        "cache) / prefix recompute at the same requested batch (`max`: each row at its own "
        "largest batch that fits).\n",
        f"For context, the paper: {PAPER}\n",
        "| backend |"
        + (" run | train step |" if checkpoint_mode else "")
        + " decoding | batch | pixels/image | seconds/batch | images/s | ms per pixel step "
        "| × softmax KV cache | × softmax recompute |",
        "|---|" + ("---|---|" if checkpoint_mode else "") + "---|---|---|---|---|---|---|---|",
    ]
    method = {"step": "step (recurrent / KV cache)", "recompute": "prefix recompute"}
    for r in rows:
        batch = f"max → {r['batch']}" if r.get("requested_batch") == "max" else r["batch"]
        run = f" {r['run']} | {r['train_step']} |" if checkpoint_mode else ""
        lines.append(
            f"| `{r['backend']}` |{run} {method[r['method']]} | {batch} | {r['tokens']} "
            f"| {r['seconds']} | {r['images_per_s']} | {r['ms_per_pixel']} "
            f"| {r['vs_softmax_kv_cache']} | {r['vs_softmax_recompute']} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def histogram_report(args: argparse.Namespace) -> dict[str, float]:
    """Histogram bits/dim of ``args.split`` (fitted on train): all pixels and pixels i ≥ k."""
    data = PixelDataModule(
        source=args.source, image_size=args.image_size, levels=args.levels, root=args.root
    )
    data.setup("fit")
    train, evaluated = data.datasets["train"].pixels, data.datasets[args.split].pixels
    k = args.observed_pixels
    if k is None:  # ImageGenerationTask's default: the top round(0.38 · H) rows
        k = max(1, round(DEFAULT_OBSERVED_FRACTION * data.height)) * data.width
    result = {
        "all": histogram_bits_per_dim(train, evaluated, args.levels, smoothing=args.smoothing),
        "held_out": histogram_bits_per_dim(
            train, evaluated, args.levels, smoothing=args.smoothing, held_out_from=k
        ),
    }
    print(
        f"{args.source} {data.height}x{data.width}, {args.levels} levels, per-pixel histogram "
        f"fitted on train ({len(train)} images, add-{args.smoothing} over the "
        f"{len(train.unique())} levels used), {args.split} split ({len(evaluated)} images): "
        f"{result['all']:.4f} bits/dim on all {data.seq_len} pixels, {result['held_out']:.4f} "
        f"on the held-out pixels i >= {k}"
    )
    return result


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


def _batch(text: str) -> str:
    if text != "max" and not (text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"a batch is a positive int or 'max', got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.benchmarks.generation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--backends", nargs="*", default=[], help="name[:key=value,...]")
    parser.add_argument(
        "--checkpoints", nargs="*", default=[], type=Path, help="trained image checkpoints"
    )
    parser.add_argument(
        "--recompute",
        nargs="*",
        default=[],
        help="also timed uncached: backend specs (--backends); backend names, specs or run "
        "folders (--checkpoints, where softmax always is)",
    )
    parser.add_argument(
        "--recompute-max-batch",
        "--recompute_max_batch",
        type=int,
        default=2**31,
        help="time prefix recompute (--checkpoints) only at batches up to this: on a CPU it "
        "costs O(N²) per image (~100 s per 28×28 image at batch 1), hours at batch 32",
    )
    parser.add_argument("--out", type=Path, default=Path("out/image_throughput"))
    parser.add_argument("--image-size", "--image_size", type=int, default=28)
    parser.add_argument("--batch", type=int, default=32, help="batch of --backends")
    parser.add_argument(
        "--batches", nargs="+", type=_batch, default=["1", "32"], help="of --checkpoints; or max"
    )
    parser.add_argument("--memory-budget-gb", "--memory_budget_gb", type=float, default=8.0)
    parser.add_argument("--max-batch-limit", "--max_batch_limit", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--levels", type=int, default=256)
    parser.add_argument("--d-model", "--d_model", type=int, default=64)
    parser.add_argument("--num-heads", "--num_heads", type=int, default=4)
    parser.add_argument("--num-layers", "--num_layers", type=int, default=2)
    parser.add_argument("--d-ff", "--d_ff", type=int, default=256)
    parser.add_argument(
        "--histogram", action="store_true", help="print the per-pixel histogram bits/dim"
    )
    parser.add_argument("--source", default="digits", help="--histogram: image source")
    parser.add_argument("--root", default="data", help="--histogram: folder of MNIST/raw/")
    parser.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument("--smoothing", type=float, default=0.5)
    parser.add_argument(
        "--observed-pixels",
        "--observed_pixels",
        type=int,
        help="--histogram: k; default the top round(0.38·H) rows",
    )
    parser.add_argument(
        "--decode-csv", "--decode_csv", type=Path, help="CSV of `benchmark decode` to plot"
    )
    parser.add_argument(
        "--decode-png", "--decode_png", type=Path, default=Path("out/decode_latency.png")
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.backends and args.checkpoints:
        parser.error("give --backends (random models) or --checkpoints (trained), not both")
    if args.histogram:
        histogram_report(args)
    if args.decode_csv is not None:
        log.info("wrote %s", plot_decode(args.decode_csv, args.decode_png))
    if args.checkpoints:
        try:  # every checkpoint is read before any is timed: a bad path fails at once
            models = [load_pixel_model(path) for path in args.checkpoints]
        except CheckpointError as err:
            parser.exit(2, f"{parser.prog}: error: {err}\n")
        rows = [
            row
            for path, model in zip(args.checkpoints, models, strict=True)
            for row in measure_checkpoint(path, model, args=args)
        ]
    else:
        jobs = [(spec, "step") for spec in args.backends]
        jobs += [(spec, "recompute") for spec in args.recompute]
        rows = [measure(spec, method, args=args) for spec, method in jobs]
    if rows:
        command = "python -m attn_lightning.benchmarks.generation " + shlex.join(argv)
        write_throughput(rows, args.out, command, args)
        log.info("wrote %s.md and %s.csv", args.out, args.out)


if __name__ == "__main__":
    main()
