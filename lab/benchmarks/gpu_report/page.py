"""The report's one markdown page: provenance, the GPU targets, stages, tables, figures.

Sections, each from the files the stages wrote (``collect``), each left out when its stage
wrote nothing: the targets (``targets``), the stages (status, seconds, why), the CUDA tests, one
table per regime of ms per causal fwd+bwd (contender × N, speed-up vs flash; fla's op is the
anchor of the ``linear`` rows), the agreement of each contender with the float32 torch kernel and
its first call (compilation, autotuning), each attention row's achieved bandwidth against the
device's copy bandwidth (``bandwidth``; the copy bandwidth also in the header), ``auto``'s
choice per shape against the fastest linear kernel (``auto_choice``), the profiler's top kernels
(``profile/top_kernels.md``), the training step, decode, and the broader per-call table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from attn_lightning.records import markdown_meta, markdown_table
from lab.benchmarks import decode, plots, report, scaling
from lab.benchmarks.gpu_report import auto_choice, bandwidth, collect, profile, targets
from lab.benchmarks.gpu_report.calls import CONTENDERS, LINEAR_OUTPUTS, Shape
from lab.benchmarks.gpu_report.kernels import KernelRow
from lab.benchmarks.gpu_report.runner import StageResult

log = logging.getLogger(__name__)

FLASH = "flash"


def _cell(row: KernelRow | None, flash: float | None) -> str:
    """``ms (×flash)`` for an attention row, ``ms`` for the rest, the note when unmeasured."""
    if row is None:
        return ""
    if row.ms is None:
        return row.note
    ratio = row.contender in LINEAR_OUTPUTS and flash and row.contender != FLASH
    return f"{row.ms:.3g}" + (f" ({flash / row.ms:.2g}×)" if ratio and flash else "")


def kernel_section(rows: Sequence[KernelRow]) -> list[str]:
    """Per regime (H, D, B·N): ms per call, contender × N; then agreement and first calls."""
    if not rows:
        return []
    parts = []
    index = {(r.contender, r.shape): r for r in rows}
    order = {label: i for i, label in enumerate(CONTENDERS)}
    labels = sorted({r.contender for r in rows}, key=lambda c: order.get(c, len(order)))
    for regime in dict.fromkeys(r.shape.regime for r in rows):
        shapes = sorted({r.shape for r in rows if r.shape.regime == regime}, key=lambda s: s.n)
        body = []
        for label in labels:
            cells = [_cell(index.get((label, s)), _flash_ms(index, s)) for s in shapes]
            if any(cells):
                body.append(
                    [f"{label}: {CONTENDERS[label][0]}" if label in CONTENDERS else label, *cells]
                )
        header = ["contender", *(f"N={s.n:,} (B {s.batch})" for s in shapes)]
        parts.append(
            f"## Per call, {regime}: ms per causal fwd+bwd (speed-up vs flash)\n\n"
            + markdown_table(header, body)
        )
    checked = [r for r in rows if r.ms is not None]
    body = [
        [
            r.contender,
            str(r.shape),
            r.kernel,
            "" if r.rel_err is None else f"{r.rel_err:.2e}",
            "" if r.first_ms is None else f"{r.first_ms / 1e3:.1f}",
            "" if r.min_ms is None or r.max_ms is None else f"{r.min_ms:.3g}–{r.max_ms:.3g}",
            str(r.repeats),
        ]
        for r in checked
    ]
    header = [
        "contender",
        "shape BxHxNxD",
        "kernel",
        "rel. error vs its fp32 reference",
        "first call s",
        "ms range",
        "timed calls",
    ]
    parts.append("## Agreement, first calls and spread\n\n" + markdown_table(header, body))
    return parts + normaliser_section(rows)


def bandwidth_section(rows: Sequence[KernelRow], copy_gb_s: float | None) -> list[str]:
    """Achieved bandwidth of every timed attention row, against the copy bandwidth if measured."""
    found = [
        bandwidth.achieved(r.contender, r.shape, r.dtype, r.ms, copy_gb_s)
        for r in rows
        if r.contender in bandwidth.ROWS and r.ms is not None
    ]
    if not found:
        return []
    copy = "not measured" if copy_gb_s is None else f"{copy_gb_s:,.0f} GB/s"
    return [
        f"## Achieved bandwidth vs the memory roofline (copy bandwidth: {copy})\n\n"
        f"{bandwidth.FORMULA}.\n\n{bandwidth.table(found)}"
    ]


def normaliser_section(rows: Sequence[KernelRow]) -> list[str]:
    """The fla path's normaliser alone, before (strided cumsum) and now, with the speed-up."""
    old = {r.shape: r.ms for r in rows if r.contender == "normaliser:old" and r.ms}
    new = {r.shape: r.ms for r in rows if r.contender == "normaliser:new" and r.ms}
    body = [
        [str(s), f"{old[s]:.3g}", f"{new[s]:.3g}", f"{old[s] / new[s]:.3g}×"]
        for s in old
        if s in new
    ]
    if not body:
        return []
    header = ["shape BxHxNxD", "before: cumsum(dim=2) ms", "now: by chunks ms", "speed-up"]
    return ["## The normaliser, fwd+bwd: before vs now\n\n" + markdown_table(header, body)]


def _flash_ms(index: Mapping[tuple[str, Shape], KernelRow], shape: Shape) -> float | None:
    row = index.get((FLASH, shape))
    return None if row is None else row.ms


def profile_section(out: Path) -> list[str]:
    rows = collect.profile_rows(out)
    if not rows:
        return []
    title = "## Top kernels by device time (`profile/top_kernels.md`; CPU operators in a dry run)"
    return [f"{title}\n\n{profile.table(rows)}"]


def _latency_section(rows: Sequence[scaling.Row], out: Path, caption: str) -> list[str]:
    """Per (dtype, protocol, H): fwd and fwd+bwd time, fwd+bwd peak memory, and two figures."""
    parts = []
    for dtype, protocol, heads in dict.fromkeys((r.dtype, r.protocol, r.heads) for r in rows):
        group = [r for r in rows if (r.dtype, r.protocol, r.heads) == (dtype, protocol, heads)]
        tag = f"latency_{protocol}_{dtype}_H{heads}"
        parts.append(f"## Per call: {protocol}, {dtype}, H = {heads}")
        for mode, title in plots.MODE_TITLES.items():
            if any(r.mode == mode for r in group):
                table = report.scaling_table(group, mode=mode)
                parts.append(f"### {title}: ms per call (speed-up vs softmax)\n\n{table}")
        if any(r.peak_mb is not None for r in group):
            table = report.scaling_table(group, mode="fwdbwd", value="peak_mb")
            parts.append(f"### forward + backward: peak memory (MiB)\n\n{table}")
        for value, ylabel in (("time", "ms"), ("speedup", "speed-up vs softmax")):
            path = out / "figures" / f"{tag}_{value}.png"
            title = f"{protocol}, {dtype}, H = {heads}: {value} vs N"
            try:
                made = plots.scaling_figure(
                    group, path, value=value, ylabel=ylabel, title=title, caption=caption
                )
            except (ValueError, RuntimeError) as err:  # a figure must not cost the report
                log.warning("gpu-report: figure %s not drawn (%s)", path.name, err)
                made = None
            if made is not None:
                parts.append(f"![{title}](figures/{path.name})")
    return parts


def _model_section(out: Path) -> list[str]:
    parts = []
    for pattern, title in (("model_tokens_*.csv", "B·N tokens constant"),):
        rows = collect.model_rows(out, pattern)
        if rows:
            parts.append(
                f"## Training step, {title}: tokens/s (speed-up vs softmax) [attention share]"
                f"\n\n{report.model_step_table(rows)}\n\n{report.crossover_table(rows)}"
            )
    return parts


def _decode_section(rows: Sequence[decode.DecodeRow]) -> list[str]:
    if not rows:
        return []
    contexts = sorted({r.context for r in rows})
    index = {(r.backend, r.context): r.ms for r in rows}
    body = [
        [b, *(f"{index[(b, t)]:.3g}" if index.get((b, t)) else "" for t in contexts)]
        for b in dict.fromkeys(r.backend for r in rows)
    ]
    header = ["backend", *(f"T={t}" for t in contexts)]
    return [f"## Decode: ms per token after T tokens\n\n{markdown_table(header, body)}"]


def write_page(
    out: Path,
    meta: Mapping[str, str],
    results: Sequence[StageResult],
    *,
    dry_run: bool,
) -> str:
    """Write ``<out>/gpu_report.md`` from the stages' files; return its text."""
    kernels, decode_rows = collect.kernel_rows(out), collect.decode_rows(out)
    copy_gb_s = bandwidth.read_copy(out)
    steps = collect.model_rows(out, "model_tokens_*.csv")
    found = targets.evaluate(kernels, steps, decode_rows, copy_gb_s=copy_gb_s)
    copy = "not measured" if copy_gb_s is None else f"{copy_gb_s:,.0f} GB/s"
    # Measured once per report by the first stage that times kernels (bandwidth.py).
    meta = {**meta, "copy_bandwidth": f"{copy} (device-to-device copy, read + write, median)"}
    stage_rows = [
        [r.name, r.what, r.status, f"{r.seconds:.0f}", r.note or (r.log and f"`{r.log}`")]
        for r in results
    ]
    tests = [collect.junit_summary(p) for p in sorted((out / "parity").glob("*.xml"))]
    title = "# GPU report" + (
        " (dry run on the CPU: toy shapes, nothing here is a GPU result)" * dry_run
    )
    parts = [
        title,
        markdown_meta(meta),
        "## Targets\n\n"
        + markdown_table(
            ["target", "measured", "verdict"], [[t.what, t.measured, t.verdict] for t in found]
        ),
        "## Stages\n\n" + markdown_table(["stage", "what", "status", "s", "note"], stage_rows),
        "## Tests\n\n"
        + ("\n".join(f"- {s.name}: {s.line()}" for s in tests if s) or "No test results."),
        *kernel_section(kernels),
        *bandwidth_section(kernels, copy_gb_s),
        *auto_choice.section(kernels),
        *profile_section(out),
        *_model_section(out),
        *_decode_section(decode_rows),
        *_latency_section(collect.latency_rows(out), out, caption=meta.get("gpu", "")),
    ]
    text = "\n\n".join(parts) + "\n"
    (out / "gpu_report.md").write_text(text)
    return text
