"""Command line of ``python -m attn_lightning.benchmark {latency,decode,approx,kernels,model}``.

Every subcommand prints its markdown table(s) on stdout, logs progress on stderr, and writes
``<out>/<tag>.csv``, ``<out>/<tag>.md`` and PNG figures, each recording the machine, versions
and settings (see ``commands``). Backends are ``name[:key=value,...]`` (see ``specs``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from attn_lightning.attention import available_attentions
from attn_lightning.benchmarks import approximation as approx
from attn_lightning.benchmarks.commands import (
    DTYPES,
    cmd_approx,
    cmd_decode,
    cmd_kernels,
    cmd_latency,
    cmd_model,
)
from attn_lightning.benchmarks.measure import SDPA_KERNELS
from attn_lightning.benchmarks.model_step import MODELS
from attn_lightning.benchmarks.protocols import MODES, PROTOCOLS
from attn_lightning.benchmarks.specs import BackendSpec, parse_backend

# The backends of the blog's comparison: the default of the ``model`` subcommand.
MODEL_BACKENDS = ("softmax", "linear", "performer", "polysketch")


def default_backends() -> list[str]:
    """Every registered backend with its defaults (softmax, the baseline, first)."""
    return sorted(available_attentions(), key=lambda name: name != "softmax")


def backend_arg(spec: str) -> BackendSpec:
    try:
        return parse_backend(spec)
    except ValueError as err:  # argparse shows ArgumentTypeError messages verbatim
        raise argparse.ArgumentTypeError(str(err)) from err


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--out",
        type=Path,
        default=Path("out/benchmarks"),
        help="directory for the CSV, markdown and PNG files",
    )
    common.add_argument("--tag", help="file name stem (default per subcommand)")
    timed = argparse.ArgumentParser(add_help=False)
    timed.add_argument(
        "--backends",
        nargs="+",
        type=backend_arg,
        default=None,
        help="name[:key=value,...], e.g. polysketch:sketch_size=32 "
        f"(default: {' '.join(default_backends())})",
    )
    timed.add_argument("--batch", type=int, help="B (default: the protocol's)")
    timed.add_argument("--heads", type=int, help="H (default: the protocol's)")
    timed.add_argument("--head-dim", type=int, help="D = Dv (default: the protocol's)")
    timed.add_argument("--repeats", type=int, default=5)
    timed.add_argument("--warmup", type=int, default=2)
    timed.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")

    lat = sub.add_parser(
        "latency",
        parents=[common, timed],
        help="forward / forward+backward time, peak memory and counted FLOPs vs N",
    )
    lat.add_argument("--protocol", choices=sorted(PROTOCOLS), default="small-batch")
    lat.add_argument("--lengths", nargs="+", type=int, help="N values (default: the protocol's)")
    lat.add_argument("--tokens", type=int, help="B·N for constant-tokens (default 65536)")
    lat.add_argument("--causal", choices=["both", "causal", "noncausal"], default="both")
    lat.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    lat.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    lat.add_argument(
        "--budget",
        type=float,
        default=5.0,
        help="seconds per point; slower points are cut or skipped with an estimate",
    )
    lat.add_argument(
        "--max-memory-gb",
        type=float,
        help="skip points estimated above this (default: 50%% of available RAM "
        "on CPU, 90%% of free GPU memory)",
    )
    lat.add_argument(
        "--sdpa-kernel",
        choices=SDPA_KERNELS,
        help="force SDPA's kernel for softmax (default: flash on CUDA in half "
        "precision, else auto)",
    )
    lat.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    lat.add_argument("--no-plots", action="store_true")
    lat.add_argument(
        "--matmul-size",
        type=int,
        default=2048,
        help="n of the n×n float32 GEMM measured as the roofline",
    )
    lat.add_argument("--csv", type=Path, help="also write the rows as CSV here")
    lat.set_defaults(func=cmd_latency)

    dec = sub.add_parser("decode", parents=[common, timed], help="per-token step() latency")
    dec.add_argument("--contexts", nargs="+", type=int, default=[1024, 4096, 16384, 65536])
    dec.set_defaults(func=cmd_decode)

    app = sub.add_parser("approx", parents=[common], help="relative error vs exact softmax")
    app.add_argument(
        "--experiments", nargs="+", choices=approx.EXPERIMENTS, default=list(approx.EXPERIMENTS)
    )
    app.add_argument("--features", nargs="+", type=int, default=[16, 32, 64, 128, 256, 512, 1024])
    app.add_argument(
        "--stds", nargs="+", type=float, default=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
    )
    app.add_argument("--sketch-sizes", nargs="+", type=int, default=[4, 8, 16, 32, 64, 128])
    app.add_argument("--degrees", nargs="+", type=int, default=[2, 4, 6, 8, 10, 12, 16])
    app.add_argument("--draws", type=int, default=10)
    app.add_argument("--length", type=int, default=256)
    app.add_argument("--heads", type=int, default=4)
    app.add_argument("--head-dim", type=int, default=64)
    app.add_argument(
        "--std",
        nargs="+",
        type=float,
        default=[0.5, 1.0],
        help="σ of q, k in the performer/sketch/degree sweeps (one curve each)",
    )
    app.add_argument("--causal", action="store_true")
    app.set_defaults(func=cmd_approx)

    ker = sub.add_parser("kernels", parents=[common], help="similarity vs angle")
    ker.add_argument(
        "--checkpoint",
        type=Path,
        help="Lightning checkpoint or state dict with *coefficient_logits",
    )
    ker.add_argument("--degrees", nargs="+", type=int, default=[2, 4, 8])
    ker.add_argument(
        "--learned-degree",
        type=int,
        default=4,
        help="degree of the 1/i! curve drawn without a checkpoint",
    )
    ker.add_argument("--head-dim", type=int, default=64, help="D of the elu+1 / Performer pairs")
    ker.add_argument("--pairs", type=int, default=256, help="random pairs per angle")
    ker.add_argument("--norm", type=float, default=1.0, help="‖x‖ = ‖y‖ (1: unit vectors)")
    ker.add_argument("--num-features", type=int, default=64, help="Performer m")
    ker.set_defaults(func=cmd_kernels)

    mod = sub.add_parser(
        "model",
        parents=[common],
        help="tokens/s of a whole training step of the real models, and its attention share",
    )
    mod.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    mod.add_argument(
        "--backends",
        nargs="+",
        type=backend_arg,
        default=[parse_backend(s) for s in MODEL_BACKENDS],
        help=f"name[:key=value,...] (default: {' '.join(MODEL_BACKENDS)})",
    )
    mod.add_argument("--lengths", nargs="+", type=int, default=[256, 1024, 4096, 16384])
    mod.add_argument("--widths", nargs="+", type=int, default=[64, 256], help="d_model values")
    mod.add_argument("--layers", type=int, default=2)
    mod.add_argument("--heads", type=int, default=4, help="H; head_dim = width / H")
    mod.add_argument("--batch", type=int, default=1)
    mod.add_argument("--repeats", type=int, default=3)
    mod.add_argument("--warmup", type=int, default=1)
    mod.add_argument(
        "--budget",
        type=float,
        default=20.0,
        help="seconds per point; a step estimated slower is skipped (and larger N with it)",
    )
    mod.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    mod.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    mod.set_defaults(func=cmd_model)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "backends", "absent") is None:
        args.backends = [parse_backend(s) for s in default_backends()]
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    sys.stdout.write(args.func(args))
    return 0
