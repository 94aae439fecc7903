"""The long runs' traces from run records: final loss, spikes with their size and gradient,
learned coefficients, on fake records whose every number is known (fresh ones, holding every
logged point, and one converted from the CSVs written before records)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from attn_lightning.records.files import read_csv
from attn_lightning.records.run_files import write_curves, write_record, write_spikes
from lab.studies.reversal.traces import (
    burst_rows,
    coefficient_series,
    final_loss,
    thin,
)
from lab.studies.reversal.trajectories import write_trajectories

LEARNED = "polynomial_degree-4_learned_coefficients-true"
LAYERS = ("net.decoder.layers.0.attn", "net.decoder.layers.1.attn")
GROUPS = ("attention", "feedforward", "embedding", "other")
NAN = math.nan


def _scalars(spikes: dict[int, float], grads: dict[int, float], loss: float = 2.0) -> dict:
    # 200 steps as the study logs them: the loss and every gradient norm every 20 steps (norm
    # 1.0 unless in ``grads``), the spike flags every step.
    scalars: dict[str, list[tuple[int, float]]] = {
        "train/loss_step": [(s, loss) for s in range(19, 200, 20)],
        "train/loss_spike": [(s, float(s in spikes)) for s in range(200)],
    }
    for name in ("global_norm", *GROUPS):
        scalars[f"grad/{name}"] = [(s, grads.get(s, 1.0)) for s in range(0, 200, 20)]
    return scalars


def _record(
    root: Path,
    variant: str,
    seed: int,
    scalars: dict,
    spikes: dict[int, tuple[float, ...]] | None,
    *,
    test_loss: float = 0.001,
    status: str = "ok",
) -> Path:
    """A run record folder under ``root``: ``scalars`` as its curves.csv, ``spikes`` (step ->
    loss, ratio, total, grad_norm, grad_ratio, prior_grad_ratio) as its spikes.csv (None: none)."""
    folder = root / f"{variant}-s{seed}"
    folder.mkdir(parents=True)
    record: dict[str, Any] = {
        "schema": 1,
        "experiment": "poly",
        "run": folder.name,
        "seed": seed,
        "tags": {"study": "poly", "variant": variant, "seed": seed},
        "status": status,
        "global_step": 200,
        "metrics": {"test": {"test/loss": test_loss}},
    }
    write_record(folder, record)
    write_curves(folder, {(s, tag): v for tag, points in scalars.items() for s, v in points})
    if spikes is not None:
        write_spikes(folder, spikes)
    return folder


def _learned(seed: int) -> dict:
    # Training loss 1.0 falling to 0.01 over the last 100 steps; a spike at step 130 (5× its
    # median, loss 0.2), the gradient 10× at step 120; coefficients logged every 50 steps: a0
    # grows by 0.1 per log, a4 stays at 0.04 + seed; seed 1 also logs c.
    scalars = _scalars({130: 5.0}, {120: 10.0})
    scalars["train/loss_step"] = [(s, 1.0 if s < 100 else 0.01) for s in range(19, 200, 20)]
    for layer in LAYERS:
        scalars[f"attention/{layer}/a0"] = [(s, 1.0 + 0.1 * (s // 50)) for s in range(0, 200, 50)]
        scalars[f"attention/{layer}/a4"] = [(s, 0.04 + seed) for s in range(0, 200, 50)]
        if seed == 1:
            scalars[f"attention/{layer}/c"] = [(s, 2.0) for s in range(0, 200, 50)]
    return scalars


# seed 0's tracker measured the spike step's own gradient (3.0, 30× and 2×); seed 1's did not.
SPIKE = {0: (0.2, 5.0, 1.0, 3.0, 30.0, 2.0), 1: (0.2, 5.0, 1.0, NAN, NAN, NAN)}


@pytest.fixture(scope="module")
def long_study(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    for seed in (0, 1):
        _record(root, LEARNED, seed, _learned(seed), {130: SPIKE[seed]})
    _record(root, "softmax", 0, _scalars({}, {}), {}, test_loss=0.002)
    _record(root, "softmax", 1, _scalars({}, {}), {}, status="running")  # named, not counted
    return root


COMMAND = "python -m lab.studies.sweep --plan configs/studies/page.yaml"


def _run(root: Path, out: Path, **options: Any) -> list[dict]:
    return write_trajectories([root], out, command=COMMAND, **options)


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
    tags = [
        "attention/l1/c",
        "attention/l1/a10",
        "attention/l1/a2",
        "attention/l0/a1",
        "train/loss",
    ]
    found = coefficient_series({tag: [(0, 1.0)] for tag in tags})
    assert list(found) == [("l0", "a1"), ("l1", "a2"), ("l1", "a10"), ("l1", "c")]


def test_trajectories_tables_and_files(long_study, tmp_path):
    out = tmp_path / "traces"
    rows = _run(long_study, out, tail=100, every=100, steps=[0, 100])
    by_run = {(r["variant"], r["seed"]): r for r in rows}
    assert set(by_run) == {(LEARNED, 0), (LEARNED, 1), ("softmax", 0)}
    learned = by_run[(LEARNED, 0)]
    assert learned["final_train_loss"] == pytest.approx(0.01)  # steps 119..199 only
    assert learned["min_train_loss"] == pytest.approx(0.01)
    assert (learned["test_loss"], learned["steps"]) == (0.001, 200)
    assert (learned["spikes"], learned["largest_spike"]) == (1, 5.0)
    assert learned["max_grad_norm"] == pytest.approx(10.0)
    assert by_run[("softmax", 0)]["spikes"] == 0
    assert by_run[("softmax", 0)]["final_train_loss"] == pytest.approx(2.0)

    _, spikes = read_csv(tmp_path / "traces_spikes.csv")
    assert len(spikes) == 2
    spike = spikes[0]
    assert (spike["step"], spike["loss"], spike["loss_over_median"]) == ("130", "0.2", "5")
    assert (spike["grad_step"], float(spike["grad_norm"])) == ("120", 10.0)
    # Against the norms logged in the 200 steps before (all 1.0): 10×; every group is 10× its
    # median there too, and the first of equals stands out.
    assert float(spike["grad_norm_over_recent"]) == pytest.approx(10.0)
    assert (spike["top_group"], spike["top_group_over_median"]) == ("attention", "10")
    at_spike = ("grad_at_spike", "grad_at_spike_over_median", "grad_before_spike_over_median")
    assert [spike[k] for k in at_spike] == ["3", "30", "2"]
    assert [spikes[1][k] for k in at_spike] == ["", "", ""]  # NaN (not measured): empty

    _, bursts = read_csv(tmp_path / "traces_bursts.csv")
    assert [(b["seed"], b["first_step"], b["spikes"]) for b in bursts] == [
        ("0", "130", "1"),
        ("1", "130", "1"),
    ]
    assert bursts[0]["first_grad_at_spike_over_median"] == "30"

    meta, coefficients = read_csv(tmp_path / "traces_coefficients.csv")
    assert meta["command"] == COMMAND
    a0 = [r for r in coefficients if r["seed"] == "0" and r["key"] == "a0"]
    assert {r["layer"] for r in a0} == set(LAYERS)
    # Logged at 0, 50, 100, 150; every 100 keeps 0 and 100, and the last point (150).
    assert [int(r["step"]) for r in a0 if r["layer"].endswith("0.attn")] == [0, 100, 150]
    keys = [r["key"] for r in coefficients if r["seed"] == "1" and r["layer"].endswith("0.attn")]
    assert list(dict.fromkeys(keys)) == ["a0", "a4", "c"]  # c after the a_i, seed 1 only
    assert not any(r["key"] == "c" for r in coefficients if r["seed"] == "0")

    page = (tmp_path / "traces.md").read_text()
    assert page.startswith("# Training traces: `poly`")
    assert "| 130 | 2.00e-01 | 5.0 | 1.00e+01 (120) | 10.0 | 3.00e+00 | 30.0 | 2.0 |" in page
    assert "| 0 | 130–130 | 1 | 2.00e-01 | 5 | 10.00 | 30.00 | 2.00 |" in page  # the bursts
    assert "Not in these tables (no ok record): `softmax` s1." in page
    assert "without a training-loss curve" not in page  # every record has its curves
    # a4 is 0.04 (seed 0) and 1.04 (seed 1): median [min, max] over the two seeds.
    assert "| a4 | 2 | 0.540 [0.040, 1.040] | 0.540 [0.040, 1.040] |" in page
    assert "| c | 1 | 2.000 | 2.000 |" in page  # one run: no spread
    # a0 at step 0 is 1.0, at 100 is 1.2, at the end (150) 1.3; max |a| the same.
    row = "| a0 | 2 | 1.000 [1.000, 1.000] | 1.200 [1.200, 1.200] | 1.300 [1.300, 1.300] | 1.300"
    assert row in page
    assert "![traces_loss](traces_loss.png)" in page
    assert (tmp_path / "traces_loss.png").stat().st_size > 0
    assert (tmp_path / "traces_coefficients.png").stat().st_size > 0


def test_a_converted_record_gives_its_converted_values(tmp_path):
    # Converted from the CSVs written before records: no loss or gradient curves; the final and
    # lowest loss and largest norm at the last step, the gradient logged before each spike at
    # the spike's step, as converted/ tags.
    runs = tmp_path / "runs"
    tags = {
        "converted/final_train_loss_last500": [(199, 1e-7)],
        "converted/min_train_loss": [(199, 5e-8)],
        "converted/max_grad_norm": [(199, 1.5)],
        "converted/grad_step": [(613, 600.0)],
        "converted/grad_norm": [(613, 3.5e-4)],
        "converted/grad_norm_over_median": [(613, 103.0)],
        "converted/grad_norm_over_recent": [(613, 0.33)],
        "converted/top_group/other": [(613, 131.0)],
        "attention/net.layers.0.attn/a0": [(0, 1.0), (250, 1.5)],
    }
    _record(runs, LEARNED, 0, tags, {613: (0.0097, 85.0, 1.0, NAN, NAN, NAN)})
    out = tmp_path / "converted"
    [row] = _run(runs, out)
    assert (row["final_train_loss"], row["min_train_loss"]) == (1e-7, 5e-8)
    assert (row["max_grad_norm"], row["spikes"], row["largest_spike"]) == (1.5, 1, 85.0)
    _, [spike] = read_csv(tmp_path / "converted_spikes.csv")
    assert (spike["grad_step"], spike["grad_norm"], spike["grad_norm_over_recent"]) == (
        "600",
        "0.00035",
        "0.33",
    )
    assert (spike["top_group"], spike["top_group_over_median"]) == ("other", "131")
    page = out.with_suffix(".md").read_text()
    assert "without a training-loss curve (converted from earlier `trajectories` CSVs" in page
    assert f"not in the loss figure): `{LEARNED}` s0." in page
    assert "_loss.png" not in page and not (tmp_path / "converted_loss.png").exists()
    # Another tail than the converted one cannot be recomputed: no value, not a wrong one.
    assert _run(runs, out, tail=100)[0]["final_train_loss"] is None


def test_a_run_in_several_folders_is_its_ok_record_once(long_study, tmp_path):
    # A study continued elsewhere: the same run unfinished in one folder, ok in another.
    later = tmp_path / "later"
    _record(later, "softmax", 1, _scalars({}, {}, loss=3.0), {}, test_loss=0.004)
    _record(later, LEARNED, 0, _learned(0), {130: SPIKE[0]}, test_loss=0.5)  # a second copy
    rows = write_trajectories([long_study, later], tmp_path / "x", command=COMMAND)
    assert [(r["variant"], r["seed"]) for r in rows] == [
        (LEARNED, 0),
        (LEARNED, 1),
        ("softmax", 0),
        ("softmax", 1),
    ]
    assert rows[0]["test_loss"] == 0.001  # the first folder's copy
    assert rows[3]["final_train_loss"] == 3.0
    assert "Not in these tables" not in (tmp_path / "x.md").read_text()


def test_variants_by_spec_pick_and_order_the_runs(long_study, tmp_path):
    spec = "polynomial:degree=4,learned_coefficients=true"
    rows = _run(long_study, tmp_path / "x", variants=["softmax", spec])
    assert [(r["variant"], r["seed"]) for r in rows] == [("softmax", 0), (LEARNED, 0), (LEARNED, 1)]


def test_no_coefficients_file_without_a_learned_variant(long_study, tmp_path):
    _run(long_study, tmp_path / "soft", variants=["softmax"])
    assert (tmp_path / "soft_runs.csv").is_file() and (tmp_path / "soft_spikes.csv").is_file()
    assert not (tmp_path / "soft_coefficients.csv").exists()
    assert not (tmp_path / "soft_coefficients.png").exists()
    assert "## Learned coefficients" not in (tmp_path / "soft.md").read_text()


def test_trajectories_without_records_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"runs folder {tmp_path} holds no run record"):
        _run(tmp_path, tmp_path / "x")
