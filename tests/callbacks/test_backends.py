"""Callbacks on the attention backends: feature redraws rank-independent, on schedule, reaching
Performer layers; the learned polynomial's coefficients logged per layer while training."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from attn_lightning.attention import available_attentions, build_attention
from attn_lightning.callbacks import (
    AttentionDiagnostics,
    FeatureRedraw,
    collect_diagnostics,
    redraw_all_features,
    redraw_generator,
)
from attn_lightning.models import BlockSizes, TransformerEncoder
from attn_lightning.models.multihead import MultiHeadAttention


class Drawn(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.zeros(4))

    def redraw_features(self, generator):
        self.w.copy_(torch.randn(4, generator=generator))


def test_redraw_depends_only_on_seed_and_step():
    a, b = nn.Sequential(Drawn(), Drawn()), nn.Sequential(Drawn(), Drawn())
    b[0].w.fill_(3.0)  # different state before the redraw, as on an unsynchronised rank
    assert redraw_all_features(a, seed=1, step=1000) == 2
    redraw_all_features(b, seed=1, step=1000)
    torch.testing.assert_close(a[0].w, b[0].w)
    torch.testing.assert_close(a[1].w, b[1].w)
    assert not torch.equal(a[0].w, a[1].w)  # layers get different draws
    before = a[0].w.clone()
    redraw_all_features(a, seed=1, step=2000)
    assert not torch.equal(before, a[0].w)
    assert redraw_generator(0, 5).initial_seed() != redraw_generator(1, 5).initial_seed()


class FakeTrainer:
    def __init__(self, step):
        self.global_step = step


def test_feature_redraw_schedule():
    module = nn.Sequential(Drawn())
    callback = FeatureRedraw(every_n_steps=10, seed=0)
    for step, should in [(0, False), (5, False), (10, True), (10, False), (20, True)]:
        before = module[0].w.clone()
        callback.on_train_batch_start(FakeTrainer(step), module, None, 0)
        assert (not torch.equal(before, module[0].w)) == should, step
    with pytest.raises(ValueError, match="every_n_steps must be >= 0"):
        FeatureRedraw(every_n_steps=-1)


@pytest.mark.skipif("performer" not in available_attentions(), reason="performer not registered")
def test_redraw_reaches_performer_layers():
    torch.manual_seed(0)
    sizes = BlockSizes(d_model=8, num_heads=2, d_ff=8)
    performer = {"name": "performer", "num_features": 4}
    enc = TransformerEncoder(sizes, num_layers=2, attention=performer)
    torch.manual_seed(1)
    other = TransformerEncoder(sizes, num_layers=2, attention=performer)
    assert redraw_all_features(enc, seed=0, step=7) == 2
    redraw_all_features(other, seed=0, step=7)
    for la, lb in zip(enc.layers, other.layers, strict=True):
        torch.testing.assert_close(
            la.attn.backend.projection_matrix, lb.attn.backend.projection_matrix
        )


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
