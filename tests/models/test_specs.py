"""Model specs: sizes stated once, read from a mapping (YAML, a checkpoint) with clear errors."""

from __future__ import annotations

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
    with pytest.raises(ValueError, match="allowed: d_model, num_heads, d_ff, dropout, num_queries"):
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
