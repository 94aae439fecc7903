"""A short causal convolution over the sequence: each channel mixes its own last K inputs.

The token-mixing ingredient every recent linear-attention model puts before its feature map —
GLA, DeltaNet, Based's BaseConv layers, Mamba; fla's ``ShortConvolution`` (``use_short_conv``,
``conv_size`` 4): a depthwise ``Conv1d`` of kernel K with no bias, left-padded so position t sees
``x[t-K+1 .. t]`` only, then SiLU. ``MultiHeadAttention(short_conv=K)`` runs it on q, k and v
after their projections. It gives every position its previous tokens at no attention cost —
what an induction head's first layer otherwise has to compute — for a decode state of the last
K - 1 inputs.

Shapes: ``x: (B, L, C)``; ``key_padding_mask: (B, L)`` bool, True = real token: padded inputs are
zeroed first, so a padded position adds nothing to the real ones after it (left padding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ShortConvolution(nn.Module):
    """``y_t = silu(Σ_{j<K} w_j ⊙ x_{t-K+1+j})`` per channel; zeros before the sequence.

    Args:
        channels: C.
        kernel_size: K >= 1, the inputs each output sees (its own and the K - 1 before it).

    Raises:
        ValueError: ``channels`` or ``kernel_size`` < 1.
    """

    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        if channels < 1 or kernel_size < 1:
            raise ValueError(
                f"a short convolution needs channels >= 1 and kernel_size >= 1, got "
                f"channels={channels}, kernel_size={kernel_size}"
            )
        self.kernel_size = kernel_size
        # nn.Conv1d's own init (as fla's), kept as a plain (C, 1, K) weight for the step's use.
        conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=False)
        self.weight = nn.Parameter(conv.weight.detach().clone())

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        """``x: (B, L, C)`` -> ``(B, L, C)``."""
        if key_padding_mask is not None:
            x = x * key_padding_mask[..., None].to(x.dtype)
        length = x.shape[1]
        y = F.conv1d(
            x.transpose(1, 2), self.weight.to(x.dtype), padding=self.kernel_size - 1,
            groups=x.shape[-1],
        )  # fmt: skip
        # Contiguous before SiLU: its backward on the strided view took ~20 % longer (CPU).
        return F.silu(y[..., :length].transpose(1, 2).contiguous())

    def step(self, x: Tensor, cache: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One position ``x: (B, 1, C)`` and the last K - 1 inputs ``cache: (B, K - 1, C)``
        (None: the start, zeros) -> ``((B, 1, C), the new cache)``; equals ``forward`` there."""
        if cache is None:
            cache = x.new_zeros(x.shape[0], self.kernel_size - 1, x.shape[-1])
        window = torch.cat([cache, x], dim=1)  # (B, K, C): oldest first, as the kernel reads
        weight = self.weight[:, 0, :].to(x.dtype)  # (C, K)
        y = torch.einsum("bkc,ck->bc", window, weight)[:, None]
        return F.silu(y), window[:, 1:]

    def state_size(self) -> int:
        """Floats the step keeps per batch row: the last K - 1 inputs of every channel."""
        return (self.kernel_size - 1) * self.weight.shape[0]


__all__ = ["ShortConvolution"]
