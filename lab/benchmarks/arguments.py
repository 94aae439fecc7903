"""Command-line pieces the benchmarks share: output flags, timing flags, backend specs, dtypes.

Each benchmark module's ``add_arguments(parser)`` takes what it needs from here; ``cli`` builds
one subparser per row of its command table. A run that finds its arguments unusable raises
``UsageError``, which ``cli.main`` turns into a one-line usage error (exit status 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from attn_lightning.attention import available_attentions
from lab.benchmarks.specs import BackendSpec, parse_backend

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class UsageError(ValueError):
    """Arguments that parse but cannot be used together (or name a file that cannot be used)."""


def default_device() -> str:
    """``cuda`` where a GPU is visible, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_backends() -> list[str]:
    """Every registered backend with its defaults (softmax, the baseline, first)."""
    return sorted(available_attentions(), key=lambda name: name != "softmax")


def backend_arg(spec: str) -> BackendSpec:
    """argparse ``type=`` of a backend spec: ``name[:key=value,...]`` checked by the registry."""
    try:
        return parse_backend(spec)
    except ValueError as err:  # argparse shows ArgumentTypeError messages verbatim
        raise argparse.ArgumentTypeError(str(err)) from err


def add_backends(
    parser: argparse.ArgumentParser, defaults: list[str], **kwargs: Any
) -> argparse.Action:
    """``--backends name[:key=value,...] ...`` defaulting to ``defaults`` (parsed now)."""
    return parser.add_argument(
        "--backends",
        nargs="+",
        type=backend_arg,
        default=[parse_backend(spec) for spec in defaults],
        **kwargs,
    )


def add_output(parser: argparse.ArgumentParser) -> None:
    """``--out`` (folder of the CSV, markdown and PNG files) and ``--tag`` (their name stem)."""
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("out/benchmarks"),
        help="directory for the CSV, markdown and PNG files",
    )
    parser.add_argument("--tag", help="file name stem (default per subcommand)")


def add_timing(parser: argparse.ArgumentParser) -> None:
    """The flags of a timed attention call: backends, its shape (None: the command's default),
    repeats, warm-up and device."""
    add_backends(
        parser,
        default_backends(),
        help="name[:key=value,...], e.g. polysketch:sketch_size=32 "
        f"(default: {' '.join(default_backends())})",
    )
    parser.add_argument("--batch", type=int, help="B (default: the protocol's)")
    parser.add_argument("--heads", type=int, help="H (default: the protocol's)")
    parser.add_argument("--head-dim", type=int, help="D = Dv (default: the protocol's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default=default_device())


def budget_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The ``Settings`` fields of a budgeted series (``budget``) from ``--device``, ``--dtype``,
    ``--repeats``, ``--warmup`` and ``--budget``."""
    return {
        "device": torch.device(args.device),
        "dtype": DTYPES[args.dtype],
        "repeats": args.repeats,
        "warmup": args.warmup,
        "budget_s": args.budget,
    }


def timing_method(device: torch.device) -> str:
    """How a point's time was taken, for the results' provenance."""
    return "CUDA events" if device.type == "cuda" else "time.perf_counter"
