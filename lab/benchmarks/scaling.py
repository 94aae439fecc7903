"""Latency and peak memory of one attention call against the sequence length N.

Random q, k, v of shape (B, H, N, D), D = Dv, shaped by a ``TimingProtocol`` (``PROTOCOLS``,
three from the literature, overridable on the CLI):

* ``small-batch`` (default): B = 4, H = 4, D = 64, N = 256 … 16,384: a few long sequences, the
  setting of the library's speed targets.
* ``fixed-batch``: one attention layer, H = 1, D = 64, B = 32, N = 128 … 6,000 (the setup of the
  2024 blog reproduction "Linear Attention Is All You Need").
* ``constant-tokens``: B·N = 2¹⁶ tokens, H = 1, D = 64, N = 2⁹ … 2¹⁶, cost reported per sample
  (Katharopoulos et al. 2020, Fig. 1).

Each point (backend, causal, mode, N) is the median of timed repeats after warm-up, within a
per-point time budget (``measure.timed_point``); one more call measures peak memory (on CPU it is
the first warm-up call). A series runs through ``budget.run_budgeted``: a point's cost is
extrapolated from the last measured point of its series as ``value · (N/N₀)^α · (B/B₀)`` (α of
time and of memory each from the last two points, clamped to [1, 2]); a point estimated over the
time budget or the memory limit is skipped with the estimate ("too slow" / "OOM (est.)").

Every row, measured or skipped, carries ``fwd_flops``, counted by ``flops.attention_flops`` (eval
mode), None for a backend without a formula. Backends without a causal form have no causal rows.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attn_lightning.attention import Attention
from lab.benchmarks.budget import extrapolate, growth_exponent, run_budgeted
from lab.benchmarks.flop_count import CallShape
from lab.benchmarks.flops import attention_flops
from lab.benchmarks.measure import (
    BackendSpec,
    feature_dim,
    is_out_of_memory,
    minimal_flops,
    peak_bytes,
    sdpa_context,
    timed_point,
)

MODES = ("fwd", "fwdbwd")


@dataclass(frozen=True)
class TimingProtocol:
    """Shapes of a scaling run; ``tokens`` set means B = tokens // N (constant B·N)."""

    name: str
    lengths: tuple[int, ...]
    heads: int
    head_dim: int
    batch: int = 1
    tokens: int | None = None

    def batch_for(self, n: int) -> int:
        return max(1, self.tokens // n) if self.tokens else self.batch

    def describe(self) -> str:
        batch = f"B·N={self.tokens}" if self.tokens else f"B={self.batch}"
        lengths = ", ".join(map(str, self.lengths))
        return f"{self.name}: {batch}, H={self.heads}, D={self.head_dim}, N = {lengths}"


PROTOCOLS: dict[str, TimingProtocol] = {
    "small-batch": TimingProtocol(
        "small-batch", (256, 1024, 4096, 16384), heads=4, head_dim=64, batch=4
    ),
    "fixed-batch": TimingProtocol(
        "fixed-batch", (128, 256, 512, 1024, 2048, 4096, 6000), heads=1, head_dim=64, batch=32
    ),
    "constant-tokens": TimingProtocol(
        "constant-tokens", tuple(2**e for e in range(9, 17)), heads=1, head_dim=64, tokens=2**16
    ),
}


log = logging.getLogger(__name__)


@dataclass
class Row:
    """One measured (or skipped) point. Times are per call of the whole batch."""

    protocol: str
    backend: str
    causal: bool
    mode: str
    n: int
    batch: int
    heads: int
    head_dim: int
    dtype: str
    ms: float | None = None
    ms_per_sample: float | None = None
    repeats: int = 0
    gflops: float | None = None
    fwd_flops: int | None = None  # forward FLOPs of the call (``flops``), also on fwdbwd rows
    peak_mb: float | None = None
    est_ms: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Settings:
    device: torch.device
    dtype: torch.dtype
    repeats: int = 5
    warmup: int = 2
    budget_s: float = 5.0
    max_memory_bytes: int | None = None
    sdpa_kernel: str = "auto"
    measure_memory: bool = True


def make_call(
    attn: Attention,
    *,
    b: int,
    h: int,
    n: int,
    d: int,
    causal: bool,
    mode: str,
    settings: Settings,
    sdpa_kernel: str,
) -> Callable[[], None]:
    """A closure running one forward (no grad) or forward+backward on fixed random inputs."""
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, n, d, generator=g).to(settings.device, settings.dtype) for _ in range(3)
    )
    half = settings.dtype in (torch.float16, torch.bfloat16)

    def amp() -> contextlib.AbstractContextManager:
        if not half:
            return contextlib.nullcontext()
        return torch.autocast(settings.device.type, dtype=settings.dtype)

    if mode == "fwd":

        def forward() -> None:
            with torch.no_grad(), amp(), sdpa_context(sdpa_kernel, settings.device):
                attn(q, k, v, causal=causal)

        return forward
    for t in (q, k, v):
        t.requires_grad_(True)

    def call() -> None:
        q.grad = k.grad = v.grad = None  # set_to_none, as a training step would
        with amp(), sdpa_context(sdpa_kernel, settings.device):
            out = attn(q, k, v, causal=causal)
        out.float().sum().backward()

    return call


def _estimate(measured: Sequence[Row], n: int, b: int, field: str) -> float:
    """``field`` (``ms`` or ``peak_mb``) at (N, B) from the last measured point, as
    ``value · (N/N₀)^α · (B/B₀)``: α of the per-sample value (B changes with N under constant
    tokens) from the last two points (``budget.growth_exponent``). A fixed α = 2 would skip every
    linear-memory backend at large N (PolySketch's 1.1 GiB at N 4,096 "estimated" 18 GiB at
    16,384, where it needs 4.5)."""
    values = [(r.n, getattr(r, field), r.batch) for r in measured]
    exponent = growth_exponent([(m, None if v is None else v / mb) for m, v, mb in values])
    last = measured[-1]
    return extrapolate(getattr(last, field), last.n, n, exponent) * (b / last.batch)


def _skip(measured: Sequence[Row], row: Row, settings: Settings) -> str | None:
    """Why ``row`` is not run: its call estimated over the time budget ("too slow", the estimate
    kept in ``est_ms``) or its peak memory over the limit ("OOM (est.)"); None to run it."""
    last = measured[-1]
    if last.ms is None:  # measured rows always have a time
        return None
    est_ms = _estimate(measured, row.n, row.batch, "ms")
    if est_ms / 1e3 > settings.budget_s:
        row.est_ms = est_ms
        return f"too slow (est. {est_ms / 1e3:.3g} s/call)"
    if last.peak_mb is not None and settings.max_memory_bytes is not None:
        est_mb = _estimate(measured, row.n, row.batch, "peak_mb")
        if est_mb * 2**20 > settings.max_memory_bytes:
            size = f"{est_mb:.3g} MiB" if est_mb < 1024 else f"{est_mb / 1024:.3g} GiB"
            return f"OOM (est. {size})"
    return None


def _measure(row: Row, call: Callable[[], None], settings: Settings, features: int | None) -> None:
    """Time (and profile) ``call`` and fill ``row``; nothing is set on the row unless the whole
    point ran, so a point that fails half-way leaves no partial values."""
    warmup = settings.warmup
    peak: int | None = None
    if settings.measure_memory and settings.device.type == "cpu":
        # The profiled call doubles as the first warm-up (on CUDA it runs after the warm-up, so
        # one-time allocations such as library workspaces are not counted).
        peak = peak_bytes(call, device=settings.device)
        warmup = max(0, warmup - 1)
    sec, count = timed_point(
        call,
        repeats=settings.repeats,
        warmup=warmup,
        budget_s=settings.budget_s,
        device=settings.device,
    )
    if settings.measure_memory and settings.device.type == "cuda":
        peak = peak_bytes(call, device=settings.device)
    work = minimal_flops(
        features, batch=row.batch, heads=row.heads, n=row.n, dv=row.head_dim, mode=row.mode
    )
    row.ms, row.repeats = sec * 1e3, count
    row.ms_per_sample = row.ms / row.batch
    if count == 1 and sec > settings.budget_s:
        row.note = "1 run (over budget)"
    row.gflops = work / sec / 1e9 if work else None
    row.peak_mb = None if peak is None else peak / 2**20


def run_series(
    spec: BackendSpec,
    attn: Attention,
    *,
    causal: bool,
    mode: str,
    protocol: TimingProtocol,
    settings: Settings,
    dtype_name: str,
) -> list[Row]:
    """All lengths of one (backend, causal, mode) series, skipping what cannot fit
    (``budget.run_budgeted``)."""
    features = feature_dim(attn, protocol.head_dim)
    kernel = settings.sdpa_kernel if spec.name == "softmax" else "auto"

    def new_row(n: int) -> Row:
        b = protocol.batch_for(n)
        row = Row(
            protocol.name,
            spec.label,
            causal,
            mode,
            n,
            b,
            protocol.heads,
            protocol.head_dim,
            dtype_name,
        )
        # Counted, not measured: known for skipped points too. Eval mode, as ``run_scaling``
        # builds the backends (optimization's random tokens are a training-time regulariser).
        shape = CallShape.self_attention(batch=b, heads=protocol.heads, n=n, head_dim=row.head_dim)
        count = attention_flops(spec.name, shape, spec.options, causal=causal, training=False)
        row.fwd_flops = None if count is None else count.total
        return row

    def measure(row: Row) -> None:
        nonlocal kernel

        def call(sdpa_kernel: str) -> Callable[[], None]:
            return make_call(
                attn,
                b=row.batch,
                h=row.heads,
                n=row.n,
                d=row.head_dim,
                causal=causal,
                mode=mode,
                settings=settings,
                sdpa_kernel=sdpa_kernel,
            )

        try:
            _measure(row, call(kernel), settings, features)
        except RuntimeError as err:
            if kernel == "auto" or is_out_of_memory(err):
                raise
            # The forced SDPA kernel cannot run these inputs (e.g. flash needs fp16/bf16).
            kernel = "auto"
            _measure(row, call(kernel), settings, features)
            row.note = f"sdpa={settings.sdpa_kernel} unavailable, auto used"

    def measured_line(row: Row) -> str:
        time = f"{row.ms:.3f} ms" if row.ms is not None else row.note
        return (
            f"{spec.label:<32} causal={causal!s:<5} {mode:<6} N={row.n:<6d} B={row.batch:<4d} "
            f"{time}"
        )

    return run_budgeted(
        protocol.lengths,
        new_row=new_row,
        skip=lambda measured, row: _skip(measured, row, settings),
        measure=measure,
        device=settings.device,
        measured_line=measured_line,
    )


def run_scaling(
    specs: list[BackendSpec],
    *,
    protocol: TimingProtocol,
    settings: Settings,
    causal_flags: list[bool],
    modes: list[str],
    dtype_name: str,
) -> list[Row]:
    """Every series of every backend; unsupported causal modes are logged and left out."""
    rows: list[Row] = []
    for spec in specs:
        torch.manual_seed(0)  # same random features for a backend in every run
        attn = spec.build(head_dim=protocol.head_dim).to(settings.device).eval()
        for causal in causal_flags:
            if causal and not attn.supports_causal:
                log.info("%s: no causal form, causal points left out", spec.label)
                continue
            for mode in modes:
                rows += run_series(
                    spec,
                    attn,
                    causal=causal,
                    mode=mode,
                    protocol=protocol,
                    settings=settings,
                    dtype_name=dtype_name,
                )
    return rows
