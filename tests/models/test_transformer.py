"""The pre-norm blocks and the encoder stack: steps, padding, positions, errors (the attention
sites themselves: ``test_multihead``)."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.models import (
    BlockSizes,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    MultiHeadAttention,
    TransformerEncoder,
)
from tests.models.test_multihead import (
    B,
    E,
    H,
    L,
    S,
    _assert_steps_equal_causal_forward,
    _recurrent_cases,
)

SIZES = BlockSizes(d_model=E, num_heads=H, d_ff=24)


@pytest.mark.parametrize(("name", "options"), _recurrent_cases())
def test_encoder_stack_step_equals_causal_forward(name, options):
    torch.manual_seed(0)
    enc = (
        TransformerEncoder(SIZES, num_layers=2, attention={"name": name, **options}).double().eval()
    )
    assert len(_assert_steps_equal_causal_forward(enc)) == 2


def test_encoder_padding_mask_ignores_padded_tokens():
    torch.manual_seed(0)
    enc = TransformerEncoder(SIZES, num_layers=2, attention={"name": "linear"}).eval()
    x = torch.randn(B, L, E)
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[:, -2:] = False
    x2 = x.clone()
    x2[:, -2:] = torch.randn(B, 2, E) * 5
    torch.testing.assert_close(
        enc(x, key_padding_mask=mask)[:, :-2], enc(x2, key_padding_mask=mask)[:, :-2]
    )


@pytest.mark.parametrize(("name", "options"), _recurrent_cases()[:2])
def test_attention_only_blocks_have_no_mlp_and_step_as_they_run(name, options):
    torch.manual_seed(0)
    sizes = BlockSizes(d_model=E, num_heads=H, d_ff=0)
    enc = TransformerEncoder(sizes, num_layers=2, attention={"name": name, **options}).double()
    block = enc.layers[0]
    assert block.mlp is None and block.norm2 is None
    assert not any("mlp" in n or "norm2" in n for n, _ in enc.named_parameters())
    x = torch.randn(B, L, E, dtype=torch.float64)
    mixed = block.attn(block.norm1(x), block.norm1(x), block.norm1(x), causal=True)
    torch.testing.assert_close(block(x, causal=True), x + mixed)  # the attention's residual only
    assert len(_assert_steps_equal_causal_forward(enc.eval())) == 2
    decoder = DecoderBlock(sizes, attention={"name": "softmax"}, cross_attention={"name": name})
    assert decoder.mlp is None and decoder.norm3 is None
    assert decoder(x.float(), torch.randn(B, S, E)).shape == (B, L, E)


def _record_inputs(mha: MultiHeadAttention, seen: dict, site: str) -> None:
    mha.register_forward_hook(lambda mod, args, out: seen.update({site: args, site + "_out": out}))


def test_decoder_block_sites_have_their_own_backend_and_projections():
    block = DecoderBlock(
        SIZES, attention={"name": "softmax"}, projections=False, cross_attention={"name": "linear"}
    )
    assert block.self_attn.backend.name == "softmax" and block.self_attn.q_proj is None
    assert block.cross_attn.backend.name == "linear" and block.cross_attn.q_proj is not None
    out = block(torch.randn(B, L, E), torch.randn(B, S, E))
    assert out.shape == (B, L, E)
    paper = DecoderBlock(
        SIZES,
        attention={"name": "softmax"},
        projections="no_qk",
        cross_attention={"name": "softmax"},
        cross_projections="no_qk",
    )
    for mha in (paper.self_attn, paper.cross_attn):
        assert mha.projections == "no_qk" and mha.q_proj is None and mha.v_proj is not None
    encoder = EncoderBlock(SIZES, attention={"name": "softmax"}, projections="no_qk")
    assert encoder.attn.k_proj is None and encoder.attn.out_proj is not None


def test_decoder_block_adds_positions_to_queries_and_keys_not_values():
    torch.manual_seed(0)
    block = DecoderBlock(
        SIZES, attention={"name": "softmax"}, cross_attention={"name": "softmax"}
    ).eval()
    seen: dict = {}
    _record_inputs(block.self_attn, seen, "self")
    _record_inputs(block.cross_attn, seen, "cross")
    x, memory = torch.randn(B, L, E), torch.randn(B, S, E)
    pos, query_pos = torch.randn(B, S, E), torch.randn(B, L, E)
    block(x, memory, pos=pos, query_pos=query_pos)
    q, k, v = seen["self"]
    torch.testing.assert_close(q - v, query_pos)
    torch.testing.assert_close(k, q)
    q, k, v = seen["cross"]
    torch.testing.assert_close(v, memory)
    torch.testing.assert_close(k - v, pos)
    # The cross query is the normed stream after self-attention plus the queries' positions.
    torch.testing.assert_close(q, block.norm2(x + seen["self_out"]) + query_pos)


def test_encoder_block_adds_positions_to_queries_and_keys_not_values():
    torch.manual_seed(0)
    block = EncoderBlock(SIZES, attention={"name": "softmax"}).eval()
    seen: dict = {}
    _record_inputs(block.attn, seen, "self")
    x, pos = torch.randn(B, L, E), torch.randn(1, L, E)
    block(x, pos=pos)
    q, k, v = seen["self"]
    torch.testing.assert_close(v, block.norm1(x))
    torch.testing.assert_close(q - v, pos.expand_as(v))
    torch.testing.assert_close(k, q)


def test_constructors_are_keyword_only():
    with pytest.raises(TypeError):
        EncoderBlock(SIZES, {"name": "softmax"})  # type: ignore[misc]


def test_clear_errors():
    with pytest.raises(ValueError, match="d_ff must be >= 1, got 0"):
        FeedForward(d_model=E, d_ff=0)
    with pytest.raises(ValueError, match="num_layers must be >= 0, got -1"):
        TransformerEncoder(SIZES, num_layers=-1, attention={"name": "softmax"})
