"""The detection study's model costs: each variant built through train.py's parser, measured."""

from __future__ import annotations

from lab.studies.detection.report import measure
from lab.studies.detection.variants import overlays


def test_measure_builds_each_variant_through_the_train_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plain, no_proj = overlays(["softmax", "softmax_no_projections"])
    small = ["model.init_args.net.d_model=32", "model.init_args.net.d_ff=32"]
    cost = measure(plain, overrides=small, batch=1, repeats=1)
    bare = measure(no_proj, overrides=small, batch=1, repeats=1)
    assert cost["input"] == "1×3×48×48"
    # Q/K/V/out projections of 32×32 (+ bias) at 2 encoder + 2×2 decoder sites.
    assert cost["attention params"] == 6 * 4 * (32 * 32 + 32)
    assert bare["attention params"] == 0
    assert cost["total params"] - bare["total params"] == cost["attention params"]
    assert cost["forward ms / image"] > 0
