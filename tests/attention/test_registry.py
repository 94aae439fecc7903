"""The registry: one table of names, build by name or spec mapping, one spec parser."""

from __future__ import annotations

import pytest

from attn_lightning.attention import (
    Attention,
    attention_class,
    attention_options,
    available_attentions,
    build_attention,
    parse_attention_spec,
)


def test_every_name_builds_its_class():
    for name in available_attentions():
        attn = build_attention(name, head_dim=8)
        assert isinstance(attn, Attention) and type(attn) is attention_class(name)
        assert attn.name == name


def test_mapping_and_keywords_build_the_same_backend():
    a = build_attention({"name": "performer", "num_features": 16}, head_dim=8)
    b = build_attention("performer", head_dim=8, num_features=16)
    assert (a.num_features, type(a)) == (b.num_features, type(b))
    # Keywords override the mapping's entries; the mapping is not modified.
    spec = {"name": "performer", "num_features": 16}
    c = build_attention(spec, head_dim=8, num_features=32)
    assert c.num_features == 32 and spec == {"name": "performer", "num_features": 16}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"num_features": 3}, "must be a dict with a 'name' key"),
        ({"name": "performr"}, r"unknown attention 'performr'; available: .*performer"),
        ({"name": "performer", "num_feature": 8}, r"unknown option\(s\) 'num_feature'.*allowed"),
    ],
)
def test_bad_specs_name_what_is_allowed(spec, message):
    with pytest.raises(ValueError, match=message):
        build_attention(spec, head_dim=8)


def test_options_exclude_head_dim_and_carry_defaults():
    options = attention_options("performer")
    assert "head_dim" not in options and options["num_features"] == 256


def test_parse_spec():
    assert parse_attention_spec("softmax") == {"name": "softmax"}
    assert parse_attention_spec("performer:num_features=64,kernel=hyperbolic") == {
        "name": "performer",
        "num_features": 64,
        "kernel": "hyperbolic",
    }
    assert parse_attention_spec("performer:eps=1e-6")["eps"] == pytest.approx(1e-6)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("False", False), ("none", None), ("null", None), ("3", 3), ("0.5", 0.5)],
)
def test_parse_spec_values(raw, expected):
    value = parse_attention_spec(f"linear:x={raw}")["x"]
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("spec", ["performer:num_features", ":a=1", "linear:=3"])
def test_malformed_specs_fail(spec):
    with pytest.raises(ValueError, match=r"no name|key=value"):
        parse_attention_spec(spec)
