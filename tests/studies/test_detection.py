"""The detection study: variants are config overlays, tables from metrics files, model costs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from attn_lightning.models.detr import SITES
from attn_lightning.results.records import RunResult
from attn_lightning.studies.detection import main, measure, write
from attn_lightning.studies.detection_variants import (
    CONFIGS,
    CONTROLS,
    DELTA_VS_CONTROL,
    STUDY_VARIANTS,
    WHAT_DIFFERS,
    comparisons,
    difference,
    site_specs_of,
    variants,
)


def _fake_metrics(folder, variant: str, seed: int, m_ap: float) -> None:
    record = {
        "fit_seconds": 100.0 + seed,
        "global_step": 500,
        "metrics": {"val/mAP": m_ap + 0.01, "val/loss": 1.0},
        "test": {"test/mAP": m_ap, "test/AP50": 2 * m_ap, "test/AP75": m_ap / 2, "test/loss": 1.0},
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{variant}-s{seed}.json").write_text(json.dumps(record))


def test_variants_are_the_detection_overlays():
    (softmax,) = variants(["softmax"])
    assert softmax.name == "softmax" and softmax.configs[0].endswith(
        "configs/detection/softmax.yaml"
    )
    with pytest.raises(SystemExit, match="no config"):
        variants(["softmax", "no_such_variant"])


def test_tables_from_existing_metrics_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "sweeps" / "detection_report"
    _fake_metrics(runs, "softmax", 0, 0.1)
    _fake_metrics(runs, "softmax", 1, 0.3)
    _fake_metrics(runs, "mean", 0, 0.05)  # mean seed 1 never finished
    out = tmp_path / "table"
    argv = ["--variants", "softmax", "mean", "--seeds", "0", "1", "--out", str(out)]
    results = main([*argv, "--skip-runs", "--no-costs"])
    assert [(r.variant, r.seed, r.status) for r in results] == [
        ("softmax", 0, "ok"),
        ("softmax", 1, "ok"),
        ("mean", 0, "ok"),
        ("mean", 1, "crashed"),
    ]
    md = (tmp_path / "table.md").read_text()
    head = "| variant | runs | crashed | test mAP | test AP50 | test AP75 | val mAP |"
    assert head + " wall time / run (s) |" in md
    assert (
        "| `softmax` | 2 | 0 | 0.200 ± 0.141 | 0.400 ± 0.283 | 0.100 ± 0.071 | 0.210 ± 0.141 |"
        in md
    )
    assert "| `mean` | 2 | 1 | 0.050 ± 0.000 |" in md
    assert "python -m attn_lightning.studies.detection --variants softmax mean" in md
    assert "test loss" not in md and "not converged" not in md
    with (tmp_path / "table_runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["seconds"] for r in rows] == ["100.0", "101.0", "100.0", ""]
    assert rows[1]["test/mAP"] == "0.3"


def test_write_adds_the_cost_columns(tmp_path):
    results = [RunResult("softmax", 0, 140.0, "ok", {"test/mAP": 0.136}, 500)]
    costs = {
        "softmax": {
            "attention params": 99840,
            "total params": 253624,
            "forward ms / image": 1.795,
            "peak forward MiB": 0.9,
            "input": "8×3×48×48",
        }
    }
    write(tmp_path / "t", results, costs, command="cmd")
    md = (tmp_path / "t.md").read_text()
    assert "| attention params | total params | forward ms / image | peak forward MiB |" in md
    assert "| 99,840 | 253,624 | 1.795 | 0.9 |" in md
    assert "Cost columns: one CPU thread, input 8×3×48×48, eval mode, no grad." in md
    with (tmp_path / "t.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["attention params"] == "99840" and "input" not in row


def test_measure_builds_each_variant_through_the_train_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plain, no_proj = variants(["softmax", "softmax_no_projections"])
    small = ["model.init_args.d_model=32", "model.init_args.d_ff=32"]
    cost = measure(plain, overrides=small, batch=1, repeats=1)
    bare = measure(no_proj, overrides=small, batch=1, repeats=1)
    assert cost["input"] == "1×3×48×48"
    # Q/K/V/out projections of 32×32 (+ bias) at 2 encoder + 2×2 decoder sites.
    assert cost["attention params"] == 6 * 4 * (32 * 32 + 32)
    assert bare["attention params"] == 0
    assert cost["total params"] - bare["total params"] == cost["attention params"]
    assert cost["forward ms / image"] > 0


def test_the_study_pairs_each_optimization_variant_with_its_no_qk_control():
    assert [v.name for v in variants(["all"])] == list(STUDY_VARIANTS)
    for name, control in CONTROLS.items():
        assert (CONFIGS / f"{name}.yaml").is_file() and (CONFIGS / f"{control}.yaml").is_file()
    # Every optimization variant and the pooling baseline are in the study, right after (or
    # with the pool, near) the softmax no_qk control of the same site(s), which is in it too.
    for site in ("encoder_self", "decoder_self", "decoder_cross", "all"):
        control = f"softmax_no_qk_{site}"
        assert CONTROLS[f"optimization_{site}"] == control
        order = STUDY_VARIANTS.index(f"optimization_{site}")
        assert STUDY_VARIANTS[order - 1] == control
    assert CONTROLS["pool_encoder_self"] == "softmax_no_qk_encoder_self"
    assert "pool_encoder_self" in STUDY_VARIANTS
    # Every config under configs/detection/ (but the base) is in the study.
    configs = {p.stem for p in CONFIGS.glob("*.yaml")} - {"base"}
    assert configs == set(STUDY_VARIANTS)
    # "all" expands in place; a name given twice is run once.
    assert [v.name for v in variants(["softmax", "all"])] == list(STUDY_VARIANTS)


@pytest.mark.parametrize("variant", sorted(CONTROLS))
def test_each_variant_differs_from_its_control_in_one_thing(variant):
    """Per site: either the mixing differs (backend or its options, same projections) or the
    projections do (same backend), never both, and the same kind of change at every site."""
    mine, theirs = site_specs_of(variant), site_specs_of(CONTROLS[variant])
    kinds = set()
    for site in SITES:
        if mine[site] == theirs[site]:
            continue
        a, b = dict(mine[site]), dict(theirs[site])
        same_projections = a.pop("projections") == b.pop("projections")
        kinds.add("mixing" if same_projections else "projections")
        assert same_projections or a == b, f"{site}: both the mixing and the projections differ"
    assert len(kinds) == 1, f"{variant} vs {CONTROLS[variant]}: {kinds or 'identical'}"
    assert difference(variant, CONTROLS[variant]).count(":") == 1  # the table's column says so


def test_the_difference_column_names_sites_and_change():
    assert difference("optimization_decoder_cross", "softmax_no_qk_decoder_cross") == (
        "decoder_cross: softmax → optimization"
    )
    assert difference("softmax_no_qk_all", "softmax") == "every site: projections all → no_qk"
    assert difference("mean", "softmax") == "encoder_self: softmax → mean, projections all → none"


def test_tables_compare_each_variant_with_its_control(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "sweeps" / "detection_report"
    for seed, m_ap in enumerate((0.20, 0.30)):
        _fake_metrics(runs, "softmax_no_qk_encoder_self", seed, m_ap)
    for seed, m_ap in enumerate((0.15, 0.21)):  # per-seed Δ -0.05, -0.09
        _fake_metrics(runs, "optimization_encoder_self", seed, m_ap)
    _fake_metrics(runs, "pool_encoder_self", 0, 0.25)  # seed 1 never finished
    names = ["softmax_no_qk_encoder_self", "optimization_encoder_self", "pool_encoder_self"]
    argv = ["--variants", *names, "--seeds", "0", "1", "--out", str(tmp_path / "t")]
    results = main([*argv, "--skip-runs", "--no-costs"])
    md = (tmp_path / "t.md").read_text()
    assert "| control | what differs from the control | Δ test mAP vs control [95 % CI] |" in md
    assert "| `optimization_encoder_self` | 2 | 0 | 0.180 ± 0.042 |" in md
    # Paired by seed: mean -0.07, half-width t(0.975, 1) · sd(Δ) / √2 = 12.706 · 0.0283 / 1.414.
    change = "encoder_self: softmax → optimization"
    assert f"| `softmax_no_qk_encoder_self` | {change} | -0.070 [-0.324, +0.184] (n=2) |" in md
    change = "encoder_self: softmax → pool"  # one shared seed: no interval
    assert f"| `softmax_no_qk_encoder_self` | {change} | +0.050 (n=1) |" in md
    assert "Δ vs control: the variant's test mAP minus its control's, paired by seed" in md
    # The control itself has no control among these runs (softmax did not run): cells "–".
    with (tmp_path / "t.csv").open() as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    assert rows["softmax_no_qk_encoder_self"]["control"] == ""
    assert rows["pool_encoder_self"]["Δ test mAP vs control [95 % CI]"] == "+0.050 (n=1)"
    # A control whose runs all crashed gives no difference, not a wrong one.
    crashed = [r for r in results if r.variant != "softmax_no_qk_encoder_self"]
    crashed.append(RunResult("softmax_no_qk_encoder_self", 0, None, "crashed"))
    got = comparisons(crashed)["optimization_encoder_self"]
    assert got == {
        "control": "`softmax_no_qk_encoder_self`",
        WHAT_DIFFERS: "encoder_self: softmax → optimization",
        DELTA_VS_CONTROL: None,
    }


def test_variants_are_required_unless_only_the_sites_table_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "t")])
    assert exc.value.code == 2 and "--variants is required" in capsys.readouterr().err


def test_earlier_runs_come_from_the_first_table_that_holds_them(tmp_path):
    from attn_lightning.results.records import RunResult
    from attn_lightning.results.tables import write_tables
    from attn_lightning.studies.detection import read_earlier

    def table(name: str, runs: list[RunResult], curve_value: float) -> Path:
        out = tmp_path / name
        write_tables(out, runs, command="x", metrics=["test/mAP"], label="variant")
        with out.with_name(name + "_curves.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["variant", "seed", "optimizer_steps", "val/mAP"])
            w.writeheader()
            w.writerows(
                {
                    "variant": r.variant,
                    "seed": r.seed,
                    "optimizer_steps": 500,
                    "val/mAP": curve_value,
                }
                for r in runs
            )
        return out

    first = table("grid", [RunResult("a", 0, 1.0, "ok", {"test/mAP": 0.1})], 0.1)
    second = table(
        "main",
        [
            RunResult("a", 0, 1.0, "ok", {"test/mAP": 0.9}),
            RunResult("a", 1, 1.0, "ok", {"test/mAP": 0.8}),
        ],
        0.9,
    )
    earlier, curves = read_earlier([first, second])
    assert earlier["a", 0].value("test/mAP") == 0.1 and earlier["a", 1].value("test/mAP") == 0.8
    assert sorted((c["seed"], c["val/mAP"]) for c in curves) == [(0, 0.1), (1, 0.9)]
