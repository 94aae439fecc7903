"""The detection study's variants: config overlays, each paired with the control it differs
from in one thing only, and the difference named site by site."""

from __future__ import annotations

import pytest

from attn_lightning.models.detr import SITES
from lab.studies.detection.variants import (
    CONFIGS,
    CONTROLS,
    STUDY_VARIANTS,
    difference,
    overlays,
    site_specs_of,
)


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
