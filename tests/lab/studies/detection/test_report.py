"""The detection report kinds: refusals (a page without runs, a probe run without its rows or
checkpoint), each variant's model built through train.py's parser and measured, the
``detection_sites`` counts taken from that model, and the multiplicity table's family and Holm
order (the committed pages are rebuilt from their records: ``tests/docs/test_plan_pages.py``)."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.records import write_csv
from lab.benchmarks.flop_count import CallShape
from lab.benchmarks.flops import attention_flops
from lab.benchmarks.report import read_csv
from lab.results import paired
from lab.results.records import RunResult
from lab.studies.detection.report import (
    build_model,
    measure,
    multiplicity_rows,
    write_page,
    write_probe,
    write_sites,
)
from lab.studies.detection.variants import overlays
from tests.lab.studies.detection.runs import fake_record


def test_a_page_without_runs_to_show_is_refused(tmp_path):
    with pytest.raises(ValueError, match="give variants"):
        write_page([tmp_path], tmp_path / "p", command="c", seeds=[0])


def test_the_multiplicity_family_is_every_shown_control_pair_and_the_pairs_named(tmp_path):
    maps = {
        "softmax": [0.80, 0.81, 0.82, 0.80, 0.81],
        "softmax_no_qk_all": [0.76, 0.78, 0.77, 0.75, 0.79],  # control: softmax
        "optimization_all": [0.01, 0.02, 0.01, 0.00, 0.02],  # control: softmax_no_qk_all
        "pool_encoder_self": [0.9] * 5,  # its control (softmax_no_qk_encoder_self) not shown
    }
    results = [
        RunResult(name, seed, 1.0, "ok", {"test/mAP": value})
        for name, values in maps.items()
        for seed, value in enumerate(values)
    ]
    rows = multiplicity_rows(results, {"optimization_all": "softmax"})
    deltas = {
        "`softmax_no_qk_all` − `softmax`": [-0.04, -0.03, -0.05, -0.05, -0.02],
        "`optimization_all` − `softmax_no_qk_all`": [-0.75, -0.76, -0.76, -0.75, -0.77],
        "`optimization_all` − `softmax`": [-0.79, -0.79, -0.81, -0.80, -0.79],
    }
    p_values = {name: paired.t_test(d) for name, d in deltas.items()}
    assert [r["comparison"] for r in rows] == sorted(p_values, key=lambda n: p_values[n])
    assert [r["Holm threshold"] for r in rows] == ["0.0167", "0.0250", "0.0500"]
    assert [r["survives Holm"] for r in rows] == ["yes"] * 3  # all far below 0.0167
    last = rows[-1]
    assert last["comparison"] == "`softmax_no_qk_all` − `softmax`"
    assert last["mean Δ test mAP"] == "-0.038"
    assert float(last["t p"]) == pytest.approx(p_values[last["comparison"]], abs=1e-3)
    assert float(last["detectable Δ, 80 % power"]) == pytest.approx(
        paired.detectable_effect(deltas[last["comparison"]]), abs=1e-3
    )
    with pytest.raises(ValueError, match=r"family names \['mean'\], not shown on the page"):
        multiplicity_rows(results, {"mean": "softmax"})


def test_probe_page_reads_the_rows_kept_beside_each_record(tmp_path):
    folder = fake_record(tmp_path, "runs", "softmax", 0, test={"test/mAP": 0.5})
    row = {"variant": "softmax", "seed": 0, "layer": 0, "backend": "softmax"}
    row |= {"mass on objects": 0.25, "cells in objects": 0.2, "argmax spread": 0.5}
    row |= {"std across images": 0.03, "std across queries": 0.04, "query overlap": 0.125}
    write_csv(folder / "probe.csv", [row], {"batches": "4"}, float_digits=6)
    # a run with neither probe.csv nor a record, or a record but no local checkpoint, is named
    with pytest.raises(FileNotFoundError, match="no record of softmax seed 7 under"):
        write_probe(
            [tmp_path / "runs"], tmp_path / "p", command="c", variants=["softmax"], seeds=[7]
        )
    (folder / "probe.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"no probe\.csv beside the committed record"):
        write_probe(
            [tmp_path / "runs"], tmp_path / "p", command="c", variants=["softmax"], seeds=[0]
        )
    with pytest.raises(ValueError, match="batches must be >= 1, got 0"):
        write_probe([tmp_path], tmp_path / "p", command="c", variants=[], seeds=[0], batches=0)


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


def test_sites_table_of_the_detection_variants(tmp_path, monkeypatch):
    """The ``detection_sites`` page: each variant built by train.py's parser, no training, no
    timing."""
    monkeypatch.chdir(tmp_path)
    names = ["softmax_no_qk_encoder_self", "optimization_encoder_self", "pool_encoder_self"]
    write_sites([], tmp_path / "d_sites", command="the plan's command", variants=names)
    meta, rows = read_csv(tmp_path / "d_sites.csv")
    assert meta["command"] == "the plan's command" and "eval mode" in meta["flops"]
    assert [(r["variant"], r["site"]) for r in rows] == [
        (v, s) for v in names for s in ("encoder_self", "decoder_self", "decoder_cross")
    ]
    # The token counts come from the model: the backbone's grid for a 48×48 image.
    model, size = build_model(overlays(["softmax"])[0])
    grid = model.backbone(torch.zeros(1, 3, size, size)).shape[-2:]
    tokens, queries = grid[0] * grid[1], model.query_embed.num_embeddings
    encoder = {r["variant"]: r for r in rows if r["site"] == "encoder_self"}
    cross = [r for r in rows if r["site"] == "decoder_cross"]
    assert all(int(r["queries"]) == int(r["keys"]) == tokens for r in encoder.values())
    assert all((int(r["queries"]), int(r["keys"])) == (queries, tokens) for r in cross)
    e = model.d_model
    assert all(int(r["params_per_layer"]) == 2 * (e * e + e) for r in encoder.values())  # V, out
    assert {r["projections"] for r in encoder.values()} == {"no_qk"}
    heads = model.encoder[0].attn.num_heads
    shape = CallShape.self_attention(batch=1, heads=heads, n=tokens, head_dim=e // heads)
    opt = encoder["optimization_encoder_self"]
    assert opt["backend"].startswith("optimization:dictionary=values")
    want = attention_flops("optimization", shape, {"iterations": 10})
    assert want is not None and int(opt["attention_flops"]) == want.total
    pool = encoder["pool_encoder_self"]  # a k×k window on the feature map, not a 1-D one
    assert int(pool["attention_flops"]) == heads * tokens * (e // heads) * 9
    md = (tmp_path / "d_sites.md").read_text()
    assert "## Per site" in md and "## Per variant" in md
    assert "| `optimization_encoder_self` | encoder_self |" in md
