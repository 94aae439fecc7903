"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs", arXiv 2006.16236).

sim(q, k) = φ(q)ᵀφ(k) with a fixed element-wise feature map; O(N·D·Dv) time, O(D·Dv) decode state.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import check_choice
from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS


def _elu_plus_one_values(x: Tensor, *, blocked: bool) -> Tensor:
    """``elu(x) + 1``: ``exp(min(x, 0)) + max(x, 0)`` in row blocks (``blocked``), or ``elu + 1``.

    The blocked form is for the CPU, where PyTorch's elu goes through a scalar expm1, and where
    adding ``max(x, 0)`` in row blocks of ~4 MB saves an N-sized temporary (a fresh mmap, whose
    page faults cost as much as the op). Elsewhere it is two kernels: on a GPU each block would be
    a launch, and elu is vectorised there.
    """
    if not blocked:
        return F.elu(x).add_(1.0)
    y = x.clamp(max=0).exp_()
    rows = max(1, (1 << 20) * x.shape[-2] // max(1, x.numel()))
    for xs, ys in zip(x.split(rows, dim=-2), y.split(rows, dim=-2)):
        ys.add_(xs.clamp(min=0))
    return y


class _EluPlusOne(torch.autograd.Function):
    """``elu(x) + 1`` with derivative ``min(φ(x), 1)``, saving only its output."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        y = _elu_plus_one_values(x, blocked=x.device.type == "cpu")
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        return y.clamp(max=1.0).mul_(grad)


def _elu_plus_one(x: Tensor) -> Tensor:
    return _EluPlusOne.apply(x)


def _relu(x: Tensor) -> Tensor:
    return F.relu(x)


def _softplus(x: Tensor) -> Tensor:
    return F.softplus(x)


def _squared_relu(x: Tensor) -> Tensor:
    return F.relu(x).square()


# Named element-wise feature maps; each is non-negative so the normaliser is too.
FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {
    "elu": _elu_plus_one,
    "relu": _relu,
    "softplus": _softplus,
    "squared_relu": _squared_relu,
}


class LinearAttention(FeatureMapAttention):
    """Kernel attention with an element-wise feature map (default ``elu(x) + 1``).

    Args:
        head_dim: D.
        feature_map: one of ``FEATURE_MAPS`` (elu, relu, softplus, squared_relu).
        chunk_size: tokens per chunk in the causal kernel.
        eps: added to the normaliser (a query whose keys all have zero features gets 0).
        implementation: the causal kernel, ``auto``, ``torch``, ``fla`` or ``triton``
            (``feature_map``; ``triton`` applies the ``elu`` map inside the kernel).
        rotary: RoFormer §3.3's rotary form, the features turned by their positions in the
            numerator only (``feature_map`` module docstring): self-attention, an even
            ``head_dim``, the torch kernels. Use it with ``net.positional`` other than
            ``rotary``, which turns q and k before φ.
    """

    name = "linear"
    features_in_bf16 = True  # every map in FEATURE_MAPS is element-wise

    def __init__(
        self,
        *,
        head_dim: int,
        feature_map: str = "elu",
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
        implementation: str = "auto",
        rotary: bool = False,
    ) -> None:
        super().__init__(
            head_dim=head_dim, chunk_size=chunk_size, eps=eps, implementation=implementation
        )
        check_choice("feature_map", feature_map, FEATURE_MAPS, backend=self.name)
        self.feature_map_name = feature_map
        self.fuses_elu_features = feature_map == "elu"  # the Triton kernel applies φ on load
        self._phi = FEATURE_MAPS[feature_map]
        if not isinstance(rotary, bool):
            raise ValueError(
                f"attention 'linear' option rotary must be true or false, got {rotary!r}"
            )
        if rotary:
            self.use_rotary()

    @property
    def feature_dim(self) -> int:
        """F = D: every map of ``FEATURE_MAPS`` is element-wise."""
        return self.head_dim

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        return self._phi(x)

    def extra_repr(self) -> str:
        rotary = ", rotary=True" if self.rotary else ""
        return f"head_dim={self.head_dim}, feature_map={self.feature_map_name!r}{rotary}"
