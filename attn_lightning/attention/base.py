"""The attention contract every backend implements.

Shape glossary (same as ``torch.nn.functional.scaled_dot_product_attention``):

    B   batch            H   heads
    L   query length     S   key/value length (L == S when causal)
    D   query/key dim    Dv  value dim

    q: (B, H, L, D)   k: (B, H, S, D)   v: (B, H, S, Dv)   ->   out: (B, H, L, Dv)

Mask polarity, one everywhere: ``key_padding_mask`` is ``(B, S)`` bool and **True marks a real
token** (may be attended). Masked keys contribute to neither numerator nor normaliser. A query
that can see no key at all (every key masked) gets a zero output rather than NaN.

A backend only mixes values; projections, heads, norms and residuals live in
``attn_lightning.models.transformer.MultiHeadAttention``.
"""

from __future__ import annotations

import abc

import torch
from torch import Tensor, nn

# A recurrent state is a tuple of tensors owned by the caller: ``step`` returns it, never stores it.
State = tuple[Tensor, ...]


class Attention(nn.Module, abc.ABC):
    """Base class: validates inputs once, then dispatches to ``_attend`` / ``_step``.

    Subclasses set ``name`` (the registry key), implement ``_attend`` and, when they have an
    O(1)-state recurrent form, ``_step`` and ``supports_recurrence = True``.
    """

    name: str = "attention"
    supports_recurrence: bool = False
    supports_causal: bool = True

    def __init__(self, *, head_dim: int) -> None:
        super().__init__()
        if not isinstance(head_dim, int) or head_dim <= 0:
            raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
        self.head_dim = head_dim

    # ------------------------------------------------------------------ public API
    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """Mix ``v`` by the similarity of ``q`` and ``k``; see the module docstring for shapes."""
        self._check_inputs(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        if causal and not self.supports_causal:
            raise NotImplementedError(
                f"attention {self.name!r} does not support causal=True; "
                f"use a backend with a causal form (e.g. 'softmax', 'linear')"
            )
        return self._attend(q, k, v, causal=causal, key_padding_mask=key_padding_mask)

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: State | None = None
    ) -> tuple[Tensor, State]:
        """Attend for one new token given the state of all previous ones.

        Args:
            q, k, v: ``(B, H, 1, D)``, ``(B, H, 1, D)``, ``(B, H, 1, Dv)`` for the new position.
            state: what the previous call returned, or None at the first position.

        Returns:
            ``(out, state)`` with ``out: (B, H, 1, Dv)`` equal to ``forward(causal=True)`` at this
            position, and the new state (the input state is not modified in place).
        """
        if not self.supports_recurrence:
            raise NotImplementedError(
                f"attention {self.name!r} has no recurrent step(); "
                f"decode by recomputing the prefix with forward(causal=True)"
            )
        self._check_inputs(q, k, v, causal=True, key_padding_mask=None)
        if q.shape[2] != 1:
            raise ValueError(
                f"step() takes one token: q, k, v must have length 1, got {q.shape[2]}"
            )
        return self._step(q, k, v, state)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}"

    # ------------------------------------------------------------------ for subclasses
    @abc.abstractmethod
    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None
    ) -> Tensor: ...

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        raise NotImplementedError  # pragma: no cover - guarded by supports_recurrence

    def _check_inputs(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None
    ) -> None:
        for label, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError(f"{label} must be 4-D (B, H, N, D), got shape {tuple(t.shape)}")
        (b, h, l_q, d), (bk, hk, s, dk), (bv, hv, sv, _) = q.shape, k.shape, v.shape
        if (b, h) != (bk, hk) or (b, h) != (bv, hv):
            raise ValueError(
                f"q, k, v must share (B, H): got "
                f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
            )
        if d != dk:
            raise ValueError(f"q and k must share the last dim D: got {d} and {dk}")
        if d != self.head_dim:
            raise ValueError(
                f"attention {self.name!r} was built with head_dim={self.head_dim} but got D={d}"
            )
        if s != sv:
            raise ValueError(f"k and v must share the length S: got {s} and {sv}")
        if causal and l_q != s:
            raise ValueError(f"causal=True requires L == S, got L={l_q}, S={s}")
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool:
                raise ValueError(
                    "key_padding_mask must be bool (True = real token), "
                    f"got {key_padding_mask.dtype}"
                )
            if tuple(key_padding_mask.shape) != (b, s):
                raise ValueError(
                    f"key_padding_mask must have shape (B, S) = {(b, s)}, "
                    f"got {tuple(key_padding_mask.shape)}"
                )


def allowed_keys(
    batch: int,
    q_len: int,
    k_len: int,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    device: torch.device,
) -> Tensor | None:
    """Boolean ``(B, 1, L, S)`` mask of which keys each query may see, or None for "all"."""
    if not causal and key_padding_mask is None:
        return None
    allowed = torch.ones(batch, 1, q_len, k_len, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]
    return allowed


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types (states must not overflow), the input dtype otherwise (fp64 stays)."""
    return torch.promote_types(dtype, torch.float32)
