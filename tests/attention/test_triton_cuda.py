"""The compiled Triton causal product on a GPU: bf16 and fp32 at realistic shapes vs float64.

Skipped without CUDA (the CPU suite checks the same kernels under Triton's interpreter:
``tests/attention/ops/test_triton_causal.py``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import build_attention
from attn_lightning.attention.ops.linear_kernels import linear_attention_step
from attn_lightning.attention.ops.triton_causal import triton_causal_linear_attention
from attn_lightning.attention.ops.triton_causal_kernels import kernels

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _relative(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


# N 1,000: a partial last chunk; F 528, Dv 16: PolySketch's widths (F tiled nine times).
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(("h", "f", "e"), [(4, 64, 64), (2, 128, 128), (2, 528, 16)])
@pytest.mark.parametrize("mean", [0.0, 2.0])
def test_compiled_kernels_match_float64(dtype, h, f, e, mean):
    g = torch.Generator().manual_seed(0)
    q, k = (torch.rand(2, h, 1000, f, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, h, 1000, e, generator=g, dtype=torch.float64) + mean
    grad = torch.randn(2, h, 1000, e, generator=g, dtype=torch.float64)
    q, k, v, grad = (t.to(dtype).double() for t in (q, k, v, grad))  # representable inputs
    ref64 = [t.clone().requires_grad_() for t in (q, k, v)]
    s = (ref64[0] @ ref64[1].transpose(-1, -2)).tril()
    ref = s @ ref64[2] / (1e-6 + s.sum(-1, keepdim=True))
    ref.backward(grad)
    low = [t.to("cuda", dtype).requires_grad_() for t in (q, k, v)]
    out = triton_causal_linear_attention(*low, offset=0.0, eps=1e-6)
    out.backward(grad.to("cuda", dtype))
    tol_out, tol_grad = (1e-2, 3e-2) if dtype == torch.bfloat16 else (1e-5, 1e-4)
    assert out.dtype == dtype
    assert _relative(out.cpu(), ref) < tol_out
    for got, want in zip(low, ref64):
        assert _relative(got.grad.cpu(), want.grad) < tol_grad


def test_final_state_is_the_step_state_and_kernels_are_compiled():
    tuned = kernels(False).readout  # autotuned, over a compiled kernel: never the interpreter
    assert type(tuned).__name__ == "Autotuner" and type(tuned.fn).__name__ == "JITFunction"
    g = torch.Generator().manual_seed(1)
    q, k = (torch.rand(2, 4, 300, 64, generator=g).cuda() for _ in range(2))
    v = torch.randn(2, 4, 300, 64, generator=g).cuda()
    _, (s, z) = triton_causal_linear_attention(q, k, v, offset=0.0, eps=1e-6, return_state=True)
    state = None
    for t in range(300):
        sl = slice(t, t + 1)
        _, state = linear_attention_step(q[:, :, sl], k[:, :, sl], v[:, :, sl], state)
    torch.testing.assert_close(s, state[0], rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(z, state[1], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name", ["linear", "performer", "polysketch"])
def test_backend_bf16_training_step_matches_torch_kernel(name):
    torch.manual_seed(0)
    attn = build_attention(name, head_dim=64, implementation="triton").cuda()
    ref = build_attention(name, head_dim=64, implementation="torch").cuda()
    ref.load_state_dict(attn.state_dict())
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 512, 64, generator=g).cuda().bfloat16() for _ in range(3))
    out = attn(q, k, v, causal=True)
    want = ref(q.float(), k.float(), v.float(), causal=True)
    assert torch.isfinite(out).all()
    assert _relative(out.float(), want.double()) < 2e-2


# linear's elu + 1 applied in the kernels' loads: raw q, k (mean 0), padded keys -inf.
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_compiled_elu_features_match_float64(dtype):
    g = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 4, 1000, 64, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 4, 1000, 64, generator=g, dtype=torch.float64) + 2.0
    grad = torch.randn(2, 4, 1000, 64, generator=g, dtype=torch.float64)
    q, k, v, grad = (t.to(dtype).double() for t in (q, k, v, grad))
    mask = torch.ones(2, 1000, dtype=torch.bool)
    mask[1, 700:] = False
    ref64 = [t.clone().requires_grad_() for t in (q, k, v)]
    phi_k = (F.elu(ref64[1]) + 1).masked_fill(~mask[:, None, :, None], 0.0)
    s = ((F.elu(ref64[0]) + 1) @ phi_k.transpose(-1, -2)).tril()
    (s @ ref64[2] / (1e-6 + s.sum(-1, keepdim=True))).backward(grad)
    low = [t.to("cuda", dtype).requires_grad_() for t in (q, k, v)]
    padded = low[1].masked_fill(~mask.cuda()[:, None, :, None], float("-inf"))
    out = triton_causal_linear_attention(
        low[0], padded, low[2], offset=0.0, eps=1e-6, elu_features=True
    )
    out.backward(grad.to("cuda", dtype))
    ref = (s @ ref64[2] / (1e-6 + s.sum(-1, keepdim=True))).detach()
    tol_out, tol_grad = (1e-2, 3e-2) if dtype == torch.bfloat16 else (1e-5, 1e-4)
    assert _relative(out.detach().cpu(), ref) < tol_out
    for got, want in zip(low, ref64):
        assert _relative(got.grad.cpu(), want.grad) < tol_grad
