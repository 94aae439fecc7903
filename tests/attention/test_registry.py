"""The registry: one literal table of names, user registration, build by name or spec mapping,
one spec parser, and the deprecated spellings it still accepts."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pytest
import torch

from attn_lightning.attention import (
    ATTENTIONS,
    Attention,
    attention_class,
    attention_options,
    available_attentions,
    build_attention,
    naive,
    parse_attention_spec,
    register_attention,
    registry,
    resolve_attention,
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


# ---------------------------------------------------------------------------- the table
def test_the_table_is_one_literal_dict_of_classes_named_by_their_key():
    # Literal in the source: a dict display with string keys, not filled in by side effects.
    tree = ast.parse(inspect.getsource(registry))
    (table,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "ATTENTIONS"
    ]
    assert isinstance(table, ast.Dict)
    names = [key.value for key in table.keys if isinstance(key, ast.Constant)]
    assert names == sorted(names) and set(names) == set(ATTENTIONS)
    for name, cls in ATTENTIONS.items():
        assert issubclass(cls, Attention) and cls.name == name
    assert not any(
        hasattr(sys.modules[cls.__module__], "register_attention") for cls in ATTENTIONS.values()
    )


def test_every_registered_backend_has_a_naive_reference_that_a_test_uses():
    """A backend = its own file + one ATTENTIONS row + one float64 reference ``naive_<name>``."""
    tests = "".join(p.read_text() for p in Path(__file__).parent.rglob("test_*.py"))
    modules = [cls.__module__ for cls in ATTENTIONS.values()]
    assert len(set(modules)) == len(modules), f"backends sharing a module: {modules}"
    for name in ATTENTIONS:
        reference = getattr(naive, f"naive_{name}", None)
        assert callable(reference), f"attention {name!r} has no naive_{name} in attention/naive/"
        assert re.search(rf"\bnaive_{name}\(", tests), f"no test compares {name!r} to naive_{name}"


def test_register_attention_adds_a_user_backend(monkeypatch):
    monkeypatch.setattr(registry, "ATTENTIONS", dict(registry.ATTENTIONS))

    @register_attention("scaled_mean")
    class ScaledMean(Attention):
        def __init__(self, *, head_dim: int, factor: float = 2.0) -> None:
            super().__init__(head_dim=head_dim)
            self.factor = factor

        def _attend(self, q, k, v, *, causal, key_padding_mask, grid):
            return self.factor * v.mean(dim=2, keepdim=True).expand(*q.shape[:3], v.shape[-1])

    assert ScaledMean.name == "scaled_mean" and "scaled_mean" in available_attentions()
    assert attention_options("scaled_mean") == {"factor": 2.0}
    attn = build_attention({"name": "scaled_mean", "factor": 3.0}, head_dim=4)
    assert isinstance(attn, ScaledMean) and attn.factor == 3.0
    v = torch.ones(1, 1, 5, 2)
    assert torch.equal(attn(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 5, 4), v), 3 * v[:, :, :3])
    with pytest.raises(ValueError, match="already registered"):
        register_attention("softmax")(ScaledMean)
    register_attention("scaled_mean")(ScaledMean)  # the same class again: allowed


def test_the_retired_form_option_is_an_unknown_option_in_one_line():
    # {name: polynomial, form: sketch} is spelt {name: polysketch, sketch: random, norm: fixed}.
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'form' for attention 'polynomial'"):
        build_attention({"name": "polynomial", "form": "sketch"}, head_dim=8)


def test_resolve_attention():
    base = {"name": "performer", "num_features": 64}
    assert resolve_attention(None, None) == {"name": "softmax"}
    assert resolve_attention(base, {"num_features": 16}) == {
        "name": "performer",
        "num_features": 16,
    }
    assert resolve_attention(base, {"name": "linear"}) == {"name": "linear"}
    assert resolve_attention(base, {"name": "performer"}) == base
