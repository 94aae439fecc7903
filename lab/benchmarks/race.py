"""The GPU report's three commands: ``race``, ``profile`` and ``bandwidth``.

    python -m lab.benchmark race --shapes 2x4x32768x64 16x32x1024x128 \\
        --contenders fla-op linear:fla flash --device cuda --out out/race
    python -m lab.benchmark profile --shape 4x32x4096x128 --contenders flash linear:fla \\
        --device cuda --out out/profile
    python -m lab.benchmark bandwidth --device cuda --size-mb 1024 --out out/bandwidth

``race``: for each shape (in the order given: ``gpu_report`` puts the targets' shapes first), each
contender of ``contenders``: build its ``Call`` (inputs outside the timing), ``warmup`` untimed
calls (the first one compiles and autotunes: its time is kept as ``first_ms``), then ``repeats``
timed calls (CUDA events on a GPU), their median; then one forward compared with
``contenders.reference`` (relative Frobenius error; the reference computed once per shape).

``profile``: per contender at one shape, ``warmup`` untimed calls, then ``--calls`` calls under
``torch.profiler``; its kernels (device-side events; on a CPU the CPU operators) ranked by total
device time, the top ``--top`` kept with launches and ms per call and share of the contender's
device time: why a kernel is slow is then measured, not guessed.

``bandwidth``: a large device-to-device copy (``dst.copy_(src)``, median of ``repeats``) into
``<out>/copy.csv``: bytes read plus written over time, the memory roofline of the page. A causal
fwd+bwd on ``(B, H, N, D)`` moves at least ``8 · B·H·N·D · itemsize`` bytes (``bytes_moved``: q,
k, v, out and their gradients, each once) — a lower bound of the traffic, so a row's time over
``roofline_ms`` is an upper bound of its distance from the memory limit.

In race and profile a contender that cannot run here gets a row with the reason; one that fails
gets a row with its error and the next one runs (an out-of-memory is ``OOM``). The CSV and
markdown are rewritten after every point, so a job killed at its timeout keeps what it measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch.profiler import ProfilerActivity, profile

from attn_lightning.records import environment, markdown_table, read_csv, write_csv
from lab.benchmarks import contenders, report
from lab.benchmarks.measure import (
    DTYPES,
    add_output,
    is_out_of_memory,
    synchronize,
    time_calls,
    timing_method,
)

log = logging.getLogger(__name__)

COPY_FILE = "copy.csv"
R = TypeVar("R")
TENSORS = 8  # q, k, v, out and their four gradients


@dataclass
class KernelRow:
    """One (shape, contender) point: median ms of a causal fwd+bwd, or why there is none."""

    contender: str
    batch: int
    heads: int
    n: int
    head_dim: int
    dtype: str
    ms: float | None = None
    repeats: int = 0
    min_ms: float | None = None
    max_ms: float | None = None
    first_ms: float | None = None  # the first call: compilation and autotuning included
    rel_err: float | None = None  # forward output vs ``contenders.reference``
    kernel: str = ""
    note: str = ""

    @property
    def shape(self) -> contenders.Shape:
        return contenders.Shape(self.batch, self.heads, self.n, self.head_dim)


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


def _contender_flags(parser: argparse.ArgumentParser) -> None:
    add_output(parser)
    parser.add_argument(
        "--contenders", nargs="+", choices=list(contenders.CONTENDERS), required=True
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``race``."""
    _contender_flags(parser)
    parser.add_argument("--shapes", nargs="+", type=contenders.Shape.parse, required=True)
    parser.add_argument("--repeats", type=int, default=10)


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``profile``."""
    _contender_flags(parser)
    parser.add_argument("--shape", type=contenders.Shape.parse, required=True)
    parser.add_argument("--calls", type=int, default=3, dest="calls_profiled")
    parser.add_argument("--top", type=int, default=10)


def add_bandwidth_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``bandwidth``."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size-mb", type=float, default=1024.0, help="of each of the 2 tensors")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("out/bandwidth"), help="result folder")


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """``‖got − want‖ / ‖want‖`` in float32."""
    want = want.float()
    return float((got.float() - want).norm() / want.norm().clamp_min(1e-30))


def _failure(label: str, err: Exception) -> str:
    """The note of a contender that did not run (``Unavailable``) or failed."""
    if isinstance(err, contenders.Unavailable):
        return f"not run: {err}"
    log.exception("%s failed", label)
    return "OOM" if is_out_of_memory(err) else f"{type(err).__name__}: {str(err)[:200]}"


def measure(
    label: str,
    shape: contenders.Shape,
    *,
    device: torch.device,
    dtype_name: str,
    repeats: int,
    warmup: int,
    references: dict[str, torch.Tensor] | None = None,
) -> KernelRow:
    """One point (see the module doc); never raises for the contender's own failures.

    ``references`` keeps the shape's reference outputs by kind between contenders (the caller
    empties it when the shape changes), so each is computed once per shape."""
    dtype = DTYPES[dtype_name]
    row = KernelRow(label, shape.batch, shape.heads, shape.n, shape.head_dim, dtype_name)
    try:
        call = contenders.CONTENDERS[label][1](shape, device, dtype)
        row.kernel = call.kernel
        synchronize(device)
        began = time.perf_counter()
        call.run()
        synchronize(device)
        row.first_ms = (time.perf_counter() - began) * 1e3
        for _ in range(max(0, warmup - 1)):
            call.run()
        synchronize(device)
        times = [t * 1e3 for t in time_calls(call.run, repeats=repeats, device=device)]
        row.ms, row.repeats = statistics.median(times), len(times)
        row.min_ms, row.max_ms = min(times), max(times)
        kind = contenders.reference_kind(label)
        if kind is not None:
            references = {} if references is None else references
            if kind not in references:
                references[kind] = contenders.reference(kind, shape, device, dtype)
            row.rel_err = rel_err(call.output(), references[kind])
    except Exception as err:  # one contender's failure (a Triton error too) must not cost the rest
        row.note = _failure(f"race: {label} at {shape}", err)
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return row


def table(rows: Sequence[KernelRow]) -> str:
    """ms per call, a row per contender, a column per shape (the notes of unrun points)."""
    shapes = list(dict.fromkeys(r.shape for r in rows))
    index = {(r.contender, r.shape): r for r in rows}
    body = []
    for label in dict.fromkeys(r.contender for r in rows):
        cells = []
        for shape in shapes:
            r = index.get((label, shape))
            cells.append("" if r is None else f"{r.ms:.3g}" if r.ms is not None else r.note)
        body.append([label, *cells])
    return markdown_table(["contender", *(str(s) for s in shapes)], body)


def run(args: argparse.Namespace) -> str:
    """Race the contenders; files rewritten after every point; return the last table."""
    device, tag = torch.device(args.device), args.tag or "race"
    meta = environment(
        device,
        command=args.command_line,
        dtype=args.dtype,
        call="causal forward + backward, inputs and features made outside the timing",
        repeats=args.repeats,
        warmup=args.warmup,
        timing=timing_method(device),
    )
    rows: list[KernelRow] = []
    text = ""
    for shape in args.shapes:
        references: dict[str, torch.Tensor] = {}  # this shape's, shared by its contenders
        for label in args.contenders:
            row = measure(
                label,
                shape,
                device=device,
                dtype_name=args.dtype,
                repeats=args.repeats,
                warmup=args.warmup,
                references=references,
            )
            rows.append(row)
            log.info("race: %s %s: %s ms %s", shape, label, row.ms, row.note)
            text = f"## ms per causal fwd+bwd\n\n{table(rows)}"
            report.write_report(args.out, tag, meta, rows, text)
    return text + "\n"


def top_kernels(
    prof: profile, label: str, *, calls_profiled: int, top: int, cuda: bool
) -> list[KernelShare]:
    """The ``top`` kernels of a finished profile by self device time (CPU operators on a CPU)."""
    names = ("self_device_time_total", "self_cuda_time_total") if cuda else ("self_cpu_time_total",)
    events = []
    for event in prof.key_averages():
        if str(getattr(event, "device_type", "")).endswith("CUDA") != cuda:
            continue
        name = next((n for n in names if hasattr(event, n)), None)  # torch renamed it in 2.4
        us = float(getattr(event, name)) if name else 0.0
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
    except Exception as err:  # one contender's failure (a Triton error too) must not cost the rest
        return [KernelShare(label, 0, "", 0, 0, 0, _failure(f"profile: {label}", err))]


def kernels_table(rows: Sequence[KernelShare]) -> str:
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


def run_profile(args: argparse.Namespace) -> str:
    """Profile each contender; files rewritten after each; return the last table."""
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
        text = f"## top kernels\n\n{kernels_table(rows)}"
        report.write_report(args.out, tag, meta, rows, text)
    return text + "\n"


def bytes_moved(shape: contenders.Shape, dtype_name: str) -> int:
    """The bytes a causal fwd+bwd at ``shape`` must move at ``dtype_name`` (module doc).

    Raises:
        ValueError: ``dtype_name`` is not one of ``arguments.DTYPES``.
    """
    if dtype_name not in DTYPES:
        raise ValueError(f"dtype {dtype_name!r}: expected one of {sorted(DTYPES)}")
    elements = shape.batch * shape.heads * shape.n * shape.head_dim
    return TENSORS * elements * DTYPES[dtype_name].itemsize


def roofline_ms(shape: contenders.Shape, dtype_name: str, copy_gb_s: float) -> float:
    """``bytes_moved`` at the copy bandwidth (GB/s = 1e9 bytes/s), in ms."""
    return bytes_moved(shape, dtype_name) / (copy_gb_s * 1e9) * 1e3


def run_bandwidth(args: argparse.Namespace) -> str:
    """GB/s of ``dst.copy_(src)`` for ``--size-mb`` MB tensors (read + write over the median
    time) into ``<out>/copy.csv``; return one line saying it."""
    device = torch.device(args.device)
    src = torch.empty(int(args.size_mb * 1e6) // 4, device=device).uniform_()
    dst = torch.empty_like(src)
    for _ in range(args.warmup):
        dst.copy_(src)
    synchronize(device)
    seconds = statistics.median(
        time_calls(lambda: dst.copy_(src), repeats=args.repeats, device=device)
    )
    gb_s = 2 * src.numel() * 4 / seconds / 1e9
    meta = environment(device, command=args.command_line, timing=timing_method(device))
    args.out.mkdir(parents=True, exist_ok=True)
    row = {"gb_s": gb_s, "size_mb": args.size_mb, "repeats": args.repeats, "device": str(device)}
    write_csv(args.out / COPY_FILE, [row], meta)
    return f"copy bandwidth on {device}: {gb_s:,.0f} GB/s ({args.size_mb:g} MB tensors)\n"


def read_copy(folder: Path) -> float | None:
    """The copy bandwidth in GB/s of ``<folder>/copy.csv``, or None if unmeasured."""
    path = folder / COPY_FILE
    try:
        records = read_csv(path)[1] if path.is_file() else []
    except (OSError, ValueError):  # half-written by a killed run
        return None
    return float(records[0]["gb_s"]) if records and records[0].get("gb_s") else None


def _value(raw: str, kind: str) -> Any:
    """A CSV cell as the field's declared type (``"float | None"`` etc.); empty -> None."""
    if raw == "":
        return None if "None" in kind else ("" if kind.startswith("str") else None)
    if kind.startswith("bool"):
        return raw == "True"
    if kind.startswith("int"):
        return int(float(raw))
    return float(raw) if kind.startswith("float") else raw


def typed(cls: type[R], record: dict[str, str]) -> R:
    """``cls`` (a dataclass) from one CSV record; missing columns take the field's default."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    return cls(**{f.name: _value(record[f.name], str(f.type)) for f in fields if f.name in record})


def read_rows(cls: type[R], out: Path, pattern: str) -> list[R]:
    """Every record of the CSVs under ``out`` matching ``pattern``, as ``cls``."""
    found = []
    for path in sorted(out.glob(pattern)):
        try:
            found += [typed(cls, r) for r in read_csv(path)[1]]
        except (OSError, ValueError) as err:  # a half-written file of a killed stage
            log.warning("gpu report: %s unreadable (%s), left out", path, err)
    return found
