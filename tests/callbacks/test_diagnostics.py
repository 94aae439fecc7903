"""Attention diagnostics: the learned polynomial's coefficients logged per layer while training."""

from __future__ import annotations

import json

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.callbacks import AttentionDiagnostics, collect_diagnostics
from attn_lightning.models.transformer import MultiHeadAttention


def test_collect_names_each_layer_and_skips_backends_without_diagnostics():
    model = torch.nn.ModuleDict(
        {
            "learned": MultiHeadAttention(
                d_model=8,
                num_heads=2,
                attention={"name": "polynomial", "degree": 2, "learned_coefficients": True},
            ),
            "plain": MultiHeadAttention(d_model=8, num_heads=2, attention={"name": "softmax"}),
        }
    )
    assert collect_diagnostics(model) == pytest.approx(
        {
            "attention/learned/a0": 1.0,
            "attention/learned/a1": 1.0,
            "attention/learned/a2": 0.5,
            "attention/learned/c": 1.0,  # the LN scale's growth, 1 at the start
        }
    )
    bare = build_attention("polysketch", head_dim=4, sketch_size=2, learned_coefficients=True)
    assert set(collect_diagnostics(bare)) == {f"attention/{k}" for k in ("a0", "a2", "a4", "c")}


def test_negative_interval_is_refused():
    with pytest.raises(ValueError, match="every_n_steps must be >= 0"):
        AttentionDiagnostics(every_n_steps=-1)


@pytest.mark.parametrize(
    "attention",
    [
        {"name": "polynomial", "degree": 4, "learned_coefficients": True},
        {"name": "polysketch", "sketch_size": 4, "learned_coefficients": True},
    ],
    ids=["exact", "linear-time"],
)
def test_fit_logs_coefficients_of_every_layer_as_they_move(fit_run, attention):
    scalars = fit_run(
        f"--model.init_args.attention={json.dumps(attention)}",
        "--attention_diagnostics.every_n_steps=2",
        "--trainer.max_steps=5",
    )
    tags = sorted(t for t in scalars if t.startswith("attention/"))
    degrees = range(5) if attention["name"] == "polynomial" else (0, 2, 4)
    keys = [*(f"a{d}" for d in degrees), "c"]
    # The reversal model: 2 layers, net.encoder.layers.<i>.attn.
    assert tags == sorted(
        f"attention/net.encoder.layers.{i}.attn/{k}" for i in range(2) for k in keys
    )
    for tag in tags:
        assert [step for step, _ in scalars[tag]] == [0, 2, 4]
    a0 = [value for _, value in scalars["attention/net.encoder.layers.0.attn/a0"]]
    assert a0[0] == pytest.approx(1.0, rel=1e-5)  # 1/0! at initialisation
    assert a0[-1] != a0[0]  # trained: the coefficient moved
