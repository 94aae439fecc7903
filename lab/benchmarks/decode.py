"""``decode``: per-token ``step`` latency after a context of T tokens, O(1) recurrent state vs
KV cache; ``<out>/<tag>.{csv,md}`` with one row per (backend, context).

The state is prefilled to the size of T tokens (random contents: only timing is measured), and
each timed call steps the state the previous call returned, as a decoder does. ``plot_decode``
draws the CSV (``generation --decode-csv``).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from attn_lightning.attention import Attention, FeatureMapAttention, State
from attn_lightning.attention.ops.kv_cache import from_prefix
from attn_lightning.records import read_csv
from lab.benchmarks import report
from lab.benchmarks.measure import BackendSpec, add_output, add_timing, median_seconds

log = logging.getLogger(__name__)


@dataclass
class DecodeRow:
    """One backend at one context length: ms per decoded token (median of the timed steps)."""

    backend: str
    context: int
    batch: int
    heads: int
    head_dim: int
    ms: float | None
    note: str = ""


def prefill_state(
    attn: Attention,
    context: int,
    shape: Sequence[int],
    device: torch.device,
    *,
    room: int = 64,
) -> State:
    """A state of the shape and cost of having stepped through ``context`` random tokens (its
    contents are random: only timing is measured here, not outputs).

    Feature-map backends: ``S = Σφ(k)vᵀ: (B, H, F, Dv)`` and ``z = Σφ(k): (B, H, F)`` in one pass;
    the others (softmax, polynomial): a preallocated KV cache ``(k, v): (B, H, T, D)`` each with
    ``room`` free slots, as a decoder that knows its length would hold it.
    """
    b, h, _, d = shape
    k = torch.randn(b, h, context, d, device=device)
    v = torch.randn(b, h, context, d, device=device)
    if isinstance(attn, FeatureMapAttention):
        phi_k = attn.features(k, is_query=False)  # (B, H, T, F)
        return phi_k.transpose(-1, -2) @ v, phi_k.sum(dim=-2)
    return from_prefix(k, v, capacity=context + room)


def chained_step(attn: Attention, x: torch.Tensor, state: State) -> Callable[[], None]:
    """One decoding step per call, each on the state the previous call returned, as a decoder
    steps: a KV cache appends in place (re-stepping one state would copy it every call). The
    context grows by one token per call, negligible against T."""

    def step() -> None:
        nonlocal state
        _, state = attn.step(x, x, x, state)

    return step


def run_decode(
    specs: Sequence[BackendSpec],
    *,
    contexts: Sequence[int],
    batch: int,
    heads: int,
    head_dim: int,
    repeats: int,
    warmup: int,
    device: torch.device,
) -> list[DecodeRow]:
    """Median seconds of one ``step`` per backend and context; backends without ``step`` skip."""
    rows: list[DecodeRow] = []
    for spec in specs:
        torch.manual_seed(0)
        attn = spec.build(head_dim=head_dim).to(device).eval()
        if not attn.supports_recurrence:
            log.info("%s: no step(), left out", spec.label)
            continue
        shape = (batch, heads, 1, head_dim)
        x = torch.randn(shape, device=device)
        for t in contexts:
            with torch.no_grad():
                state = prefill_state(attn, t, shape, device, room=warmup + repeats + 1)
                sec = median_seconds(
                    chained_step(attn, x, state),
                    repeats=repeats,
                    warmup=warmup,
                    device=device,
                )
            rows.append(DecodeRow(spec.label, t, batch, heads, head_dim, sec * 1e3))
            log.info("%-32s context=%-7d %.3f ms/token", spec.label, t, sec * 1e3)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``decode``."""
    add_output(parser)
    add_timing(parser)
    parser.add_argument("--contexts", nargs="+", type=int, default=[1024, 4096, 16384, 65536])


def run(args: argparse.Namespace) -> str:
    """Time every backend's ``step`` at every context; write the files, return the table."""
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
    meta = report.environment(
        device, command=args.command_line, repeats=args.repeats, warmup=args.warmup
    )
    contexts = sorted({r.context for r in rows})
    index = {(r.backend, r.context): r.ms for r in rows}
    body = [
        [b, *(f"{index[(b, t)]:.3f}" if (b, t) in index else "" for t in contexts)]
        for b in dict.fromkeys(r.backend for r in rows)
    ]
    text = "## ms per decoded token\n\n" + report.markdown_table(
        ["backend", *(f"T={t}" for t in contexts)], body
    )
    report.write_report(args.out, args.tag or f"decode_{device.type}", meta, rows, text)
    return text + "\n"


def plot_decode(csv_path: Path, png: Path) -> Path:
    """Log-log plot of ms per decoded token against context length, one line per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta, rows = read_csv(csv_path)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for backend in dict.fromkeys(r["backend"] for r in rows):
        points = [(int(r["context"]), float(r["ms"])) for r in rows if r["backend"] == backend]
        points = [p for p in points if p[1] == p[1]]  # drop NaN (skipped points)
        ax.plot(*zip(*points, strict=True), marker="o", label=backend)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length T (tokens already decoded)")
    ax.set_ylabel("ms per decoded token (one step)")
    first = rows[0]
    ax.set_title(
        f"decode latency, B={first['batch']}, H={first['heads']}, D={first['head_dim']}, "
        f"{meta.get('device', '')}",
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png
