"""PolySketch's cost model: which form ``auto`` takes, and the widths it is given."""

from __future__ import annotations

from attn_lightning.attention import build_attention
from attn_lightning.attention.ops.score_form import (
    KERNEL_MAX_ELEMENTS,
    score_widths,
    uses_kernel_form,
)


def test_auto_evaluation_takes_the_cheaper_form_and_bounds_the_score_matrix():
    # r = 64 (2,080 features) at the reversal's 100 tokens: the score form is far cheaper.
    common = {"value_dim": 16, "widths": (64,), "causal": True, "chunk_size": 64}
    assert uses_kernel_form("auto", heads=256, queries=100, keys=100, **common)
    # r = 16 (136 features): the feature form wins once N is long.
    small = {**common, "widths": (16,)}
    assert not uses_kernel_form("auto", heads=1, queries=4096, keys=4096, **small)
    # Untiled (autograd over the whole matrix): never past KERNEL_MAX_ELEMENTS score entries,
    # however cheap; the tiled forms keep nothing quadratic, so only the cost decides.
    n = 2048
    assert 16 * n * n > KERNEL_MAX_ELEMENTS
    assert not uses_kernel_form("auto", heads=16, queries=n, keys=n, tiled=False, **common)
    assert uses_kernel_form("auto", heads=16, queries=n, keys=n, **common)
    assert uses_kernel_form("kernel", heads=16, queries=n, keys=n, tiled=False, **common)
    assert not uses_kernel_form("features", heads=1, queries=8, keys=8, **common)


def test_score_widths_name_each_squared_inner_product():
    d, r = 8, 5
    assert score_widths(d, 4, r, False) == (r,)  # ⟨s_q, s_k⟩²
    assert score_widths(d, 2, r, False) == (d,)  # degree 2: s = identity
    assert score_widths(d, 4, r, True) == (d, r)  # a_2⟨q', k'⟩² + a_4⟨s_q, s_k⟩²
    assert score_widths(d, 2, r, True) == (d,)
    attn = build_attention("polysketch", head_dim=d, sketch_size=r, learned_coefficients=True)
    assert attn.score_widths() == (d, r)


def test_a_tiled_causal_call_is_costed_at_half_the_square():
    # Taylor's shape (d' 16, F 153, Dv 32) at N 512: half the square is the cheaper form, the
    # whole square (untiled, or not causal) is not.
    common = {"heads": 32, "queries": 512, "keys": 512, "value_dim": 32, "widths": (16,)}
    common |= {"chunk_size": 64, "features": 153}
    assert uses_kernel_form("auto", causal=True, **common)
    assert not uses_kernel_form("auto", causal=True, tiled=False, **common)
    assert not uses_kernel_form("auto", causal=False, **common)
