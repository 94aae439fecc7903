"""The detection study's sensitivity grid: variants and overrides, names, tables, one real run."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import pytest
import yaml

from attn_lightning.attention.optimization import OptimizationAttention
from lab.studies.detection import sensitivity
from lab.studies.detection.costs import build_model
from lab.studies.detection.report import write_page
from lab.studies.detection.sensitivity import (
    ABLATIONS,
    DELTA_VS_REFERENCE,
    GRID,
    SENSITIVITY_DEFAULT,
    sensitivity_grid,
    sensitivity_sites,
)
from lab.studies.detection.variants import CONFIGS
from lab.studies.runner import Variant, run_name
from tests.lab.studies.detection.runs import SMALL, fake_record, tiny_runner

ONE_AT_A_TIME = [
    "optimization_decoder_cross",
    "optimization_decoder_cross@lam=0.03",
    "optimization_decoder_cross@lam=0.3",
    "optimization_decoder_cross@iterations=5",
    "optimization_decoder_cross@iterations=20",
    "optimization_decoder_cross@random_tokens=0",
]
SPEC = {"name": "optimization", "projections": "no_qk", "dictionary": "values"}


def _site_specs(variant: Variant) -> dict[str, dict]:
    """The override of each site: ``model.init_args.<site>={json}`` -> {site: spec}."""
    specs = {}
    for override in variant.overrides:
        key, _, value = override.partition("=")
        specs[key.removeprefix("model.init_args.")] = json.loads(value)
    return specs


def _fake_metrics(
    logs: Path, experiment: str, name: str, seed: int, m_ap: float, keys90: float | None
) -> None:
    # a finished run's record, where the runner finds it: logs/<experiment>/<run>/
    fit = {"val/mAP": m_ap, "val/loss": 1.0}
    if keys90 is not None:  # two layers report it; the table shows their mean
        for layer, offset in (
            ("net.decoder.0.cross_attn", -1.0),
            ("net.decoder.1.cross_attn", 1.0),
        ):
            fit[f"attention/{layer}/keys90"] = keys90 + offset
            fit[f"attention/{layer}/keys90_fraction"] = 0.5
    test = {"test/mAP": m_ap, "test/AP50": 2 * m_ap, "test/AP75": m_ap / 2}
    fake_record(logs, experiment, name, seed, test=test, fit=fit, seconds=50.0, steps=2000)


def test_one_at_a_time_grid_changes_one_option_of_the_site_spec():
    grid = sensitivity_grid()
    assert SENSITIVITY_DEFAULT == "optimization_decoder_cross"
    assert [p.variant.name for p in grid] == ONE_AT_A_TIME
    assert [tuple(p.options.values()) for p in grid] == [
        (0.1, 10, 8),
        (0.03, 10, 8),
        (0.3, 10, 8),
        (0.1, 5, 8),
        (0.1, 20, 8),
        (0.1, 10, 0),
    ]
    for point in grid:
        variant = point.variant
        assert variant.subcommand == "fit"
        assert variant.configs == (str(CONFIGS / "optimization_decoder_cross.yaml"),)
        # The whole spec of the one site, the other options as the overlay has them.
        assert _site_specs(variant) == {"decoder_cross": {**SPEC, **point.options}}


def test_full_grid_is_the_factorial_and_shares_names_with_the_one_at_a_time_grid():
    full = sensitivity_grid(full=True)
    assert len(full) == 3 * 3 * 2 == 18
    assert full[0].variant.name == "optimization_decoder_cross"  # the reference first
    combos = {tuple(p.options.values()) for p in full}
    assert combos == set(itertools.product(*GRID.values()))
    names = [p.variant.name for p in full]
    assert len(set(names)) == 18
    assert "optimization_decoder_cross@lam=0.03,iterations=5,random_tokens=0" in names
    # Stable: the same point has the same name (and run files) in both grids and every call.
    assert set(ONE_AT_A_TIME) <= set(names)
    assert names == [p.variant.name for p in sensitivity_grid(full=True)]
    labels = {run_name(p.variant, 0) for p in full}
    assert "optimization_decoder_cross@lam-0.03_iterations-5_random_tokens-0-s0" in labels


def test_a_grid_on_all_sites_overrides_every_site():
    grid = sensitivity_grid("optimization_all")
    assert [p.variant.name for p in grid][1] == "optimization_all@lam=0.03"
    specs = _site_specs(grid[1].variant)
    assert set(specs) == {"encoder_self", "decoder_self", "decoder_cross"}
    assert all(
        spec == {**SPEC, "random_tokens": 8, "iterations": 10, "lam": 0.03}
        for spec in specs.values()
    )
    assert sensitivity_sites() == [
        "optimization_all",
        "optimization_decoder_cross",
        "optimization_decoder_self",
        "optimization_encoder_self",
    ]


def test_ablation_ladder_swaps_one_ingredient_of_the_paper_form_at_a_time():
    ladder = sensitivity_grid(grid=ABLATIONS)
    paper = {
        "projections": "no_qk",
        "dictionary": "values",
        "power": 5.0,
        "signed": False,
        "normalize": False,
        "random_tokens": 8,
        "lam": 0.1,
    }
    assert ladder[0].variant.name == "optimization_decoder_cross"
    assert ladder[0].options == paper  # the backend's defaults where the overlay sets none
    assert [p.variant.name for p in ladder[1:]] == [
        "optimization_decoder_cross@projections=True",
        "optimization_decoder_cross@dictionary=keys",
        "optimization_decoder_cross@power=1.0",
        "optimization_decoder_cross@signed=True",
        "optimization_decoder_cross@normalize=True",
        "optimization_decoder_cross@random_tokens=0",
        "optimization_decoder_cross@lam=0.0",
    ]
    for point in ladder[1:]:
        changed = {o for o in paper if point.options[o] != paper[o]}
        assert len(changed) == 1, point.variant.name
        # Everything else of the site's spec (iterations, projections) as the overlay has it.
        spec = _site_specs(point.variant)["decoder_cross"]
        assert spec == {**SPEC, "iterations": 10, **point.options}
    # The projections rung is a site-spec key, not a backend option: train.py's parser builds it.
    model, _ = build_model(ladder[1].variant, overrides=SMALL)
    cross = model.decoder[0].cross_attn
    assert cross.q_proj is not None and cross.k_proj is not None
    assert isinstance(cross.backend, OptimizationAttention)


def test_ablation_runs_the_control_beside_the_ladder_and_titles_its_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs, exp = tmp_path / "logs", "detection_ablation"
    _fake_metrics(runs, exp, "optimization_decoder_cross", 0, 0.01, keys90=None)
    _fake_metrics(runs, exp, "optimization_decoder_cross@power=1.0", 0, 0.41, keys90=None)
    _fake_metrics(runs, exp, "softmax_no_qk_decoder_cross", 0, 0.58, keys90=None)
    out = tmp_path / "abl"
    centre = "optimization_decoder_cross"
    results = write_page([runs], out, command="c", grid="ablation", centre=centre, seeds=[0])
    assert [r.variant for r in results][-1] == "softmax_no_qk_decoder_cross"
    assert len(results) == 8 + 1
    md = out.with_name("abl.md").read_text()
    assert md.startswith("# Ablation of optimization attention: one ingredient")
    assert (
        "| projections | dictionary | p | signed | normalize | random tokens | λ | test mAP |" in md
    )
    assert "| no_qk | values | 1.0 | False | False | 8 | 0.1 | 0.410 ± 0.000 (1) |" in md
    assert "| +0.400 (n=1) | `optimization_decoder_cross@power=1.0` |" in md
    # The paper's point against its control, in the summary below the ladder.
    assert "| -0.570 (n=1) |" in md


def test_bad_sites_are_named_with_what_is_allowed(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"'softmax'; allowed: optimization_all, optimization_dec"):
        sensitivity_grid("softmax")
    page = {"command": "c", "seeds": [0]}
    with pytest.raises(ValueError, match=r"'no_such_site'; allowed: optimization_all"):
        write_page([tmp_path], tmp_path / "t", grid="sensitivity", centre="no_such_site", **page)
    with pytest.raises(ValueError, match=r"grid 'lattice'; allowed: sensitivity, ablation"):
        write_page([tmp_path], tmp_path / "t", grid="lattice", centre="x", **page)
    with pytest.raises(ValueError, match=r"a sensitivity page needs centre"):
        write_page([tmp_path], tmp_path / "t", grid="sensitivity", **page)
    # Sites that disagree on an option of the grid have no one point to vary around.
    monkeypatch.setattr(sensitivity, "CONFIGS", tmp_path)
    sites = {"decoder_self": {**SPEC, "lam": 0.1}, "decoder_cross": {**SPEC, "lam": 0.3}}
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump({"model": {"init_args": sites}}))
    with pytest.raises(ValueError, match=r"'mixed' sets lam differently per site"):
        sensitivity_grid("mixed")


def test_sensitivity_tables_from_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs, exp = tmp_path / "logs", "detection_sensitivity"  # not the study's detection_report
    for seed, m_ap in enumerate((0.50, 0.52, 0.54)):
        _fake_metrics(runs, exp, ONE_AT_A_TIME[0], seed, m_ap, keys90=None)
    for seed, m_ap in enumerate((0.45, 0.49, 0.50)):  # per-seed Δ -0.05, -0.03, -0.04
        _fake_metrics(runs, exp, "optimization_decoder_cross@lam=0.3", seed, m_ap, keys90=None)
    _fake_metrics(runs, exp, "optimization_decoder_cross@iterations=5", 1, 0.42, keys90=None)
    out, centre = tmp_path / "sens", ONE_AT_A_TIME[0]
    page = {"command": "python -m lab.studies.sweep --plan p", "seeds": [0, 1, 2]}
    results = write_page([runs / exp], out, grid="sensitivity", centre=centre, **page)
    assert len(results) == 6 * 3
    md = (tmp_path / "sens.md").read_text()
    assert md.startswith("# Sensitivity of optimization attention: `optimization_decoder_cross`")
    head = "| λ | K | random tokens | test mAP | test AP50 | test AP75 | " + DELTA_VS_REFERENCE
    assert head + " | variant |" in md
    assert (
        "| 0.1 | 10 | 8 | 0.520 ± 0.020 (3) | 1.040 ± 0.040 (3) | 0.260 ± 0.010 (3) | reference |"
        in md
    )
    # Paired: mean -0.04 ± t(0.975, 2) · 0.01 / √3 = 0.0248.
    assert "| 0.3 | 10 | 8 | 0.480 ± 0.026 (3) |" in md
    assert "| -0.040 [-0.065, -0.015] (n=3) | `optimization_decoder_cross@lam=0.3` |" in md
    assert "| 0.1 | 5 | 8 | 0.420 ± 0.000 (1) |" in md and "| -0.100 (n=1) |" in md
    assert "| 0.03 | 10 | 8 | – | – | – | – | `optimization_decoder_cross@lam=0.03` |" in md
    assert (
        "Δ vs default: per seed, the point's test mAP minus that of `optimization_decoder_cross`"
        in md
    )
    assert "No keys90 column" in md and "## All columns and runs" in md
    assert "python -m lab.studies.sweep --plan p\n" in md
    with (tmp_path / "sens.csv").open() as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    lam = rows["optimization_decoder_cross@lam=0.3"]
    assert (lam["λ"], lam["K"], lam["random tokens"]) == ("0.3", "10", "8")
    assert lam[DELTA_VS_REFERENCE] == "-0.040 [-0.065, -0.015] (n=3)"
    with (tmp_path / "sens_runs.csv").open() as f:  # the 7 runs with a record, of 18
        assert len(list(csv.DictReader(f))) == 7
    assert "Not run yet (no run record):" in md


def test_keys90_is_a_column_when_the_records_hold_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for seed, keys90 in enumerate((3.0, 5.0)):
        _fake_metrics(tmp_path / "logs", "grid", ONE_AT_A_TIME[0], seed, 0.5, keys90=keys90)
    page = {"command": "c", "seeds": [0, 1], "grid": "sensitivity", "centre": ONE_AT_A_TIME[0]}
    write_page([tmp_path / "logs"], tmp_path / "s", **page)
    md = (tmp_path / "s.md").read_text()
    assert f"| {DELTA_VS_REFERENCE} | keys90 | variant |" in md
    assert (
        "| reference | 4.00 ± 1.41 (2) | `optimization_decoder_cross` |" in md
    )  # layer means 3, 5
    assert "No keys90 column" not in md


def test_each_grid_point_builds_its_options_into_the_site_through_the_train_cli(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    for point in sensitivity_grid():
        model, _ = build_model(point.variant, overrides=SMALL)
        backends = {n: m for n, m in model.named_modules() if isinstance(m, OptimizationAttention)}
        assert sorted(backends) == ["decoder.0.cross_attn.backend", "decoder.1.cross_attn.backend"]
        for backend in backends.values():
            got = (backend.lam, backend.iterations, backend.random_tokens)
            assert got == tuple(point.options.values()), point.variant.name


def test_one_grid_point_trains_through_train_py(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    point = sensitivity_grid()[2]  # lam=0.3
    result = tiny_runner("grid").run(point.variant, 0)
    assert (result.variant, result.status, result.global_step) == (point.variant.name, "ok", 2)
    assert 0.0 <= result.metrics["test/mAP"] <= 1.0
    folder = Path("logs") / "grid" / "optimization_decoder_cross@lam-0.3-s0"
    assert result.log_dir == str(folder) and (folder / "record.json").is_file()
    hparams = yaml.safe_load((folder / "hparams.yaml").read_text())
    assert hparams["decoder_cross"] == {**SPEC, "lam": 0.3, "iterations": 10, "random_tokens": 8}
    # The backends' diagnostics after the last step reach the record (the keys90 column).
    keys90 = [k for k in result.metrics if k.endswith("/keys90")]
    assert sorted(keys90) == [f"attention/net.decoder.{i}.cross_attn/keys90" for i in (0, 1)]
    assert all(result.metrics[k] >= 1.0 for k in keys90)


@pytest.mark.parametrize("grid", [GRID, ABLATIONS], ids=["sensitivity", "ablation"])
def test_each_grid_point_has_the_overlay_its_plan_runs(grid):
    # The plans run a point as configs/detection/grid/<point>.yaml: the same site spec as the
    # point's override of its centre, so the page's options are what the run trained.
    centre = {id(GRID): "optimization_decoder_self", id(ABLATIONS): SENSITIVITY_DEFAULT}[id(grid)]
    for point in sensitivity_grid(centre, grid=grid)[1:]:
        overlay = CONFIGS / "grid" / f"{point.variant.name}.yaml"
        assert Variant.from_config(overlay).name == point.variant.name
        sites = yaml.safe_load(overlay.read_text())["model"]["init_args"]
        assert sites == _site_specs(point.variant), point.variant.name
