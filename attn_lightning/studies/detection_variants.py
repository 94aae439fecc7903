"""The detection study's variants and how two of them are compared.

A variant is ``configs/detection/<name>.yaml`` (``CONFIGS``) stacked on its ``base.yaml``;
``STUDY_VARIANTS`` is the study in table order and ``CONTROLS`` names the variant each one
differs from in one thing only. A comparison is paired by seed (``studies.paired``): per seed,
the variant's ``COMPARED`` metric minus its control's. Both the study (``studies.detection``)
and its sensitivity grid (``studies.detection_sensitivity``) compare this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attn_lightning.studies import paired
from attn_lightning.studies.paired import PairedDelta
from attn_lightning.studies.runner import ROOT, Variant
from attn_lightning.studies.tables import RunResult

CONFIGS = ROOT / "configs" / "detection"
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


def variants(names: Sequence[str]) -> list[Variant]:
    """The variants ``configs/detection/<name>.yaml`` (``all``: ``STUDY_VARIANTS``), each once,
    in the order given; SystemExit naming any missing file."""
    names = [n for name in names for n in (STUDY_VARIANTS if name == "all" else (name,))]
    missing = [n for n in names if not (CONFIGS / f"{n}.yaml").is_file()]
    if missing:
        raise SystemExit(f"no config for {missing} under {CONFIGS}")
    return [Variant.from_config(CONFIGS / f"{n}.yaml") for n in dict.fromkeys(names)]


def per_seed(results: Sequence[RunResult], name: str, key: str = COMPARED) -> dict[int, float]:
    """``{seed: value of key}`` over the finished runs of variant ``name`` that report it."""
    return paired.per_seed(results, name, key)


def format_delta(delta: PairedDelta | None) -> str | None:
    """A paired Δ of ``COMPARED`` in its column's digits: ``+0.012 [-0.004, +0.028] (n=3)``."""
    return paired.format_delta(delta, COMPARED)


def comparisons(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per variant whose control also ran: ``{control, Δ test mAP vs control [95 % CI]}``,
    paired by seed (``studies.paired.comparisons`` with ``CONTROLS``)."""
    return paired.comparisons(results, CONTROLS, COMPARED)
