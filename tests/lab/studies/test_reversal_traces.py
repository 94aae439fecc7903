"""What a reversal run's curves say (steps to a threshold, spikes, the gradients at them, final
loss, bursts, coefficients) on hand-made curves, and the runs read from records: every number
here is known by construction. The pages built from the committed records are checked byte for
byte by ``tests/docs/test_plan_pages.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_lightning.records.run_files import write_record
from lab.results.records import Scalars
from lab.studies.reversal import chosen_runs
from lab.studies.reversal_traces import (
    GROUPS,
    best_validation,
    burst_rows,
    coefficient_series,
    final_loss,
    max_grad_norm,
    spike_gradients,
    spike_steps,
    steps_to_threshold,
    thin,
)
from lab.studies.trajectories import write_trajectories


def fake_scalars(
    val: list[float],
    spikes: list[int],
    grads: dict[int, dict[str, float]] | None = None,
    val_loss: list[float] | None = None,
) -> Scalars:
    """200 steps as the study logs them: ``val/token_acc`` (and ``val/loss``) at steps 49, 99,
    ...; the spike flags every step; every gradient norm 1.0 at steps 0, 20, ... unless ``grads``
    (step -> {"global_norm" or a group: norm}) says otherwise."""
    grads = grads or {}
    scalars: Scalars = {"val/token_acc": [(49 + 50 * i, v) for i, v in enumerate(val)]}
    if val_loss is not None:
        scalars["val/loss"] = [(49 + 50 * i, v) for i, v in enumerate(val_loss)]
    scalars["train/loss_spike"] = [(s, 1.0 if s in spikes else 0.0) for s in range(200)]
    for name in ("global_norm", *GROUPS):
        scalars[f"grad/{name}"] = [(s, grads.get(s, {}).get(name, 1.0)) for s in range(0, 200, 20)]
    return scalars


# Seed 0 crosses 0.99 at step 149; spikes at 130 (gradient logged at 120: global norm 10x the
# run median, attention 50x its median) and 160 (logged at that step: 4x, feedforward 8x); its
# validation loss is lowest (twice) at logged steps 99 and 149: the best checkpoint is step 100.
SEED0 = fake_scalars(
    [0.5, 0.98, 0.995, 0.999],
    val_loss=[0.5, 0.05, 0.05, 0.2],
    spikes=[130, 160],
    grads={
        120: {"global_norm": 10.0, "attention": 50.0, "feedforward": 2.0},
        160: {"global_norm": 4.0, "feedforward": 8.0},
    },
)
SEED1 = fake_scalars([0.7, 0.991, 0.999, 0.999], spikes=[])
SEED2 = fake_scalars([0.2, 0.3, 0.35, 0.4], spikes=[100], grads={100: {"global_norm": 3.0}})


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


def test_final_loss_is_the_mean_over_the_last_steps():
    points = {"train/loss_step": [(19, 4.0), (39, 2.0), (59, 1.0)]}
    assert final_loss(points, tail=40) == pytest.approx(1.5)  # steps 39 and 59
    assert final_loss(points, tail=1000) == pytest.approx(7 / 3)
    assert final_loss({}, tail=10) is None


def test_spikes_less_than_the_gap_apart_in_one_run_are_one_burst():
    def spike(variant, step, loss, grad):
        at_spike = ("grad_at_spike", "grad_at_spike_over_median", "grad_before_spike_over_median")
        row = {"variant": variant, "seed": 0, "step": step, "loss": loss}
        row |= {"loss_over_median": loss * 10, "grad_step": step - 5}
        return row | {"grad_norm_over_recent": grad} | dict.fromkeys(at_spike)

    spikes = [spike("a", 10, 0.1, 0.5), spike("a", 110, 0.3, 9.0), spike("a", 211, 0.2, 1.0)]
    spikes.append(spike("b", 215, 0.05, 2.0))  # another run: its own burst, however close
    bursts = burst_rows(spikes, gap=100)
    assert [(b["variant"], b["first_step"], b["last_step"], b["spikes"]) for b in bursts] == [
        ("a", 10, 110, 2),
        ("a", 211, 211, 1),
        ("b", 215, 215, 1),
    ]
    first = bursts[0]
    assert (first["max_loss"], first["max_over_median"]) == (0.3, 3.0)
    # The gradient is the first spike's: what came before the loss rose, not inside the burst.
    assert (first["first_grad_step"], first["first_grad_norm_over_recent"]) == (5, 0.5)
    assert burst_rows([]) == []


def test_thin_keeps_the_first_point_of_each_bucket_and_the_last():
    points = [(s, float(s)) for s in range(0, 1001, 50)]
    assert [s for s, _ in thin(points, 250)] == [0, 250, 500, 750, 1000]
    assert [s for s, _ in thin(points[:-1], 300)] == [0, 300, 600, 900, 950]
    with pytest.raises(ValueError, match="every must be >= 1"):
        thin(points, 0)


def test_coefficients_are_ordered_by_layer_then_index_then_the_scale():
    tags = ["attention/l1/c", "attention/l1/a10", "attention/l1/a2", "attention/l0/a1", "x/loss"]
    found = coefficient_series({tag: [(0, 1.0)] for tag in tags})
    assert list(found) == [("l0", "a1"), ("l1", "a2"), ("l1", "a10"), ("l1", "c")]


def _record(root: Path, variant: str, seed: int, status: str, loss: float) -> None:
    folder = root / f"{variant}-s{seed}"
    folder.mkdir(parents=True)
    tags = {"study": "poly", "variant": variant, "seed": seed}
    metrics = {"test": {"test/loss": loss, "test/token_acc": 1.0}} if status == "ok" else {}
    record = {"schema": 1, "experiment": "poly", "run": folder.name, "seed": seed, "tags": tags}
    write_record(folder, record | {"status": status, "global_step": 200, "metrics": metrics})


def test_a_run_recorded_twice_keeps_its_finished_record(tmp_path):
    # A study continued elsewhere: softmax seed 1 running in one folder, ok in another.
    _record(tmp_path / "a", "softmax", 1, "running", 0.0)
    _record(tmp_path / "b", "softmax", 1, "ok", 0.002)
    for roots in ([tmp_path / "a", tmp_path / "b"], [tmp_path / "b", tmp_path / "a"]):
        (run,) = chosen_runs(roots, None)[1]
        assert (run.status, run.value("test/loss")) == ("ok", 0.002)


def test_a_folder_without_records_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'nope'} does not exist"):
        chosen_runs([tmp_path / "nope"], None)
    with pytest.raises(FileNotFoundError, match=f"runs folder {tmp_path} holds no run record"):
        write_trajectories([tmp_path], tmp_path / "x", command="python -m ...")
