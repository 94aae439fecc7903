"""``bandwidth``: the device's copy bandwidth, and each timed call's achieved bandwidth against it.

    python -m lab.benchmark bandwidth --device cuda --size-mb 1024 --out out/bandwidth

The command times a large device-to-device copy (``dst.copy_(src)``; CUDA events on a GPU,
median of ``repeats`` after ``warmup``) and writes ``<out>/copy.csv``: the device's copy
bandwidth, bytes read plus bytes written over time (1 GiB tensors: far past L2).

A causal forward + backward of attention on ``(B, H, N, D)`` q, k, v moves at least
``8 · B·H·N·D · itemsize`` bytes (``bytes_moved``): q, k, v and out, then out's gradient and
q's, k's and v's, each read or written once at the call's dtype. Its time at the copy
bandwidth is the memory roofline (``roofline_ms``); a row's ``× roofline`` is its time over that.
It is a lower bound of the traffic (a real backward reads q, k, v again), so ``× roofline`` is an
upper bound of how far a kernel is from the memory limit.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from attn_lightning.records import environment, markdown_table, read_csv, write_csv
from lab.benchmarks.arguments import DTYPES, timing_method
from lab.benchmarks.contenders import LINEAR_OUTPUTS, Shape
from lab.benchmarks.measure import synchronize, time_calls

FILE = "copy.csv"
TENSORS = 8  # q, k, v, out and their four gradients
FORMULA = (
    "bytes moved = 8 · B·H·N·D · bytes per element (q, k, v, out and their gradients, each read "
    "or written once at the call's dtype: a lower bound); GB/s = bytes / time; roofline = bytes "
    "/ the copy bandwidth; × roofline = time / roofline"
)
ROWS = ("flash", *LINEAR_OUTPUTS)  # the attention calls the formula describes


def bytes_moved(shape: Shape, dtype_name: str) -> int:
    """The bytes a causal fwd+bwd at ``shape`` must move at ``dtype_name`` (module doc).

    Raises:
        ValueError: ``dtype_name`` is not one of ``arguments.DTYPES``.
    """
    if dtype_name not in DTYPES:
        raise ValueError(f"dtype {dtype_name!r}: expected one of {sorted(DTYPES)}")
    elements = shape.batch * shape.heads * shape.n * shape.head_dim
    return TENSORS * elements * DTYPES[dtype_name].itemsize


def roofline_ms(shape: Shape, dtype_name: str, copy_gb_s: float) -> float:
    """``bytes_moved`` at the copy bandwidth (GB/s = 1e9 bytes/s), in ms."""
    return bytes_moved(shape, dtype_name) / (copy_gb_s * 1e9) * 1e3


def measure_copy(device: torch.device, *, size_mb: float, repeats: int, warmup: int) -> float:
    """GB/s of ``dst.copy_(src)`` for ``size_mb`` MB tensors: read + write over the median time."""
    count = int(size_mb * 1e6) // 4
    src = torch.empty(count, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    for _ in range(warmup):
        dst.copy_(src)
    synchronize(device)
    seconds = statistics.median(time_calls(lambda: dst.copy_(src), repeats=repeats, device=device))
    return 2 * count * 4 / seconds / 1e9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``bandwidth``."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size-mb", type=float, default=1024.0, help="of each of the 2 tensors")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("out/bandwidth"), help="result folder")


def run(args: argparse.Namespace) -> str:
    """Measure the copy bandwidth into ``<out>/copy.csv``; return one line saying it."""
    device = torch.device(args.device)
    gb_s = measure_copy(device, size_mb=args.size_mb, repeats=args.repeats, warmup=args.warmup)
    meta = environment(device, command=args.command_line, timing=timing_method(device))
    args.out.mkdir(parents=True, exist_ok=True)
    row = {"gb_s": gb_s, "size_mb": args.size_mb, "repeats": args.repeats, "device": str(device)}
    write_csv(args.out / FILE, [row], meta)
    return f"copy bandwidth on {device}: {gb_s:,.0f} GB/s ({args.size_mb:g} MB tensors)\n"


def read_copy(folder: Path) -> float | None:
    """The copy bandwidth in GB/s of ``<folder>/copy.csv``, or None if unmeasured."""
    path = folder / FILE
    try:
        records = read_csv(path)[1] if path.is_file() else []
    except (OSError, ValueError):  # half-written by a killed run
        return None
    return float(records[0]["gb_s"]) if records and records[0].get("gb_s") else None


@dataclass(frozen=True)
class Achieved:
    """One timed row's bandwidth: bytes, GB/s and, given the copy bandwidth, × roofline."""

    contender: str
    shape: Shape
    dtype: str
    ms: float
    bytes: int
    gb_s: float
    roofline_ms: float | None
    times_roofline: float | None


def achieved(
    contender: str, shape: Shape, dtype: str, ms: float, copy_gb_s: float | None
) -> Achieved:
    """The bandwidth of one row timed at ``ms`` (``copy_gb_s`` None: no roofline)."""
    moved = bytes_moved(shape, dtype)
    roof = None if copy_gb_s is None else roofline_ms(shape, dtype, copy_gb_s)
    return Achieved(
        contender, shape, dtype, ms, moved, moved / (ms * 1e-3) / 1e9, roof, roof and ms / roof
    )


def table(rows: Sequence[Achieved]) -> str:
    """Per timed attention row: MB moved, ms, GB/s, roofline ms and × roofline."""
    body = [
        [
            a.contender,
            str(a.shape),
            a.dtype,
            f"{a.bytes / 1e6:,.1f}",
            f"{a.ms:.3g}",
            f"{a.gb_s:,.0f}",
            "" if a.roofline_ms is None else f"{a.roofline_ms:.3g}",
            "" if a.times_roofline is None else f"{a.times_roofline:.2f}×",
        ]
        for a in rows
    ]
    header = ["contender", "shape BxHxNxD", "dtype", "MB moved", "ms", "GB/s", "roofline ms"]
    return markdown_table([*header, "× roofline"], body)
