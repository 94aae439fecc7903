"""``profile``: ``torch.profiler``'s top kernels of each contender at one shape.

    python -m lab.benchmark profile --shape 4x32x4096x128 --contenders flash linear:fla \\
        --device cuda --out out/profile

Per contender: its ``Call`` (``contenders``), ``warmup`` untimed calls, then ``calls_profiled``
calls under ``torch.profiler`` (CPU and CUDA activity). Its kernels (device-side events) are ranked
by their total CUDA time; the top ``top`` are kept with their count per call, ms per call and
share of the contender's CUDA time. On a CPU the CPU operators stand in for
kernels. Written to ``<out>/<tag>.csv`` and ``.md`` after each contender: the reading of *why*
a kernel is slow is then measured, not guessed (what it found: docs/benchmarks.md, "Results: GPU").
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from attn_lightning.records import environment, markdown_meta, markdown_table, write_csv
from lab.benchmarks import contenders
from lab.benchmarks.arguments import DTYPES, add_output
from lab.benchmarks.measure import synchronize

log = logging.getLogger(__name__)


@dataclass
class KernelShare:
    """One kernel (or CPU operator) of one contender's profiled calls."""

    contender: str
    rank: int
    kernel: str
    per_call: float  # launches per call
    ms_per_call: float
    share: float  # of the contender's device time
    note: str = ""


def _device_us(event: object, cuda: bool) -> float:
    """An averaged event's self time on the device (µs): CUDA kernels, or CPU operators."""
    names = ("self_device_time_total", "self_cuda_time_total") if cuda else ("self_cpu_time_total",)
    for name in names:
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def top_kernels(
    prof: profile, label: str, *, calls_profiled: int, top: int, cuda: bool
) -> list[KernelShare]:
    """The ``top`` kernels of a finished profile by device time (see the module doc)."""
    events = []
    for event in prof.key_averages():
        on_device = str(getattr(event, "device_type", "")).endswith("CUDA")
        if on_device == cuda:
            us = _device_us(event, cuda)
            if us > 0:
                events.append((us, event.key, event.count))
    total = sum(us for us, _, _ in events) or 1.0
    events.sort(reverse=True)
    return [
        KernelShare(
            label, i + 1, key[:160], count / calls_profiled, us / 1e3 / calls_profiled, us / total
        )
        for i, (us, key, count) in enumerate(events[:top])
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``profile``."""
    add_output(parser)
    parser.add_argument("--shape", type=contenders.Shape.parse, required=True)
    parser.add_argument(
        "--contenders", nargs="+", choices=list(contenders.CONTENDERS), required=True
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, dest="calls_profiled")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--device", default="cuda")


def profile_one(label: str, args: argparse.Namespace, device: torch.device) -> list[KernelShare]:
    """The top kernels of ``label``, or one row saying why there are none."""
    cuda = device.type == "cuda"
    try:
        call = contenders.CONTENDERS[label][1](args.shape, device, DTYPES[args.dtype])
        for _ in range(args.warmup):
            call.run()
        synchronize(device)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(args.calls_profiled):
                call.run()
            synchronize(device)
        found = top_kernels(
            prof, label, calls_profiled=args.calls_profiled, top=args.top, cuda=cuda
        )
        return found or [KernelShare(label, 0, "", 0, 0, 0, "the profiler saw no kernel")]
    except contenders.Unavailable as err:
        return [KernelShare(label, 0, "", 0, 0, 0, f"not run: {err}")]
    except Exception as err:  # one contender's failure (a Triton error too) must not cost the rest
        log.exception("profile: %s failed", label)
        return [KernelShare(label, 0, "", 0, 0, 0, f"{type(err).__name__}: {str(err)[:200]}")]


def run(args: argparse.Namespace) -> str:
    """Profile each contender; write ``<out>/<tag>.csv`` and ``.md`` after each, return the
    last table."""
    device, tag = torch.device(args.device), args.tag or "top_kernels"
    meta = environment(
        device,
        command=args.command_line,
        shape=f"{args.shape} (BxHxNxD), {args.dtype}, causal forward + backward",
        profiled=f"{args.calls_profiled} calls after {args.warmup} warm-ups",
        ranked_by="CUDA time of each kernel" if device.type == "cuda" else "CPU self time",
    )
    rows: list[KernelShare] = []
    text = ""
    for label in args.contenders:
        rows += profile_one(label, args, device)
        args.out.mkdir(parents=True, exist_ok=True)
        write_csv(args.out / f"{tag}.csv", rows, meta)
        text = f"# {tag}\n\n{markdown_meta(meta)}\n\n{table(rows)}\n"
        (args.out / f"{tag}.md").write_text(text)
    return text


def table(rows: Sequence[KernelShare]) -> str:
    """One markdown table: contender, rank, kernel, launches and ms per call, share."""
    body = [
        [
            r.contender,
            r.rank,
            f"`{r.kernel}`",
            f"{r.per_call:g}",
            f"{r.ms_per_call:.3g}",
            f"{r.share:.0%}",
        ]
        if not r.note
        else [r.contender, "", r.note, "", "", ""]
        for r in rows
    ]
    return markdown_table(["contender", "#", "kernel", "per call", "ms per call", "share"], body)
