"""The shapes of a scaling run: three protocols from the literature, overridable on the CLI.

A protocol is a ``TimingProtocol`` (not ``Protocol``: that name is ``typing.Protocol``'s).

* ``small-batch`` (default): B = 4, H = 4, D = 64, N = 256 … 16,384: a few long sequences, the
  setting of the library's speed targets.
* ``fixed-batch``: one attention layer, H = 1, D = 64, B = 32, N = 128 … 6,000 (the setup of the
  2024 blog reproduction "Linear Attention Is All You Need").
* ``constant-tokens``: B·N = 2¹⁶ tokens, H = 1, D = 64, N = 2⁹ … 2¹⁶, cost reported per sample
  (Katharopoulos et al. 2020, Fig. 1).
"""

from __future__ import annotations

from dataclasses import dataclass

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
