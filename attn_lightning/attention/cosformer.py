"""cosFormer: ReLU linear attention re-weighted by the cosine of the token distance.

Qin, Sun, Deng et al., "cosFormer: Rethinking Softmax in Attention", ICLR 2022 (arXiv 2202.08791),
one of the feature maps the Based paper compares on MQAR::

    sim(q_i, k_j) = relu(q_i)ᵀ relu(k_j) · cos(π/2 · (i − j) / M),     i, j = 1, 2, ...

Ptolemy's cos(a − b) = cos a cos b + sin a sin b splits it into features of one token each,
``φ(x_i) = [relu(x_i) sin θ_i, relu(x_i) cos θ_i]``, θ_i = π i / (2M): F = 2D, an F·Dv + F state.
For |i − j| < M the cosine is positive, so every weight is ≥ 0 and the normaliser is a sum of
non-negative terms (plus ``eps``, where the paper clamps it at eps).

M, ``horizon``: the paper's (and its code's, and Zoology's) M is each call's length, max(L, S)
(``horizon: None``, the default). Then the weight of a pair depends on how long the sequence is:
a causal output at i changes with the length of the call (never with the future's content), a
prefix or a right-padded batch is another re-weighting, and a token-by-token decode, which does
not know the final length, has no M, so this form has no ``step()`` (decoding recomputes the
prefix). ``horizon: N`` fixes M = N: the weights depend on i − j only, ``step()`` carries the
position in its state and equals the causal forward, prefixes and padding are exact, and a call or
decode longer than N is refused (beyond it cos turns negative). Training at a fixed length L with
``horizon: L`` is the paper's form on those sequences.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attn_lightning.attention.base import State, accumulation_dtype, check_int
from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS, linear_attention_step


class CosFormerAttention(FeatureMapAttention):
    """cosFormer's ReLU features with the cos re-weighting (module docstring).

    Args:
        head_dim: D.
        horizon: M, the distance at which the re-weighting reaches cos(π/2) = 0; None: each call's
            max(L, S), as the paper (then no ``step()``).
        chunk_size: tokens per chunk in the causal kernel.
        eps: added to the normaliser.
        implementation: the causal kernel, ``auto``, ``torch``, ``fla`` or ``triton``.

    Raises:
        ValueError: ``horizon`` not None or an int >= 1; in forward, a call longer than
            ``horizon``; in ``step()``, a position past it.
    """

    name = "cosformer"
    positional = True  # the weight of a pair is set by the tokens' indices

    def __init__(
        self,
        *,
        head_dim: int,
        horizon: int | None = None,
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
        implementation: str = "auto",
    ) -> None:
        super().__init__(
            head_dim=head_dim, chunk_size=chunk_size, eps=eps, implementation=implementation
        )
        what = "M, the token distance at which the cos re-weighting reaches 0; None: the call's"
        self.horizon = (
            None if horizon is None else check_int("horizon", horizon, minimum=1, what=what)
        )
        # Instance-level, as softmax's window sets ``positional``: only a fixed M has a recurrence.
        self.supports_recurrence = horizon is not None
        self.length_dependent = horizon is None
        if horizon is None:
            self.recurrence_hint = (
                "its M is each call's length, which a token-by-token decode does not know: build "
                "it with horizon=<the longest length> for a step(), or decode by recomputing the "
                "prefix with forward(causal=True)"
            )

    @property
    def feature_dim(self) -> int:
        """F = 2D: relu(x)·sin θ and relu(x)·cos θ."""
        return 2 * self.head_dim

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        """φ of a sequence x whose tokens sit at positions 1..N, M = ``horizon`` or N."""
        n = x.shape[-2]
        return reweighted(x, first=1, horizon=self._m(n, n))

    def call_features(
        self, q: Tensor, k: Tensor, *, dtype: torch.dtype | None
    ) -> tuple[Tensor, Tensor]:
        """φ(q), φ(k) of one call: queries and keys both from position 1, M of the whole call."""
        m = self._m(q.shape[-2], k.shape[-2])
        return self._features(q, first=1, horizon=m, dtype=dtype), self._features(
            k, first=1, horizon=m, dtype=dtype
        )

    def _features(
        self, x: Tensor, *, first: int, horizon: int, dtype: torch.dtype | None = None
    ) -> Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            return reweighted(
                x.to(dtype or accumulation_dtype(x.dtype)), first=first, horizon=horizon
            )

    def _m(self, queries: int, keys: int) -> int:
        """M for a call of L = ``queries``, S = ``keys``: ``horizon``, or max(L, S) without one."""
        longest = max(queries, keys)
        if self.horizon is None:
            return longest
        if longest > self.horizon:
            raise ValueError(
                f"attention 'cosformer' was built with horizon={self.horizon} but got a call of "
                f"length {longest} (L={queries}, S={keys}): past M the cos re-weighting turns "
                f"negative; build it with horizon >= {longest}"
            )
        return self.horizon

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        # The position rides in the state as a CPU int64 scalar: read back without a device sync.
        assert self.horizon is not None  # supports_recurrence is False without one
        position = 1 if state is None else int(state[2]) + 1
        if position > self.horizon:
            raise ValueError(
                f"attention 'cosformer' was built with horizon={self.horizon} and cannot step to "
                f"position {position}: past M the cos re-weighting turns negative; build it with "
                f"a larger horizon"
            )
        phi_q = self._features(q, first=position, horizon=self.horizon)
        phi_k = self._features(k, first=position, horizon=self.horizon)
        out, sums = linear_attention_step(
            phi_q, phi_k, v, None if state is None else state[:2], eps=self.eps
        )
        return out, (*sums, torch.tensor(position))

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, horizon={self.horizon}"


def reweighted(x: Tensor, *, first: int, horizon: int) -> Tensor:
    """``[relu(x_i)·sin θ_i, relu(x_i)·cos θ_i]`` for the tokens of x at positions ``first``,
    ``first + 1``, ..., θ_i = π·i/(2M); the angles in float64, then x's dtype."""
    n = x.shape[-2]
    positions = torch.arange(first, first + n, device=x.device, dtype=torch.float64)
    theta = positions * (math.pi / (2 * horizon))
    sin, cos = (w.to(x.dtype)[:, None] for w in (theta.sin(), theta.cos()))
    relu = torch.relu(x)
    return torch.cat([relu * sin, relu * cos], dim=-1)
