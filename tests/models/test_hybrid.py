"""Hybrid stacks: a backend per layer from ``attention.layers``; step path, sizes, errors."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.linear import LinearAttention
from attn_lightning.attention.performer import PerformerAttention
from attn_lightning.attention.softmax import SoftmaxAttention
from attn_lightning.models import BlockSizes, SequenceTransformer, TransformerEncoder
from attn_lightning.models.hybrid import layer_attentions
from attn_lightning.models.specs import SequenceSpec

SIZES = BlockSizes(d_model=12, num_heads=3, d_ff=24)
HYBRID = {"name": "linear", "layers": {0: {"name": "softmax"}, 2: {"feature_map": "relu"}}}


def backends(encoder: TransformerEncoder) -> list:
    return [layer.attn.backend for layer in encoder.layers]


def test_each_layer_gets_its_entry_or_the_default():
    layers = layer_attentions(HYBRID, num_layers=4)
    assert layers == [
        {"name": "softmax"},  # another name: the whole dict is the entry's
        {"name": "linear"},
        {"name": "linear", "feature_map": "relu"},  # same backend: keys merged
        {"name": "linear"},
    ]
    assert layer_attentions({"name": "softmax"}, num_layers=2) == [{"name": "softmax"}] * 2
    assert layer_attentions({"name": "linear", "layers": {"1": {"name": "softmax"}}}, num_layers=2)[
        1
    ] == {"name": "softmax"}  # a command line's string index
    last = {"name": "linear", "layers": {-1: {"name": "softmax"}}}
    assert [e["name"] for e in layer_attentions(last, num_layers=3)] == ["linear"] * 2 + ["softmax"]
    assert layer_attentions(
        {"name": "linear", "layers": {"-2": {"name": "softmax"}}}, num_layers=2
    )[0] == {"name": "softmax"}  # from the top, also as a command line's string


def test_the_stack_is_mixed():
    encoder = TransformerEncoder(SIZES, num_layers=4, attention=HYBRID)
    kinds = backends(encoder)
    assert [type(b) for b in kinds] == [SoftmaxAttention] + [LinearAttention] * 3
    assert kinds[2].feature_map_name == "relu" and kinds[1].feature_map_name == "elu"
    assert encoder.supports_recurrence


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        (
            {2: {"name": "softmax"}},
            r"names layer 2, which does not exist: .* 2 layer\(s\), .*0\.\.1",
        ),
        ({-3: {"name": "softmax"}}, r"names layer -3, which does not exist: .*\(or -1\.\.-2\)"),
        ({1: {"name": "softmax"}, -1: {"name": "softmax"}}, r"names layer 1 twice, as 1 and -1"),
        ({"1.0": {"name": "softmax"}}, r"key '1\.0'; keys are layer indices 0\.\.1 \(or -1"),
        ({"first": {"name": "softmax"}}, r"key 'first'; keys are layer indices 0\.\.1"),
        ({0: "softmax"}, r"attention\.layers\.0 must be a backend dict"),
        ([{"name": "softmax"}], r"attention\.layers must map a layer index"),
    ],
)
def test_a_bad_layers_entry_is_one_clear_error(layers, message):
    with pytest.raises(ValueError, match=message):
        TransformerEncoder(SIZES, num_layers=2, attention={"name": "linear", "layers": layers})


def test_mixed_stack_step_path_equals_parallel_path():
    torch.manual_seed(0)
    attention = {
        "name": "linear",
        "layers": {0: {"name": "softmax"}, 2: {"name": "performer", "num_features": 8}},
    }
    spec = SequenceSpec(d_model=12, num_heads=3, d_ff=24, num_layers=3, max_len=16)
    model = SequenceTransformer(spec, vocab_size=11, max_len=16, attention=attention)
    model = model.double().eval()
    assert [type(b) for b in backends(model.encoder)] == [
        SoftmaxAttention,
        LinearAttention,
        PerformerAttention,
    ]
    tokens = torch.randint(11, (2, 9), generator=torch.Generator().manual_seed(1))
    parallel = model(tokens, causal=True)  # (B, L, V)
    state = None
    for t in range(tokens.shape[1]):
        logits, state = model.step(tokens[:, t], state)
        torch.testing.assert_close(logits, parallel[:, t], rtol=1e-9, atol=1e-9)
    # The states are each layer's own kind: a growing KV cache, then two fixed-size sums.
    _, (cache, linear, performer) = state
    assert cache[0].shape == (2, 3, 9, 4) and linear[0].shape == (2, 3, 4, 4)
    assert performer[0].shape == (2, 3, 8, 4)


def test_state_sizes_per_layer():
    encoder = TransformerEncoder(
        SIZES, num_layers=2, attention=HYBRID | {"layers": {0: {"name": "softmax"}}}
    )
    d = 4  # head_dim = 12 / 3
    assert encoder.state_sizes(seq_len=10) == (3 * 10 * 2 * d, 3 * (d * d + d))
    pooled = TransformerEncoder(SIZES, num_layers=1, attention={"name": "optimization"})
    with pytest.raises(NotImplementedError, match="'optimization' has no state size"):
        pooled.state_sizes(seq_len=4)


def test_positions_pick_the_logits_of_those_positions():
    torch.manual_seed(0)
    spec = SequenceSpec(d_model=12, num_heads=3, d_ff=24, num_layers=1, max_len=16)
    model = SequenceTransformer(spec, vocab_size=11, max_len=16, attention={"name": "softmax"})
    tokens = torch.randint(11, (2, 9))
    positions = torch.tensor([[1, 4], [0, 8]])
    full = model(tokens, causal=True)
    picked = model(tokens, causal=True, positions=positions)
    assert picked.shape == (2, 2, 11)
    torch.testing.assert_close(picked[0], full[0, [1, 4]])
    torch.testing.assert_close(picked[1], full[1, [0, 8]])
