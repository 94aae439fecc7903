"""The ``detection_sites`` page kind: each site's tokens, parameters and FLOPs, from the model
train.py's parser builds for each variant (no training, no timing)."""

from __future__ import annotations

import torch

from lab.benchmarks.flops import CallShape, attention_flops
from lab.benchmarks.report import read_csv
from lab.studies.detection.report import build_model, write_sites
from lab.studies.detection.variants import overlays


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
