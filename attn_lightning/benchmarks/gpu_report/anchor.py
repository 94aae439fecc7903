"""The anchor: fla's own causal linear-attention op, called directly, timed like a backend.

``FlaOp`` is what a user of flash-linear-attention would write for our ``linear`` backend:
``elu(x) + 1`` features and ``chunk_linear_attn(normalize=True)`` on the ``[B, T, H, ·]`` views of
the same ``(B, H, N, D)`` inputs, without our contract (input checks, the causal finiteness probe,
the float32 normaliser with its offset and eps). Timed by ``scaling.run_series`` on the shapes of
a ``latency`` protocol, it says what the adapter costs over the kernel: the report's target is
``linear:implementation=fla`` within 1.2× of it. CUDA only (fla's kernels are Triton).

    child job: ["anchor", "--out", DIR, "--dtype", "bfloat16", "--protocol", "constant-tokens",
                "--tokens", "65536", "--heads", "4", "--head-dim", "64", "--lengths", ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_lightning.attention import Attention
from attn_lightning.attention.ops import fla
from attn_lightning.benchmarks import report, scaling
from attn_lightning.benchmarks.arguments import DTYPES, budget_settings, timing_method
from attn_lightning.benchmarks.protocols import MODES, PROTOCOLS, TimingProtocol
from attn_lightning.benchmarks.specs import BackendSpec

LABEL = "fla-op (anchor)"
# Its FLOPs are counted as linear attention's (same products, same φ).
SPEC = BackendSpec(label=LABEL, name="linear")


class FlaOp(nn.Module):
    """``elu(x) + 1`` then fla's ``chunk_linear_attn(scale=1, normalize=True)``; causal only."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = True) -> Tensor:
        if not causal:
            raise ValueError("fla's linear_attn ops are causal: the anchor has no non-causal form")
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))  # [B, T, H, ·] views
        out, _ = fla.chunk_op()(F.elu(q) + 1, F.elu(k) + 1, v, scale=1.0, normalize=True)
        return out.transpose(1, 2)


def build_parser() -> argparse.ArgumentParser:
    """The anchor job's flags (a subset of ``latency``'s, same meaning)."""
    parser = argparse.ArgumentParser(prog="anchor", description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tag", default=None)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="constant-tokens")
    parser.add_argument("--tokens", type=int, default=None, help="B·N (constant-tokens)")
    parser.add_argument("--batch", type=int, default=None, help="B (instead of --tokens)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--lengths", nargs="+", type=int, required=True)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per point")
    parser.add_argument("--device", default="cuda")
    return parser


def main(argv: Sequence[str]) -> int:
    """Time the anchor, causal, every mode and N; write ``<out>/<tag>.{csv,md}``."""
    args = build_parser().parse_args(list(argv))
    device = torch.device(args.device)
    base = PROTOCOLS[args.protocol]
    protocol = TimingProtocol(
        name=base.name,
        lengths=tuple(args.lengths),
        heads=args.heads,
        head_dim=args.head_dim,
        batch=args.batch or base.batch,
        tokens=None if args.batch else (args.tokens or base.tokens),
    )
    settings = scaling.Settings(**budget_settings(args), measure_memory=True)
    anchor = cast(Attention, FlaOp().to(device))  # timed through the backends' loop
    rows = []
    for mode in args.modes:
        rows += scaling.run_series(
            SPEC,
            anchor,
            causal=True,
            mode=mode,
            protocol=protocol,
            settings=settings,
            dtype_name=args.dtype,
        )
    meta = report.environment(
        device,
        command=f"anchor {' '.join(argv)}",
        protocol=protocol.describe(),
        dtype=args.dtype,
        anchor="elu(x)+1, then fla.ops.linear_attn.chunk_linear_attn(scale=1, normalize=True)",
        fla_core=fla.installed_version() or "not installed",
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
        timing=timing_method(device),
    )
    tables = "\n\n".join(
        f"## {mode}: ms per call\n\n" + report.scaling_table(rows, mode=mode) for mode in args.modes
    )
    tag = args.tag or f"anchor_{protocol.name}_{args.dtype}"
    report.write_report(args.out, tag, meta, rows, tables)
    return 0
