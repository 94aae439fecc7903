"""The subcommands: run an experiment, print its tables, write CSV / markdown / PNG files.

Each ``cmd_*`` takes the parsed arguments of its subparser (``cli.build_parser``) and returns
the text printed on stdout; files go to ``--out`` under ``--tag`` (default per command).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from attn_lightning.attention import attention_class
from attn_lightning.benchmarks import approximation as approx
from attn_lightning.benchmarks import (
    approximation_report,
    kernel_shapes,
    model_step,
    plots,
    report,
    scaling,
)
from attn_lightning.benchmarks.decode import run_decode
from attn_lightning.benchmarks.measure import available_memory_bytes, matmul_gflops
from attn_lightning.benchmarks.protocols import PROTOCOLS, TimingProtocol
from attn_lightning.benchmarks.specs import BackendSpec

log = logging.getLogger("attn_lightning.benchmark")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _write(out: Path, tag: str, meta: dict, rows: Sequence, tables: str) -> None:
    report.write_csv(out / f"{tag}.csv", rows, meta)
    text = f"# {tag}\n\n{report.markdown_meta(meta)}\n\n{tables}\n"
    (out / f"{tag}.md").write_text(text)
    log.info("wrote %s and %s", out / f"{tag}.csv", out / f"{tag}.md")


def cmd_latency(args: argparse.Namespace) -> str:
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
        device=device,
        dtype=DTYPES[args.dtype],
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
        max_memory_bytes=limit,
        sdpa_kernel=kernel,
        measure_memory=not args.no_memory,
    )
    gemm = matmul_gflops(device, size=args.matmul_size)
    log.info("%s: fp32 matmul %.1f GFLOP/s; %s", device, gemm, protocol.describe())
    causal_flags = {"both": [False, True], "causal": [True], "noncausal": [False]}[args.causal]
    rows = scaling.run_scaling(
        args.backends,
        protocol=protocol,
        settings=settings,
        causal_flags=causal_flags,
        modes=args.modes,
        dtype_name=args.dtype,
    )
    per_sample = protocol.tokens is not None
    time_key = "ms_per_sample" if per_sample else "ms"
    meta = report.environment(
        device,
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
        timing="CUDA events" if device.type == "cuda" else "time.perf_counter",
    )
    unit = "ms per sample" if per_sample else "ms per call"
    tables = []
    for mode in args.modes:
        title = plots.MODE_TITLES[mode]
        tables.append(
            f"## {title}: time ({unit}; speed-up vs softmax; achieved GFLOP/s)\n\n"
            + report.scaling_table(rows, mode=mode, value=time_key)
        )
        if not args.no_memory:
            tables.append(
                f"## {title}: peak memory (MiB)\n\n"
                + report.scaling_table(rows, mode=mode, value="peak_mb")
            )
    tables.append(
        "## forward FLOPs per call (counted, see docs/benchmarks.md, FLOPs per call; "
        "[rate achieved in the forward timing])\n\n" + report.flops_table(rows)
    )
    notes = latency_notes(args.backends, causal_flags)
    text = "\n\n".join(tables) + "".join(f"\n\n{note}" for note in notes)
    tag = args.tag or f"scaling_{protocol.name}_{device.type}_{args.dtype}"
    if args.csv:
        report.write_csv(args.csv, rows, meta)
    _write(args.out, tag, meta, rows, text)
    if not args.no_plots:
        caption = (
            f"{meta['device']} · torch {torch.__version__} · {protocol.describe()} · {args.dtype}"
        )
        for value, ylabel, name in (
            ("time", "ms", "time"),
            ("peak_mb", "peak MiB", "memory"),
            ("speedup", "speed-up vs softmax", "speedup"),
        ):
            if value == "peak_mb" and args.no_memory:
                continue
            plots.scaling_figure(
                rows,
                args.out / f"{tag}_{name}.png",
                value=value,
                ylabel=ylabel,
                title=f"{protocol.name}: {name} vs N",
                caption=caption,
                per_sample=per_sample,
            )
        # One panel column: the forward count is the same on fwd and fwdbwd rows.
        counted = {(r.backend, r.causal, r.n): replace(r, mode="fwd") for r in rows}
        plots.scaling_figure(
            list(counted.values()),
            args.out / f"{tag}_flops.png",
            value="fwd_flops",
            ylabel="forward FLOPs per call",
            title=f"{protocol.name}: counted forward FLOPs vs N",
            caption=caption,
        )
    return f"# {meta['device']}, fp32 matmul {gemm:.1f} GFLOP/s\n\n{text}\n"


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


def cmd_decode(args: argparse.Namespace) -> str:
    device = torch.device(args.device)
    rows = run_decode(
        args.backends,
        contexts=args.contexts,
        batch=args.batch or 4,
        heads=args.heads or 4,
        head_dim=args.head_dim or 64,
        repeats=args.repeats,
        warmup=args.warmup,
        device=device,
    )
    meta = report.environment(device, repeats=args.repeats, warmup=args.warmup)
    contexts = sorted({r.context for r in rows})
    index = {(r.backend, r.context): r.ms for r in rows}
    body = [
        [b, *(f"{index[(b, t)]:.3f}" if (b, t) in index else "" for t in contexts)]
        for b in dict.fromkeys(r.backend for r in rows)
    ]
    text = "## ms per decoded token\n\n" + report.markdown_table(
        ["backend", *(f"T={t}" for t in contexts)], body
    )
    _write(args.out, args.tag or f"decode_{device.type}", meta, rows, text)
    return text + "\n"


def cmd_approx(args: argparse.Namespace) -> str:
    settings = approx.ApproxSettings(
        length=args.length,
        heads=args.heads,
        head_dim=args.head_dim,
        draws=args.draws,
        causal=args.causal,
    )
    rows: list[approx.ApproxRow] = []
    # experiment -> (rows(settings, values, suffix=...), the values swept)
    sweeps: dict[str, tuple[Callable[..., list[approx.ApproxRow]], Sequence[int]]] = {
        "performer": (approx.performer_rows, args.features),
        "sketch": (approx.sketch_rows, args.sketch_sizes),
        "degree": (approx.degree_rows, args.degrees),
    }
    for experiment in args.experiments:
        if experiment == "scale":
            rows += approx.scale_rows(settings, args.stds)
            continue
        sweep, values = sweeps[experiment]
        for std in args.std:  # one curve per σ, named by it when there are several
            suffix = f" σ={std:g}" if len(args.std) > 1 else ""
            rows += sweep(replace(settings, std=std), values, suffix=suffix)
    shape = (
        f"B=1, H={settings.heads}, N={settings.length}, D=Dv={settings.head_dim}, "
        f"causal={settings.causal}, draws={settings.draws}"
    )
    meta = report.environment(
        torch.device("cpu"),
        inputs=shape,
        sweep_stds=args.std,
        dtype="float64",
        seeds="inputs: draw i; features: 10000 + i",
        spread="std over draws in tables; min-max band in figures",
    )
    text = approximation_report.markdown_tables(rows)
    tag = args.tag or "approximation"
    _write(args.out, tag, meta, rows, text)
    caption = (
        f"N={settings.length}, H={settings.heads}, D={settings.head_dim}, "
        f"{settings.draws} draws, σ of q, k = {', '.join(map(str, args.std))} unless "
        f"varied, float64, lines = mean, bands = min-max over draws"
    )
    for experiment in dict.fromkeys(r.experiment for r in rows):
        plots.band_figure(
            approximation_report.figure_panels(rows, experiment),
            args.out / f"{tag}_{experiment}.png",
            title=f"approximation error: {experiment}",
            caption=caption,
            ncols=2 if experiment == "performer" else 1,
        )
    return text + "\n"


def cmd_kernels(args: argparse.Namespace) -> str:
    learned = kernel_shapes.load_learned_coefficients(args.checkpoint) if args.checkpoint else None
    curves = kernel_shapes.kernel_curves(
        degrees=args.degrees,
        learned=learned,
        learned_degree=args.learned_degree,
        dim=args.head_dim,
        pairs=args.pairs,
        norm=args.norm,
        num_features=args.num_features,
    )
    source = str(args.checkpoint) if args.checkpoint else "none: 1/i! initialisation plotted"
    meta = report.environment(
        torch.device("cpu"),
        checkpoint=source,
        norm=args.norm,
        head_dim=args.head_dim,
        pairs=args.pairs,
        performer_features=args.num_features,
    )
    rows = kernel_shapes.curves_to_rows(curves)
    coarse = rows[:: max(1, len(rows) // 6)]
    body = [[c["label"], *(f"{r[c['label']]:.3g}" for r in coarse)] for c in curves]
    text = "## similarity / similarity at θ = 0\n\n" + report.markdown_table(
        ["kernel", *(f"θ={r['theta_deg']:.0f}°" for r in coarse)], body
    )
    if learned:
        width = max(len(a) for a in learned.values())
        table = [
            [name, *(f"{a[i]:.4g}" if i < len(a) else "" for i in range(width))]
            for name, a in learned.items()
        ]
        text += "\n\n## learned coefficients a_i (1/i! at initialisation)\n\n"
        text += report.markdown_table(["layer", *(f"a{i}" for i in range(width))], table)
    tag = args.tag or "kernel_shapes"
    _write(args.out, tag, meta, rows, text)
    floor = 1e-8  # log panel: the power kernels reach 0 at 90°
    log_curves = [{**c, "y": [max(v, floor) for v in c["y"]], "lo": None} for c in curves]
    panel = {"xlabel": "angle θ between x and y (degrees)", "ylabel": "k(θ) / k(0)"}
    plots.band_figure(
        [
            {**panel, "title": "normalised similarity", "curves": curves},
            {**panel, "title": "same, log scale", "ylog": True, "curves": log_curves},
        ],
        args.out / f"{tag}.png",
        title=f"kernel shapes, ‖x‖ = ‖y‖ = {args.norm:g}",
        caption=f"learned polynomial: {source}",
    )
    return text + "\n"


def cmd_model(args: argparse.Namespace) -> str:
    device = torch.device(args.device)
    settings = model_step.Settings(
        device=device,
        dtype=DTYPES[args.dtype],
        layers=args.layers,
        heads=args.heads,
        batch=args.batch,
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
    )
    rows = model_step.run_model_steps(
        args.models, args.widths, args.backends, args.lengths, settings, args.dtype
    )
    shape = f"B={args.batch}, layers={args.layers}, H={args.heads}, d_ff=4·width"
    meta = report.environment(
        device,
        models="reversal: SequenceTransformer decoder over x SEP y (N tokens); "
        "pixel: PixelTransformer over N pixels, 256 levels",
        shape=shape,
        step="forward, loss, backward, clip_grad_norm 1.0, AdamW (lr 1e-3, wd 0.01)",
        dtype=args.dtype,
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
        timing="CUDA events" if device.type == "cuda" else "time.perf_counter",
        attention_share="hooks on every backend: forward pre-hook -> hook, output grad -> "
        "last q/k/v grad, in the timed steps; projections excluded",
    )
    text = (
        "## Training step: tokens/s (end-to-end speed-up vs softmax) [attention share]\n\n"
        + report.model_step_table(rows)
        + "\n\n## Crossover N vs softmax: end-to-end training step and attention alone\n\n"
        + report.crossover_table(rows)
    )
    tag = args.tag or f"model_step_{device.type}_{args.dtype}"
    _write(args.out, tag, meta, rows, text)
    plots.model_step_figure(
        rows,
        args.out / f"{tag}.png",
        title="training step: tokens/s (top) and attention share (bottom) vs N",
        caption=f"{meta['device']} · torch {torch.__version__} · {shape} · {args.dtype}",
    )
    return text + "\n"
