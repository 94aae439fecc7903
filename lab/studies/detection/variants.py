"""The detection study's variants and how two of them are compared.

A variant is ``configs/detection/<name>.yaml`` (``CONFIGS``) stacked on its ``base.yaml``;
``STUDY_VARIANTS`` is the study in table order and ``CONTROLS`` names the variant each one
differs from in one thing only. A comparison is paired by seed (``results.paired``): per seed,
the variant's ``COMPARED`` metric minus its control's. Both the study's tables
(``detection.report``) and its sensitivity grid (``detection.sensitivity``) compare this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from attn_lightning.models.detr import SITES
from attn_lightning.tasks.detection import site_specs
from lab.results import paired
from lab.results.records import RunResult
from lab.studies.runner import CONFIGS as CHECKOUT_CONFIGS
from lab.studies.runner import Variant

CONFIGS = CHECKOUT_CONFIGS / "detection"
# The study, in table order: each optimization row right after the control it is compared with.
STUDY_VARIANTS = (
    "softmax",
    "softmax_no_projections",
    "softmax_no_projections_encoder_self",
    "mean",
    "softmax_no_qk_encoder_self",
    "optimization_encoder_self",
    "pool_encoder_self",
    "softmax_no_qk_decoder_self",
    "optimization_decoder_self",
    "softmax_no_qk_decoder_cross",
    "optimization_decoder_cross",
    "softmax_no_qk_all",
    "optimization_all",
)
# Variant -> the variant it differs from in one thing only (the comment of each config says so):
# optimization and pool -> softmax with the same projections at the same site(s) (the mixing);
# the no_qk controls -> softmax (the missing Q/K matrices); mean (projections: false at the
# encoder) -> softmax without projections at the encoder, which -> softmax (the missing matrices).
CONTROLS = {
    "optimization_encoder_self": "softmax_no_qk_encoder_self",
    "optimization_decoder_self": "softmax_no_qk_decoder_self",
    "optimization_decoder_cross": "softmax_no_qk_decoder_cross",
    "optimization_all": "softmax_no_qk_all",
    "pool_encoder_self": "softmax_no_qk_encoder_self",
    "softmax_no_qk_encoder_self": "softmax",
    "softmax_no_qk_decoder_self": "softmax",
    "softmax_no_qk_decoder_cross": "softmax",
    "softmax_no_qk_all": "softmax",
    "softmax_no_projections": "softmax",
    "softmax_no_projections_encoder_self": "softmax",
    "mean": "softmax_no_projections_encoder_self",
}
COMPARED = "test/mAP"  # the metric of the "Δ vs control" column
DELTA_VS_CONTROL = paired.delta_title(COMPARED)
WHAT_DIFFERS = "what differs from the control"
PROJECTIONS = {True: "all", "no_qk": "no_qk", False: "none"}  # as detection_sites.md names them


def overlays(names: Sequence[str]) -> list[Variant]:
    """The variants ``configs/detection/<name>.yaml`` (``all``: ``STUDY_VARIANTS``), each once,
    in the order given; ValueError naming any without a file, and the names there are."""
    names = [n for name in names for n in (STUDY_VARIANTS if name == "all" else (name,))]
    missing = [n for n in names if not (CONFIGS / f"{n}.yaml").is_file()]
    if missing:
        there = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem != "base"))
        raise ValueError(f"no config for {missing} under {CONFIGS}; allowed: all, {there}")
    return [Variant.from_config(CONFIGS / f"{n}.yaml") for n in dict.fromkeys(names)]


def site_specs_of(name: str) -> dict[str, dict[str, Any]]:
    """Variant ``name``'s ``{site: {name, projections, **options}}`` as ``DetectionTask``
    resolves them, read from its YAML stacked on ``base.yaml`` (no model is built)."""
    args: dict[str, Any] = {}
    for stem in ("base", name):
        text = (CONFIGS / f"{stem}.yaml").read_text()
        args.update((yaml.safe_load(text).get("model") or {}).get("init_args") or {})
    return site_specs(
        attention=args["attention"],
        projections=args["projections"],
        sites={site: args.get(site) for site in SITES},
        override=None,
    )


def difference(name: str, control: str) -> str:
    """What variant ``name`` changes from ``control``, site by site, e.g.
    ``decoder_cross: softmax → optimization`` or ``every site: projections all → no_qk``."""
    mine, theirs = site_specs_of(name), site_specs_of(control)
    changes: dict[str, list[str]] = {}
    for site in SITES:
        a, b = dict(mine[site]), dict(theirs[site])
        new, old = a.pop("projections"), b.pop("projections")
        what = []
        if a != b:
            what.append(f"{b['name']} → {a['name']}" if a["name"] != b["name"] else "options")
        if new != old:
            what.append(f"projections {PROJECTIONS[old]} → {PROJECTIONS[new]}")
        if what:
            changes.setdefault(", ".join(what), []).append(site)
    return "; ".join(
        f"{'every site' if len(sites) == len(SITES) else ' + '.join(sites)}: {what}"
        for what, sites in changes.items()
    )


def comparisons(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per variant whose control also ran: ``{control, what differs, Δ test mAP vs control
    [95 % CI]}``, paired by seed (``results.paired.comparisons`` with ``CONTROLS``)."""
    rows = paired.comparisons(results, CONTROLS, COMPARED)
    for name, row in rows.items():
        row[WHAT_DIFFERS] = difference(name, CONTROLS[name])
        row[DELTA_VS_CONTROL] = row.pop(DELTA_VS_CONTROL)  # the Δ after what it measures
    return rows
