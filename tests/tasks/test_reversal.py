"""The reversal task: layout of x SEP y, causality, decoding consistency, attention override."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.attention import available_attentions
from attn_lightning.tasks import SequenceReversalTask
from attn_lightning.tasks.reversal import measured_cross_entropy

SMALL = {"net": {"d_model": 16, "num_heads": 2, "num_layers": 2, "d_ff": 32, "max_len": 64}}


def task(**kwargs):
    torch.manual_seed(0)
    return SequenceReversalTask(**{**SMALL, **kwargs}).eval()


def batch(n=6, b=3, seed=0):
    x = torch.randint(10, (b, n), generator=torch.Generator().manual_seed(seed))
    return x, x.flip(dims=[1])


def test_decoder_logits_cover_the_reversed_half_causally():
    model = task()
    x, y = batch()
    logits = model(x, y)
    assert logits.shape == (3, 6, 10)
    # Position t (predicting y_{t+1}) may see x and y_1..y_t, never y_{t+1}.. .
    y2 = y.clone()
    y2[:, 3:] = (y2[:, 3:] + 1) % 10
    torch.testing.assert_close(model(x, y2)[:, :4], logits[:, :4])
    assert not torch.allclose(model(x, y2)[:, 4:], logits[:, 4:])


def test_encoder_mode_is_bidirectional():
    model = task(mode="encoder")
    x, y = batch()
    logits = model(x, y)
    assert logits.shape == (3, 6, 10)
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % 10
    assert not torch.allclose(model(x2, y)[:, 0], logits[:, 0])  # first output sees last input


def test_greedy_decoding_agrees_with_teacher_forcing_on_its_own_output():
    # If the targets are the model's own greedy output, every teacher-forced argmax must equal
    # them: the layout of forward() and of generation are the same (exact_acc == greedy exact).
    model = task().double()
    x, _ = batch(n=8)
    predicted = model.predict_reversal(x)
    assert predicted.shape == x.shape
    assert torch.equal(model(x, predicted).argmax(dim=-1), predicted)
    method = model.decode_method
    model.decode_method = "recompute"
    assert torch.equal(model.predict_reversal(x), predicted)
    model.decode_method = method


def test_sample_rows_and_predict_step():
    model = task()
    x, y = batch()
    rows = model.sample_rows({"source": x, "target": y}, 2)
    assert len(rows) == 2 and set(rows[0]) >= {"input", "target", "prediction", "correct"}
    assert rows[0]["input"] == "".join(map(str, x[0].tolist()))
    out = model.predict_step({"source": x, "target": y}, 0)
    assert out["prediction"].shape == x.shape


@pytest.mark.skipif("performer" not in available_attentions(), reason="performer not registered")
def test_attention_override_loads_checkpoint_with_other_feature_count():
    trained = task(attention={"name": "performer", "num_features": 8})
    checkpoint = {"state_dict": {k: v.clone() for k, v in trained.state_dict().items()}}
    evaluated = task(
        attention={"name": "performer", "num_features": 8},
        attention_override={"num_features": 16},
    )
    assert evaluated.attention_config == {"name": "performer", "num_features": 16}
    assert "attention_override" not in evaluated.hparams
    with pytest.warns(UserWarning, match="not loaded from the checkpoint"):
        evaluated.on_load_checkpoint(checkpoint)
    evaluated.load_state_dict(checkpoint["state_dict"])  # strict: reconciled
    torch.testing.assert_close(
        evaluated.net.embed.weight, trained.net.embed.weight
    )  # everything but the reshaped random features comes from the checkpoint
    backend = evaluated.net.encoder.layers[0].attn.backend
    assert backend.projection_matrix.shape[0] == 16


def test_errors():
    with pytest.raises(ValueError, match="unknown mode 'seq2seq'; allowed: decoder, encoder"):
        task(mode="seq2seq")
    with pytest.raises(ValueError, match="unknown decode_method 'beam'; allowed: auto, step"):
        task(decode_method="beam")
    if "optimization" in available_attentions():
        with pytest.raises(ValueError, match=r"has no causal form.*use mode='encoder'"):
            task(attention={"name": "optimization"})
    with pytest.raises(ValueError, match="unknown attention 'nope'"):
        task(attention={"name": "nope"})


def test_measured_loss_is_exact_where_float32_cross_entropy_rounds_to_zero():
    # The target's logit 20 above nine others: the true loss is log(1 + 9 e^-20) ≈ 1.85e-8, but
    # float32 rounds 1 + 1.85e-8 to 1 and the usual cross-entropy reads exactly 0.
    logits = torch.zeros(4, 10)
    logits[:, 3] = 20.0
    target = torch.full((4,), 3)
    true = math.log1p(9 * math.exp(-20.0))
    assert torch.nn.functional.cross_entropy(logits, target).item() == 0.0
    measured = measured_cross_entropy(logits, target)
    assert measured.dtype == torch.float64
    assert measured.item() == pytest.approx(true, rel=1e-12)
    assert not measured.requires_grad


def test_training_steps_on_the_float32_loss_and_reports_the_measured_one():
    model = task().train()
    x, y = batch()
    out = model.training_step({"source": x, "target": y}, 0)
    assert out["loss"].dtype == torch.float32 and out["loss"].requires_grad
    assert out["measured_loss"].dtype == torch.float64
    assert out["measured_loss"].item() == pytest.approx(out["loss"].item(), rel=1e-6)
