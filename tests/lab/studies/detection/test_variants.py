"""The detection study's variants: config overlays, each paired with the control it differs
from in one thing only, the difference named site by site; the sensitivity grid around one:
variants and overrides, names, errors, one real run (its pages rebuilt from the committed
records: ``tests/docs/test_plan_pages.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from attn_lightning.attention.optimization import OptimizationAttention
from attn_lightning.models.detr import SITES
from lab.studies.detection import variants
from lab.studies.detection.report import build_model, write_page
from lab.studies.detection.variants import (
    ABLATIONS,
    CONFIGS,
    CONTROLS,
    GRID,
    SENSITIVITY_DEFAULT,
    STUDY_VARIANTS,
    difference,
    overlays,
    sensitivity_grid,
    sensitivity_sites,
    site_specs_of,
)
from lab.studies.runner import Variant
from tests.lab.studies.detection.runs import SMALL, tiny_runner

ONE_AT_A_TIME = [
    "optimization_decoder_cross",
    "optimization_decoder_cross@lam=0.03",
    "optimization_decoder_cross@lam=0.3",
    "optimization_decoder_cross@iterations=5",
    "optimization_decoder_cross@iterations=20",
    "optimization_decoder_cross@random_tokens=0",
]
SPEC = {"name": "optimization", "projections": "no_qk", "dictionary": "values"}


def test_variants_are_the_detection_overlays():
    (softmax,) = overlays(["softmax"])
    assert softmax.name == "softmax" and softmax.configs[0].endswith(
        "configs/detection/softmax.yaml"
    )
    with pytest.raises(
        ValueError, match=r"no config for \['no_such_variant'\].*allowed: all, mean"
    ):
        overlays(["softmax", "no_such_variant"])


def test_the_study_pairs_each_optimization_variant_with_its_no_qk_control():
    assert [v.name for v in overlays(["all"])] == list(STUDY_VARIANTS)
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
    assert [v.name for v in overlays(["softmax", "all"])] == list(STUDY_VARIANTS)


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


def _site_specs(variant: Variant) -> dict[str, dict]:
    """The override of each site: ``model.init_args.<site>={json}`` -> {site: spec}."""
    specs = {}
    for override in variant.overrides:
        key, _, value = override.partition("=")
        specs[key.removeprefix("model.init_args.")] = json.loads(value)
    return specs


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
    monkeypatch.setattr(variants, "CONFIGS", tmp_path)
    sites = {"decoder_self": {**SPEC, "lam": 0.1}, "decoder_cross": {**SPEC, "lam": 0.3}}
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump({"model": {"init_args": sites}}))
    with pytest.raises(ValueError, match=r"'mixed' sets lam differently per site"):
        sensitivity_grid("mixed")


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
