"""Base class for "linear attention with a feature map": sim(q, k) = φ(q)ᵀφ(k).

Linear (Katharopoulos), Performer (FAVOR+), PolySketch and mean pooling only define φ; the
non-causal, causal-chunked and recurrent forms all come from ``linear_kernels`` (one kernel, no
per-variant copies). ``implementation`` picks the kernel of the causal product: ``torch`` (our
chunked ``causal_product``), ``fla`` (flash-linear-attention's fused Triton kernel, CUDA only:
``ops/fla.py``), ``triton`` (our chunk-parallel product as fused Triton kernels, CUDA, or CPU
under ``TRITON_INTERPRET=1``: ``ops/triton_causal.py``; linear's elu + 1 is applied in its loads)
or ``auto`` (the torch kernel for now: ``dispatch.AUTO_TAKES_FLA``). The non-causal product and
``step`` are the same under every choice.

``rotary`` (offered by ``linear``): RoFormer §3.3's rotary form of linear attention (Su et al.
2021, arXiv 2104.09864), ``out_i = Σ_{j} (R_i φ(q_i))ᵀ(R_j φ(k_j)) v_j / (c + Σ_{j} φ(q_i)ᵀφ(k_j))``
with ``R_t`` the rotary turn of position t (``ops.rotary``): the pairs' weights depend on i − j,
and the normaliser keeps its non-negative terms. The numerator and the normaliser then use
different features, so it runs on the torch kernels (the causal product and the causal
normaliser, one call each); ``step`` keeps the position in its state (a CPU integer).
"""

from __future__ import annotations

import abc

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import (
    Attention,
    Layout,
    Mask,
    State,
    accumulation_dtype,
    check_choice,
    check_eps,
    check_int,
    check_state_request,
)
from attn_lightning.attention.ops import dispatch, fla
from attn_lightning.attention.ops.causal_normaliser import causal_normaliser
from attn_lightning.attention.ops.causal_product import causal_product
from attn_lightning.attention.ops.linear_kernels import (
    DEFAULT_EPS,
    causal_linear_attention,
    finish,
    linear_attention,
    linear_attention_step,
    product_dtype,
)
from attn_lightning.attention.ops.rotary import turn


class FeatureMapAttention(Attention):
    """Kernel attention ``out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (c + φ(q_i)ᵀ Σ_j φ(k_j))``.

    Subclasses implement ``feature_map`` and may set ``normalizer_offset`` (c). Feature maps are
    evaluated in float32 at least, with autocast off, so exp-type features cannot overflow in
    half precision.

    Args:
        head_dim: D.
        chunk_size: tokens per chunk of the torch causal kernel (fla's and triton's use 64).
        eps: added to the normaliser.
        implementation: ``auto``, ``torch``, ``fla`` or ``triton``, the causal product's kernel
            (module docstring). ``fla`` without fla-core fails here; on a non-CUDA tensor (and
            ``triton`` without the interpreter there), in forward.
    """

    supports_recurrence = True
    normalizer_offset: float = 0.0
    # True when φ is element-wise and as exact in bfloat16 as rounded from float32 (bf16 has
    # float32's range): bf16 inputs bound for the torch causal kernel's bf16 GEMMs then skip a
    # float32 copy of x and of φ and two casts, forward and backward.
    features_in_bf16: bool = False
    # True when φ is elu(x) + 1: the Triton kernel then applies it to raw q and k as it loads them
    # (and its derivative to dq, dk), so no φ tensor is written or read (``triton_causal``).
    fuses_elu_features: bool = False
    # True for RoFormer's rotary form (module docstring); set by a subclass that offers it.
    rotary: bool = False

    def __init__(
        self,
        *,
        head_dim: int,
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
        implementation: str = "auto",
    ) -> None:
        super().__init__(head_dim=head_dim)
        self.chunk_size = check_int("chunk_size", chunk_size, minimum=1, what="tokens per chunk")
        self.eps = check_eps(eps)
        self.implementation = check_choice(
            "implementation", implementation, dispatch.IMPLEMENTATIONS, backend=self.name
        )
        if implementation == "fla":  # a missing package fails at build time, before training
            fla.check_installed(self.name)

    @abc.abstractmethod
    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        """φ: ``(B, H, N, D) -> (B, H, N, F)``, non-negative for a well-defined normaliser."""

    @property
    def feature_dim(self) -> int:
        """F, the width of φ(x): each subclass states it (``state_size`` is built on it)."""
        raise NotImplementedError(f"{type(self).__name__} does not state its feature_dim")

    def state_size(self, *, seq_len: int, value_dim: int | None = None) -> int:
        """``F·Dv + F`` floats per head, whatever ``seq_len``: ``step``'s state Σφ(k)vᵀ and Σφ(k)
        (``linear_attention_step``); none without a ``step()`` (cosformer without a horizon)."""
        if not self.supports_recurrence:
            return super().state_size(seq_len=seq_len, value_dim=value_dim)  # raises, naming why
        dv = check_state_request(self.head_dim, seq_len, value_dim)
        return self.feature_dim * (dv + 1)

    def features(self, x: Tensor, *, is_query: bool, dtype: torch.dtype | None = None) -> Tensor:
        """``feature_map`` evaluated in ``dtype`` (None: the accumulation dtype), autocast off."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self.feature_map(x.to(dtype or accumulation_dtype(x.dtype)), is_query=is_query)

    def call_features(
        self, q: Tensor, k: Tensor, *, dtype: torch.dtype | None
    ) -> tuple[Tensor, Tensor]:
        """φ(q), φ(k) of one forward call (``features`` of each); a map that depends on the
        tokens' positions and the call's lengths (``cosformer``) sees both here."""
        return self.features(q, is_query=True, dtype=dtype), self.features(
            k, is_query=False, dtype=dtype
        )

    def use_rotary(self) -> None:
        """Switch this instance to the rotary form (module docstring): positional, self-attention
        only, on the torch kernels. ValueError for an odd feature width or another kernel."""
        if self.feature_dim % 2:
            raise ValueError(
                f"attention {self.name!r} with rotary turns pairs of features: its feature width "
                f"must be even, got {self.feature_dim} (head_dim {self.head_dim})"
            )
        if self.implementation not in ("auto", "torch"):
            raise ValueError(
                f"attention {self.name!r} with rotary runs on the torch kernels (its numerator "
                f"and normaliser use different features; fla's and our Triton kernel share one), "
                f"got implementation {self.implementation!r}; allowed: auto, torch"
            )
        self.rotary = True
        self.positional = True  # a pair's weight depends on the tokens' indices
        self.supports_cross_attention = False
        self.fuses_elu_features = False

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        if self.rotary:
            return self._attend_rotary(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        kernel = dispatch.resolve(self.implementation, v, backend=self.name)  # refuses before φ
        bf16 = q.dtype == product_dtype(v.dtype) == torch.bfloat16
        low = bf16 and causal and kernel in ("torch", "triton") and self.features_in_bf16
        dtype = torch.bfloat16 if low else None  # φ in the GEMMs' dtype, or float32 at least
        fused = causal and kernel == "triton" and self.fuses_elu_features  # raw q, k: φ in-kernel
        phi_q, phi_k = (q, k) if fused else self.call_features(q, k, dtype=dtype)
        if key_padding_mask is not None:
            # Zero features (fused: raw -inf, as φ(-inf) = 0 and so is φ' there): a masked key
            # adds to neither Σφ(k)vᵀ nor Σφ(k).
            fill = float("-inf") if fused else 0.0
            phi_k = phi_k.masked_fill(~key_padding_mask[:, None, :, None], fill)
        offset, eps = self.normalizer_offset, self.eps
        if not causal:
            return linear_attention(phi_q, phi_k, v, offset=offset, eps=eps)
        if kernel == "fla":
            return fla.fla_causal_linear_attention(phi_q, phi_k, v, offset=offset, eps=eps)
        if kernel == "triton":  # imported here: Triton loads only for calls that ask for it
            from attn_lightning.attention.ops.triton_causal import triton_causal_linear_attention

            out = triton_causal_linear_attention(
                phi_q, phi_k, v, offset=offset, eps=eps, elu_features=fused
            )
            assert isinstance(out, Tensor)  # return_state=False: the output alone
            return out
        return causal_linear_attention(
            phi_q, phi_k, v, chunk_size=self.chunk_size, offset=offset, eps=eps
        )

    def _attend_rotary(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask
    ) -> Tensor:
        """RoFormer §3.3 (module docstring), tokens at positions 0 .. N − 1; float32 at least."""
        phi_q, phi_k = self.call_features(q, k, dtype=None)  # the accumulation dtype
        if key_padding_mask is not None:  # a masked key adds to neither sum
            phi_k = phi_k.masked_fill(~key_padding_mask[:, None, :, None], 0.0)
        turned_q, turned_k = turn(phi_q, phi_k)
        with torch.autocast(device_type=v.device.type, enabled=False):
            vv = v.to(phi_q.dtype)
            if not causal:
                num = turned_q @ (turned_k.transpose(-1, -2) @ vv)  # (B, H, L, Dv)
                den = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (B, H, L, 1)
            else:
                n = q.shape[-2]
                c = max(1, min(self.chunk_size, n))
                pad = (-n) % c  # zero keys add nothing; padded queries' rows are dropped
                tq, tk, tv = (F.pad(t, (0, 0, 0, pad)) for t in (turned_q, turned_k, vv))
                num = causal_product(tq, tk, tv, c)[:, :, :n]
                den = causal_normaliser(phi_q, phi_k)
            return finish(num, den.squeeze(-1), self.normalizer_offset, self.eps, v.dtype)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        phi_q = self.features(q, is_query=True)
        phi_k = self.features(k, is_query=False)
        if self.rotary:
            return self._step_rotary(phi_q, phi_k, v, state)
        return linear_attention_step(
            phi_q, phi_k, v, state, offset=self.normalizer_offset, eps=self.eps
        )

    def _step_rotary(
        self, phi_q: Tensor, phi_k: Tensor, v: Tensor, state: State | None
    ) -> tuple[Tensor, State]:
        """``S += R_t φ(k) vᵀ``, ``z += φ(k)``, ``out = (R_t φ(q))ᵀS / (c + φ(q)ᵀz)`` at the
        token's position t, which rides in the state as a CPU int64 (no device sync to read)."""
        position = 0 if state is None else int(state[2]) + 1
        turned_q, turned_k = turn(phi_q, phi_k, offset=position)
        with torch.autocast(device_type=v.device.type, enabled=False):
            kv = turned_k.transpose(-1, -2) @ v.to(phi_k.dtype)  # (B, H, F, Dv)
            z = phi_k.squeeze(-2)  # (B, H, F)
            if state is not None:
                kv, z = kv + state[0], z + state[1]
            num = turned_q @ kv  # (B, H, 1, Dv)
            den = (phi_q @ z.unsqueeze(-1)).squeeze(-1)  # (B, H, 1)
            out = finish(num, den, self.normalizer_offset, self.eps, v.dtype)
        return out, (kv, z, torch.tensor(position))
