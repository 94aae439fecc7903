"""The cross-attention probe: weights of any backend, the statistics on hand-made cases, one
trained run read back from its record, and a clear error for a run that does not exist."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_softmax
from lab.studies.detection.probe import (
    STATS,
    attention_weights,
    layer_stats,
    object_cells,
    run_rows,
)
from lab.studies.detection.variants import CONFIGS
from lab.studies.runner import Variant
from tests.lab.studies.detection.runs import tiny_runner


def _qkv(l_q=3, s=4, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 2, n, d, generator=g) for n in (l_q, s, s))


def test_weights_of_softmax_are_its_probabilities_and_of_optimization_its_power_weights():
    q, k, v = _qkv()
    softmax = build_attention("softmax", head_dim=4)
    ref_v = torch.eye(4).expand(2, 2, 4, 4)
    ref = naive_softmax(q, k, ref_v).float()  # the reference computes in float64
    torch.testing.assert_close(attention_weights(softmax, q, k, v), ref)
    opt = build_attention("optimization", head_dim=4).eval()
    w = attention_weights(opt, q, k, v)
    assert w.shape == (2, 2, 3, 4) and (w >= 0).all()
    torch.testing.assert_close(w @ v, opt(q, k, v))  # out = w @ v, as the backend mixes
    rows = w.sum(-1)
    assert torch.all(((rows - 1).abs() < 1e-5) | (rows == 0))


def test_object_cells_and_statistics_on_hand_made_weights():
    # A 2×2 grid; a box over the left half covers cells 0 and 2 (row-major).
    left = torch.tensor([[0.25, 0.5, 0.5, 1.0]])
    assert object_cells(left, 2).tolist() == [True, False, True, False]
    targets = [{"boxes": left}, {"boxes": left}]
    # Every query of every image puts all its weight on cell 0.
    same = torch.zeros(2, 1, 3, 4)
    same[..., 0] = 1.0
    stats = layer_stats(same, targets)
    assert set(stats) == set(STATS)
    assert stats["mass on objects"] == 1.0 and stats["cells in objects"] == 0.5
    assert stats["argmax spread"] == 0.5  # one cell over the 2 images: 1/B
    assert stats["query overlap"] == 1.0 and stats["std across images"] == 0.0
    # Queries on different cells, and a different cell in each image.
    apart = torch.zeros(2, 1, 3, 4)
    for b in range(2):
        for n in range(3):
            apart[b, 0, n, (n + b) % 4] = 1.0
    stats = layer_stats(apart, targets)
    assert stats["query overlap"] == 0.0 and stats["argmax spread"] == 1.0
    assert layer_stats(-apart, targets) == stats  # signed weights: where, not which sign
    with pytest.raises(ValueError, match="5 keys are not a square"):
        layer_stats(torch.zeros(1, 1, 1, 5), targets[:1])


def test_probe_reads_a_trained_run_back(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = tiny_runner("probe")
    variant = Variant.from_config(CONFIGS / "optimization_decoder_cross.yaml")
    assert runner.run(variant, 0).status == "ok"
    # a run with a record and a local checkpoint but no probe.csv yet is measured, and kept
    rows = run_rows([tmp_path / "logs" / "probe"], variant.name, 0, batches=1)
    assert [(r["layer"], r["backend"]) for r in rows] == [(0, "optimization"), (1, "optimization")]
    assert all(0.0 <= r["mass on objects"] <= 1.0 and 0 < r["argmax spread"] <= 1 for r in rows)
    kept = tmp_path / "logs" / "probe" / "optimization_decoder_cross-s0" / "probe.csv"
    lines = kept.read_text().splitlines()
    assert sum(line.startswith("optimization_decoder_cross,0,") for line in lines) == 2
    assert run_rows([kept.parents[1]], variant.name, 0, batches=1) == [
        {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()} for row in rows
    ]
