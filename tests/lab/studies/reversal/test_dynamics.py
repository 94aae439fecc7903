"""The reversal report's scalar arithmetic: steps to a threshold, spikes, gradients at spikes."""

from __future__ import annotations

import pytest

from lab.studies.reversal.dynamics import (
    best_validation,
    max_grad_norm,
    spike_gradients,
    spike_steps,
    steps_to_threshold,
)
from tests.lab.studies.reversal.fake_runs import SEED0, SEED1, SEED2, fake_scalars


def test_steps_to_threshold_is_the_first_logged_step_at_or_above():
    assert steps_to_threshold(SEED0, 0.99) == 149
    assert steps_to_threshold(SEED1, 0.99) == 99
    assert steps_to_threshold(SEED0, 0.98) == 99  # ≥, not >
    assert steps_to_threshold(SEED2, 0.99) is None
    assert steps_to_threshold({}, 0.99) is None


def test_spike_steps_none_without_flags_and_suffixed_tags_are_found():
    assert spike_steps(SEED0) == [130, 160]
    assert spike_steps(SEED1) == []
    assert spike_steps({}) is None
    assert spike_steps({"train/loss_spike_step": [(0, 0.0), (7, 1.0)]}) == [7]


def test_spike_gradients_ratio_group_and_lag():
    first, second = spike_gradients(SEED0)
    # Ten gradient logs, eight of them 1.0: the run medians are 1.0.
    assert (first.spike_step, first.grad_step, first.lag) == (130, 120, 10)
    assert (first.norm, first.ratio) == (10.0, 10.0)
    assert (first.group, first.group_ratio) == ("attention", 50.0)
    assert (second.grad_step, second.lag, second.ratio) == (160, 0, 4.0)
    assert (second.group, second.group_ratio) == ("feedforward", 8.0)
    assert spike_gradients(SEED1) == []


def test_spike_gradients_group_ratio_is_relative_to_the_groups_own_median():
    # Embedding grads are tiny throughout; 0.05 at the spike is 5x its median, and beats the
    # attention norm that is larger in absolute terms but only 2x its median.
    grads = {s: {"embedding": 0.01} for s in range(0, 200, 20)}
    grads[100] = {"embedding": 0.05, "attention": 2.0}
    (record,) = spike_gradients(fake_scalars([0.1], spikes=[105], grads=grads))
    assert record.group == "embedding" and record.group_ratio == pytest.approx(5.0)


def test_max_grad_norm_is_the_largest_logged_global_norm():
    assert max_grad_norm(SEED0) == 10.0 and max_grad_norm(SEED2) == 3.0
    assert max_grad_norm({}) is None


def test_best_validation_is_the_first_lowest_loss_counted_in_optimiser_steps():
    assert best_validation(SEED0) == (100, pytest.approx(0.05))  # logged at 99; tie at 149
    assert best_validation(SEED1) is None  # no val/loss logged
    diverged = {"val/loss": [(9, float("nan")), (19, 0.3), (29, float("inf"))]}
    assert best_validation(diverged) == (20, 0.3)
