"""``benchmark learned``: the coefficients and q'/k' LayerNorm scales of real attention modules,
read back per layer and checkpoint; a file without them is a usage error naming it."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from attn_lightning.attention.polynomial import PolynomialAttention
from attn_lightning.attention.polysketch import PolySketchAttention
from attn_lightning.records.files import read_csv
from lab.benchmarks.cli import main
from lab.benchmarks.kernel_shapes import learned_rows


class Model(nn.Module):
    """Two attention sites with learned coefficients, named as a study's checkpoint names them."""

    def __init__(self) -> None:
        super().__init__()
        self.exact = PolynomialAttention(head_dim=16, degree=4, learned_coefficients=True)
        self.sketch = PolySketchAttention(head_dim=16, sketch_size=8, learned_coefficients=True)


def _save(tmp_path, model: nn.Module, run: str = "poly-s3"):
    path = tmp_path / run / "best-step=600.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": model.state_dict()}, path)
    return path


def test_reads_every_layers_coefficients_and_gamma_norm(tmp_path, capsys):
    model = Model()
    with torch.no_grad():  # what training could have done: scale γ, move a coefficient
        model.exact.qk_norm.weight.mul_(1.5)
        model.exact.coefficient_logits[2] = math.log(math.expm1(0.25))
    path = _save(tmp_path, model)
    assert main(["learned", "--checkpoints", str(path), "--out", str(tmp_path / "o")]) == 0
    _, rows = read_csv(tmp_path / "o" / "learned_kernels.csv")
    exact, sketch = rows
    assert exact["run"] == "poly-s3" and exact["layer"] == "exact" and exact["form"] == "exact"
    got = [float(exact[f"a{i}"]) for i in range(5)]
    assert got == pytest.approx([1, 1, 0.25, 1 / 6, 1 / 24], rel=1e-5)  # 1/i! but a2
    # γ starts at D^{-1/4} per entry: ‖γ‖ = D^{1/4} = 2 at D = 16; here scaled by 1.5.
    assert float(exact["gamma_norm_init"]) == pytest.approx(2.0)
    assert float(exact["gamma_norm"]) == pytest.approx(3.0)
    assert float(exact["gamma_min"]) == pytest.approx(0.75)
    # γ × 1.5 scales q'ᵀk' by c = 2.25: b_i = a_i c^i is the same kernel at γ's start.
    assert float(exact["scale_c"]) == pytest.approx(2.25)
    got_b = [float(exact[f"b{i}"]) for i in range(5)]
    assert got_b == pytest.approx([a * 2.25**i for i, a in enumerate(got)], rel=1e-5)
    assert sketch["b1"] == "" and float(sketch["b4"]) == pytest.approx(1 / 24, rel=1e-5)
    assert sketch["form"] == "linear-time, even" and sketch["a1"] == sketch["a3"] == ""
    assert float(sketch["a4"]) == pytest.approx(1 / 24, rel=1e-5)
    assert float(sketch["gamma_norm"]) == pytest.approx(2.0)
    assert "| poly-s3 | exact | exact | 1 | 1 | 0.25 |" in capsys.readouterr().out


def test_the_effective_coefficients_give_the_same_scores(tmp_path):
    # Σ a_i d^i on the γ-scaled inputs equals Σ b_i d₀^i on the inputs at γ's start.
    torch.manual_seed(0)
    model = Model().double()
    with torch.no_grad():
        model.exact.qk_norm.weight.mul_(1.3)
        model.exact.coefficient_logits.add_(torch.randn(5, dtype=torch.float64) * 0.3)
    row = learned_rows(_save(tmp_path, model))[0]  # full precision (the CSV rounds)
    b = [row[f"b{i}"] for i in range(5)]
    q, k = torch.randn(2, 6, 16, dtype=torch.float64).unbind(0)
    exact = model.exact
    with torch.no_grad():
        scores = exact.kernel(exact.normalize_inputs(q) @ exact.normalize_inputs(k).T)
        exact.qk_norm.weight.div_(1.3)  # back to the start
        dot0 = exact.normalize_inputs(q) @ exact.normalize_inputs(k).T
    expected = sum(b_i * dot0**i for i, b_i in enumerate(b)).clamp_min(0)
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-8)


def test_a_checkpoint_without_learned_coefficients_is_a_usage_error(tmp_path, capsys):
    path = _save(tmp_path, PolynomialAttention(head_dim=16, degree=4))
    good = _save(tmp_path, Model(), run="good-s0")
    with pytest.raises(SystemExit) as exc:
        main(["learned", "--checkpoints", str(good), str(path), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    assert str(path) in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing written for the good one either


@pytest.mark.parametrize("content", [None, b"not a checkpoint", "pickled"])
def test_a_missing_or_corrupt_file_is_a_usage_error_naming_it(tmp_path, capsys, content):
    path = tmp_path / "x.ckpt"
    if content == "pickled":  # a class weights_only refuses: torch advises weights_only=False
        torch.save({"state_dict": {}, "x": argparse.Namespace()}, path)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit) as exc:
        main(["learned", "--checkpoints", str(path), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: --checkpoints {path}" in err, err
    assert "weights_only" not in err


def test_ranges_group_a_variants_seeds_per_layer(tmp_path):
    paths = []
    for seed, scale in ((0, 1.0), (1, 2.0)):
        model = Model()
        with torch.no_grad():
            model.exact.qk_norm.weight.mul_(scale)
        paths.append(str(_save(tmp_path, model, run=f"poly-s{seed}")))
    main(["learned", "--checkpoints", *paths, "--out", str(tmp_path / "o")])
    _, rows = read_csv(tmp_path / "o" / "learned_kernels_ranges.csv")
    exact = next(r for r in rows if r["layer"] == "exact")
    assert exact["variant"] == "poly" and exact["runs"] == "2"
    assert exact["gamma_norm"] == "2 – 4" and exact["a0"] == "1 – 1"
    assert next(r for r in rows if r["layer"] == "sketch")["a1"] == "–"


def test_the_polynomial_page_quotes_the_committed_per_seed_csv():
    """Every range polynomial.md gives for the learned kernels is the min – max of the
    committed per-seed, per-layer CSV that ``learned`` wrote."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "results"
    _, rows = read_csv(docs / "polynomial_len50_learned.csv")
    page = " ".join((docs / "polynomial.md").read_text().split())

    def span(form: str, key: str, digits: int, layer: str = "") -> str:
        values = [float(r[key]) for r in rows if r["form"] == form and layer in r["layer"]]
        return f"{min(values):.{digits}f}–{max(values):.{digits}f}"

    exact, even = "exact", "linear-time, even"
    digits = (2, 2, 2, 2, 3)
    coefficients = ", ".join(span(exact, f"a{i}", d) for i, d in enumerate(digits))
    assert f"a = ({coefficients})" in page
    sketch = ", ".join(span(even, f"a{i}", d) for i, d in ((0, 2), (2, 2), (4, 3)))
    assert f"(a₀, a₂, a₄) = ({sketch})" in page
    gammas = [span(f, "gamma_norm", 2, f"layers.{n}.") for f in (exact, even) for n in (0, 1)]
    assert f"to {gammas[0]} in layer 0 and {gammas[1]} in layer 1" in page
    assert f"({gammas[2]} and {gammas[3]} in the linear-time form)" in page
    assert len(rows) == 40  # 2 variants × 10 seeds × 2 layers
