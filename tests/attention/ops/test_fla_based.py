"""``taylor``'s score form through fla's parallel Based kernel, on the CPU: fla's own naive
reference (``fla/ops/based/naive.py``, loaded from the installed file without importing ``fla``)
stands in for the kernel to check the adapter's layout, scale, eps and routing; the kernel itself
runs once under Triton's interpreter in a subprocess (fla's kernels are decorated when ``fla`` is
imported, so the interpreter must be on before that, and this test process is left without it).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_taylor
from attn_lightning.attention.ops import dispatch, fla
from tests.attention.ops.test_fla import fla_file, fla_naive

B, H, N, D, DV = 2, 3, 37, 6, 5  # N not a multiple of fla's 32- and 128-token tiles


def _reference_op():
    """fla's naive Based attention with the kernel's signature: (q, k, v, scale) -> (Σ sim·v,
    Σ sim), (B, H, T, ·) tensors (the normaliser from a ones value column, unnormalised)."""
    naive = fla_naive("ops/based/naive.py").naive_parallel_based

    def op(q, k, v, scale):
        num = naive(q, k, v, scale=scale, use_norm=False)
        den = naive(q, k, torch.ones_like(v[..., :1]), scale=scale, use_norm=False)[..., 0]
        return num, den

    return op


def _inputs(d: int = D, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, w, generator=g, requires_grad=True) for w in (d, d, DV)]


def test_installed_kernel_takes_what_the_adapter_passes():
    # ParallelBasedFunction.forward(ctx, q, k, v, scale) returns (o, z) in (B, H, T, ·).
    tree = ast.parse(fla_file("ops/based/parallel.py").read_text())
    forward = next(
        node
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef) and cls.name == "ParallelBasedFunction"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "forward"
    )
    assert [a.arg for a in forward.args.args] == ["ctx", "q", "k", "v", "scale"]
    assert "B, H, T, K, V = (*k.shape, v.shape[-1])" in ast.unparse(forward)


@pytest.mark.parametrize("eps", [1e-6, 0.5])
def test_adapter_matches_float64_reference(eps):
    q, k, v = _inputs()
    out = fla.fla_taylor_attention(q, k, v, eps=eps, op=_reference_op())
    ref = naive_taylor(q, k, v, causal=True, eps=eps)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref.float(), rtol=1e-5, atol=1e-6)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    got = torch.autograd.grad(out, (q, k, v), cotangent)
    want = torch.autograd.grad(ref, (q, k, v), cotangent.double())
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b.float(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("masked", [False, True])
def test_taylor_score_form_routes_to_fla_unless_masked_or_not_causal(monkeypatch, masked):
    calls = []

    def adapter(*args, **kwargs):
        calls.append(args[0].shape[-1])
        return fla_taylor_attention(*args, **kwargs, op=_reference_op())

    fla_taylor_attention = fla.fla_taylor_attention
    attn = build_attention("taylor", head_dim=D, feature_dim=4, evaluation="kernel")
    plain = build_attention("taylor", head_dim=D, feature_dim=4, evaluation="kernel")
    monkeypatch.setattr(dispatch, "resolve", lambda implementation, v, *, backend: "fla")
    monkeypatch.setattr(fla, "fla_taylor_attention", adapter)
    q, k, v = _inputs()
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, -5:] = False
    out = attn(q, k, v, causal=True, key_padding_mask=mask if masked else None)
    attn(q, k, v, causal=False)  # the non-causal score form stays ours
    assert calls == ([] if masked else [4])  # q' only: fla reads the first d' coordinates
    monkeypatch.undo()
    ref = plain(q, k, v, causal=True, key_padding_mask=mask if masked else None)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


KERNEL_RUN = """
import torch
from attn_lightning.attention.naive import naive_taylor
from attn_lightning.attention.ops import fla
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, 70, w, generator=g, requires_grad=True) for w in (16, 16, 32))
out = fla.fla_taylor_attention(q, k, v, eps=1e-6)
ref = naive_taylor(q, k, v, causal=True)
torch.testing.assert_close(out, ref.float(), rtol=1e-4, atol=1e-5)
c = torch.randn(out.shape, generator=g)
got = torch.autograd.grad(out, (q, k, v), c)
for a, b in zip(got, torch.autograd.grad(ref, (q, k, v), c.double())):
    torch.testing.assert_close(a, b.float(), rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_fla_parallel_based_kernel_under_the_interpreter_matches_the_reference():
    fla_file("ops/based/parallel.py")  # skips without fla-core
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KERNEL_RUN)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
