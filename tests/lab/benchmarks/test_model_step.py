"""The ``model`` subcommand: tiny training steps write their files; the crossover rule.

No speed is asserted: only that the numbers exist and lie in their ranges.
"""

from __future__ import annotations

import pytest
import torch

from attn_lightning.models import ShortConvolution
from lab.benchmark import main
from lab.benchmarks.measure import parse_backend
from lab.benchmarks.model_step import AttentionTimer, Row, Settings, build_model
from lab.benchmarks.report import crossover, crossover_table, read_csv

COLUMNS = {
    "model",
    "width",
    "backend",
    "n",
    "batch",
    "params",
    "step_ms",
    "tokens_per_s",
    "attn_ms",
    "attn_share",
    "repeats",
    "note",
}


def test_tiny_run_writes_csv_markdown_and_figure(tmp_path, capsys):
    args = ["model", "--models", "reversal", "pixel", "--backends", "softmax", "linear"]
    args += ["--lengths", "16", "32", "--widths", "16", "--repeats", "1", "--warmup", "1"]
    assert main([*args, "--device", "cpu", "--out", str(tmp_path), "--tag", "ms"]) == 0
    out = capsys.readouterr().out
    assert {p.name for p in tmp_path.iterdir()} == {"ms.csv", "ms.md", "ms.png"}
    meta, rows = read_csv(tmp_path / "ms.csv")
    assert "torch" in meta["versions"] and "hooks" in meta["attention_share"]
    assert set(rows[0]) >= COLUMNS
    points = {(r["model"], r["backend"], int(r["n"])) for r in rows}
    assert points == {
        (m, b, n) for m in ("reversal", "pixel") for b in ("softmax", "linear") for n in (16, 32)
    }
    for r in rows:
        assert 0.0 < float(r["attn_share"]) < 1.0
        assert float(r["tokens_per_s"]) > 0 and int(r["params"]) > 0
    text = (tmp_path / "ms.md").read_text()
    assert "- **device**: `cpu" in text and out.strip() in text
    assert "| reversal | 16 | linear |" in out and "attention-only crossover" in out


@pytest.mark.parametrize("model", ["reversal", "pixel"])
def test_attention_timer_counts_every_layer_forward_and_backward(model):
    settings = Settings(device=torch.device("cpu"), layers=3, heads=2)
    net, loss_fn = build_model(model, n=8, width=8, spec=parse_backend("linear"), settings=settings)
    timer = AttentionTimer(net, settings.device)
    loss_fn().backward()
    assert len(timer._calls) == 3
    assert all(None not in call.marks and call.inputs_left == 0 for call in timer._calls)
    assert timer.seconds() > 0
    timer.reset()
    assert timer.seconds() == 0


@pytest.mark.parametrize("model", ["reversal", "pixel"])
def test_short_conv_reaches_every_layer(model):
    settings = Settings(device=torch.device("cpu"), layers=3, heads=2, short_conv=4)
    net, loss_fn = build_model(model, n=8, width=8, spec=parse_backend("linear"), settings=settings)
    convs = [m for m in net.modules() if isinstance(m, ShortConvolution)]
    assert [c.kernel_size for c in convs] == [4, 4, 4]
    loss_fn().backward()
    assert all(c.weight.grad is not None for c in convs)


def test_reversal_needs_an_even_length():
    settings = Settings(device=torch.device("cpu"))
    with pytest.raises(ValueError, match="even N"):
        build_model("reversal", n=7, width=8, spec=parse_backend("softmax"), settings=settings)
    with pytest.raises(ValueError, match="unknown model"):
        build_model("vision", n=8, width=8, spec=parse_backend("softmax"), settings=settings)


def test_crossover_is_the_first_n_of_the_final_faster_run():
    softmax = {256: 1.0, 1024: 4.0, 4096: 16.0, 16384: 64.0}
    assert crossover({256: 2.0, 1024: 5.0, 4096: 8.0, 16384: 30.0}, softmax) == 4096
    # Faster at 256, slower at 1024: the crossover is where it stays faster.
    assert crossover({256: 0.5, 1024: 5.0, 4096: 8.0, 16384: 30.0}, softmax) == 4096
    assert crossover({256: 0.5, 1024: 3.0, 4096: 8.0}, softmax) == 256
    assert crossover({256: 2.0, 1024: 8.0, 4096: 20.0}, softmax) is None
    assert crossover({256: 0.5, 1024: 3.0, 4096: 20.0}, softmax) is None  # slower at the end
    assert crossover({1024: 3.0, 65536: 1.0}, softmax) == 1024  # only common N count
    assert crossover({}, softmax) is None


def _row(backend: str, n: int, step: float, attn: float) -> Row:
    return Row("pixel", 64, 2, 4, backend, n, 1, "float32", step_ms=step, attn_ms=attn)


def test_crossover_table_end_to_end_beside_attention_only():
    rows = [
        _row("softmax", 256, 10.0, 2.0),
        _row("softmax", 1024, 40.0, 30.0),
        _row("linear", 256, 12.0, 1.0),
        _row("linear", 1024, 20.0, 5.0),
        _row("performer", 256, 20.0, 8.0),
        _row("performer", 1024, 80.0, 40.0),
    ]
    table = crossover_table(rows)
    assert "| pixel | 64 | linear | N=1024 | 2× at N=1024 | N=256 | 6× at N=1024 |" in table
    assert "| pixel | 64 | performer | none | 0.5× at N=1024 | none | 0.75× at N=1024 |" in table
    assert "| softmax |" not in table
