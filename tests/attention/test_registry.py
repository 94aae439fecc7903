"""The registry: one literal table of names, user registration, build by name or spec mapping,
one spec parser, and the deprecated spellings it still accepts."""

from __future__ import annotations

import ast
import inspect
import re
import sys
import warnings
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
    upgrade_attention_spec,
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
        assert callable(reference), f"attention {name!r} has no naive_{name} in naive.py"
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


def test_a_backend_written_before_grid_still_works_and_is_told_once(monkeypatch):
    monkeypatch.setattr(registry, "ATTENTIONS", dict(registry.ATTENTIONS))
    with pytest.warns(
        FutureWarning, match=r"OldMean._attend has no 'grid' argument; write"
    ) as seen:

        @register_attention("old_mean")
        class OldMean(Attention):
            def _attend(self, q, k, v, *, causal, key_padding_mask):  # the old signature
                return v.mean(dim=2, keepdim=True).expand(*q.shape[:3], v.shape[-1])

    assert len(seen) == 1
    attn = build_attention("old_mean", head_dim=4)
    q, k, v = torch.zeros(1, 1, 6, 4), torch.zeros(1, 1, 6, 4), torch.arange(6.0).view(1, 1, 6, 1)
    for grid in (None, (2, 3)):
        torch.testing.assert_close(attn(q, k, v, grid=grid), torch.full((1, 1, 6, 1), 2.5))
    with pytest.raises(ValueError, match="grid"):
        attn(q, k, v, grid=(2, 2))  # checked by the base class all the same


# ---------------------------------------------------------------------------- old spellings
OLD_SPELLINGS = {  # id -> (old spec, today's spec, the spelling the warning names)
    "sketch": (
        {"name": "polynomial", "form": "sketch", "degree": 4, "sketch_size": 8},
        {"name": "polysketch", "sketch": "random", "norm": "fixed", "degree": 4, "sketch_size": 8},
        "{name: polysketch, sketch: random, norm: fixed, ...}",
    ),
    "learned": (
        {"name": "polynomial", "form": "learned", "sketch_size": 8},
        {
            "name": "polysketch",
            "sketch": "learned",
            "norm": "fixed",
            "sketch_levels": 1,
            "sketch_bias": True,
            "sketch_size": 8,
        },
        "{name: polysketch, sketch: learned, norm: fixed, sketch_levels: 1, sketch_bias: true, "
        "...}",
    ),
    "exact": (
        {"name": "polynomial", "form": "exact", "degree": 6},
        {"name": "polynomial", "norm": "fixed", "degree": 6},
        "{name: polynomial, norm: fixed, ...}",
    ),
}


@pytest.mark.parametrize("case", OLD_SPELLINGS)
def test_deprecated_polynomial_forms_warn_and_build_the_new_spelling(case):
    old, new, spelling = OLD_SPELLINGS[case]
    frozen = dict(old)
    torch.manual_seed(0)
    with pytest.warns(FutureWarning, match=re.escape(spelling)) as record:
        attn = build_attention(old, head_dim=8)
    assert len(record) == 1 and f"form: {old['form']}" in str(record[0].message)
    assert record[0].filename == __file__  # points at the caller, not at the registry
    assert old == frozen  # the saved hyper-parameters are not rewritten in place
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling is silent
        want = build_attention(new, head_dim=8)
    assert type(attn) is attention_class(new["name"]) and repr(attn) == repr(want)
    for key, value in want.state_dict().items():  # same keys, same first draw
        torch.testing.assert_close(attn.state_dict()[key], value, rtol=0, atol=0)
    options = {key: value for key, value in old.items() if key != "name"}
    with pytest.warns(FutureWarning, match=re.escape(spelling)):  # as keyword options
        assert type(build_attention("polynomial", head_dim=8, **options)) is type(attn)
    with pytest.warns(FutureWarning, match=re.escape(spelling)):
        assert upgrade_attention_spec(old) == new


def test_deprecated_sketch_state_dict_keys_load_into_polysketch():
    # An old checkpoint of {name: polynomial, form: sketch} stored its sketch as sketch.s1/s2.
    torch.manual_seed(1)
    new = build_attention("polysketch", head_dim=8, sketch_size=4, norm="fixed")
    with pytest.warns(FutureWarning):
        old = build_attention(
            {"name": "polynomial", "form": "sketch", "sketch_size": 4}, head_dim=8
        )
    assert set(old.state_dict()) == {"sketch.s1", "sketch.s2"}
    old.load_state_dict(new.state_dict())
    q = torch.randn(1, 2, 5, 8)
    torch.testing.assert_close(old(q, q, q[..., :3]), new(q, q, q[..., :3]), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"form": "fast"}, "unknown form 'fast'.*allowed: exact, sketch, learned"),
        ({"form": "exact", "sketch_size": 32}, r"'sketch_size'.*option of polysketch"),
        ({"form": "exact", "chunk_size": 16}, r"unknown option\(s\) 'chunk_size'"),
        ({"form": "sketch", "degree": 6}, "sketch='random' supports degree 2, 4, got degree=6"),
        ({"form": "learned", "degree": 2}, "sketch='learned' supports degree 4, got degree=2"),
        ({"form": "learned", "learned_coefficients": True}, "learned_coefficients=True needs"),
    ],
    ids=str,
)
def test_deprecated_spellings_still_fail_clearly(spec, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(ValueError, match=message):
            build_attention({"name": "polynomial", **spec}, head_dim=8)


def test_resolve_attention():
    base = {"name": "performer", "num_features": 64}
    assert resolve_attention(None, None) == {"name": "softmax"}
    assert resolve_attention(base, {"num_features": 16}) == {
        "name": "performer",
        "num_features": 16,
    }
    assert resolve_attention(base, {"name": "linear"}) == {"name": "linear"}
    assert resolve_attention(base, {"name": "performer"}) == base
