"""Gradient tracking: group norms against a hand computation, the loss-spike detector on a known
sequence, and a tiny ``train.py fit`` whose TensorBoard run holds the scalars at the right steps."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from attn_lightning.callbacks import GradientTracker, LossSpikeDetector, ParameterGroups
from attn_lightning.models.multihead import MultiHeadAttention
from attn_lightning.models.positional import LearnedPositionalEncoding
from attn_lightning.models.transformer import FeedForward

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


def test_spike_rows_carry_the_gradient_of_the_step_and_of_the_one_before():
    detector = LossSpikeDetector(factor=3.0, window=2)
    losses = [1.0, 1.0, 1.0, 5.0, 1.0]
    norms = [2.0, 4.0, 8.0, 30.0, None]  # no gradient known at step 4
    for step, (loss, norm) in enumerate(zip(losses, norms, strict=True)):
        detector.update(step, torch.tensor(loss), None if norm is None else torch.tensor(norm))
    rows = detector.flush()
    assert [r.step for r in rows if r.flag] == [3]
    spike = rows[3]
    # Median of the two norms before (lower middle: 4), the step's own 30 and the previous 8.
    assert (spike.grad_norm, spike.grad_ratio, spike.prior_grad_ratio) == (30.0, 7.5, 2.0)
    assert math.isnan(rows[0].grad_ratio) and math.isnan(rows[1].grad_ratio)  # window filling
    assert rows[2].grad_ratio == pytest.approx(8.0 / 2.0)
    # A step without a norm: NaN for its own, the previous step's still known (30 / 8); the
    # window then restarts (consecutive steps only).
    assert math.isnan(rows[4].grad_norm) and math.isnan(rows[4].grad_ratio)
    assert rows[4].prior_grad_ratio == pytest.approx(30.0 / 8.0)
    detector.update(5, torch.tensor(1.0), torch.tensor(3.0))
    assert math.isnan(detector.flush()[0].grad_ratio)


def test_a_resumed_tracker_continues_both_windows_and_the_count():
    def feed(tracker, steps):
        for step in steps:
            loss = 10.0 if step in (3, 7) else 1.0
            tracker.spikes.update(step, torch.tensor(loss), torch.tensor(1.0 + step))
        return tracker.spikes.flush()

    whole = GradientTracker(spike_window=2)
    reference = feed(whole, range(10))
    first = GradientTracker(spike_window=2)
    feed(first, range(5))
    resumed = GradientTracker(spike_window=2)
    resumed.load_state_dict(first.state_dict())
    assert [tuple(r) for r in feed(resumed, range(5, 10))] == [tuple(r) for r in reference[5:]]
    assert resumed.spikes.count == whole.spikes.count == 2


def test_global_norm_stays_on_the_device_and_matches_the_logged_one():
    torch.manual_seed(0)
    model = Tiny()
    groups = ParameterGroups(model)
    assert groups.global_norm() is None
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    norm = groups.global_norm()
    assert isinstance(norm, torch.Tensor) and norm.dim() == 0
    assert float(norm) == pytest.approx(groups.norms()["global_norm"], rel=1e-6)
    model.head.bfloat16()  # bf16 weights and grads: not the fused float32 path
    model.head.weight.grad = torch.randn_like(model.head.weight)
    assert float(groups.global_norm()) == pytest.approx(groups.norms()["global_norm"], rel=1e-6)


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
        "--gradient_tracker.every_n_steps=1",
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
    # The gradient at each spike: that step's global norm (logged every step here), over the
    # previous step's (the window of 1), and the previous step's over itself.
    norms = dict(scalars["grad/global_norm"])
    assert [s for s, _ in scalars["grad/norm_at_spike"]] == [1, 2, 3, 4]
    for step, norm in scalars["grad/norm_at_spike"]:
        assert norm == pytest.approx(norms[step], rel=1e-6)
    for step, ratio in scalars["grad/norm_at_spike_ratio"]:
        assert ratio == pytest.approx(norms[step] / norms[step - 1], rel=1e-5)
    assert [r for _, r in scalars["grad/norm_before_spike_ratio"]] == pytest.approx([1.0] * 4)


def test_fit_with_every_n_steps_zero_logs_nothing(fit_run):
    scalars = fit_run("--gradient_tracker.every_n_steps=0")
    assert not any(tag.startswith("grad/") or "loss_spike" in tag for tag in scalars)
    assert "train/loss_step" in scalars
