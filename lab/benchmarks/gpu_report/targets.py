"""The GPU efficiency targets, each judged met, not met or not measured, with its numbers.

The targets are those of docs/benchmarks.md ("Results: GPU"). The per-call ones are judged on
bf16 causal forward + backward rows of the ``kernels`` job (``kernels.KernelRow``), the step and
decode ones on the ``model`` and ``decode`` rows.

* our fla path (``linear:fla``) within 1.15× of fla's own op (``fla-op``) at every shape
  measured by both;
* ``linear`` with ``auto`` ≥ 2.5× SDPA flash at N = 32k (H 4, D 64), ≥ 1.5× at N = 16k
  (H 32, D 128);
* the torch kernel ≥ 2× faster than on 2026-11-28 at H 32, D 128 (``TORCH_KERNEL_BEFORE``);
* the reversal model's training step (width 256, B·N = 64k tokens): ``linear`` faster than
  softmax from some N ≤ 8,192 on (``report.crossover``);
* decode per token at 64k tokens of context: ``linear``'s step ≥ 10× faster than softmax's
  preallocated KV cache;
* the fused Triton kernel (``linear:triton``) within 5× of the memory roofline at
  N = 32k (H 4, D 64; ``bandwidth``: the bytes a fwd+bwd moves at the copy bandwidth).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lab.benchmarks import decode, model_step, report
from lab.benchmarks.gpu_report import bandwidth
from lab.benchmarks.gpu_report.calls import Shape
from lab.benchmarks.gpu_report.kernels import KernelRow

FLA_PATH_LIMIT = 1.15
AUTO_VS_FLASH = ((Shape(2, 4, 32768, 64), 2.5), (Shape(1, 32, 16384, 128), 1.5))
# ms per causal fwd+bwd of ``linear`` on the torch kernel, bf16, B·N = 16k tokens, H 32, D 128.
TORCH_KERNEL_BEFORE = {
    Shape(16, 32, 1024, 128): 15.9,
    Shape(4, 32, 4096, 128): 17.4,
    Shape(1, 32, 16384, 128): 17.6,
}
TORCH_KERNEL_SOURCE = "an H100 on 2026-11-28, bf16, CUDA events, median of 5 (docs/benchmarks.md)"
TORCH_KERNEL_SPEEDUP = 2.0
MODEL_CROSSOVER_N = 8192
DECODE_CONTEXT, DECODE_RATIO = 65536, 10.0
SOFTMAX, LINEAR = "softmax", "linear"
ROOFLINE_SHAPE, ROOFLINE_LIMIT, TRITON = Shape(2, 4, 32768, 64), 5.0, "linear:triton"


@dataclass(frozen=True)
class Target:
    """One target: what, the measured numbers, and the verdict."""

    what: str
    measured: str
    verdict: str  # met, not met, not measured


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "not met")


def _ms(rows: Sequence[KernelRow], contender: str) -> dict[Shape, float]:
    """Shape -> median ms of ``contender`` (the last row of a shape measured twice)."""
    return {r.shape: r.ms for r in rows if r.contender == contender and r.ms is not None}


def _short(shape: Shape) -> str:
    return f"H {shape.heads} D {shape.head_dim} N {shape.n:,}"


def fla_path(rows: Sequence[KernelRow]) -> Target:
    """``linear:fla`` / ``fla-op`` at every shape that has both."""
    mine, anchor = _ms(rows, "linear:fla"), _ms(rows, "fla-op")
    shapes = [s for s in mine if s in anchor]
    what = f"our fla path within {FLA_PATH_LIMIT}× of fla's op at every measured shape"
    if not shapes:
        return Target(what, "–", verdict(None))
    ratios = {s: mine[s] / anchor[s] for s in shapes}
    worst = max(shapes, key=ratios.__getitem__)
    cells = ", ".join(f"{ratios[s]:.2f}× ({_short(s)})" for s in shapes)
    measured = f"worst {ratios[worst]:.2f}× at {_short(worst)}, {len(shapes)} shapes: {cells}"
    return Target(what, measured, verdict(ratios[worst] <= FLA_PATH_LIMIT))


def auto_vs_flash(rows: Sequence[KernelRow]) -> list[Target]:
    """``linear:auto`` vs ``flash`` at each shape of ``AUTO_VS_FLASH``."""
    mine, flash = _ms(rows, "linear:auto"), _ms(rows, "flash")
    kernel = {r.shape: r.kernel for r in rows if r.contender == "linear:auto"}
    found = []
    for shape, wanted in AUTO_VS_FLASH:
        what = f"linear (auto) ≥ {wanted}× SDPA flash at {_short(shape)}"
        if shape not in mine or shape not in flash:
            found.append(Target(what, "–", verdict(None)))
            continue
        speedup = flash[shape] / mine[shape]
        measured = f"{flash[shape]:.3g} / {mine[shape]:.3g} ms = {speedup:.2f}× ({kernel[shape]})"
        found.append(Target(what, measured, verdict(speedup >= wanted)))
    return found


def torch_kernel(rows: Sequence[KernelRow]) -> Target:
    """The torch kernel now vs ``TORCH_KERNEL_BEFORE`` at every one of its shapes."""
    mine = _ms(rows, "linear:torch")
    what = (
        f"torch kernel ≥ {TORCH_KERNEL_SPEEDUP:g}× faster than on 2026-11-28 at H 32, D 128 "
        f"(before: {TORCH_KERNEL_SOURCE})"
    )
    shapes = [s for s in TORCH_KERNEL_BEFORE if s in mine]
    if not shapes:
        return Target(what, "–", verdict(None))
    speedups = {s: TORCH_KERNEL_BEFORE[s] / mine[s] for s in shapes}
    measured = ", ".join(
        f"{TORCH_KERNEL_BEFORE[s]:.3g} → {mine[s]:.3g} ms = {speedups[s]:.2f}× (N {s.n:,})"
        for s in shapes
    )
    if len(shapes) < len(TORCH_KERNEL_BEFORE):
        measured += f"; {len(TORCH_KERNEL_BEFORE) - len(shapes)} shape(s) not measured"
    slow = min(speedups.values()) < TORCH_KERNEL_SPEEDUP
    # Met only when every shape was measured; one slow shape is enough for not met.
    complete = len(shapes) == len(TORCH_KERNEL_BEFORE)
    return Target(what, measured, verdict(False if slow else (True if complete else None)))


def model(rows: Sequence[model_step.Row]) -> Target:
    """``linear`` (auto) faster than softmax from some N ≤ ``MODEL_CROSSOVER_N`` on."""
    steps: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.step_ms:
            steps.setdefault(r.backend, {})[r.n] = r.step_ms
    mine, base = steps.get(LINEAR, {}), steps.get(SOFTMAX, {})
    common = sorted(set(mine) & set(base))
    what = (
        f"reversal training step (width 256, B·N = 64k): linear faster than softmax from "
        f"N ≤ {MODEL_CROSSOVER_N:,}"
    )
    if not common:
        return Target(what, "–", verdict(None))
    n = report.crossover(mine, base)
    ratios = ", ".join(f"{base[k] / mine[k]:.2f}× at {k:,}" for k in common)
    found = f"faster from N = {n:,}" if n else "not faster at the largest N"
    return Target(what, f"{found} ({ratios})", verdict(n is not None and n <= MODEL_CROSSOVER_N))


def decode_step(rows: Sequence[decode.DecodeRow]) -> Target:
    """``linear``'s step vs softmax's KV cache at ``DECODE_CONTEXT`` tokens of context."""
    ms = {r.backend: r.ms for r in rows if r.context == DECODE_CONTEXT and r.ms}
    mine, cache = ms.get(LINEAR), ms.get(SOFTMAX)
    ratio = cache / mine if mine and cache else None
    return Target(
        f"decode per token at 64k context: ≥ {DECODE_RATIO:g}× the preallocated KV cache",
        f"{cache:.3g} / {mine:.3g} ms = {ratio:.3g}×" if ratio else "–",
        verdict(None if ratio is None else ratio >= DECODE_RATIO),
    )


def roofline(rows: Sequence[KernelRow], copy_gb_s: float | None) -> Target:
    """``linear:triton``'s time over the memory roofline at ``ROOFLINE_SHAPE``."""
    what = (
        f"triton kernel within {ROOFLINE_LIMIT:g}× of the memory roofline at "
        f"{_short(ROOFLINE_SHAPE)}"
    )
    row = next((r for r in rows if r.contender == TRITON and r.shape == ROOFLINE_SHAPE), None)
    if row is None or row.ms is None or copy_gb_s is None:
        why = "no copy bandwidth" if row and row.ms is not None else (row.note if row else "–")
        return Target(what, why or "–", verdict(None))
    roof = bandwidth.roofline_ms(row.shape, row.dtype, copy_gb_s)
    moved = bandwidth.bytes_moved(row.shape, row.dtype)
    measured = (
        f"{row.ms:.3g} ms / {roof:.3g} ms roofline = {row.ms / roof:.2f}× ({moved / 1e6:,.0f} MB "
        f"at {copy_gb_s:,.0f} GB/s copy; {moved / row.ms / 1e6:,.0f} GB/s achieved)"
    )
    return Target(what, measured, verdict(row.ms / roof <= ROOFLINE_LIMIT))


def evaluate(
    kernels: Sequence[KernelRow],
    steps: Sequence[model_step.Row],
    decoded: Sequence[decode.DecodeRow],
    *,
    copy_gb_s: float | None = None,
) -> list[Target]:
    """Every target, in the order of docs/benchmarks.md, then the Triton kernel's roofline."""
    return [
        fla_path(kernels),
        *auto_vs_flash(kernels),
        torch_kernel(kernels),
        model(steps),
        decode_step(decoded),
        roofline(kernels, copy_gb_s),
    ]
