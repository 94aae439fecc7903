"""PolySketch's cost model: which form ``auto`` takes, and the widths it is given."""

from __future__ import annotations

from attn_lightning.attention import build_attention
from attn_lightning.attention.ops.score_form import score_widths, uses_kernel_form


def test_auto_evaluation_takes_the_cheaper_form():
    # r = 64 (2,080 features) at the reversal's 100 tokens: the score form is far cheaper.
    common = {"value_dim": 16, "widths": (64,), "causal": True, "chunk_size": 64}
    assert uses_kernel_form("auto", queries=100, keys=100, **common)
    # r = 16 (136 features): the feature form wins once N is long.
    small = {**common, "widths": (16,)}
    assert not uses_kernel_form("auto", queries=4096, keys=4096, **small)
    # The tiles keep nothing quadratic: however long, only the cost decides (r = 64 at 2,048).
    assert uses_kernel_form("auto", queries=2048, keys=2048, **common)
    assert not uses_kernel_form("features", queries=8, keys=8, **common)
    assert uses_kernel_form("kernel", queries=4096, keys=4096, **small)


def test_score_widths_name_each_squared_inner_product():
    d, r = 8, 5
    assert score_widths(d, 4, r, False) == (r,)  # ⟨s_q, s_k⟩²
    assert score_widths(d, 2, r, False) == (d,)  # degree 2: s = identity
    assert score_widths(d, 4, r, True) == (d, r)  # a_2⟨q', k'⟩² + a_4⟨s_q, s_k⟩²
    assert score_widths(d, 2, r, True) == (d,)
    attn = build_attention("polysketch", head_dim=d, sketch_size=r, learned_coefficients=True)
    assert attn.score_widths() == (d, r)


def test_a_causal_call_is_costed_at_half_the_square():
    # Taylor's shape (d' 16, F 153, Dv 32) at N 512: half the square is the cheaper form, the
    # whole square (not causal) is not.
    common = {"queries": 512, "keys": 512, "value_dim": 32, "widths": (16,)}
    common |= {"chunk_size": 64, "features": 153}
    assert uses_kernel_form("auto", causal=True, **common)
    assert not uses_kernel_form("auto", causal=False, **common)
