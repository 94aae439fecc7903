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

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable


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
        return F.silu(_CausalDepthwise.apply(x, self.weight))

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


class _CausalDepthwise(torch.autograd.Function):
    """``y_t = Σ_{s<K} w_{K-1-s} ⊙ x_{t-s}`` on ``(B, L, C)`` as K shifted multiply-adds.

    Not ``F.conv1d(groups=C)``: on the CPU its depthwise backward cost ~1.5x these elementwise
    passes (docs/benchmarks.md, "Short convolution"), and it wants (B, C, L) copies both ways.
    Sums run in float32 at least: bf16 partial sums, rounded one by one, lose what cancels, and
    bf16 products summed over B·L put ~5 % of noise on the weight's gradient.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor) -> Tensor:
        channels, kernel = weight.shape[0], weight.shape[-1]
        # float32 sums for bf16/fp16 inputs, rounded once at the end (as a GEMM would)
        w = weight.reshape(channels, kernel).to(torch.promote_types(x.dtype, torch.float32))
        y = x * w[:, kernel - 1]
        for shift in range(1, min(kernel, x.shape[1])):
            y[:, shift:].addcmul_(x[:, :-shift], w[:, kernel - 1 - shift])
        ctx.save_for_backward(x, weight)
        return y.to(x.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        x, weight = ctx.saved_tensors
        channels, kernel = weight.shape[0], weight.shape[-1]
        wide = torch.promote_types(grad.dtype, torch.float32)  # no copies for float32/64
        w = weight.reshape(channels, kernel).to(wide)
        grad_x = grad * w[:, kernel - 1]
        for shift in range(1, min(kernel, x.shape[1])):
            grad_x[:, :-shift].addcmul_(grad[:, shift:], w[:, kernel - 1 - shift])
        grad_x = grad_x.to(x.dtype)
        grad, x = grad.to(wide), x.to(wide)
        grad_w = grad.new_zeros(channels, kernel)
        for shift in range(min(kernel, x.shape[1])):
            product = grad[:, shift:] * x[:, : x.shape[1] - shift]
            grad_w[:, kernel - 1 - shift] = product.sum((0, 1))
        return grad_x, grad_w.to(weight.dtype).view_as(weight)


__all__ = ["ShortConvolution"]
