"""The fla adapter on CPU: fla's own float reference stands in for its CUDA kernel.

fla-core's ``fla/ops/linear_attn/naive.py`` is plain PyTorch with the kernels' signature and
conventions (``[B, T, H, K]``, ``scale`` defaulting to K^{-1/2}, ``normalize``). It is loaded from
the installed package's file, without importing ``fla`` (whose import needs Triton's GPU driver
for the kernels), and passed to the adapter as its op: layout, scale, the normaliser's offset and
eps, padding, the zero output of a query that sees no key, dtypes, and the wiring of every
feature-map backend are checked here (bf16 widths in ``test_fla_widths.py``); the kernels themselves
only on a GPU (``tests/attention/test_fla_cuda.py``).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import torch

from attn_lightning.attention import FeatureMapAttention, build_attention
from attn_lightning.attention.naive import naive_kernel_attention
from attn_lightning.attention.ops import dispatch, fla
from attn_lightning.attention.ops.causal_product import causal_product
from attn_lightning.attention.ops.linear_kernels import causal_linear_attention

B, H, N, F, DV = 2, 3, 70, 5, 4  # N > 64 and not a multiple of it: more than one fla chunk


def fla_file(relative: str) -> Path:
    """A file of the installed fla package (skips the test when fla-core is missing)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fla-core is not installed (pip install -e '.[gpu]')")
    return Path(next(iter(spec.submodule_search_locations))) / relative


def fla_naive(relative: str = "ops/linear_attn/naive.py") -> ModuleType:
    """An fla ``naive.py`` as a standalone module (skips the test when fla-core is missing)."""
    path = fla_file(relative)
    name = "fla_" + relative.removeprefix("ops/").replace("/", "_").removesuffix(".py")
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def naive() -> ModuleType:
    return fla_naive()


@pytest.fixture
def fresh_cache():
    """``missing_reason`` is cached: clear it around a test that fakes the installed version."""
    fla.missing_reason.cache_clear()
    yield
    fla.missing_reason.cache_clear()


def features(n: int = N, *, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    phi_q = torch.rand(B, H, n, F, generator=g, dtype=dtype)
    phi_k = torch.rand(B, H, n, F, generator=g, dtype=dtype)
    v = torch.randn(B, H, n, DV, generator=g, dtype=dtype)
    return phi_q, phi_k, v


def to_fla(x: torch.Tensor) -> torch.Tensor:
    return x.transpose(1, 2).contiguous()  # (B, H, N, ·) -> [B, T, H, ·]


# ------------------------------------------------------------------ fla's conventions
def test_installed_chunk_op_takes_what_the_adapter_passes():
    # Read from the source (importing fla needs a GPU driver for its kernels): the adapter calls
    # chunk_linear_attn(q, k, v, scale=..., normalize=False) and reads (out, state).
    tree = ast.parse(fla_file("ops/linear_attn/chunk.py").read_text())
    func = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "chunk_linear_attn"
    )
    names = [a.arg for a in func.args.args + func.args.kwonlyargs]
    assert names[:3] == ["q", "k", "v"] and {"scale", "normalize"} <= set(names)
    assert "head_first" not in names  # [B, T, H, K] is the only layout
    assert fla.missing_reason() is None, fla.missing_reason()


def test_fla_reference_is_our_causal_product_in_its_layout(naive):
    phi_q, phi_k, v = features(dtype=torch.float32)
    ours = causal_product(phi_q, phi_k, v, 10)  # N = 70 = 7 chunks of 10
    theirs, _ = naive.naive_recurrent_linear_attn(
        to_fla(phi_q), to_fla(phi_k), to_fla(v), scale=1.0, normalize=False
    )
    torch.testing.assert_close(theirs.transpose(1, 2), ours, rtol=1e-5, atol=1e-5)
    # The chunk form agrees with the recurrent one (its chunks are fla's 64 tokens).
    n64 = [t[:, :, :64] for t in (phi_q, phi_k, v)]
    chunked = naive.naive_chunk_linear_attn(*map(to_fla, n64), scale=1.0, normalize=False)
    torch.testing.assert_close(chunked, theirs[:, :64], rtol=1e-5, atol=1e-5)


def test_fla_default_scale_is_inverse_sqrt_k_so_the_adapter_passes_one(naive):
    phi_q, phi_k, v = map(to_fla, features())
    default, _ = naive.naive_recurrent_linear_attn(phi_q, phi_k, v, normalize=False)
    scaled, _ = naive.naive_recurrent_linear_attn(phi_q * F**-0.5, phi_k, v, scale=1.0)
    torch.testing.assert_close(default, scaled)


def test_fla_normalize_has_no_offset_which_is_why_the_adapter_divides_itself(naive):
    phi_q, phi_k, v = features()
    theirs, _ = naive.naive_recurrent_linear_attn(
        *map(to_fla, (phi_q, phi_k, v)), scale=1.0, normalize=True
    )
    plain = causal_linear_attention(phi_q, phi_k, v, chunk_size=8, offset=0.0, eps=1e-10)
    torch.testing.assert_close(theirs.transpose(1, 2), plain, rtol=1e-5, atol=1e-6)
    with_one = causal_linear_attention(phi_q, phi_k, v, chunk_size=8, offset=1.0, eps=0.0)
    assert not torch.allclose(theirs.transpose(1, 2), with_one, rtol=1e-3)


# ------------------------------------------------------------------ the adapter
def padding(n: int = N) -> torch.Tensor:
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[0, 5] = mask[1, -7:] = False
    return mask


@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("padded", [False, True])
def test_adapter_matches_float64_reference(naive, offset, padded):
    phi_q, phi_k, v = (t.requires_grad_(True) for t in features())
    mask = padding() if padded else None
    k_in = phi_k if mask is None else phi_k.masked_fill(~mask[:, None, :, None], 0.0)
    op = naive.naive_recurrent_linear_attn
    out = fla.fla_causal_linear_attention(phi_q, k_in, v, offset=offset, eps=1e-6, op=op)
    ref = naive_kernel_attention(
        phi_q, phi_k, v, causal=True, key_padding_mask=mask, offset=offset, eps=1e-6
    )
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref.float(), rtol=1e-4, atol=1e-5)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    got = torch.autograd.grad(out, (phi_q, phi_k, v), cotangent)
    want = torch.autograd.grad(ref, (phi_q, phi_k, v), cotangent.double())
    for g, w in zip(got, want):
        assert w.abs().sum() > 0
        torch.testing.assert_close(g, w.float(), rtol=1e-4, atol=1e-5)


def test_query_that_sees_no_key_gives_zero(naive):
    phi_q, phi_k, v = (t.requires_grad_(True) for t in features(8))
    k_in = phi_k.clone()
    k_in[1] = 0.0  # batch 1: every key padded
    op = naive.naive_recurrent_linear_attn
    out = fla.fla_causal_linear_attention(phi_q, k_in, v, offset=0.0, eps=0.0, op=op)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    assert torch.isfinite(out).all()
    grads = torch.autograd.grad(out.sum(), (phi_q, phi_k, v))
    assert all(torch.isfinite(g).all() for g in grads)


def test_bf16_runs_fla_in_bf16_with_a_float32_normaliser(naive):
    seen = []

    def op(q, k, v, *, scale, normalize):
        seen.append((q.shape, k.shape, v.shape, q.dtype, v.dtype, q.is_contiguous(), scale))
        assert normalize is False
        return naive.naive_recurrent_linear_attn(q, k, v, scale=scale, normalize=normalize)

    phi_q, phi_k, v = features(n=2000)
    phi_q, phi_k = phi_q[..., :DV], phi_k[..., :DV]  # F = Dv: what fla runs in bf16
    ref = fla.fla_causal_linear_attention(phi_q, phi_k, v, offset=1.0, eps=1e-6, op=op)
    low = fla.fla_causal_linear_attention(phi_q, phi_k, v.bfloat16(), offset=1.0, eps=1e-6, op=op)
    assert low.dtype == torch.bfloat16
    fp32_call, bf16_call = seen
    assert fp32_call == (
        (B, 2000, H, DV),
        (B, 2000, H, DV),
        (B, 2000, H, DV),
        *[torch.float32] * 2,
        True,
        1.0,
    )
    assert bf16_call[3:5] == (torch.bfloat16, torch.bfloat16)
    rel = (low.float() - ref).norm() / ref.norm()
    assert rel < 1e-2, f"relative error {rel:.3g}"


# The feature-map backends with their options that change φ or the normaliser's offset.
WIRING = [
    ("linear", {}),
    ("linear", {"feature_map": "relu"}),
    ("performer", {"num_features": 16}),
    ("performer", {"kernel": "hyperbolic", "num_features": 8}),
    ("polysketch", {"sketch_size": 4, "evaluation": "features"}),  # offset 1
    ("polysketch", {"learned_coefficients": True, "sketch_size": 4, "evaluation": "features"}),
    ("taylor", {"feature_dim": 3, "evaluation": "features"}),  # its score form: test_fla_based
    ("mean", {}),
]


@pytest.mark.parametrize(("name", "options"), WIRING, ids=[f"{n}{o}" for n, o in WIRING])
def test_every_backend_routes_its_causal_product_through_the_adapter(
    naive, monkeypatch, name, options
):
    calls = []

    def op(*args, **kwargs):
        calls.append(kwargs)
        return naive.naive_recurrent_linear_attn(*args, **kwargs)

    torch.manual_seed(0)
    via_fla = build_attention(name, head_dim=4, **options)
    torch.manual_seed(0)
    plain = build_attention(name, head_dim=4, implementation="torch", **options)
    # As on a GPU: resolve says fla (the option stays auto), and fla's op is the reference.
    monkeypatch.setattr(dispatch, "resolve", lambda implementation, v, *, backend: "fla")
    monkeypatch.setattr(fla, "chunk_op", lambda: op)
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(B, H, 20, 4, generator=g, requires_grad=True) for _ in range(3)]
    mask = padding(20)
    out = via_fla(*inputs, causal=True, key_padding_mask=mask)
    assert calls, "the causal product did not go through fla's op"
    monkeypatch.undo()
    ref = plain(*inputs, causal=True, key_padding_mask=mask)
    # float32 both ways (fla's reference computes in float32): relu's near-zero normalisers
    # amplify rounding, a wrong offset or layout would be off by O(1).
    close = {"rtol": 2e-3, "atol": 2e-4}
    torch.testing.assert_close(out, ref, **close)
    cotangent = torch.randn(out.shape, generator=g)
    # mean ignores q and k: their gradients are None both ways.
    got = torch.autograd.grad(out, [*inputs, *via_fla.parameters()], cotangent, allow_unused=True)
    want = torch.autograd.grad(ref, [*inputs, *plain.parameters()], cotangent, allow_unused=True)
    for a, b in zip(got, want):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, **close)


# ------------------------------------------------------------------ dispatch and errors
@pytest.mark.parametrize(
    ("implementation", "device", "dtype", "installed", "want"),
    [
        ("auto", "cuda", torch.bfloat16, True, "torch"),  # AUTO_TAKES_FLA is off (module note)
        ("auto", "cuda", torch.float16, True, "torch"),
        ("auto", "cuda", torch.float32, True, "torch"),
        ("auto", "cpu", torch.bfloat16, True, "torch"),
        ("torch", "cuda", torch.bfloat16, True, "torch"),
        ("fla", "cuda", torch.float32, True, "fla"),
        ("fla", "cuda", torch.bfloat16, False, "fla"),  # resolve refuses it, naming the fix
    ],
)
def test_dispatch_rule(implementation, device, dtype, installed, want):
    assert dispatch.choose(implementation, device, dtype, installed=installed) == want


@pytest.mark.parametrize(
    ("device", "dtype", "installed", "want"),
    [
        ("cuda", torch.bfloat16, True, "fla"),
        ("cuda", torch.float16, True, "fla"),
        ("cuda", torch.float32, True, "torch"),  # fla's fp32 is TF32: opt in with fla
        ("cuda", torch.bfloat16, False, "torch"),
        ("cpu", torch.bfloat16, True, "torch"),
    ],
)
def test_auto_rule_when_it_takes_fla_again(monkeypatch, device, dtype, installed, want):
    monkeypatch.setattr(dispatch, "AUTO_TAKES_FLA", True)
    assert dispatch.choose("auto", device, dtype, installed=installed) == want


@pytest.mark.parametrize("name", ["linear", "mean", "performer", "polysketch"])
def test_fla_on_a_cpu_tensor_is_one_line_naming_the_fix(name):
    attn = build_attention(name, head_dim=4, implementation="fla")
    x = torch.randn(1, 1, 3, 4)
    with pytest.raises(ValueError, match="runs on CUDA tensors, got a cpu tensor") as err:
        attn(x, x, x, causal=True)
    assert "implementation: auto" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.usefixtures("fresh_cache")
@pytest.mark.parametrize(("version", "says"), [(None, "not installed"), ("0.4.2", "0.4.2 is")])
def test_fla_without_a_usable_package_fails_at_build_time(monkeypatch, version, says):
    monkeypatch.setattr(fla, "installed_version", lambda: version)
    with pytest.raises(ModuleNotFoundError, match=f"{says}.*pip install") as err:
        build_attention("linear", head_dim=4, implementation="fla")
    assert "\n" not in str(err.value)
    # auto never needs it: it falls back to the torch kernel.
    assert dispatch.resolve("auto", torch.zeros(1), backend="linear") == "torch"


def test_unknown_implementation_lists_the_allowed():
    with pytest.raises(
        ValueError, match=r"implementation 'cuda'.*allowed: auto, torch, fla, triton"
    ):
        build_attention("performer", head_dim=4, implementation="cuda")


def test_every_feature_map_backend_takes_the_option():
    from attn_lightning.attention import ATTENTIONS, attention_options

    for name, cls in ATTENTIONS.items():
        if issubclass(cls, FeatureMapAttention):
            assert attention_options(name)["implementation"] == "auto", name


def test_auto_on_cpu_is_the_torch_kernel_bit_for_bit():
    torch.manual_seed(0)
    auto = build_attention("performer", head_dim=4)
    torch.manual_seed(0)
    plain = build_attention("performer", head_dim=4, implementation="torch")
    q, k, v = (torch.randn(2, 2, 9, 4) for _ in range(3))
    assert torch.equal(auto(q, k, v, causal=True), plain(q, k, v, causal=True))
