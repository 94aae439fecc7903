"""The reversal study report: numbers from fake runs (metrics files + TensorBoard events)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from attn_lightning.studies.reversal_report import (
    GROUPS,
    Scalars,
    main,
    read_scalars,
    report,
    spike_gradients,
    spike_steps,
    steps_to_threshold,
)

EXPERIMENT = "poly"
POLY = "polynomial_degree-4_normalize-false"


def fake_scalars(
    val: list[float],
    spikes: list[int],
    grads: dict[int, dict[str, float]] | None = None,
    steps: int = 200,
) -> Scalars:
    """A run's scalars as the study logs them; every gradient norm is 1.0 unless overridden.

    ``val``: ``val/token_acc`` at steps 49, 99, ... (the step Lightning logs after 50k steps).
    ``grads``: step -> {"global_norm" or a group: norm}, at the gradient steps 0, 20, ...
    """
    grads = grads or {}
    scalars: Scalars = {"val/token_acc": [(49 + 50 * i, v) for i, v in enumerate(val)]}
    flags = [(s, 1.0 if s in spikes else 0.0) for s in range(steps)]
    scalars["train/loss_spike"] = flags
    scalars["train/loss_spikes"] = [(s, float(sum(s >= t for t in spikes))) for s in range(steps)]
    scalars["train/loss_step"] = [(s, 2.0) for s in range(19, steps, 20)]
    for name in ("global_norm", *GROUPS):
        scalars[f"grad/{name}"] = [
            (s, grads.get(s, {}).get(name, 1.0)) for s in range(0, steps, 20)
        ]
    return scalars


# Seed 0 crosses 0.99 at step 149; spikes at 130 (gradient logged at 120: global norm 10x the
# run median, attention 50x its median) and 160 (logged at that step: 4x, feedforward 8x).
SEED0 = fake_scalars(
    [0.5, 0.98, 0.995, 0.999],
    spikes=[130, 160],
    grads={
        120: {"global_norm": 10.0, "attention": 50.0, "feedforward": 2.0},
        160: {"global_norm": 4.0, "feedforward": 8.0},
    },
)
SEED1 = fake_scalars([0.7, 0.991, 0.999, 0.999], spikes=[])
SEED2 = fake_scalars(
    [0.2, 0.3, 0.35, 0.4],
    spikes=[100],
    grads={100: {"global_norm": 3.0, "attention": 6.0, "embedding": 5.0}},
)


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


def _write_events(log_dir: Path, scalars: Scalars) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(log_dir))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()


def _write_run(
    root: Path, label: str, seed: int, scalars: Scalars | None, test: dict[str, float] | None
) -> None:
    name = f"{label}-s{seed}"
    log_dir = root / "logs" / EXPERIMENT / name
    if scalars is not None:
        _write_events(log_dir, scalars)
    if test is not None:  # a run without a metrics file is still running (or crashed)
        sweeps = root / "sweeps" / EXPERIMENT
        sweeps.mkdir(parents=True, exist_ok=True)
        record = {
            "fit_seconds": 100.0 + seed,
            "global_step": 200,
            "metrics": {"val/token_acc": 0.5},
            "test": test,
            "log_dir": f"logs/{EXPERIMENT}/{name}",
        }
        (sweeps / f"{name}.json").write_text(json.dumps(record))


def _test(token: float, exact: float, loss: float) -> dict[str, float]:
    return {
        "test/token_acc": token,
        "test/exact_acc": exact,
        "test/gen_token_acc": token,
        "test/gen_exact_acc": exact,
        "test/loss": loss,
    }


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("study")
    _write_run(root, POLY, 0, SEED0, _test(0.999, 0.9, 0.01))
    _write_run(root, POLY, 1, SEED1, _test(0.995, 0.8, 0.02))
    _write_run(root, POLY, 2, SEED2, _test(0.40, 0.0, 1.5))
    _write_run(root, "softmax", 0, SEED1, _test(1.0, 1.0, 0.001))
    _write_run(root, "softmax", 1, SEED2, None)  # unfinished: log folder only
    return root


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_read_scalars_round_trips_every_event(study):
    scalars = read_scalars(study / "logs" / EXPERIMENT / f"{POLY}-s0")
    assert len(scalars["train/loss_spike"]) == 200  # every step, nothing subsampled
    assert spike_steps(scalars) == [130, 160]
    assert steps_to_threshold(scalars, 0.99) == 149
    assert scalars["grad/attention"][6] == (120, 50.0)


def test_report_summary_numbers(study, tmp_path):
    summary = report(EXPERIMENT, tmp_path / "out" / "rep", root=study)
    assert [r["variant"] for r in summary] == [POLY, "softmax"]  # sorted labels
    poly, soft = summary
    assert (poly["runs"], poly["converged"], poly["unfinished"]) == (3, 2, 0)
    assert (soft["runs"], soft["converged"], soft["unfinished"]) == (1, 1, 1)
    # Token accuracies 0.40, 0.995, 0.999: inclusive quartiles interpolate halfway.
    assert poly["test/token_acc_median"] == pytest.approx(0.995)
    assert poly["test/token_acc_q25"] == pytest.approx(0.6975)
    assert poly["test/token_acc_q75"] == pytest.approx(0.997)
    assert poly["test/loss_median"] == pytest.approx(0.02)
    # Steps to 99 %: 149 and 99 (seed 2 never reached it).
    assert poly["reached"] == 2
    assert (poly["steps_to_threshold_median"], poly["steps_to_threshold_q25"]) == (124, 111.5)
    # Spikes per run 2, 0, 1.
    assert (poly["spikes_median"], poly["spikes_q25"], poly["spikes_q75"]) == (1, 0.5, 1.5)
    assert poly["spikes_max"] == 2
    # Ratios 10, 4, 3 -> 4; groups attention, feedforward, attention; lags 10, 0, 0.
    assert poly["spike_records"] == 3
    assert poly["spike_grad_ratio_median"] == pytest.approx(4.0)
    assert (poly["spike_top_group"], poly["spike_top_group_count"]) == ("attention", 2)
    assert poly["spike_grad_lag_median"] == 0
    assert (soft["spikes_max"], soft["spike_records"], soft["spike_top_group"]) == (0, 0, None)


def test_report_files(study, tmp_path):
    out = tmp_path / "rep"
    report(EXPERIMENT, out, root=study, command="the command")
    md = out.with_name("rep.md").read_text()
    assert "```bash\nthe command\n```" in md and "Machine" in md
    assert f"| `{POLY}` | 2/3 | 0 | 99.50 [69.75, 99.70] |" in md
    assert (
        f"| `{POLY}` | 124 [112, 136] | 2/3 | 1.0 [0.5, 1.5] | 2 | 3 | 4.00 | 0 | attention (2) |"
        in md
    )
    assert f"| `{POLY}` | 2 | ok | 40.00 | 0.00 | 40.00 | 0.00 | 1.5000 | – | 1 | 3.000 |" in md
    assert "| `softmax` | 1 | unfinished |" in md
    rows = {r["variant"]: r for r in _read_csv(out.with_name("rep.csv"))}
    assert float(rows[POLY]["test/token_acc_q25"]) == pytest.approx(0.6975)
    assert rows["softmax"]["converged"] == "1" and rows["softmax"]["unfinished"] == "1"
    runs = _read_csv(out.with_name("rep_runs.csv"))
    assert [(r["variant"], r["seed"], r["status"]) for r in runs] == [
        (POLY, "0", "ok"),
        (POLY, "1", "ok"),
        (POLY, "2", "ok"),
        ("softmax", "0", "ok"),
        ("softmax", "1", "unfinished"),
    ]
    first = runs[0]
    assert (first["steps_to_threshold"], first["spikes"], first["max_grad_norm"]) == (
        "149",
        "2",
        "10.0",
    )
    assert (first["fit_seconds"], first["global_step"], first["test/exact_acc"]) == (
        "100.0",
        "200",
        "0.9",
    )
    assert runs[2]["steps_to_threshold"] == ""  # never reached
    curves = _read_csv(out.with_name("rep_curves.csv"))
    assert [r["optimizer_steps"] for r in curves[:4]] == ["50", "100", "150", "200"]
    seed0 = [float(r["val/token_acc"]) for r in curves[:4]]  # float32 in TensorBoard
    assert seed0 == pytest.approx([0.5, 0.98, 0.995, 0.999])
    assert len(curves) == 4 * 4  # 4 validations of each finished run (unfinished: not read)
    assert "| `softmax` | 0 | 70.0 | 99.1 | 99.9 | 99.9 |" in md  # SEED1's curve, in percent


def test_cli_variants_order_and_filter(study, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["--experiment", EXPERIMENT, "--out", str(out), "--root", str(study)]
    summary = main([*argv, "--variants", "softmax", POLY, "--threshold", "0.999"])
    assert [r["variant"] for r in summary] == ["softmax", POLY]
    # At 0.999 seed 1 (test 0.995) no longer converges; its validation reaches 0.999 at step
    # 149, seed 0's at 199.
    assert (summary[1]["converged"], summary[1]["reached"]) == (1, 2)
    assert summary[1]["steps_to_threshold_median"] == 174
    assert "--threshold 0.999" in out.with_name("cli.md").read_text()
    only = main([*argv, "--variants", "softmax"])
    assert [r["variant"] for r in only] == ["softmax"]
    assert POLY not in out.with_name("cli_runs.csv").read_text()


def test_cli_variants_accept_attention_specs(study, tmp_path):
    argv = ["--experiment", EXPERIMENT, "--out", str(tmp_path / "x"), "--root", str(study)]
    summary = main([*argv, "--variants", "polynomial:degree=4,normalize=false"])
    assert [r["variant"] for r in summary] == [POLY] and summary[0]["runs"] == 3


def test_cli_error_names_the_missing_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--experiment", "nope", "--out", str(tmp_path / "x"), "--root", str(tmp_path)])
    assert exit_info.value.code == 2
    assert str(tmp_path / "sweeps" / "nope") in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_control_adds_paired_differences_over_shared_seeds(study, tmp_path):
    out = tmp_path / "paired"
    argv = ["--experiment", EXPERIMENT, "--out", str(out), "--root", str(study)]
    main([*argv, "--variants", "softmax", POLY, "--control", "softmax"])
    (row,) = _read_csv(out.with_name("paired_paired.csv"))
    # Only seed 0 finished in both (softmax seed 1 is unfinished): one pair, no interval.
    assert (row["variant"], row["control"], row["Δ test loss n"]) == (POLY, "softmax", "1")
    assert float(row["Δ test loss mean"]) == pytest.approx(0.01 - 0.001)
    assert float(row["Δ token acc (pp) mean"]) == pytest.approx((0.999 - 1.0) * 100)
    text = out.with_name("paired.md").read_text()
    assert f"| `{POLY}` | `softmax` | +0.00900 (n=1) |" in text
