"""Benchmark entry point: ``python -m attn_lightning.benchmark <command> ...``.

    latency   forward / forward+backward time and peak memory vs N, every backend, causal and
              not; protocols small-batch (B=4, H=4), fixed-batch (B=32, N=128…6000) and
              constant-tokens (B·N = 2¹⁶, N = 2⁹…2¹⁶, cost per sample)
    decode    per-token step() latency vs context length
    approx    relative error of the approximate backends vs exact softmax
    kernels   each similarity vs the angle between unit vectors (learned polynomial from a
              checkpoint with --checkpoint)
    model     tokens/s of one whole training step (forward, loss, backward, AdamW) of the
              reversal and pixel models vs N, the share of it spent inside attention, and the
              N from which each backend beats softmax end to end vs in attention alone

Examples::

    python -m attn_lightning.benchmark latency --backends softmax linear performer \\
        --lengths 256 1024 4096 16384 --causal both
    python -m attn_lightning.benchmark latency --protocol fixed-batch --out docs/figures
    python -m attn_lightning.benchmark approx --out docs/figures
    python -m attn_lightning.benchmark kernels --checkpoint checkpoints/last.ckpt
    python -m attn_lightning.benchmark model --models reversal pixel \\
        --backends softmax linear performer polysketch --lengths 256 1024 4096 16384 \\
        --widths 64 256 --out docs/figures

The implementation lives in ``attn_lightning.benchmarks`` (one module per concern).
"""

from __future__ import annotations

from attn_lightning.benchmarks.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
