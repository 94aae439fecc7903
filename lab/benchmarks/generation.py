"""``generation``: images/s of whole-image sampling per backend, and the histogram baseline.

    python -m lab.benchmark generation --image-size 28 --batch 32 \\
        --backends softmax linear performer:num_features=64 polysketch:sketch_size=32 \\
        --recompute softmax --out docs/results/image_throughput
    python -m lab.benchmark generation --checkpoints \\
        checkpoints/image/<softmax-run>/last.ckpt checkpoints/image/<linear-run>/last.ckpt \\
        --batches 1 32 max [--memory-budget-gb 8] --out docs/results/image_throughput_trained
    python -m lab.benchmark generation --histogram --image-size 28 --levels 256
    python -m lab.benchmark generation --decode-csv out/decode/decode_cpu.csv \\
        --decode-png docs/results/figures/decode_latency.png     # plot only (``decode``)

A ``PixelTransformer`` samples ``batch`` whole images unconditionally (temperature 1) through
``models/decoding.py``: ``step`` (recurrent state, or a preallocated KV cache for softmax) or
prefix recompute (the uncached reference). ``--backends``: random-weight models (speed does not
depend on the weights); ``--checkpoints``: trained ``ImageGenerationTask`` checkpoints at every
``--batches`` entry, ``max`` being the largest batch whose peak memory, projected from a batch of
4, fits ``--memory-budget-gb`` (halved again on a real out-of-memory). Measured and written by
``throughput``: images/s set against softmax's step and prefix recompute at the same requested
batch, with the paper's numbers beside them.
Histogram (``histogram_report``): bits/dim of an independent per-pixel histogram fitted on the
training split, on all pixels and on the held-out completion pixels.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attn_lightning.cli.checkpoints import (
    CheckpointError,
    load_checkpoint,
    load_task,
    saved_class,
)
from attn_lightning.data.pixels import PixelDataModule, histogram_bits_per_dim
from attn_lightning.models.pixel import PixelTransformer
from attn_lightning.tasks.image import DEFAULT_OBSERVED_FRACTION, ImageGenerationTask
from lab.benchmarks import decode
from lab.benchmarks.measure import UsageError
from lab.benchmarks.throughput import measure, measure_checkpoint, write_throughput

log = logging.getLogger("lab.benchmarks.generation")


SIZES = ("image_size", "levels")  # the data's; the model's own are its net spec


def format_attention_spec(attention: Mapping[str, Any]) -> str:
    """A backend dict in the command-line spelling: ``{"name": "performer", "num_features":
    64}`` -> ``"performer:num_features=64"`` (the inverse of ``parse_attention_spec``)."""

    def value(v: Any) -> str:
        return "none" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    options = [f"{k}={value(v)}" for k, v in attention.items() if k != "name"]
    return str(attention["name"]) + (":" + ",".join(options) if options else "")


def _net_sizes(net: Mapping[str, Any]) -> list[str]:
    return [f"{k}={net[k]}" for k in ("d_model", "num_heads", "num_layers", "d_ff", "output")]


def load_pixel_model(path: str | Path) -> tuple[PixelTransformer, dict[str, Any]]:
    """The trained model (eval mode, CPU) of an ``ImageGenerationTask`` checkpoint, and what
    labels it: ``backend`` (spec), ``name`` (backend name), ``run`` (run folder), ``step``
    (global step) and ``model`` (its sizes).

    Raises:
        CheckpointError: the file is missing, corrupt, or not an image-generation checkpoint;
            the message names the path.
    """
    path = Path(path)
    checkpoint = load_checkpoint(path, flag="--checkpoints")
    foreign = CheckpointError(f"--checkpoints {str(path)!r} is not an image-generation checkpoint")
    class_path = saved_class(checkpoint, "hyper_parameters")
    if class_path is not None and class_path.rsplit(".", 1)[-1] != "ImageGenerationTask":
        raise CheckpointError(f"{foreign} (its task is {class_path})")
    try:
        task = load_task(path, default=ImageGenerationTask, flag="--checkpoints")
    except (TypeError, ValueError, RuntimeError) as err:  # other hparams, missing/extra weights
        reason = " ".join(str(err).split())[:160]
        raise CheckpointError(f"{foreign} ({type(err).__name__}: {reason})") from None
    info = {
        "backend": format_attention_spec(task.attention_config),
        "name": task.attention_config["name"],
        "run": path.parent.name,
        "step": checkpoint.get("global_step", ""),
        "model": " ".join(
            [*(f"{k}={task.hparams[k]}" for k in SIZES), *_net_sizes(task.hparams["net"])]
        ),
    }
    return task.net.eval(), info


def histogram_report(args: argparse.Namespace) -> tuple[dict[str, float], str]:
    """Histogram bits/dim of ``args.split`` (fitted on train): all pixels and pixels i ≥ k.

    Returns:
        ``{"all": ..., "held_out": ...}`` and the line that states them with the data used.
    """
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
    line = (
        f"{args.source} {data.height}x{data.width}, {args.levels} levels, per-pixel histogram "
        f"fitted on train ({len(train)} images, add-{args.smoothing} over the "
        f"{len(train.unique())} levels used), {args.split} split ({len(evaluated)} images): "
        f"{result['all']:.4f} bits/dim on all {data.seq_len} pixels, {result['held_out']:.4f} "
        f"on the held-out pixels i >= {k}"
    )
    return result, line


def _batch(text: str) -> str:
    if text != "max" and not (text.isdigit() and int(text) > 0):
        raise argparse.ArgumentTypeError(f"a batch is a positive int or 'max', got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``generation`` (each also in its old underscore spelling)."""
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


def run(args: argparse.Namespace) -> str:
    """Run the jobs the flags ask for; return what is printed (the histogram line, the
    throughput markdown).

    Raises:
        UsageError: both ``--backends`` and ``--checkpoints``, or a checkpoint that cannot be
            used (before anything is timed).
    """
    if args.backends and args.checkpoints:
        raise UsageError("give --backends (random models) or --checkpoints (trained), not both")
    printed = []
    if args.histogram:
        printed.append(histogram_report(args)[1])
    if args.decode_csv is not None:
        log.info("wrote %s", decode.plot_decode(args.decode_csv, args.decode_png))
    if args.checkpoints:
        try:  # every checkpoint is read before any is timed: a bad path fails at once
            models = [load_pixel_model(path) for path in args.checkpoints]
        except CheckpointError as err:
            raise UsageError(str(err)) from None
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
        printed.append(write_throughput(rows, args.out, args.command_line, args))
        log.info("wrote %s.md and %s.csv", args.out, args.out)
    return "".join(f"{text.rstrip()}\n" for text in printed)
