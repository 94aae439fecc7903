"""The GPU report's checks: the efficiency targets met or not, and ``auto``'s choice per shape.

The targets are those of docs/benchmarks.md ("Results: GPU"), each judged met, not met or not
measured, with its numbers. The per-call ones are judged on bf16 causal forward + backward rows
of ``race`` (``race.KernelRow``), the step and decode ones on the ``model`` and ``decode`` rows.

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

``auto``'s rule (``choices``): at a measured shape it never picks a kernel more than
``TOLERANCE`` (10 %) slower than another kernel measured there. Per shape where one of
``KERNELS`` was timed: the fastest, what ``auto`` picks today (the ``linear:auto`` row's kernel;
without that row, ``dispatch.choose`` asked for a CUDA call of the row's dtype), the pick's time
over the fastest, and what ``auto`` should take there: its pick within the rule, else the
fastest. So a report measured on a GPU says what ``auto`` should become.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attn_lightning.attention.ops import dispatch, fla
from attn_lightning.records import markdown_table
from lab.benchmarks import bandwidth, decode, model_step, report
from lab.benchmarks.arguments import DTYPES
from lab.benchmarks.contenders import Shape
from lab.benchmarks.race import KernelRow

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


# ---------------------------------------------------------------- auto's choice
KERNELS = ("linear:torch", "linear:fla", "linear:triton")
AUTO = "linear:auto"
TOLERANCE = 0.10


@dataclass(frozen=True)
class Choice:
    """One shape: each kernel's ms, the fastest, auto's pick and whether the pick keeps the rule."""

    shape: Shape
    dtype: str
    ms: dict[str, float]  # kernel name (torch, fla, triton) -> median ms
    fastest: str
    pick: str
    pick_ms: float | None  # None: auto's pick was not timed at this shape
    ratio: float | None  # pick_ms / the fastest's ms
    within: bool | None  # None: cannot be judged (the pick not timed)

    @property
    def should_take(self) -> str:
        """What ``auto`` should take here: its pick if it keeps the rule, else the fastest."""
        return self.pick if self.within else self.fastest


def _kernel(label: str) -> str:
    return label.split(":", 1)[1]


def _pick(rows: Sequence[KernelRow], shape: Shape, dtype: str) -> str:
    """The kernel ``auto`` took at ``shape``: its row's ``auto: <kernel>``, else ``choose``."""
    for r in rows:
        if r.contender == AUTO and r.shape == shape and r.kernel.startswith("auto: "):
            return r.kernel.removeprefix("auto: ")
    installed = fla.missing_reason() is None
    return dispatch.choose("auto", "cuda", DTYPES[dtype], installed=installed)


def choices(rows: Sequence[KernelRow]) -> list[Choice]:
    """A ``Choice`` per (shape, dtype) where a kernel of ``KERNELS`` was timed, in row order."""
    timed = [r for r in rows if r.contender in KERNELS and r.ms is not None]
    found = []
    for shape, dtype in dict.fromkeys((r.shape, r.dtype) for r in timed):
        ms: dict[str, float] = {
            _kernel(r.contender): r.ms
            for r in timed
            if (r.shape, r.dtype) == (shape, dtype) and r.ms is not None
        }
        fastest = min(ms, key=ms.__getitem__)
        pick = _pick(rows, shape, dtype)
        pick_ms = ms.get(pick)
        ratio = None if pick_ms is None else pick_ms / ms[fastest]
        within = None if ratio is None else ratio <= 1 + TOLERANCE
        found.append(Choice(shape, dtype, ms, fastest, pick, pick_ms, ratio, within))
    return found


def auto_section(rows: Sequence[KernelRow]) -> list[str]:
    """The page's "auto's choice" section, or nothing when no linear kernel was timed."""
    found = choices(rows)
    if not found:
        return []
    names = [_kernel(k) for k in KERNELS]
    body = []
    for c in found:
        judged = {None: "pick not timed", True: "yes", False: "no"}[c.within]
        body.append(
            [
                str(c.shape),
                c.dtype,
                *(f"{c.ms[n]:.3g}" if n in c.ms else "" for n in names),
                c.fastest,
                c.pick,
                "" if c.ratio is None else f"{c.ratio:.2f}×",
                judged,
                c.should_take,
            ]
        )
    header = ["shape BxHxNxD", "dtype", *(f"{n} ms" for n in names), "fastest", "auto picks"]
    header += ["pick / fastest", f"within {TOLERANCE:.0%}", "auto should take"]
    return [
        "## auto's choice: the fastest linear kernel per measured shape\n\n"
        f"The rule: `auto` never picks a kernel more than {TOLERANCE:.0%} slower than another "
        "measured at the same shape. 'auto picks' is the kernel the `linear:auto` row ran "
        "(`attention/ops/dispatch.py` `choose`).\n\n" + markdown_table(header, body)
    ]
