"""The long runs' traces: final loss, spikes with their size and gradient, learned coefficients,
on fake runs whose every number is known."""

from __future__ import annotations

import pytest

from attn_lightning.results.files import read_csv
from attn_lightning.studies.reversal.cli import main
from attn_lightning.studies.reversal.traces import burst_rows, final_loss, thin
from tests.studies.reversal.fake_runs import EXPERIMENT, fake_scalars, test_metrics, write_run

LEARNED = "polynomial_degree-4_learned_coefficients-true"


def _learned_scalars(seed: int) -> dict:
    # 200 steps; training loss 1.0 falling to 0.01 over the last 100 steps (logged every 20);
    # a spike at step 130 (5× its median, loss 0.2), gradient 10× its median at step 120;
    # coefficients logged every 50 steps: a0 grows by 0.1 per log, a4 stays at 0.04 + seed.
    scalars = fake_scalars(
        [0.5, 0.9, 0.995, 0.999], spikes=[130], grads={120: {"global_norm": 10.0}}
    )
    scalars["train/loss_step"] = [(s, 1.0 if s < 100 else 0.01) for s in range(19, 200, 20)]
    scalars["train/loss_at_spike"] = [(130, 0.2)]
    scalars["train/loss_spike_ratio"] = [(130, 5.0)]
    if seed == 0:  # the gradient measured at the spike's own step (seed 1: an older log)
        scalars["grad/norm_at_spike"] = [(130, 3.0)]
        scalars["grad/norm_at_spike_ratio"] = [(130, 30.0)]
        scalars["grad/norm_before_spike_ratio"] = [(130, 2.0)]
    for layer in ("net.decoder.layers.0.attn", "net.decoder.layers.1.attn"):
        scalars[f"attention/{layer}/a0"] = [(s, 1.0 + 0.1 * (s // 50)) for s in range(0, 200, 50)]
        scalars[f"attention/{layer}/a4"] = [(s, 0.04 + seed) for s in range(0, 200, 50)]
        if seed == 1:  # runs from 2026-11-26 on also log the kernel's scale c
            scalars[f"attention/{layer}/c"] = [(s, 2.0) for s in range(0, 200, 50)]
    return scalars


@pytest.fixture(scope="module")
def long_study(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    for seed in (0, 1):
        write_run(root, LEARNED, seed, _learned_scalars(seed), test_metrics(1.0, 1.0, 0.001))
    softmax = fake_scalars([0.9, 0.999, 0.999, 0.999], spikes=[])
    write_run(root, "softmax", 0, softmax, test_metrics(1.0, 1.0, 0.002))
    write_run(root, "softmax", 1, softmax, None)  # still running: named, not counted
    return root


def test_final_loss_is_the_mean_over_the_last_steps():
    points = {"train/loss_step": [(19, 4.0), (39, 2.0), (59, 1.0)]}
    assert final_loss(points, tail=40) == pytest.approx(1.5)  # steps 39 and 59
    assert final_loss(points, tail=1000) == pytest.approx(7 / 3)
    assert final_loss({}, tail=10) is None


def test_spikes_less_than_the_gap_apart_in_one_run_are_one_burst():
    def spike(variant, step, loss, grad):
        return {
            "variant": variant,
            "seed": 0,
            "step": step,
            "loss": loss,
            "loss_over_median": loss * 10,
            "grad_step": step - 5,
            "grad_norm_over_recent": grad,
            "grad_at_spike": None,
            "grad_at_spike_over_median": None,
            "grad_before_spike_over_median": None,
        }

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


def test_trajectories_tables_and_files(long_study, tmp_path):
    out = tmp_path / "traces"
    rows = main(
        [
            *("trajectories", "--experiment", EXPERIMENT, "--root", str(long_study)),
            *("--out", str(out), "--tail", "100", "--every", "100", "--steps", "0", "100"),
        ]
    )
    by_run = {(r["variant"], r["seed"]): r for r in rows}
    assert set(by_run) == {(LEARNED, 0), (LEARNED, 1), ("softmax", 0)}
    learned = by_run[(LEARNED, 0)]
    assert learned["final_train_loss"] == pytest.approx(0.01)  # steps 119..199 only
    assert learned["min_train_loss"] == pytest.approx(0.01)
    assert learned["test_loss"] == pytest.approx(0.001)
    assert (learned["spikes"], learned["largest_spike"]) == (1, 5.0)
    assert learned["max_grad_norm"] == pytest.approx(10.0)
    assert by_run[("softmax", 0)]["spikes"] == 0
    assert by_run[("softmax", 0)]["final_train_loss"] == pytest.approx(2.0)

    _, spikes = read_csv(tmp_path / "traces_spikes.csv")
    assert len(spikes) == 2
    spike = spikes[0]
    assert (spike["step"], spike["loss"], spike["loss_over_median"]) == ("130", "0.2", "5")
    assert (spike["grad_step"], float(spike["grad_norm"])) == ("120", 10.0)
    # Against the norms logged in the 200 steps before (all 1.0): 10×.
    assert float(spike["grad_norm_over_recent"]) == pytest.approx(10.0)
    at_spike = ("grad_at_spike", "grad_at_spike_over_median", "grad_before_spike_over_median")
    assert [spike[k] for k in at_spike] == ["3", "30", "2"]
    assert [spikes[1][k] for k in at_spike] == ["", "", ""]  # not logged: empty, not zero

    _, bursts = read_csv(tmp_path / "traces_bursts.csv")
    assert [(b["seed"], b["first_step"], b["spikes"]) for b in bursts] == [
        ("0", "130", "1"),
        ("1", "130", "1"),
    ]
    assert bursts[0]["first_grad_at_spike_over_median"] == "30"

    meta, coefficients = read_csv(tmp_path / "traces_coefficients.csv")
    assert meta["command"].startswith("python -m attn_lightning.studies.reversal trajectories")
    a0 = [r for r in coefficients if r["seed"] == "0" and r["key"] == "a0"]
    assert {r["layer"] for r in a0} == {"net.decoder.layers.0.attn", "net.decoder.layers.1.attn"}
    # Logged at 0, 50, 100, 150; every 100 keeps 0 and 100, and the last point (150).
    assert [int(r["step"]) for r in a0 if r["layer"].endswith("0.attn")] == [0, 100, 150]
    keys = [r["key"] for r in coefficients if r["seed"] == "1" and r["layer"].endswith("0.attn")]
    assert list(dict.fromkeys(keys)) == ["a0", "a4", "c"]  # c after the a_i, seed 1 only
    assert not any(r["key"] == "c" for r in coefficients if r["seed"] == "0")

    page = (tmp_path / "traces.md").read_text()
    assert "| 130 | 2.00e-01 | 5.0 | 1.00e+01 (120) | 10.0 | 3.00e+00 | 30.0 | 2.0 |" in page
    assert "| 0 | 130–130 | 1 | 2.00e-01 | 5 | 10.00 | 30.00 | 2.00 |" in page  # the bursts
    assert "`softmax` s1" in page  # the unfinished run is named
    # a4 is 0.04 (seed 0) and 1.04 (seed 1): median [min, max] over the two seeds.
    assert "| a4 | 2 | 0.540 [0.040, 1.040] | 0.540 [0.040, 1.040] |" in page
    assert "| c | 1 | 2.000 | 2.000 |" in page  # one run: no spread
    # a0 at step 0 is 1.0, at 100 is 1.2, at the end (150) 1.3; max |a| the same.
    row = "| a0 | 2 | 1.000 [1.000, 1.000] | 1.200 [1.200, 1.200] | 1.300 [1.300, 1.300] | 1.300"
    assert row in page
    assert (tmp_path / "traces_loss.png").stat().st_size > 0
    assert (tmp_path / "traces_coefficients.png").stat().st_size > 0


def test_trajectories_without_runs_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["trajectories", "--experiment", "none", "--root", str(tmp_path), "--out", "x"])
    assert "no runs in" in capsys.readouterr().err


def test_variants_by_spec_pick_and_order_the_runs(long_study, tmp_path):
    spec = "polynomial:degree=4,learned_coefficients=true"
    args = ["trajectories", "--experiment", EXPERIMENT, "--root", str(long_study)]
    rows = main([*args, "--out", str(tmp_path / "x"), "--variants", "softmax", spec])
    assert [(r["variant"], r["seed"]) for r in rows] == [("softmax", 0), (LEARNED, 0), (LEARNED, 1)]


def test_no_coefficients_file_without_a_learned_variant(long_study, tmp_path):
    out = tmp_path / "soft"
    main(
        [
            *("trajectories", "--experiment", EXPERIMENT, "--root", str(long_study)),
            *("--out", str(out), "--variants", "softmax"),
        ]
    )
    assert (tmp_path / "soft_runs.csv").is_file() and (tmp_path / "soft_spikes.csv").is_file()
    assert not (tmp_path / "soft_coefficients.csv").exists()
    assert not (tmp_path / "soft_coefficients.png").exists()
    assert "## Learned coefficients" not in (tmp_path / "soft.md").read_text()


def test_committed_rows_of_runs_whose_logs_are_gone_join_the_tables(long_study, tmp_path):
    # Session 1 wrote the traces of the long study; session 2 has only the logs of learned seed 1
    # (again) and of a new learned seed 2 and softmax seed 3: its tables hold every run, seed 1
    # from its logs (not twice), and the bursts are recomputed over all the spikes.
    first = tmp_path / "first"
    args = ["trajectories", "--experiment", EXPERIMENT, "--tail", "100"]
    main([*args, "--root", str(long_study), "--out", str(first)])
    later = tmp_path / "later"
    write_run(later, LEARNED, 1, _learned_scalars(1), test_metrics(1.0, 1.0, 0.001))
    write_run(later, LEARNED, 2, _learned_scalars(2), test_metrics(1.0, 1.0, 0.003))
    softmax = fake_scalars([0.9, 0.999, 0.999, 0.999], spikes=[])
    write_run(later, "softmax", 3, softmax, test_metrics(1.0, 1.0, 0.004))
    out = tmp_path / "merged"
    args += ["--root", str(later), "--out", str(out), "--variants", "softmax", LEARNED]
    rows = main([*args, "--committed", str(first)])
    assert [(r["variant"], r["seed"]) for r in rows] == [
        ("softmax", 0),
        ("softmax", 3),
        (LEARNED, 0),
        (LEARNED, 1),
        (LEARNED, 2),
    ]
    committed = rows[2]  # seed 0 from the CSV: numbers are numbers again
    assert (committed["spikes"], committed["test_loss"], committed["steps"]) == (1, 0.001, 200)
    assert rows[4]["test_loss"] == pytest.approx(0.003)
    _, bursts = read_csv(tmp_path / "merged_bursts.csv")
    assert [(b["seed"], b["first_step"]) for b in bursts] == [
        ("0", "130"),
        ("1", "130"),
        ("2", "130"),
    ]
    _, coefficients = read_csv(tmp_path / "merged_coefficients.csv")
    assert sorted({r["seed"] for r in coefficients}) == ["0", "1", "2"]
    assert (
        len([r for r in coefficients if r["seed"] == "1"])
        == len([r for r in coefficients if r["seed"] == "2"]) + 2 * 2
    )  # seed 1 also logs c (two layers, two thinned points); not duplicated
    page = (tmp_path / "merged.md").read_text()
    assert f"`{LEARNED}` | 3 | 0, 1, 2 |" in page
    assert "`softmax` | 2 | 0, 3 |" in page
    assert "as committed: `softmax` s0; `" + LEARNED + "` s0." in page
    assert "read from logs here: `softmax` s3; `" + LEARNED + "` s1, s2." in page
    # Run again over its own output: the same tables (a run is never counted twice).
    assert main([*args, "--committed", str(out)]) == rows


def test_committed_prefix_without_its_files_is_a_clear_error(long_study, tmp_path, capsys):
    args = ["trajectories", "--experiment", EXPERIMENT, "--root", str(long_study)]
    with pytest.raises(SystemExit):
        main([*args, "--out", str(tmp_path / "x"), "--committed", str(tmp_path / "nothing")])
    assert "nothing_runs.csv" in capsys.readouterr().err
