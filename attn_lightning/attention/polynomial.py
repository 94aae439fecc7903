"""Polynomial attention: normalised power attention and the learned polynomial, both exact.

    A_ij = ⟨q'_i, k'_j⟩^p / (1 + Σ_j ⟨q'_i, k'_j⟩^p),   out_i = Σ_j A_ij v_j,   p even

(Kacham, Mirrokni, Zhong, "PolySketchFormer", ICML 2024, arXiv 2310.01655) with q', k' from
``qk_norm.QKNorm``: by default the paper's learnable LayerNorm shared by q and k; ``norm="fixed"``
(LN without affine, · D^{-1/4}: this project's earlier form) and ``normalize=False`` (x · D^{-1/4},
the thesis's unnormalised kernel) are options. Masked keys (padding, and the future when causal)
count in neither the numerator nor the Σ; a query that sees no key gets 0.

This backend computes the score quadratically, O(N²·D) (the reference and the short-sequence
path); ``step`` keeps a KV cache ``(k', v)``. Its linear-time forms are the ``polysketch``
backend (random or learned sketch, local blocks, and the learned polynomial's even part).

Shapes (see ``base.py``)::

    q: (B, H, L, D)  k: (B, H, S, D)  v: (B, H, S, Dv)  ->  sim: (B, H, L, S)  ->  (B, H, L, Dv)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_lightning.attention.base import (
    Attention,
    Layout,
    Mask,
    State,
    accumulation_dtype,
    check_eps,
    check_state_request,
)
from attn_lightning.attention.ops import kv_cache
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS
from attn_lightning.attention.ops.power_exact import blocked_keys, exact_power_attention
from attn_lightning.attention.ops.qk_norm import QKNorm, check_norm


def taylor_logits(degrees: list[int]) -> Tensor:
    """θ_i = softplus⁻¹(1/i!) = log(expm1(1/i!)) per degree i: a_i = softplus(θ_i) = 1/i!."""
    init = torch.tensor([1.0 / math.factorial(i) for i in degrees], dtype=torch.float64)
    return torch.log(torch.expm1(init)).float()


class PolynomialAttention(Attention):
    """Normalised power attention ``⟨q', k'⟩^p / (1 + Σ_j ⟨q', k'⟩^p)``, exact.

    Learned polynomial (``learned_coefficients=True``)::

        sim = max(0, Σ_{i=0..p} a_i ⟨q', k'⟩^i),  a_i = softplus(θ_i) ≥ 0,  A = sim_ij / Σ_j sim_ij

    with a_i initialised at 1/i!: the degree-p Taylor polynomial of exp, and ``⟨q', k'⟩`` is
    softmax's logit, so the layer starts as a Taylor approximation of softmax attention
    (generalised attention, Katharopoulos et al. 2020). No "1 +" here: it acts as a phantom key
    of similarity 1 and value 0, which the power kernel needs (Σ_j ⟨q', k'⟩^p can be ≈ 0 for
    near-orthogonal q, k, and dividing by it alone would amplify noise) but which here would only
    shrink the output and break the softmax limit: a_0 > 0 already keeps Σ_j sim_ij off zero.
    The clamp: odd powers make Σ a_i d^i negative for d < 0 unless the even terms dominate. The
    even-degree truncated exponential is positive everywhere, but learned a_i can lose that, and
    a signed similarity gives a normaliser that can cross zero (unbounded, sign-flipped weights).
    Clamped, the weights stay a convex combination, and ``eps`` in the normaliser makes a query
    whose keys are all masked (or all clamped) output 0.

    Everything runs in float32 at least with autocast off; the output has v's dtype.

    Departures from the paper, each off by default: ``norm="fixed"`` (our earlier LN without
    affine parameters and an extra D^{-1/4}); ``normalize=False`` (no LN: the thesis's kernel on
    raw projections, scaled by D^{-1/4}). The learned polynomial is the thesis's, not the paper's;
    its learnable LN scale starts at D^{-1/4} so that ``⟨q', k'⟩`` starts at softmax's logit scale
    (see ``qk_norm``). Checkpoints from before the learnable norm load with ``norm: fixed``.

    Args:
        head_dim: D.
        degree: p, any even int ≥ 2.
        learned_coefficients: learn the polynomial's coefficients (see above).
        normalize: normalise q and k (``norm``); False: x · D^{-1/4} only.
        norm: ``learned`` (paper) or ``fixed`` (see ``qk_norm``).
        eps: added to the normaliser.
    """

    name = "polynomial"
    supports_recurrence = True  # exact, but the state (KV cache) grows with the context

    def __init__(
        self,
        *,
        head_dim: int,
        degree: int = 4,
        learned_coefficients: bool = False,
        normalize: bool = True,
        norm: str = "learned",
        eps: float = DEFAULT_EPS,
    ) -> None:
        super().__init__(head_dim=head_dim)
        check_norm(norm, self.name)
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 2 or degree % 2:
            raise ValueError(
                f"degree must be an even int >= 2 (2, 4, 6, ...; an odd power makes the scores "
                f"and the normaliser signed), got {degree!r}"
            )
        self.degree = degree
        self.learned_coefficients = bool(learned_coefficients)
        self.normalize = bool(normalize)
        self.norm = norm
        self.eps = check_eps(eps)
        # c in out = Σ sim·v / (c + Σ sim): the power kernel's "1 +"; none for the learned
        # polynomial (see the class docstring).
        self.normalizer_offset = 0.0 if learned_coefficients else 1.0
        self.coefficient_logits: nn.Parameter | None = None
        if learned_coefficients:
            # θ_i = softplus⁻¹(1/i!) = log(expm1(1/i!)), so a_i starts at 1/i!.
            self.coefficient_logits = nn.Parameter(taylor_logits(list(range(degree + 1))))
        # Named ``qk_norm`` in state dicts (``learned``: ``qk_norm.weight``, ``qk_norm.bias``).
        self.qk_norm = QKNorm(
            head_dim,
            norm if normalize else "none",
            init_scale=head_dim**-0.25 if learned_coefficients else 1.0,
        )

    # ------------------------------------------------------------------ the similarity
    @property
    def coefficients(self) -> Tensor:
        """a_0..a_p of ``sim = Σ_i a_i ⟨q', k'⟩^i``: softplus(θ) with learned coefficients, else
        the one-hot e_p of the power kernel. Read from a checkpoint: ``softplus(state_dict[...
        "coefficient_logits"])``."""
        if self.coefficient_logits is not None:
            return F.softplus(self.coefficient_logits)
        return F.one_hot(torch.tensor(self.degree), self.degree + 1).float()

    def diagnostics(self) -> dict[str, float]:
        """``a_i`` of the learned polynomial and ``c``, the growth of ⟨q', k'⟩ through the LN
        scale (``QKNorm.scale_growth``), for the training logs."""
        if self.coefficient_logits is None:
            return {}
        values = {f"a{i}": a for i, a in enumerate(self.coefficients.detach().tolist())}
        c = self.qk_norm.scale_growth()
        return values if c is None else values | {"c": c}

    def kernel(self, dot: Tensor) -> Tensor:
        """The similarity as a function of ``d = ⟨q', k'⟩`` (any shape): ``d^p``, or
        ``max(0, Σ_i a_i d^i)`` (Horner) with learned coefficients."""
        if self.coefficient_logits is None:
            return dot.pow(self.degree)
        a = self.coefficients.to(dot.dtype)
        sim = torch.zeros_like(dot) + a[-1]
        for coefficient in a[:-1].flip(0):
            sim = sim * dot + coefficient
        return sim.clamp_min(0.0)

    def normalize_inputs(self, x: Tensor) -> Tensor:
        """``x'`` of ``qk_norm`` (the learnable LN by default), in x's dtype."""
        return self.qk_norm(x)

    # ------------------------------------------------------------------ contract
    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        return self._exact(q, k, v, causal=causal, key_padding_mask=key_padding_mask)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        """A KV cache ``(k': (B, H, T, D) in the accumulation dtype, v: (B, H, T, Dv))``."""
        acc = accumulation_dtype(torch.promote_types(q.dtype, v.dtype))  # as in ``_exact``
        with torch.autocast(device_type=k.device.type, enabled=False):
            k_new = self.normalize_inputs(k.to(acc))
        # Preallocated (``kv_cache``): one slot written per token, no O(T) concatenation.
        state = kv_cache.append(state, k_new, v)
        cache_k, cache_v = state  # (B, H, T + 1, D), (B, H, T + 1, Dv)
        out = self._exact(
            q, cache_k, cache_v, causal=False, key_padding_mask=None, keys_normalized=True
        )
        return out, state

    def state_size(self, *, seq_len: int, value_dim: int | None = None) -> int:
        """``N·(D + Dv)`` floats per head: the KV cache of N normalised keys and values."""
        return seq_len * (self.head_dim + check_state_request(self.head_dim, seq_len, value_dim))

    def _exact(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool,
        key_padding_mask: Tensor | None,
        keys_normalized: bool = False,
    ) -> Tensor:
        """``Σ_j sim_ij v_j / (c + Σ_j sim_ij + eps)`` over the allowed keys, O(L·S·(D + Dv)),
        by tiles with a hand-written backward (``power_exact``): no (B, H, L, S) tensor kept or
        allocated whole (plain autograd over the formula made the learned polynomial 4× slower
        than the power kernel in training at 513 tokens)."""
        acc = accumulation_dtype(torch.promote_types(q.dtype, v.dtype))
        blocked = blocked_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
        with torch.autocast(device_type=q.device.type, enabled=False):
            qn = self.normalize_inputs(q.to(acc))
            kn = k.to(acc) if keys_normalized else self.normalize_inputs(k.to(acc))
            offset = self.normalizer_offset + self.eps
            coefficients = None
            if self.coefficient_logits is not None:
                coefficients = self.coefficients.to(acc)
            out = exact_power_attention(
                qn,
                kn,
                v.to(acc),
                blocked=blocked,
                causal=causal,
                degree=self.degree,
                offset=offset,
                coefficients=coefficients,
            )
            return out.to(v.dtype)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, degree={self.degree}, "
            f"learned_coefficients={self.learned_coefficients}, normalize={self.normalize}, "
            f"norm={self.norm!r}, eps={self.eps}"
        )
