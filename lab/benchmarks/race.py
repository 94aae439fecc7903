"""``race``: the contenders of ``contenders`` raced shape by shape, files written per point.

    python -m lab.benchmark race --shapes 2x4x32768x64 16x32x1024x128 \\
        --contenders fla-op linear:fla flash --device cuda --out out/race

For each shape (in the order given: ``gpu_report`` puts the targets' shapes first), each contender:
build its ``Call`` (inputs outside the timing), ``warmup`` untimed calls (the first one
compiles and autotunes: its time is kept as ``first_ms``), then ``repeats`` timed calls (CUDA
events on a GPU), their median; then one forward compared with ``contenders.reference`` (relative
Frobenius error; the reference computed once per shape). A contender that cannot run here gets
a row with the reason; one that fails gets a row with its error and the next one runs; an
out-of-memory is ``OOM``. The CSV and markdown are rewritten after every point, so a job killed
at its timeout keeps what it timed.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attn_lightning.records import environment, markdown_meta, markdown_table, write_csv
from lab.benchmarks import contenders
from lab.benchmarks.arguments import DTYPES, add_output, timing_method
from lab.benchmarks.measure import is_out_of_memory, synchronize, time_calls

log = logging.getLogger(__name__)


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``race``."""
    add_output(parser)
    parser.add_argument("--shapes", nargs="+", type=contenders.Shape.parse, required=True)
    parser.add_argument(
        "--contenders", nargs="+", choices=list(contenders.CONTENDERS), required=True
    )
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda")


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """``‖got − want‖ / ‖want‖`` in float32."""
    want = want.float()
    return float((got.float() - want).norm() / want.norm().clamp_min(1e-30))


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
    except contenders.Unavailable as err:
        row.note = f"not run: {err}"
    except Exception as err:  # one contender's failure (a Triton error too) must not cost the rest
        row.note = "OOM" if is_out_of_memory(err) else f"{type(err).__name__}: {str(err)[:200]}"
        log.exception("race: %s at %s failed", label, shape)
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
    """Race the contenders; write ``<out>/<tag>.csv`` and ``.md`` after every point, return
    the last table."""
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
            args.out.mkdir(parents=True, exist_ok=True)
            write_csv(args.out / f"{tag}.csv", rows, meta)
            text = f"# {tag}: ms per causal fwd+bwd\n\n{markdown_meta(meta)}\n\n{table(rows)}\n"
            (args.out / f"{tag}.md").write_text(text)
    return text
