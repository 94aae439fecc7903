"""The optional input check: non-finite q, k, v at unmasked positions raise a clear ValueError."""

from __future__ import annotations

import math
import os

import pytest
import torch

from attn_lightning.attention import (
    Attention,
    build_attention,
    check_finite,
    check_finite_enabled,
    set_check_finite,
)
from attn_lightning.attention.base import CHECK_FINITE_ENV
from tests.attention.conftest import backend_cases

B, H, D, DV, N = 2, 3, 8, 5, 8
WHERE = (1, 2, 3, 4)  # (b, h, n, d) of the planted value; d < DV so it fits v too


def make(name: str, options: dict) -> Attention:
    torch.manual_seed(0)
    return build_attention(name, head_dim=D, **options).eval()


def qkv(n: int = N, dv: int = DV):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, n, D, generator=g)
    k = torch.randn(B, H, n, D, generator=g)
    v = torch.randn(B, H, n, dv, generator=g)
    return {"q": q, "k": k, "v": v}


def padding_mask() -> torch.Tensor:
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 5:] = False
    mask[1, 1] = False  # before WHERE's n = 3 in batch 1: a masked NaN comes first in order
    return mask


@pytest.fixture
def checking():
    with check_finite():
        yield


@pytest.mark.usefixtures("checking")
@pytest.mark.parametrize(("name", "options"), backend_cases())
class TestCheckFinite:
    @pytest.mark.parametrize("label", ["q", "k", "v"])
    @pytest.mark.parametrize("value", [math.nan, -math.inf])
    def test_nonfinite_real_input_names_tensor_backend_and_position(
        self, name, options, label, value
    ):
        attn = make(name, options)
        inputs = qkv()
        inputs[label][WHERE] = value
        causal = attn.supports_causal
        with pytest.raises(ValueError, match=rf"{name!r}.* {label}: .* = \(1, 2, 3, 4\)"):
            attn(**inputs, causal=causal)

    @pytest.mark.parametrize("label", ["k", "v"])
    def test_first_unmasked_position_is_named(self, name, options, label):
        attn = make(name, options)
        inputs = qkv()
        inputs[label][1, 0, 1, 0] = math.nan  # padded, and earlier in (b, h, n, d) order
        inputs[label][WHERE] = math.inf
        with pytest.raises(ValueError, match=rf"{label}: inf at .* = \(1, 2, 3, 4\)"):
            attn(**inputs, key_padding_mask=padding_mask())

    @pytest.mark.parametrize("causal", [False, True])
    def test_nonfinite_masked_positions_pass(self, name, options, causal):
        attn = make(name, options)
        if causal and not attn.supports_causal:
            pytest.skip(f"{name} has no causal form")
        # optimization's values dictionary needs Dv == D
        inputs = qkv(dv=DV if attn.supports_any_value_dim else D)
        mask = padding_mask()
        padded = ~mask[:, None, :, None]
        inputs["k"] = inputs["k"].masked_fill(padded, math.nan)
        inputs["v"] = inputs["v"].masked_fill(padded, math.inf)
        out = attn(**inputs, causal=causal, key_padding_mask=mask)
        assert torch.isfinite(out).all()

    def test_step_checks_its_token(self, name, options):
        attn = make(name, options)
        if not attn.supports_recurrence:
            pytest.skip(f"{name} has no step()")
        inputs = {label: t[:, :, :1] for label, t in qkv().items()}
        _, state = attn.step(*inputs.values())
        inputs["v"] = inputs["v"].clone()
        inputs["v"][1, 2, 0, 4] = math.nan
        with pytest.raises(ValueError, match=rf"{name!r}.* v: nan at .* = \(1, 2, 0, 4\)"):
            attn.step(*inputs.values(), state)


def test_off_by_default_and_no_check_when_off():
    if os.environ.get(CHECK_FINITE_ENV, "").strip().lower() not in {"", "0", "false", "no", "off"}:
        pytest.skip(f"{CHECK_FINITE_ENV} turns the check on for this process")
    assert not check_finite_enabled()
    inputs = qkv()
    inputs["q"][WHERE] = math.nan
    out = make("softmax", {})(**inputs)  # no error: the NaN just flows to its own row
    assert torch.isnan(out[WHERE[:3]]).all()


def test_context_manager_and_setter_restore_the_switch():
    before = check_finite_enabled()
    with check_finite():
        assert check_finite_enabled()
        with check_finite(False):
            assert not check_finite_enabled()
        assert check_finite_enabled()
    assert check_finite_enabled() == before
    set_check_finite(True)
    try:
        assert check_finite_enabled()
    finally:
        set_check_finite(before)


@pytest.mark.parametrize("solver", ["woodbury", "svd"])
def test_optimization_solve_failure_says_the_input_is_not_finite(solver):
    # Check off: a NaN key breaks the D×D factorisation; the error must say why.
    attn = make("optimization", {"solver": solver, "dictionary": "keys"})
    inputs = qkv()
    inputs["k"][WHERE] = math.nan
    with check_finite(False), pytest.raises(ValueError, match="NaN or inf") as info:
        attn(**inputs)
    assert isinstance(info.value.__cause__, torch.linalg.LinAlgError)
