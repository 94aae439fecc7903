"""The fused Triton causal product under Triton's CPU interpreter: outputs and gradients against
the float64 masked product and the torch kernel, normaliser, zero-key queries, final state.

Interpreted kernels come from ``triton_causal_kernels.kernels(True)``, chosen per call for CPU
tensors; the fixture turns the interpreter on through ``TRITON_INTERPRET`` for each test only, so
no other test (nor a CUDA test's compiled kernels) sees it. Tiny shapes: the interpreter is slow.
"""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.ops import dispatch, triton_causal
from attn_lightning.attention.ops.causal_product import normalised_causal_product
from attn_lightning.attention.ops.linear_kernels import linear_attention_step
from attn_lightning.attention.ops.triton_causal import (
    check_runnable,
    triton_causal_linear_attention,
)


def _inputs(n, f, e, dtype, mean=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.rand(2, 2, n, f, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 2, n, e, generator=g, dtype=torch.float64) + mean
    grad = torch.randn(2, 2, n, e, generator=g, dtype=torch.float64)
    return [t.to(dtype) for t in (q, k, v, grad)]


def _reference(q, k, v, shift):
    """Float64 ``Σ_{j≤i} s_ij v_j / (shift + Σ_{j≤i} s_ij)``, 0 where the normaliser is 0."""
    s = (q @ k.transpose(-1, -2)).tril()
    den = shift + s.sum(-1, keepdim=True)
    return s @ v / den.masked_fill(den == 0, 1.0)


def _relative(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def _run(fn, tensors):
    """Output and (dq, dk, dv) of ``fn`` for ``tensors = (q, k, v, grad)``."""
    q, k, v, grad = tensors
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return out, [t.grad for t in leaves]


# N 37 with chunks of 16: two full chunks and a partial one; F 80, E 70: two tiles of each.
@pytest.mark.parametrize("n,f,e", [(37, 8, 16), (37, 80, 70)])
@pytest.mark.parametrize("shift", [1e-6, 1.0])
def test_float32_matches_float64_reference_and_torch_kernel(interpret, n, f, e, shift):
    tensors = _inputs(n, f, e, torch.float32, mean=1.0)
    out, grads = _run(
        lambda a, b, c: triton_causal_linear_attention(
            a, b, c, offset=shift - 1e-6, eps=1e-6, chunk_size=16
        ),
        tensors,
    )
    ref, ref_grads = _run(lambda a, b, c: _reference(a, b, c, shift), [t.double() for t in tensors])
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    padded = [torch.nn.functional.pad(t, (0, 0, 0, 48 - n)) for t in tensors]
    torch_out, torch_grads = _run(
        lambda a, b, c: normalised_causal_product(a, b, c, 16, shift), padded
    )
    torch.testing.assert_close(out, torch_out[:, :, :n], rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, torch_grads):
        torch.testing.assert_close(got, want[:, :, :n], rtol=1e-4, atol=1e-5)


# Under ``interpret`` the bf16 casts round to nearest even, as compiled (conftest). Measured
# there (N 100, F 16, Dv 8, C 32, seeds 0 and 1, relative to float64), for means 0 / 2:
# out 2.6e-3 / 1.7e-3, dq 9.3e-3 / 9.2e-3, dk 4.3e-3 / 4.3e-3, dv 2.7e-3 / 2.7e-3; the torch kernel
# 5.8e-3 / 1.9e-3, 1.6e-2 / 1.5e-2, 5.8e-3 / 5.3e-3, 3.5e-3 / 3.5e-3. (Truncating, as Triton 3.8's
# interpreter does by itself: out 6.1e-3, dq 1.8e-2, dk 9.3e-3, dv 6.6e-3, twice as large.) Bounds:
# 1.5× the measured.
@pytest.mark.parametrize("mean", [0.0, 2.0])  # values with a mean: the centred backward's case
def test_bfloat16_matches_float64_reference(interpret, mean):
    tensors = _inputs(100, 16, 8, torch.bfloat16, mean=mean)
    out, grads = _run(
        lambda a, b, c: triton_causal_linear_attention(
            a, b, c, offset=0.0, eps=1e-6, chunk_size=32
        ),
        tensors,
    )
    ref, ref_grads = _run(lambda a, b, c: _reference(a, b, c, 1e-6), [t.double() for t in tensors])
    assert out.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in grads)
    assert _relative(out, ref) < 4e-3
    for got, want, bound in zip(grads, ref_grads, (1.4e-2, 6.5e-3, 4e-3)):
        assert _relative(got, want) < bound


@pytest.mark.parametrize("seed", [0, 1])
def test_bfloat16_dk_for_values_of_mean_5_is_within_the_torch_kernels_error(interpret, seed):
    """dK's ``V'Rᵀ + (r + R m_c)`` cancels to the size of the values' spread: R rounded once to
    bf16 (before hi + lo) made dk 5.5e-3 / 7.1e-3 here, the torch kernel's 4.3e-3 / 4.4e-3; now
    2.9e-3 / 3.0e-3 (N 256, F = Dv = 16, C 32, seeds 0 / 1)."""
    tensors = _inputs(256, 16, 16, torch.bfloat16, mean=5.0, seed=seed)
    _, grads = _run(
        lambda a, b, c: triton_causal_linear_attention(
            a, b, c, offset=0.0, eps=1e-6, chunk_size=32
        ),
        tensors,
    )
    _, torch_grads = _run(lambda a, b, c: normalised_causal_product(a, b, c, 32, 1e-6), tensors)
    _, ref_grads = _run(lambda a, b, c: _reference(a, b, c, 1e-6), [t.double() for t in tensors])
    assert _relative(grads[1], ref_grads[1]) <= _relative(torch_grads[1], ref_grads[1])


def test_bfloat16_dq_with_the_whole_prefix_in_one_segment_is_within_the_torch_kernels_error(
    interpret, monkeypatch
):
    """One segment (``TARGET_PROGRAMS`` 1): the per-chunk states ``s`` hold the whole prefix, not
    the zeros of one-chunk segments the tests above get. dQ's ``S' = S − z m_cᵀ`` cancels S's
    z·|m| part, so S must stay float32: stored bf16, dq for values of mean 5 erred 8.5e-2 against
    float64 (the torch kernel 1.2e-2 / 1.3e-2; float32 S 9.8e-3 / 1.1e-2; N 256, F = Dv = 16,
    C 32, seeds 0 / 1)."""
    monkeypatch.setattr(triton_causal, "TARGET_PROGRAMS", 1)
    tensors = _inputs(256, 16, 16, torch.bfloat16, mean=5.0)
    _, grads = _run(
        lambda a, b, c: triton_causal_linear_attention(
            a, b, c, offset=0.0, eps=1e-6, chunk_size=32
        ),
        tensors,
    )
    _, torch_grads = _run(lambda a, b, c: normalised_causal_product(a, b, c, 32, 1e-6), tensors)
    _, ref_grads = _run(lambda a, b, c: _reference(a, b, c, 1e-6), [t.double() for t in tensors])
    assert triton_causal._segments(8, 4) == (1, 8)  # 8 chunks, 4 programs: one segment
    assert _relative(grads[0], ref_grads[0]) <= _relative(torch_grads[0], ref_grads[0])


def test_interpreter_rounds_bf16_to_nearest_even_like_the_gpu(interpret):
    """The fixture's cast (conftest): 1 + 2⁻⁸ + 2⁻¹⁰ is above the midpoint of two bf16 steps and
    rounds up (truncation gives 1), 1 + 2⁻⁸ is a tie and rounds to the even 1."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    x = np.array([1 + 2**-8 + 2**-10, 1 + 2**-8, -(1 + 3 * 2**-8)], dtype=np.float32)
    bits = interpreter._convert_float(x, tl.float32, tl.bfloat16, None)
    got = torch.from_numpy(bits.astype(np.int16)).view(torch.bfloat16).float()
    assert got.tolist() == [1 + 2**-7, 1.0, -(1 + 2**-6)]


def test_query_that_sees_no_key_gives_zero_and_padding_adds_nothing(interpret):
    q, k, v, grad = _inputs(37, 8, 16, torch.float32)
    k[:, :, :5] = 0.0  # the first five keys padded (zero features, as the backends pass them)
    out, grads = _run(
        lambda a, b, c: triton_causal_linear_attention(a, b, c, offset=0.0, eps=0.0, chunk_size=16),
        (q, k, v, grad),
    )
    assert torch.equal(out[:, :, :5], torch.zeros_like(out[:, :, :5]))
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    ref = _reference(q.double(), k.double(), v.double(), 0.0)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)


def test_final_state_is_the_recurrent_step_state(interpret):
    q, k, v, _ = _inputs(37, 8, 16, torch.float32)
    _, (s, z) = triton_causal_linear_attention(
        q, k, v, offset=0.0, eps=1e-6, chunk_size=16, return_state=True
    )
    state = None
    for t in range(37):
        _, state = linear_attention_step(
            q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state
        )
    assert s.dtype == z.dtype == torch.float32
    torch.testing.assert_close(s, state[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(z, state[1], rtol=1e-5, atol=1e-5)


def test_refusals_name_the_value(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.rand(1, 1, 16, 16)
    with pytest.raises(ValueError, match=r"runs on CUDA tensors .* got a cpu tensor"):
        check_runnable(x, backend="linear")
    with pytest.raises(ValueError, match="no float64 kernel"):
        check_runnable(x.double(), backend="linear")
    with pytest.raises(ValueError, match="power of two >= 16, got 24"):
        triton_causal_linear_attention(x, x, x, offset=0.0, eps=1e-6, chunk_size=24)


@pytest.mark.parametrize("name", ["linear", "mean", "performer", "polysketch"])
def test_backends_with_triton_match_the_torch_kernel(interpret, name):
    torch.manual_seed(0)
    triton_attn = build_attention(name, head_dim=4, implementation="triton")
    torch_attn = build_attention(name, head_dim=4, implementation="torch")
    torch_attn.load_state_dict(triton_attn.state_dict())  # the same random features
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 20, 4, generator=g) for _ in range(3))
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[1, 13:] = False
    outs, grads = [], []
    for attn in (triton_attn, torch_attn):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attn(*leaves, causal=True, key_padding_mask=mask)
        out.square().sum().backward()
        outs.append(out)
        # mean pooling ignores q: its gradient is None under both kernels
        grads.append([t.grad for t in leaves])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)


def test_backend_with_triton_on_a_cpu_tensor_is_one_line(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    attn = build_attention("linear", head_dim=4, implementation="triton")
    x = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match="implementation 'triton' runs on CUDA") as err:
        attn(x, x, x, causal=True)
    assert "implementation: auto" in str(err.value) and "\n" not in str(err.value)
    assert dispatch.resolve("auto", x, backend="linear") == "torch"  # auto never takes triton
