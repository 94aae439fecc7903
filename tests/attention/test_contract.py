"""The attention contract, run over every registered backend (see conftest.VARIANTS), and the
option checks every backend constructor runs: one wording per mistake, bools refused."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.attention import Attention, available_attentions, build_attention
from attn_lightning.attention.base import check_choice, check_eps, check_int
from tests.attention.conftest import backend_cases

B, H, D, DV = 2, 3, 8, 5


def make(name: str, options: dict) -> Attention:
    torch.manual_seed(0)
    return build_attention(name, head_dim=D, **options).eval()


def qkv(l_q: int, s: int, seed: int = 1, dtype: torch.dtype = torch.float32, dv: int = DV):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, l_q, D, generator=g, dtype=dtype)
    k = torch.randn(B, H, s, D, generator=g, dtype=dtype)
    v = torch.randn(B, H, s, dv, generator=g, dtype=dtype)
    return q, k, v


def value_dim(attn: Attention) -> int:
    """Dv != D unless the backend needs them equal (optimization's values dictionary)."""
    return DV if attn.supports_any_value_dim else D


def self_only(attn: Attention) -> bool:
    """A backend that mixes a sequence with itself (pool) has no L != S form."""
    return not attn.supports_cross_attention


def padded_inputs(attn: Attention, n: int = 8):
    """q, k, v of length n and a ``(B, n)`` mask: batch 0 loses its last 3 keys, batch 1 key 2."""
    q, k, v = qkv(n, n, seed=3, dv=value_dim(attn))
    mask = torch.ones(B, n, dtype=torch.bool)
    mask[0, 5:] = False
    mask[1, 2] = False
    return q, k, v, mask


def causal_or_skip(attn: Attention) -> None:
    if not attn.supports_causal:
        pytest.skip(f"{attn.name} has no causal form")


def length_or_skip(attn: Attention) -> None:
    if attn.length_dependent:
        pytest.skip(f"{attn.name}'s similarity depends on the call's length: a cut is another call")


def cross_or_skip(attn: Attention) -> None:
    if self_only(attn):
        pytest.skip(f"{attn.name} is self-attention only (L == S)")


# (k, v) planted at masked positions: each non-finite kind in k and in v.
NONFINITE = [
    pytest.param(math.nan, math.inf, id="k=nan-v=inf"),
    pytest.param(math.inf, math.nan, id="k=inf-v=nan"),
]


def plant(k, v, keep, k_value: float | None, v_value: float | None):
    """k, v where ``keep``, else ``k_value``, ``v_value`` (None: finite garbage)."""
    planted = []
    for x, value in ((k, k_value), (v, v_value)):
        other = torch.randn_like(x) * 5 if value is None else torch.full_like(x, value)
        planted.append(torch.where(keep, x, other))
    return planted


def outputs_and_grads(attn, q, k, v, rows, **kwargs):
    """Outputs at ``rows`` and the gradients of their squared sum w.r.t. q, k, v (None: none)."""
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = attn(*leaves, **kwargs)[:, :, rows]
    out.square().sum().backward()
    return out.detach(), [t.grad for t in leaves]


def assert_same_where(got, want, keep):
    """Equal and finite at ``keep`` (a broadcastable bool), either both None or both tensors."""
    assert (got is None) == (want is None)
    if got is not None:
        keep = keep.expand_as(got)
        assert torch.isfinite(got[keep]).all()
        torch.testing.assert_close(got[keep], want[keep], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "options"), backend_cases())
class TestContract:
    def test_shapes_cross_attention(self, name, options):
        attn = make(name, options)
        cross_or_skip(attn)
        q, k, v = qkv(7, 11, dv=value_dim(attn))
        out = attn(q, k, v)
        assert out.shape == (B, H, 7, value_dim(attn))
        assert out.dtype == q.dtype
        assert torch.isfinite(out).all()

    def test_causal_future_does_not_leak(self, name, options):
        attn = make(name, options)
        causal_or_skip(attn)
        n, t = 10, 6
        q, k, v = qkv(n, n, dv=value_dim(attn))
        out = attn(q, k, v, causal=True)
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t:] = torch.randn_like(k2[:, :, t:]) * 3
        v2[:, :, t:] = torch.randn_like(v2[:, :, t:]) * 3
        out2 = attn(q, k2, v2, causal=True)
        torch.testing.assert_close(out[:, :, :t], out2[:, :, :t], rtol=1e-5, atol=1e-6)
        assert not torch.allclose(out[:, :, t:], out2[:, :, t:])

    def test_causal_equals_masked_prefix_attention(self, name, options):
        # Stronger than "the future does not leak": position t of the causal output equals the
        # non-causal output over the prefix k[:t+1], v[:t+1] (an exactly masked reference).
        attn = make(name, options)
        causal_or_skip(attn)
        length_or_skip(attn)
        n = 9
        q, k, v = qkv(n, n, seed=2, dv=value_dim(attn))
        out = attn(q, k, v, causal=True)
        for t in (0, 4, n - 1):
            if attn.positional:  # query t keeps its index: the last row of the causal prefix
                prefix = attn(q[:, :, : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], causal=True)
                ref = prefix[:, :, t : t + 1]
            else:
                ref = attn(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1])
            torch.testing.assert_close(out[:, :, t : t + 1], ref, rtol=1e-4, atol=1e-5)

    @pytest.mark.parametrize("causal", [False, True])
    def test_padded_keys_are_ignored(self, name, options, causal):
        attn = make(name, options)
        if causal:
            causal_or_skip(attn)
        q, k, v, mask = padded_inputs(attn)
        out = attn(q, k, v, causal=causal, key_padding_mask=mask)
        k2 = torch.where(mask[:, None, :, None], k, torch.randn_like(k) * 5)
        v2 = torch.where(mask[:, None, :, None], v, torch.randn_like(v) * 5)
        out2 = attn(q, k2, v2, causal=causal, key_padding_mask=mask)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, out2, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize(("k_bad", "v_bad"), NONFINITE)
    @pytest.mark.parametrize("causal", [False, True])
    def test_nonfinite_padded_keys_count_for_nothing(self, name, options, causal, k_bad, v_bad):
        # NaN/inf in padded k and v: same outputs and gradients (w.r.t. q and the real k, v) as
        # finite garbage there, all finite. 0·NaN = NaN, so masking must not be a multiply.
        attn = make(name, options)
        if causal:
            causal_or_skip(attn)
        q, k, v, mask = padded_inputs(attn)
        real = mask[:, None, :, None]
        kwargs = {"causal": causal, "key_padding_mask": mask}
        want = outputs_and_grads(attn, q, *plant(k, v, real, None, None), slice(None), **kwargs)
        got = outputs_and_grads(attn, q, *plant(k, v, real, k_bad, v_bad), slice(None), **kwargs)
        assert_same_where(got[0], want[0], torch.tensor(True))
        for g, w, keep in zip(got[1], want[1], (torch.tensor(True), real, real)):
            assert_same_where(g, w, keep)

    @pytest.mark.parametrize(("k_bad", "v_bad"), NONFINITE)
    def test_nonfinite_future_does_not_reach_earlier_outputs(self, name, options, k_bad, v_bad):
        # Causal: NaN/inf in k, v from position t on leave outputs before t, and the gradients of
        # a loss on them w.r.t. the inputs before t, as with finite values there.
        attn = make(name, options)
        causal_or_skip(attn)
        n, t = 10, 5  # t is not a multiple of the chunk: the bad values share a chunk with t - 1
        q, k, v = qkv(n, n, dv=value_dim(attn))
        past = (torch.arange(n) < t)[:, None]  # (N, 1)
        want = outputs_and_grads(attn, q, *plant(k, v, past, None, None), slice(0, t), causal=True)
        got = outputs_and_grads(attn, q, *plant(k, v, past, k_bad, v_bad), slice(0, t), causal=True)
        assert_same_where(got[0], want[0], torch.tensor(True))
        for g, w in zip(got[1], want[1]):
            assert_same_where(g, w, past)
        out = attn(q, *plant(k, v, past, k_bad, None), causal=True)
        assert torch.isnan(out[:, :, t:]).all(), "outputs that see a non-finite key must be NaN"

    def test_padding_equals_dropping_the_keys(self, name, options):
        attn = make(name, options)
        length_or_skip(attn)
        # A self-attention-only backend gets a query per token; the kept ones are compared.
        q, k, v = qkv(9 if self_only(attn) else 4, 9, seed=4, dv=value_dim(attn))
        # A positional backend sees token indices: only trailing keys drop without a shift.
        keep = torch.arange(5) if attn.positional else torch.tensor([0, 1, 3, 4, 8])
        mask = torch.zeros(B, 9, dtype=torch.bool)
        mask[:, keep] = True
        out = attn(q, k, v, key_padding_mask=mask)
        if self_only(attn):
            out, q = out[:, :, keep], q[:, :, keep]
        ref = attn(q, k[:, :, keep], v[:, :, keep])
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)

    def test_fully_masked_query_gives_zeros_not_nan(self, name, options):
        attn = make(name, options)
        q, k, v = qkv(5 if self_only(attn) else 3, 5, seed=5, dv=value_dim(attn))
        mask = torch.ones(B, 5, dtype=torch.bool)
        mask[1] = False
        for t in (q, k, v):
            t.requires_grad_(True)
        out = attn(q, k, v, key_padding_mask=mask)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[1], torch.zeros_like(out[1]))
        out.sum().backward()
        for t in (q, k, v):
            assert t.grad is None or torch.isfinite(t.grad).all()

    def test_step_matches_causal_forward(self, name, options):
        attn = make(name, options)
        if not attn.supports_recurrence:
            with pytest.raises(NotImplementedError, match=name):
                attn.step(*qkv(1, 1, dv=value_dim(attn)))
            return
        n = 7
        q, k, v = qkv(n, n, seed=6, dv=value_dim(attn))
        full = attn(q, k, v, causal=True)
        state = None
        for t in range(n):
            sl = slice(t, t + 1)
            out_t, state = attn.step(q[:, :, sl], k[:, :, sl], v[:, :, sl], state)
            torch.testing.assert_close(out_t, full[:, :, sl], rtol=1e-4, atol=1e-5)

    @pytest.mark.parametrize("causal", [False, True])
    def test_gradients_are_finite(self, name, options, causal):
        attn = make(name, options).train()
        if causal:
            causal_or_skip(attn)
        q, k, v = qkv(6, 6, seed=7, dv=value_dim(attn))
        for t in (q, k, v):
            t.requires_grad_(True)
        attn(q, k, v, causal=causal).square().sum().backward()
        assert v.grad is not None and v.grad.abs().sum() > 0
        for t in (q, k, v):
            assert t.grad is None or torch.isfinite(t.grad).all()
        for p in attn.parameters():
            if p.requires_grad and p.grad is not None:
                assert torch.isfinite(p.grad).all()

    def test_float64_in_float64_out(self, name, options):
        attn = make(name, options).double()
        q, k, v = qkv(4, 4, dtype=torch.float64, dv=value_dim(attn))
        if options.get("implementation") == "triton":  # no float64 kernel: a clear refusal
            with pytest.raises(ValueError, match="'triton' has no float64 kernel"):
                attn(q, k, v)
            return
        assert attn(q, k, v).dtype == torch.float64

    def test_bad_shapes_raise_clear_errors(self, name, options):
        attn = make(name, options)
        q, k, v = qkv(4, 6, dv=value_dim(attn))
        with pytest.raises(ValueError, match="4-D"):
            attn(q[0], k, v)
        with pytest.raises(ValueError, match="L == S"):
            attn(q, k, v, causal=True)
        with pytest.raises(ValueError, match="head_dim"):
            attn(q[..., :-1], k[..., :-1], v)
        with pytest.raises(ValueError, match="share the length"):
            attn(q, k, v[:, :, :-1])
        with pytest.raises(ValueError, match="bool"):
            attn(q, k, v, key_padding_mask=torch.ones(B, 6))
        with pytest.raises(ValueError, match=r"\(B, S\)"):
            attn(q, k, v, key_padding_mask=torch.ones(B, 5, dtype=torch.bool))

    @pytest.mark.parametrize("causal", [False, True])
    def test_grid_is_a_checked_per_call_argument(self, name, options, causal):
        attn = make(name, options)
        if causal:
            causal_or_skip(attn)
        n = 12
        q, k, v = qkv(n, n, seed=8, dv=value_dim(attn))
        out = attn(q, k, v, causal=causal, grid=(3, 4))
        assert out.shape == (B, H, n, value_dim(attn)) and torch.isfinite(out).all()
        if not attn.positional:  # where the tokens lie changes nothing for this similarity
            assert torch.equal(out, attn(q, k, v, causal=causal))
        with pytest.raises(ValueError, match=r"grid \(3, 5\) has 15 cells but .* S=12 tokens"):
            attn(q, k, v, causal=causal, grid=(3, 5))
        if not causal and not self_only(attn):  # the grid lays out the S keys, not the L queries
            assert attn(q[:, :, :5], k, v, grid=[4, 3]).shape == (B, H, 5, value_dim(attn))

    def test_unknown_option_lists_allowed(self, name, options):
        with pytest.raises(ValueError, match="allowed"):
            build_attention(name, head_dim=D, not_an_option=1, **options)


def test_unknown_name_lists_available():
    with pytest.raises(ValueError, match=r"available: .*softmax"):
        build_attention("sofmax", head_dim=D)


def test_cases_cover_every_registered_backend_and_both_sketches():
    cases = [param.values for param in backend_cases()]
    assert {name for name, _ in cases} == set(available_attentions())
    sketches = {opts.get("sketch", "random") for name, opts in cases if name == "polysketch"}
    assert sketches == {"random", "learned"}


def test_check_choice_names_the_value_the_backend_and_the_choices():
    assert check_choice("kernel", "relu", ("relu", "elu"), backend="linear") == "relu"
    with pytest.raises(
        ValueError, match=r"^unknown kernel 'gelu' for attention 'linear'; allowed: relu, elu$"
    ):
        check_choice("kernel", "gelu", ("relu", "elu"), backend="linear")
    with pytest.raises(ValueError, match="unknown kernel 1 "):
        check_choice("kernel", 1, ("relu",), backend="linear")


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "3", None])
def test_check_int_refuses_what_is_not_an_int_at_least_the_minimum(bad):
    with pytest.raises(
        ValueError, match=rf"^block must be an int >= 1 \(tokens per block\), got {bad!r}$"
    ):
        check_int("block", bad, minimum=1, what="tokens per block")


def test_check_int_and_check_eps_return_the_value():
    assert check_int("local_block", 0, minimum=0) == 0
    assert check_eps(0) == 0.0 and isinstance(check_eps(0), float)
    for bad in (-1e-6, True, "0", float("nan")):
        with pytest.raises(ValueError, match="eps must be >= 0"):
            check_eps(bad)
