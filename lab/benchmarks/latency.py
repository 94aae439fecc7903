"""``latency``: forward / forward+backward time, peak memory and counted FLOPs of one attention
call against N, every backend, causal and not, under one of the ``protocols``.

Measured by ``scaling`` (one budgeted series per backend, mask and mode); this module holds the
command: its arguments, the tables (``report.scaling_table``, ``report.flops_table``), the notes
printed under them, and the figures (``report.scaling_figure``).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from attn_lightning.attention import attention_class
from lab.benchmarks import report, scaling
from lab.benchmarks.measure import (
    DTYPES,
    SDPA_KERNELS,
    BackendSpec,
    add_output,
    add_timing,
    available_memory_bytes,
    budget_settings,
    matmul_gflops,
    timing_method,
)
from lab.benchmarks.scaling import MODES, PROTOCOLS, TimingProtocol

log = logging.getLogger("lab.benchmark")

CAUSAL_FLAGS = {"both": [False, True], "causal": [True], "noncausal": [False]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``latency``."""
    add_output(parser)
    add_timing(parser)
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="small-batch")
    parser.add_argument("--lengths", nargs="+", type=int, help="N values (default: the protocol's)")
    parser.add_argument("--tokens", type=int, help="B·N for constant-tokens (default 65536)")
    parser.add_argument("--causal", choices=sorted(CAUSAL_FLAGS), default="both")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument(
        "--budget",
        type=float,
        default=5.0,
        help="seconds per point; slower points are cut or skipped with an estimate",
    )
    parser.add_argument(
        "--max-memory-gb",
        type=float,
        help="skip points estimated above this (default: 50%% of available RAM "
        "on CPU, 90%% of free GPU memory)",
    )
    parser.add_argument(
        "--sdpa-kernel",
        choices=SDPA_KERNELS,
        help="force SDPA's kernel for softmax (default: flash on CUDA in half "
        "precision, else auto)",
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory pass")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--matmul-size",
        type=int,
        default=2048,
        help="n of the n×n float32 GEMM measured as the roofline",
    )
    parser.add_argument("--csv", type=Path, help="also write the rows as CSV here")


def run(args: argparse.Namespace) -> str:
    """Measure, write ``<out>/<tag>.{csv,md}`` and the figures; return the markdown printed."""
    device = torch.device(args.device)
    base = PROTOCOLS[args.protocol]
    protocol = TimingProtocol(
        name=base.name,
        lengths=tuple(args.lengths or base.lengths),
        heads=args.heads or base.heads,
        head_dim=args.head_dim or base.head_dim,
        batch=args.batch or base.batch,
        tokens=None if args.batch else (args.tokens or base.tokens),
    )
    half = args.dtype != "float32"
    kernel = args.sdpa_kernel or ("flash" if device.type == "cuda" and half else "auto")
    limit = args.max_memory_gb * 2**30 if args.max_memory_gb else None
    if limit is None:
        free = available_memory_bytes(device)
        limit = int(free * (0.9 if device.type == "cuda" else 0.5)) if free else None
    settings = scaling.Settings(
        **budget_settings(args),
        max_memory_bytes=limit,
        sdpa_kernel=kernel,
        measure_memory=not args.no_memory,
    )
    gemm = matmul_gflops(device, size=args.matmul_size)
    log.info("%s: fp32 matmul %.1f GFLOP/s; %s", device, gemm, protocol.describe())
    causal_flags = CAUSAL_FLAGS[args.causal]
    rows = scaling.run_scaling(
        args.backends,
        protocol=protocol,
        settings=settings,
        causal_flags=causal_flags,
        modes=args.modes,
        dtype_name=args.dtype,
    )
    per_sample = protocol.tokens is not None
    meta = report.environment(
        device,
        command=args.command_line,
        fp32_matmul_gflops=f"{gemm:.1f}",
        protocol=protocol.describe(),
        dtype=args.dtype,
        sdpa_kernel=kernel,
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
        max_memory_gib=f"{limit / 2**30:.1f}" if limit else "none",
        memory_measure=(
            "torch.cuda.max_memory_allocated above the start level"
            if device.type == "cuda"
            else "peak running sum of torch.profiler CPU allocator events"
        ),
        timing=timing_method(device),
    )
    text = tables(rows, args.modes, per_sample=per_sample, memory=not args.no_memory)
    text += "".join(f"\n\n{note}" for note in latency_notes(args.backends, causal_flags))
    tag = args.tag or f"scaling_{protocol.name}_{device.type}_{args.dtype}"
    if args.csv:
        report.write_csv(args.csv, rows, meta)
    report.write_report(args.out, tag, meta, rows, text)
    if not args.no_plots:
        caption = (
            f"{meta['device']} · torch {torch.__version__} · {protocol.describe()} · {args.dtype}"
        )
        figures(rows, args.out, tag, protocol, caption, per_sample, memory=not args.no_memory)
    return f"# {meta['device']}, fp32 matmul {gemm:.1f} GFLOP/s\n\n{text}\n"


def tables(
    rows: Sequence[scaling.Row], modes: Sequence[str], *, per_sample: bool, memory: bool
) -> str:
    """Per mode the time (and peak-memory) table, then the forward FLOPs per call."""
    unit = "ms per sample" if per_sample else "ms per call"
    parts = []
    for mode in modes:
        title = report.MODE_TITLES[mode]
        value = "ms_per_sample" if per_sample else "ms"
        parts.append(
            f"## {title}: time ({unit}; speed-up vs softmax; achieved GFLOP/s)\n\n"
            + report.scaling_table(rows, mode=mode, value=value)
        )
        if memory:
            parts.append(
                f"## {title}: peak memory (MiB)\n\n"
                + report.scaling_table(rows, mode=mode, value="peak_mb")
            )
    parts.append(
        "## forward FLOPs per call (counted, see docs/benchmarks.md, FLOPs per call; "
        "[rate achieved in the forward timing])\n\n" + report.flops_table(rows)
    )
    return "\n\n".join(parts)


def figures(
    rows: Sequence[scaling.Row],
    out: Path,
    tag: str,
    protocol: TimingProtocol,
    caption: str,
    per_sample: bool,
    *,
    memory: bool,
) -> None:
    """``<tag>_{time,memory,speedup,flops}.png`` (memory only when it was measured)."""
    for value, ylabel, name in (
        ("time", "ms", "time"),
        ("peak_mb", "peak MiB", "memory"),
        ("speedup", "speed-up vs softmax", "speedup"),
    ):
        if value == "peak_mb" and not memory:
            continue
        report.scaling_figure(
            rows,
            out / f"{tag}_{name}.png",
            value=value,
            ylabel=ylabel,
            title=f"{protocol.name}: {name} vs N",
            caption=caption,
            per_sample=per_sample,
        )
    # One panel column: the forward count is the same on fwd and fwdbwd rows.
    counted = {(r.backend, r.causal, r.n): replace(r, mode="fwd") for r in rows}
    report.scaling_figure(
        list(counted.values()),
        out / f"{tag}_flops.png",
        value="fwd_flops",
        ylabel="forward FLOPs per call",
        title=f"{protocol.name}: counted forward FLOPs vs N",
        caption=caption,
    )


def latency_notes(specs: Sequence[BackendSpec], causal_flags: Sequence[bool]) -> list[str]:
    """The lines printed under the latency tables: what was left out and why, and how the
    backends whose benchmark form differs from their use in a model were run."""
    notes = []
    names = {spec.name for spec in specs}
    if True in causal_flags:
        no_causal = [s.label for s in specs if not attention_class(s.name).supports_causal]
        if no_causal:
            notes.append(
                f"No causal form, so no causal rows (left out, not failed): {', '.join(no_causal)}."
            )
    if "pool" in names:
        notes.append(
            "`pool`: self-attention only (L = S); no spatial grid is given here, so its window is "
            "`pool_size` consecutive tokens of the sequence (1-D), where DETR's encoder pools "
            "k×k on its h×w feature map. Its FLOPs are the window sums: it has no product."
        )
    if "optimization" in names:
        notes.append(
            "`optimization`: eval mode, so no random tokens join the dictionary (R = 0; they "
            "are a training-time regulariser); the values dictionary needs Dv = D, which every "
            "protocol has."
        )
    notes.append(
        "FLOPs: forward only (the same figure on forward + backward rows), counted from each "
        "backend's algorithm: matmuls as 2·m·n·k plus factorisations; element-wise work ignored."
    )
    return notes
