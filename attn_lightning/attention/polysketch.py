"""PolySketch attention: the polynomial score linearised by a sketch, in linear time.

Kacham, Mirrokni, Zhong, "PolySketchFormer", ICML 2024, arXiv 2310.01655::

    sim_ij = ⟨s(q'_i), s(k'_j)⟩² ≈ ⟨q'_i, k'_j⟩⁴,   out_i = Σ_j sim_ij v_j / (1 + Σ_j sim_ij)

with q', k' from ``ops.qk_norm.QKNorm`` (the paper's learnable LayerNorm shared by q and k) and
the sketch ``s`` of ``ops/sketches.py``. ``sim = ⟨φ(q'), φ(k')⟩`` with ``φ = symmetric_square(s)``,
so it runs through the shared linear-attention kernels with normaliser offset 1: O(N·r²·Dv)
time, O(r²·Dv) decode state. Degree 2 uses ``s = identity``:
``⟨sym(q'⊗q'), sym(k'⊗k')⟩ = ⟨q', k'⟩²``.

Two more forms on the same features:

* **local** (``local_block=b``, the paper's mixed form): the exact power kernel
  ``⟨LN_q(q), LN_k(k)⟩^p`` between tokens of the same block of b positions, the sketch across
  blocks (``ops/block_local.py``); causal and not, with ``step()``.
* **learned polynomial, linear time** (``learned_coefficients=True``): the even part of the
  thesis's learned polynomial, ``sim = a_0 + a_2⟨q', k'⟩² + a_4⟨s(q'), s(k')⟩²`` with
  ``a_i = softplus(θ_i) ≥ 0`` learned, as ``φ = [√a_0, √a_2·sym(q'⊗q'), √a_4·sym(s⊗s)]``.
  Even degrees only: an odd term can make the score and the normaliser negative, which a feature
  map cannot clamp the way the exact ``polynomial`` backend does (``max(0, ·)``).

Evaluation (``evaluation``): the same function two ways, ``features`` (the linear-time form
above) or ``kernel`` (the (L, S) score matrix, O(L·S·(r + Dv)), far cheaper at short lengths);
``auto`` (default) takes the cheaper by the cost model of ``ops/score_form.py``. Both give
the same outputs up to rounding (tested in float64); ``step()`` always uses the features (the
O(r²·Dv) decode state). Not used with ``local_block``.

Shapes (see ``base.py``)::

    q: (B, H, L, D)  ->  s(q'): (B, H, L, r)  ->  φ(q'): (B, H, L, r(r+1)/2)  (D(D+1)/2 for p=2)
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_lightning.attention.base import (
    Layout,
    Mask,
    State,
    accumulation_dtype,
    check_choice,
    check_int,
    check_state_request,
)
from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.ops import dispatch, score_form
from attn_lightning.attention.ops.block_local import block_mixed_attention, block_mixed_step
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS
from attn_lightning.attention.ops.qk_norm import QKNorm, check_norm
from attn_lightning.attention.ops.score_form import EVALUATIONS, kernel_form_for
from attn_lightning.attention.ops.sketches import SKETCHES, RandomPolySketch, symmetric_square
from attn_lightning.attention.polynomial import taylor_logits

SKETCH_KINDS = ("random", "learned")


class PolySketchAttention(FeatureMapAttention):
    """Linear attention with ``φ(x) = symmetric_square(s(x'))``, estimating power attention.

    * ``sketch="random"``: the Gaussian tensor sketch, an unbiased estimate of ``⟨q', k'⟩⁴``
      whose relative error falls as 1/√r. S1, S2 are persistent buffers (``sketch.s1``,
      ``sketch.s2``) drawn once at construction from the global torch RNG (so from the run's
      seed) and then **fixed**, as in the paper; with ``redraw=True`` the ``FeatureRedraw``
      callback (``redraw_features``) redraws them from a seeded generator every N steps.
    * ``sketch="learned"``: the paper's learned sketch (degree 4 only), trained with the model;
      it starts with its own learnable LN, so no other norm is applied before it.

    Features run in float32 at least with autocast off; the output has v's dtype.

    Departures from the paper, each off by default: ``norm="fixed"`` and ``normalize=False``
    (see ``qk_norm``); ``sketch_levels=1`` and ``sketch_bias=True`` (this project's earlier
    learned sketch: checkpoints from before this form load with ``norm: fixed, sketch_levels: 1,
    sketch_bias: true``); ``learned_coefficients`` (the thesis's learned polynomial, not a
    PolySketchFormer method). The paper defines its local form for causal attention only; the
    non-causal local form here is the same rule (exact inside a block) without the mask.

    Args:
        head_dim: D.
        sketch: ``random`` or ``learned`` (see above).
        degree: p. random: 2 (exact, no randomness) or 4; learned: 4.
        sketch_size: r, the sketch width (paper: 32 or 64); φ has r(r+1)/2 features.
        normalize: normalise q and k (``norm``); False: x · D^{-1/4} only.
        norm: ``learned`` (paper) or ``fixed``.
        learned_coefficients: the learned even polynomial ``a_0 + a_2 d² + a_4 d⁴`` (random sketch).
        local_block: b > 0: exact power attention inside blocks of b tokens (0: off).
        sketch_levels: levels per branch of the learned sketch (paper: 2).
        sketch_bias: biases in the learned sketch's dense layers (paper: none).
        redraw: let ``FeatureRedraw`` redraw the random sketch (paper: fixed).
        evaluation: ``auto``, ``features`` or ``kernel`` (module docstring): how forward computes
            the same scores; an implementation choice, not a change of method.
        chunk_size: tokens per chunk in the causal kernel.
        eps: added to the normaliser.
        implementation: the causal kernel of the feature form, ``auto``, ``torch`` or ``fla``.
    """

    name = "polysketch"
    normalizer_offset = 1.0  # the power kernel's "1 +": a phantom key of similarity 1, value 0

    def __init__(
        self,
        *,
        head_dim: int,
        sketch: str = "random",
        degree: int = 4,
        sketch_size: int = 32,
        normalize: bool = True,
        norm: str = "learned",
        learned_coefficients: bool = False,
        local_block: int = 0,
        sketch_levels: int = 2,
        sketch_bias: bool = False,
        redraw: bool = False,
        evaluation: str = "auto",
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
        implementation: str = "auto",
    ) -> None:
        super().__init__(
            head_dim=head_dim, chunk_size=chunk_size, eps=eps, implementation=implementation
        )
        self.evaluation = check_choice("evaluation", evaluation, EVALUATIONS, backend=self.name)
        self.sketch_kind = check_choice("sketch", sketch, SKETCH_KINDS, backend=self.name)
        check_norm(norm, self.name)
        self.sketch_size = check_int("sketch_size", sketch_size, minimum=1)
        if type(degree) is not int or (sketch, degree) not in SKETCHES:  # not a bool, not 4.0
            supported = ", ".join(str(p) for k, p in sorted(SKETCHES) if k == sketch)
            raise ValueError(
                f"sketch={sketch!r} supports degree {supported}, got "
                f"degree={degree!r}; the exact 'polynomial' attention takes any even degree"
            )
        if learned_coefficients and sketch != "random":
            raise ValueError(
                "learned_coefficients=True needs sketch='random' (exact degree-2 features plus "
                f"the random degree-4 sketch), got sketch={sketch!r}"
            )
        self.local_block = check_int("local_block", local_block, minimum=0)
        self.positional = bool(self.local_block)  # blocks are by token index
        self.degree = degree
        self.normalize = bool(normalize)
        self.norm = norm
        self.learned_coefficients = bool(learned_coefficients)
        self.redraw = bool(redraw)
        self.normalizer_offset = 0.0 if learned_coefficients else 1.0
        # Named ``sketch`` so the buffers keep the keys of older checkpoints (``sketch.s1``).
        self.sketch = SKETCHES[(sketch, degree)](
            head_dim=head_dim, sketch_size=sketch_size, levels=sketch_levels, bias=sketch_bias
        )
        own_norm = sketch == "learned" and normalize and norm == "learned"
        self.qk_norm: QKNorm | None = None
        if not own_norm:
            scale = head_dim**-0.25 if learned_coefficients else 1.0
            self.qk_norm = QKNorm(head_dim, norm if normalize else "none", init_scale=scale)
        self.even_coefficient_logits: nn.Parameter | None = None
        if learned_coefficients:  # degrees 0, 2, ..., p, starting at 1/i! (cosh's Taylor part)
            self.even_coefficient_logits = nn.Parameter(
                taylor_logits(list(range(0, degree + 1, 2)))
            )
        self.local_q: QKNorm | None = None
        self.local_k: QKNorm | None = None
        if self.local_block:  # the paper's separate LNs for the exact in-block scores
            local_norm = norm if normalize else "none"
            self.local_q = QKNorm(head_dim, local_norm)
            self.local_k = QKNorm(head_dim, local_norm)

    # ------------------------------------------------------------------ features
    @property
    def coefficients(self) -> Tensor:
        """a_0, a_2, ..., a_p of the learned even polynomial (``learned_coefficients`` only)."""
        if self.even_coefficient_logits is None:
            raise AttributeError("coefficients exist only with learned_coefficients=True")
        return F.softplus(self.even_coefficient_logits)

    def normalize_inputs(self, x: Tensor) -> Tensor:
        """``x'`` of ``qk_norm`` (identity for the learned sketch, which has its own LN)."""
        return x if self.qk_norm is None else self.qk_norm(x)

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        """φ(x) = sym(s(x') ⊗ s(x')), so that ``⟨φ(q), φ(k)⟩ = ⟨s(q'), s(k')⟩²``; with learned
        coefficients ``[√a_0, √a_2·sym(x'⊗x'), √a_4·sym(s(x')⊗s(x'))]``."""
        x = self.normalize_inputs(x)
        if self.even_coefficient_logits is None:
            return symmetric_square(self.sketch(x))
        roots = self.coefficients.to(x.dtype).sqrt()
        parts = [roots[0].expand(*x.shape[:-1], 1), roots[1] * symmetric_square(x)]
        if self.degree == 4:
            parts.append(roots[2] * symmetric_square(self.sketch(x)))
        return torch.cat(parts, dim=-1)

    def diagnostics(self) -> dict[str, float]:
        """``a_i`` of the learned even polynomial and ``c`` (``QKNorm.scale_growth``), for the
        training logs."""
        if self.even_coefficient_logits is None:
            return {}
        values = {f"a{2 * i}": a for i, a in enumerate(self.coefficients.detach().tolist())}
        c = None if self.qk_norm is None else self.qk_norm.scale_growth()
        return values if c is None else values | {"c": c}

    @property
    def feature_dim(self) -> int:
        """F: ``w(w+1)/2`` per squared term of width w (``score_widths``), plus the constant
        ``√a_0`` feature with learned coefficients."""
        widths = self.score_widths()
        return sum(w * (w + 1) // 2 for w in widths) + int(self.learned_coefficients)

    def state_size(self, *, seq_len: int, value_dim: int | None = None) -> int:
        """``F·Dv + F`` floats per head; with ``local_block`` b, ``2·F·(Dv + 1) + b·(D + Dv)``:
        the completed and the current block's sums and the current block's normalised keys and
        values (``block_mixed_step``; its token counter is one int, not per head)."""
        if not self.local_block:
            return super().state_size(seq_len=seq_len, value_dim=value_dim)
        dv = check_state_request(self.head_dim, seq_len, value_dim)
        return 2 * self.feature_dim * (dv + 1) + self.local_block * (self.head_dim + dv)

    # ------------------------------------------------------------------ kernel form
    def score_widths(self) -> tuple[int, ...]:
        """Widths of the squared inner products in the score (``score_form.score_widths``)."""
        return score_form.score_widths(
            self.head_dim, self.degree, self.sketch_size, self.learned_coefficients
        )

    def _attend_kernel(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None
    ) -> Tensor:
        """The feature form's output from the (L, S) scores (``ops/score_form.py``), in the
        accumulation dtype with autocast off."""
        acc = accumulation_dtype(torch.promote_types(q.dtype, v.dtype))
        mask, offset = key_padding_mask, self.normalizer_offset + self.eps
        with torch.autocast(device_type=q.device.type, enabled=False):
            qn, kn = self.normalize_inputs(q.to(acc)), self.normalize_inputs(k.to(acc))
            va = v.to(acc)
            if self.even_coefficient_logits is None:
                sq, sk = self.sketch(qn), self.sketch(kn)
                out = score_form.sketch_score_attention(
                    sq, sk, va, causal=causal, key_padding_mask=mask, offset=offset
                )
            else:
                sketches = (self.sketch(qn), self.sketch(kn)) if self.degree == 4 else None
                out = score_form.even_polynomial_score_attention(
                    qn,
                    kn,
                    va,
                    self.coefficients,
                    sketches,
                    causal=causal,
                    key_padding_mask=mask,
                    offset=offset,
                )
        return out.to(v.dtype)

    # ------------------------------------------------------------------ local blocks
    def _block_options(self) -> dict[str, Any]:
        """The options of ``block_mixed_attention`` / ``block_mixed_step`` besides the inputs."""
        return {
            "block": self.local_block,
            "degree": self.degree,
            "offset": self.normalizer_offset,
            "eps": self.eps,
        }

    def _local_inputs(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, ...]:
        assert self.local_q is not None and self.local_k is not None
        acc = accumulation_dtype(torch.promote_types(q.dtype, v.dtype))
        phi_q = self.features(q, is_query=True)
        phi_k = self.features(k, is_query=False)
        qn, kn = self.local_q(q.to(acc)), self.local_k(k.to(acc))
        return phi_q, phi_k, v.to(acc), qn, kn

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        dispatch.resolve(self.implementation, v, backend=self.name)  # refuses whichever form runs
        if not self.local_block:
            kernel_form = kernel_form_for(
                self.evaluation,
                q,
                k,
                v,
                widths=self.score_widths(),
                causal=causal,
                chunk_size=self.chunk_size,
            )
            if kernel_form:
                return self._attend_kernel(
                    q, k, v, causal=causal, key_padding_mask=key_padding_mask
                )
            return super()._attend(
                q, k, v, causal=causal, key_padding_mask=key_padding_mask, grid=grid
            )
        with torch.autocast(device_type=q.device.type, enabled=False):
            # block_mixed_attention zeroes the padded keys' φ(k), kn and v itself.
            phi_q, phi_k, va, qn, kn = self._local_inputs(q, k, v)
            opts = self._block_options()
            out = block_mixed_attention(
                phi_q, phi_k, va, qn, kn, causal=causal, key_padding_mask=key_padding_mask, **opts
            )
        return out.to(v.dtype)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        if not self.local_block:
            return super()._step(q, k, v, state)
        with torch.autocast(device_type=q.device.type, enabled=False):
            phi_q, phi_k, va, qn, kn = self._local_inputs(q, k, v)
            out, state = block_mixed_step(phi_q, phi_k, va, qn, kn, state, **self._block_options())
        return out.to(v.dtype), state

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """With ``redraw=True``: redraw the random sketch S1, S2 in place from a CPU ``generator``
        (global RNG if None), the same on every device and rank (``RandomPolySketch.draw``). A
        no-op for a fixed sketch (the default), the learned and the degree-2 sketch."""
        if self.redraw and isinstance(self.sketch, RandomPolySketch):
            self.sketch.draw(generator)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, sketch={self.sketch_kind!r}, degree={self.degree}, "
            f"sketch_size={self.sketch_size}, normalize={self.normalize}, norm={self.norm!r}, "
            f"learned_coefficients={self.learned_coefficients}, local_block={self.local_block}, "
            f"redraw={self.redraw}, evaluation={self.evaluation!r}, "
            f"chunk_size={self.chunk_size}, eps={self.eps}"
        )
