"""How one benchmark point is measured, and the command-line pieces the benchmarks share.

Timing: ``time.perf_counter`` around each call on CPU; CUDA events on a GPU (recorded on the
current stream, read after one synchronisation), which time the kernels rather than the launch.

Peak memory is the largest amount of memory the call allocates above what was allocated when it
started (inputs and parameters excluded; outputs, saved activations and, for forward+backward,
the input gradients included):

* CUDA: ``torch.cuda.max_memory_allocated() - memory_allocated()`` after resetting the peak.
* CPU: the call runs once under ``torch.profiler.profile(profile_memory=True)``; the peak of the
  running sum of its allocator events in time order is the figure. RSS-based measures are useless
  here (malloc keeps freed pages; tracemalloc does not see torch's allocator).

Backends on the command line are ``name[:key=value,...]`` (``parse_backend``: values parsed by
``attention.parse_attention_spec``; unknown names and options fail before anything is timed). A
run whose arguments parse but cannot be used raises ``UsageError``, which ``cli.main`` turns into
a one-line usage error (exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from attn_lightning.attention import (
    Attention,
    FeatureMapAttention,
    attention_options,
    available_attentions,
    build_attention,
    parse_attention_spec,
)

log = logging.getLogger(__name__)

SDPA_KERNELS = ("auto", "flash", "efficient", "cudnn", "math")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[[], object], *, repeats: int, device: torch.device) -> list[float]:
    """Seconds taken by each of ``repeats`` consecutive calls of ``fn``."""
    if device.type == "cuda":
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(repeats)
        ]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) / 1e3 for start, end in events]
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return times


def median_seconds(fn: Callable[[], object], *, repeats: int, warmup: int, device) -> float:
    """Median of ``repeats`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    return statistics.median(time_calls(fn, repeats=repeats, device=device))


def timed_point(
    fn: Callable[[], object], *, repeats: int, warmup: int, budget_s: float, device: torch.device
) -> tuple[float, int]:
    """Median seconds per call within a time budget, and the number of timed calls.

    ``warmup`` untimed calls, then a first timed call: if it alone exceeds ``budget_s`` it is the
    result (one call); otherwise up to ``repeats`` calls are timed in all (the first included),
    as many as fit in the budget. A point thus costs about ``warmup`` calls + ``budget_s``.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = time_calls(fn, repeats=1, device=device)
    count = max(1, min(repeats, int(budget_s // max(times[0], 1e-9))))
    if count > 1:
        times += time_calls(fn, repeats=count - 1, device=device)
    return statistics.median(times), len(times)


@contextlib.contextmanager
def _silence_native_stderr() -> Iterator[None]:
    """Route fd 2 to /dev/null: the profiler's C++ backend logs start/stop lines there."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cpu_peak_bytes(fn: Callable[[], object]) -> int | None:
    """Peak of the running total of CPU allocator events during one call (see module doc)."""
    with (
        _silence_native_stderr(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        fn()
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError:  # private API moved: report "unknown" rather than a wrong number
        log.warning("torch.profiler exposes no kineto_results; CPU peak memory not measured")
        return None
    deltas = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    total = peak = 0
    for _, nbytes in deltas:
        total += nbytes
        peak = max(peak, total)
    return peak


def peak_bytes(fn: Callable[[], object], *, device: torch.device) -> int | None:
    """Peak bytes allocated by one call of ``fn`` above the level at its start."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    return cpu_peak_bytes(fn)


def available_memory_bytes(device: torch.device) -> int | None:
    """Free device memory (CUDA) or the kernel's MemAvailable (Linux CPU); None if unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def matmul_gflops(device: torch.device, *, size: int = 2048, repeats: int = 5) -> float:
    """Measured float32 GEMM rate (2·n³ flops per n×n product): the roofline of the kernels."""
    g = torch.Generator(device="cpu").manual_seed(0)
    a, b = (torch.randn(size, size, generator=g).to(device) for _ in range(2))
    seconds = median_seconds(lambda: a @ b, repeats=repeats, warmup=2, device=device)
    return 2 * size**3 / seconds / 1e9


def feature_dim(attn: Attention, head_dim: int) -> int | None:
    """F, the feature dimension of a feature-map backend; None for quadratic backends."""
    if not isinstance(attn, FeatureMapAttention):
        return None
    device = next((t.device for t in (*attn.buffers(), *attn.parameters())), torch.device("cpu"))
    probe = attn.features(torch.zeros(1, 1, 1, head_dim, device=device), is_query=False)
    return probe.shape[-1]


def minimal_flops(
    features: int | None, *, batch: int, heads: int, n: int, dv: int, mode: str
) -> int | None:
    """Minimal linear-attention work per call and head: 4·N·F·Dv forward, + 8·N·F·Dv backward."""
    if features is None:
        return None
    per_head = 4 * n * features * dv if mode == "fwd" else 12 * n * features * dv
    return per_head * batch * heads


def sdpa_context(kernel: str, device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.nn.attention.sdpa_kernel`` forcing one SDPA implementation, or a no-op for auto."""
    if kernel not in SDPA_KERNELS:
        raise ValueError(f"unknown SDPA kernel {kernel!r}; allowed: {', '.join(SDPA_KERNELS)}")
    if kernel == "auto" or device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[kernel]
    return sdpa_kernel([backend])


def is_out_of_memory(err: BaseException) -> bool:
    """True for allocator failures (CUDA OOM, CPU ``can't allocate``), which are results here."""
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(err).lower()
    return "out of memory" in text or "can't allocate memory" in text


@dataclass(frozen=True)
class BackendSpec:
    """A backend as named on the command line: ``label`` is the spec string itself."""

    label: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, *, head_dim: int) -> Attention:
        return build_attention(self.name, head_dim=head_dim, **self.options)


def parse_backend(spec: str) -> BackendSpec:
    """Parse ``name[:key=value,...]`` and check the name and option keys against the registry.

    The label stays the spec as written.

    Raises:
        ValueError: unknown backend, malformed ``key=value`` item or unknown option, naming the
            allowed values.
    """
    options = parse_attention_spec(spec)
    name = options.pop("name")
    if name not in available_attentions():
        raise ValueError(
            f"unknown backend {name!r} in {spec!r}; available: {', '.join(available_attentions())}"
        )
    allowed = attention_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option {', '.join(map(repr, unknown))} for backend {name!r} in {spec!r}; "
            f"allowed: {', '.join(allowed) or 'none'}"
        )
    return BackendSpec(label=spec.strip(), name=name, options=options)


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
