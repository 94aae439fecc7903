"""The fla adapter's bf16 widths on CPU: fla's reference op made to fail as fla-core 0.6.0 does.

``emulated_fla`` asserts even K and V in bf16 and gives a NaN dv where the value tile is narrower
than the key tile, as measured on an H100 (``ops/fla.py``, "Widths"); the adapter must pad around
both and slice back, with outputs and gradients as accurate as the torch kernel's.
"""

from __future__ import annotations

import copy

import pytest
import torch

from attn_lightning.attention import FeatureMapAttention, build_attention
from attn_lightning.attention.naive import naive_kernel_attention
from attn_lightning.attention.ops import dispatch, fla
from tests.attention.ops.test_fla import WIRING, B, H, N, naive, padding

__all__ = ["naive"]  # the fixture, shared with test_fla.py

# fla-core 0.6.0's bf16 dv as measured on an H100 (ops/fla.py, "Widths"), and the rule read from
# its dv kernel's tiles: (F, Dv) -> the (K, V) fla runs.
WIDTHS = [
    ((64, 16), (64, 64)),  # measured NaN unpadded (the reversal Performer)
    ((64, 32), (64, 64)),  # measured 2.0 unpadded, 3.5e-3 padded to 64
    ((64, 48), (64, 48)),  # measured right (its tile is 64), and padded to 64
    ((64, 64), (64, 64)),
    ((64, 128), (64, 128)),  # measured right
    ((32, 32), (32, 32)),  # measured right (linear, D = 32)
    ((16, 16), (16, 16)),  # linear in every shipped config
    ((128, 64), (128, 128)),
    ((528, 16), (528, 128)),  # PolySketch r = 32: K tiles cap at 128
    ((273, 16), (274, 128)),  # learned PolySketch: fla asserts even K in bf16
    ((1, 16), (2, 16)),  # mean
    ((6, 4), (6, 4)),  # one 16-wide tile each
    ((64, 129), (64, 130)),
]


@pytest.mark.parametrize(("asked", "runs"), WIDTHS, ids=[f"F{f}-Dv{v}" for (f, v), _ in WIDTHS])
def test_fla_widths_in_bf16(asked, runs):
    assert fla.fla_widths(*asked, torch.bfloat16) == runs
    assert fla.fla_widths(*asked, torch.float32) == asked  # fp32's dv was right at every width


def emulated_fla(naive):
    """fla's reference op with fla-core 0.6.0's bf16 behaviour on an H100: an assert on odd K or
    V, and a NaN dv where the value tile is narrower than the key tile (measured: K = 64 with
    V = 16 or 32; ``fla._tile`` is the width rule of its dv kernel)."""

    def op(q, k, v, *, scale, normalize):
        if q.dtype == torch.bfloat16:
            kw, vw = k.shape[-1], v.shape[-1]
            assert kw % 2 == 0 and vw % 2 == 0, f"chunk_bwd_dv requires even K and V, {kw}, {vw}"
            if fla._tile(vw) < fla._tile(kw) and v.requires_grad:
                v.register_hook(lambda grad: torch.full_like(grad, float("nan")))
        return naive.naive_recurrent_linear_attn(q, k, v, scale=scale, normalize=normalize)

    return op


# F = 1 with offset 0 is left out: φ(q) cancels, dq is exactly 0 and its bf16 rounding all error.
@pytest.mark.parametrize(
    ("f", "dv", "offset"), [(64, 16, 0.0), (64, 16, 1.0), (64, 32, 0.0), (5, 4, 0.0), (1, 16, 1.0)]
)
def test_bf16_runs_padded_widths_and_slices_them_back(naive, monkeypatch, f, dv, offset):
    g = torch.Generator().manual_seed(6)
    phi_q, phi_k = (torch.rand(B, H, N, f, generator=g) for _ in "qk")
    v = torch.randn(B, H, N, dv, generator=g)
    mask = padding()
    phi_k = phi_k.masked_fill(~mask[:, None, :, None], 0.0)
    leaves = [t.bfloat16().requires_grad_(True) for t in (phi_q, phi_k, v)]
    exact = [t.detach().double().requires_grad_(True) for t in leaves]
    seen = []
    emulator = emulated_fla(naive)

    def op(q, k, v, **kwargs):
        seen.append((k.shape[-1], v.shape[-1], q.is_contiguous(), v.is_contiguous()))
        return emulator(q, k, v, **kwargs)

    out = fla.fla_causal_linear_attention(*leaves, offset=offset, eps=1e-6, op=op)
    assert out.shape == (B, H, N, dv) and out.dtype == torch.bfloat16
    assert seen == [(*fla.fla_widths(f, dv, torch.bfloat16), True, True)]
    want = naive_kernel_attention(*exact, causal=True, offset=offset, eps=1e-6)
    cotangent = torch.randn(out.shape, generator=g)
    got = torch.autograd.grad(out, leaves, cotangent.bfloat16())
    wants = torch.autograd.grad(want, exact, cotangent.double())
    for a, b in zip((out, *got), (want, *wants)):
        assert torch.isfinite(a).all()
        rel = (a.double() - b).norm() / b.norm()
        assert rel < 2e-2, f"relative error {rel:.3g}"
    if fla.fla_widths(f, dv, torch.bfloat16)[1] != dv:  # the padding is what makes dv right
        monkeypatch.setattr(fla, "fla_widths", lambda f, dv, dtype: (f, dv))
        out = fla.fla_causal_linear_attention(*leaves, offset=offset, eps=1e-6, op=op)
        assert torch.isnan(torch.autograd.grad(out, leaves[2], cotangent.bfloat16())[0]).all()


def float64_reference(attn: FeatureMapAttention, inputs, mask) -> tuple[list, torch.Tensor]:
    """A float64 copy of ``attn`` on float64 copies of ``inputs``: the plain causal formula."""
    exact = copy.deepcopy(attn).double()
    leaves = [t.detach().double().requires_grad_(True) for t in inputs]
    phi_q = exact.features(leaves[0], is_query=True)
    phi_k = exact.features(leaves[1], is_query=False)
    out = naive_kernel_attention(
        phi_q,
        phi_k,
        leaves[2],
        causal=True,
        key_padding_mask=mask,
        offset=exact.normalizer_offset,
        eps=exact.eps,
    )
    return [*leaves, *exact.parameters()], out


BF16_OPTIONS = {"performer": {"num_features": 64}, "polysketch": {"sketch_size": 8}}


@pytest.mark.parametrize(("name", "options"), WIRING, ids=[f"{n}{o}" for n, o in WIRING])
def test_every_backend_in_bf16_through_the_adapter_is_as_accurate_as_the_torch_kernel(
    naive, monkeypatch, name, options
):
    # As test_every_backend_routes..., in bf16 at the shipped head width (16; Performer F = 64,
    # PolySketch F = 36: v padded to 64): the normaliser, padding of keys and of widths, slicing.
    # Both kernels against float64; a wrong width, offset or slice would be off by O(1). fla's
    # dφ is bf16, which PolySketch's Jacobian amplifies: dq, dk 2-3.5 % at r = 8 and 16, 16-19 %
    # at r = 4 (with fla's reference op, on this CPU), hence r = 8 and 5 % for gradients here.
    options = {**options, **BF16_OPTIONS.get(name, {})}
    torch.manual_seed(0)
    via_fla = build_attention(name, head_dim=16, **options)
    torch.manual_seed(0)
    plain = build_attention(name, head_dim=16, implementation="torch", **options)
    g = torch.Generator().manual_seed(2)
    inputs = [
        torch.randn(B, H, 70, 16, generator=g).bfloat16().requires_grad_(True) for _ in range(3)
    ]
    mask = padding(70)
    monkeypatch.setattr(dispatch, "resolve", lambda implementation, v, *, backend: "fla")
    monkeypatch.setattr(fla, "chunk_op", lambda: emulated_fla(naive))
    out = via_fla(*inputs, causal=True, key_padding_mask=mask)
    monkeypatch.undo()
    ref = plain(*inputs, causal=True, key_padding_mask=mask)
    assert out.dtype == ref.dtype == torch.bfloat16
    exact_leaves, exact = float64_reference(plain, inputs, mask)
    cotangent = torch.randn(out.shape, generator=g)

    def grads(y, leaves):
        return torch.autograd.grad(y, leaves, cotangent.to(y.dtype), allow_unused=True)

    got = grads(out, [*inputs, *via_fla.parameters()])
    torch_kernel = grads(ref, [*inputs, *plain.parameters()])
    want = grads(exact, exact_leaves)
    for a, b, w in zip((out, *got), (ref, *torch_kernel), (exact, *want)):
        if w is None:  # mean ignores q and k
            assert a is None and b is None
            continue
        assert a is not None and b is not None and torch.isfinite(a).all()
        err_fla, err_torch = ((t.double() - w).norm() / w.norm() for t in (a, b))
        tolerance = 2e-2 if a is out else 5e-2
        assert err_fla < max(2 * err_torch, tolerance), f"fla {err_fla:.3g}, torch {err_torch:.3g}"
