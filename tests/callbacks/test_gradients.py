"""Gradient tracking: group norms against a hand computation, the loss-spike detector on a known
sequence, and a tiny ``train.py fit`` whose TensorBoard run holds the scalars at the right steps."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from attn_lightning.callbacks import GradientTracker, LossSpikeDetector, ParameterGroups
from attn_lightning.models.positional import LearnedPositionalEncoding
from attn_lightning.models.transformer import FeedForward, MultiHeadAttention

ROOT = Path(__file__).resolve().parents[2]


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.pos = LearnedPositionalEncoding(4, max_len=3)
        # A backend with its own parameter: it belongs to attention with the projections.
        self.mixer = MultiHeadAttention(
            d_model=4,
            num_heads=2,
            attention={"name": "polynomial", "degree": 2, "learned_coefficients": True},
        )
        self.mlp = FeedForward(d_model=4, d_ff=8)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 5)


# The hand assignment, by attribute name (the code under test assigns by module type).
HAND_GROUPS = {
    "embed": "embedding",
    "pos": "embedding",
    "mixer": "attention",
    "mlp": "feedforward",
    "norm": "other",
    "head": "other",
}


def test_group_norms_match_a_hand_computation():
    torch.manual_seed(0)
    model = Tiny()
    names = [name for name, _ in model.named_parameters()]
    assert "mixer.backend.coefficient_logits" in names
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    model.norm.bias.grad = None  # a parameter without a grad is left out, not counted as zero
    squares = dict.fromkeys(("attention", "feedforward", "embedding", "other"), 0.0)
    for name, param in model.named_parameters():
        if param.grad is not None:
            squares[HAND_GROUPS[name.split(".")[0]]] += float(param.grad.double().pow(2).sum())

    norms = ParameterGroups(model).norms()

    assert set(norms) == {"global_norm", *squares}
    for group, square in squares.items():
        assert norms[group] == pytest.approx(math.sqrt(square), rel=1e-5), group
    assert norms["global_norm"] == pytest.approx(math.sqrt(sum(squares.values())), rel=1e-5)


def test_groups_without_grads_are_not_reported():
    model = Tiny()
    assert ParameterGroups(model).norms() == {}
    model.head.weight.grad = torch.full_like(model.head.weight, 2.0)  # 20 entries of 2
    norms = ParameterGroups(model).norms()
    assert norms == pytest.approx({"global_norm": math.sqrt(80.0), "other": math.sqrt(80.0)})


def test_spike_detector_flags_a_known_step_once_the_window_is_full():
    detector = LossSpikeDetector(factor=3.0, window=4)
    # Step 1 is huge but the window is not full yet; step 6 is > 3 × median 1; step 8 is 2.9 ×.
    losses = [1.0, 50.0, 1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 2.9, 1.0, 9.0]
    for step, loss in enumerate(losses):
        detector.update(step, torch.tensor(loss))
        if step == 7:
            first = detector.flush()
    rows = first + detector.flush()

    assert [r.step for r in rows] == list(range(len(losses)))
    assert [r.step for r in rows if r.flag] == [6, 10]
    assert [r.total for r in rows] == [0] * 6 + [1] * 4 + [2]
    assert [r.loss for r in rows] == pytest.approx(losses)
    # The ratio to the window's median (lower middle of an even window): 0 until it is full.
    assert [r.ratio for r in rows] == pytest.approx([0.0] * 4 + [1, 1, 4, 1, 2.9, 1, 9])
    assert detector.flush() == []


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="every_n_steps"):
        GradientTracker(every_n_steps=-1)
    with pytest.raises(ValueError, match="window"):
        LossSpikeDetector(window=0)


@pytest.mark.parametrize("accumulate", [1, 2])
def test_fit_logs_gradient_norms_and_spike_flags(fit_run, accumulate):
    # A tiny clip threshold: the logged norms are the unclipped ones, far above it.
    scalars = fit_run(
        "--gradient_tracker.every_n_steps=2",
        "--trainer.gradient_clip_val=1e-6",
        f"--trainer.accumulate_grad_batches={accumulate}",
    )

    for tag in ("grad/global_norm", "grad/attention", "grad/feedforward", "grad/embedding"):
        assert [step for step, _ in scalars[tag]] == [0, 2, 4], tag
        assert all(1e-3 < value < math.inf for _, value in scalars[tag]), tag
    # The reversal model has output norms and a head: "other" is there too.
    assert [step for step, _ in scalars["grad/other"]] == [0, 2, 4]
    # Every step gets a flag (the last ones written at the end of training); the window of 50
    # never fills in 5 steps, so nothing is a spike.
    assert scalars["train/loss_spike"] == [(s, 0.0) for s in range(5)]
    assert scalars["train/loss_spikes"] == [(s, 0.0) for s in range(5)]
    # Logged beside train/loss_step at the same step indices.
    assert {s for s, _ in scalars["train/loss_step"]} == set(range(5))


@pytest.mark.parametrize("accumulate", [1, 2])
def test_fit_logs_each_spike_with_its_loss_and_ratio(fit_run, accumulate):
    # window 1, factor 1e-9: every step after the first is a "spike" against the step before it.
    # The loss watched is the task's measured (float64) one, the step's mean over its batches.
    scalars = fit_run(
        "--gradient_tracker.spike_window=1",
        "--gradient_tracker.spike_factor=1e-9",
        f"--trainer.accumulate_grad_batches={accumulate}",
    )
    losses = dict(scalars["train/loss_step"])
    assert [s for s, flag in scalars["train/loss_spike"] if flag] == [1, 2, 3, 4]
    assert [s for s, _ in scalars["train/loss_at_spike"]] == [1, 2, 3, 4]
    # One batch a step: the logged loss itself. Two: their mean, close to either batch's loss at
    # this stage (≈ 2.3 each); a sum would be twice it.
    rel = 1e-6 if accumulate == 1 else 0.2
    for step, loss in scalars["train/loss_at_spike"]:
        assert loss == pytest.approx(losses[step], rel=rel)
    if accumulate == 1:
        for step, ratio in scalars["train/loss_spike_ratio"]:
            assert ratio == pytest.approx(losses[step] / losses[step - 1], rel=1e-5)


def test_fit_with_every_n_steps_zero_logs_nothing(fit_run):
    scalars = fit_run("--gradient_tracker.every_n_steps=0")
    assert not any(tag.startswith("grad/") or "loss_spike" in tag for tag in scalars)
    assert "train/loss_step" in scalars
