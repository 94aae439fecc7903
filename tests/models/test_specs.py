"""Model specs: sizes stated once, read from a mapping (YAML, a checkpoint) with clear errors."""

from __future__ import annotations

import re

import pytest
import torch

from attn_lightning.models.mlp import MLP
from attn_lightning.models.sequence import SequenceTransformer
from attn_lightning.models.specs import (
    DetrSpec,
    MLPSpec,
    PixelSpec,
    SequenceSpec,
    TransformerSpec,
    VitSpec,
    as_spec,
    spec_dict,
    spec_fields,
)


def test_as_spec_takes_a_spec_a_mapping_or_none():
    spec = SequenceSpec(d_model=32)
    assert as_spec(SequenceSpec, spec) is spec
    assert as_spec(SequenceSpec, {"d_model": 32}) == spec
    assert as_spec(SequenceSpec, None) == SequenceSpec()
    assert as_spec(MLPSpec, {"hidden_sizes": [8, 4]}) == MLPSpec(hidden_sizes=(8, 4))


def test_unknown_sizes_are_named_with_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown size\(s\) 'd_modl' in net \(SequenceSpec\)"):
        as_spec(SequenceSpec, {"d_modl": 3})
    allowed = "allowed: d_model, num_heads, d_ff, dropout, head_dim, num_queries"
    with pytest.raises(ValueError, match=allowed):
        as_spec(DetrSpec, {"num_layers": 3})
    with pytest.raises(ValueError, match="net must be a VitSpec or a mapping"):
        as_spec(VitSpec, 3)


def test_spec_dict_is_primitive_and_round_trips():
    saved = spec_dict(MLPSpec(hidden_sizes=(8, 4)))
    assert saved == {"hidden_sizes": [8, 4]}
    assert as_spec(MLPSpec, saved) == MLPSpec(hidden_sizes=(8, 4))
    assert as_spec(PixelSpec, spec_dict(PixelSpec(output="logistic_mixture"))).output == (
        "logistic_mixture"
    )


def test_each_model_kind_keeps_its_own_defaults():
    # The defaults the tasks had before the sizes moved into specs.
    assert (PixelSpec().positional, VitSpec().d_ff, SequenceSpec().max_len) == (
        "learned",
        128,
        1024,
    )
    assert DetrSpec().num_queries == 10 and TransformerSpec().d_ff == 256
    assert "max_len" in spec_fields(SequenceSpec) and "max_len" not in spec_fields(TransformerSpec)


def test_a_model_is_sized_by_its_spec():
    spec = TransformerSpec(d_model=16, num_heads=2, num_layers=3, d_ff=24)
    model = SequenceTransformer(spec, vocab_size=7, max_len=10, attention={"name": "softmax"})
    assert len(model.encoder.layers) == 3 and model.embed.weight.shape == (7, 16)
    assert model(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 7)
    mlp = MLP(input_size=6, hidden_sizes=MLPSpec(hidden_sizes=(5,)).hidden_sizes, num_classes=3)
    assert mlp.layer_names == ["fc1", "fc2"]


@pytest.mark.parametrize(
    ("spec_type", "field", "value", "expected"),
    [
        (SequenceSpec, "d_model", -4, "net.d_model must be >= 1, got -4"),
        (SequenceSpec, "num_layers", 0, "net.num_layers must be >= 1, got 0"),
        (TransformerSpec, "d_ff", -1, "net.d_ff must be >= 0, got -1"),
        (SequenceSpec, "max_len", 0, "net.max_len must be >= 1, got 0"),
        (PixelSpec, "num_mixtures", 0, "net.num_mixtures must be >= 1, got 0"),
        (VitSpec, "patch_size", 0, "net.patch_size must be >= 1, got 0"),
        (VitSpec, "num_heads", 0, "net.num_heads must be >= 1, got 0"),
        (DetrSpec, "num_queries", 0, "net.num_queries must be >= 1, got 0"),
        (DetrSpec, "num_decoder_layers", 0, "net.num_decoder_layers must be >= 1, got 0"),
        (DetrSpec, "num_encoder_layers", -1, "net.num_encoder_layers must be >= 0, got -1"),
        (DetrSpec, "backbone_width", 0, "net.backbone_width must be >= 1, got 0"),
        (DetrSpec, "dropout", 1.0, "net.dropout must be in [0, 1), got 1.0"),
        (SequenceSpec, "d_model", 30, "net.d_model (30) must be a multiple of net.num_heads (4)"),
        (MLPSpec, "hidden_sizes", (64, 0), "net.hidden_sizes must all be >= 1, got [64, 0]"),
        (SequenceSpec, "head_dim", 0, "net.head_dim must be >= 1, got 0"),
    ],
)
def test_bad_sizes_are_refused_by_the_spec(spec_type, field, value, expected):
    with pytest.raises(ValueError, match=re.escape(expected)):
        spec_type(**{field: value})
    with pytest.raises(ValueError, match=re.escape(expected)):  # as YAML and checkpoints give it
        as_spec(spec_type, {field: list(value) if isinstance(value, tuple) else value})


def test_zero_encoder_layers_and_no_hidden_layers_stay_allowed():
    # DETR's "no encoder" ablation; blocks without an MLP (Zoology's MQAR models); an MLP without
    # hidden layers is a linear classifier.
    assert DetrSpec(num_encoder_layers=0).num_encoder_layers == 0
    assert SequenceSpec(d_ff=0).d_ff == DetrSpec(d_ff=0).d_ff == 0
    assert MLPSpec(hidden_sizes=()).hidden_sizes == ()


def test_head_dim_sets_the_heads_apart_from_the_width():
    # one head of 32 features in a width-16 model: the projections map 16 to 32 and back
    spec = SequenceSpec(d_model=16, num_heads=1, head_dim=32, num_layers=2, d_ff=8)
    assert as_spec(SequenceSpec, spec_dict(spec)) == spec  # as checkpoints keep it
    model = SequenceTransformer(spec, vocab_size=7, max_len=10, attention={"name": "linear"})
    assert model(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 7)
    assert model.encoder.state_sizes(seq_len=5) == (32 * 32 + 32,) * 2
    # with it, d_model need not divide by num_heads; without Q and K projections it must be I
    assert SequenceSpec(d_model=30, num_heads=4, head_dim=8).head_dim == 8
    with pytest.raises(ValueError, match=re.escape("net.head_dim (8) × net.num_heads (4) must")):
        SequenceSpec(d_model=30, num_heads=4, head_dim=8, projections="no_qk")
    assert SequenceSpec(d_model=32, num_heads=4, head_dim=8, projections=False).head_dim == 8
