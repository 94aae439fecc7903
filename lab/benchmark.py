"""Benchmark entry point: ``python -m lab.benchmark <command> ...``.

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
    generation
              images/s of sampling whole images (random-weight models or trained checkpoints)
              with the recurrent state / KV cache vs prefix recompute; the histogram baseline;
              the decode-latency plot

The commands are the rows of ``lab.benchmarks.cli.COMMANDS`` (one module each in
``lab.benchmarks``); ``--help`` shows examples, ``<command> --help`` its flags.
"""

from __future__ import annotations

from lab.benchmarks.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
