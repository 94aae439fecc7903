"""The input normalisation of the polynomial kernels: q' and k' before ⟨q', k'⟩^p.

Polynomial kernels are only well-behaved on bounded entries (Alman & Song 2023, "Fast Attention
Requires Bounded Entries"), so ``polynomial`` and ``polysketch`` normalise q and k first:

* ``learned`` (default, PolySketchFormer's form, Kacham, Mirrokni, Zhong 2024, arXiv
  2310.01655, and its public code): ``x' = LN(x)`` with a learnable scale and bias over D,
  **one** LayerNorm shared by q and k (so ``⟨q', k'⟩`` stays a symmetric function of the two
  inputs). ``|⟨q', k'⟩| ≤ D`` at the initial scale 1.
* ``fixed`` (this project's earlier form, a departure kept as an option): ``x' = LN(x)·D^{-1/4}``
  with no affine parameters, so ``|⟨q', k'⟩| ≤ √D``, softmax's logit scale ``qᵀk/√D`` for
  unit-variance inputs.
* ``none`` (the thesis's "no normalisation"; ``normalize=False`` on the backends):
  ``x' = x·D^{-1/4}``.

The scale matters only through the kernels' "1 +" (power attention is otherwise invariant to a
common scale of q' and k') and through the learned polynomial, whose Taylor initialisation
approximates ``exp`` only at softmax's logit scale: its backends start the learnable scale at
``D^{-1/4}`` (``init_scale``), so step 0 equals the ``fixed`` form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_lightning.attention.base import check_choice

LN_EPS = 1e-5  # torch's and flax's LayerNorm default
QK_NORMS = ("learned", "fixed", "none")


def check_norm(norm: str, backend: str) -> None:
    """Raise a ``ValueError`` naming ``norm`` and the allowed forms."""
    check_choice("norm", norm, QK_NORMS, backend=backend)


class QKNorm(nn.Module):
    """``x -> x'`` in one of ``QK_NORMS`` (see the module docstring), in the input's dtype.

    The learnable scale and bias (``learned`` only: ``weight``, ``bias``, shape ``(D,)``) are cast
    to the input's dtype, so a model converted to bf16 weights still normalises in float32.

    Args:
        head_dim: D.
        norm: ``learned``, ``fixed`` or ``none``.
        init_scale: initial value of the learnable scale (``learned`` only).
    """

    def __init__(self, head_dim: int, norm: str = "learned", *, init_scale: float = 1.0) -> None:
        super().__init__()
        check_norm(norm, "polynomial")
        self.head_dim = head_dim
        self.norm = norm
        self.init_scale = float(init_scale)
        self.weight: nn.Parameter | None = None
        self.bias: nn.Parameter | None = None
        if norm == "learned":
            self.weight = nn.Parameter(torch.full((head_dim,), float(init_scale)))
            self.bias = nn.Parameter(torch.zeros(head_dim))

    def forward(self, x: Tensor) -> Tensor:
        shape = (self.head_dim,)
        if self.weight is not None and self.bias is not None:
            weight, bias = self.weight.to(x.dtype), self.bias.to(x.dtype)
            return F.layer_norm(x, shape, weight, bias, eps=LN_EPS)
        if self.norm == "fixed":
            x = F.layer_norm(x, shape, eps=LN_EPS)
        return x * self.head_dim**-0.25

    def scale_growth(self) -> float | None:
        """``c = (‖γ‖ / ‖γ₀‖)²``: how much the learnable scale has multiplied ``⟨q', k'⟩`` since
        initialisation (exact when every entry of γ moved alike); None without a learnable
        scale. A degree-i term ``a_i⟨q', k'⟩^i`` then acts as ``a_i c^i`` on inputs at the
        starting scale (``benchmark learned``)."""
        if self.weight is None:
            return None
        start = self.init_scale**2 * self.head_dim
        return float(self.weight.detach().float().square().sum()) / start

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, norm={self.norm!r}"
