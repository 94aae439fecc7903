"""polynomial.md's "high-magnitude learned coefficients" reading at 10,000 steps, recomputed from
the best checkpoints' coefficients (``polynomial_len50_10k_learned{,_s4}.csv``) and the logged
ones (``polynomial_len50_10k_traces_coefficients.csv``)."""

from __future__ import annotations

import math

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
LAYER0, LAYER1 = "net.encoder.layers.0.attn", "net.encoder.layers.1.attn"
START = [1 / math.factorial(i) for i in range(5)]  # the Taylor start of a_i


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _best(name: str, layer: str) -> list[dict[str, float]]:
    """The numeric columns of every best checkpoint's row for ``layer``."""
    rows = [r for r in runs(name) if r["layer"].startswith(layer)]
    return [
        {k: float(v) for k, v in r.items() if k[0] in "abgs" and k != "gamma_min"} for r in rows
    ]


def _span(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def _logged(seed: int, layer: str, key: str) -> dict[int, float]:
    """``key`` of ``seed``'s ``layer`` by logged step."""
    rows = runs("polynomial_len50_10k_traces_coefficients")
    return {int(r["step"]): float(r["value"]) for r in rows
            if int(r["seed"]) == seed and r["layer"] == layer and r["key"] == key}  # fmt: skip


def test_best_checkpoint_coefficients_are_the_learned_csvs():
    page = _page()
    layer1 = _best("polynomial_len50_10k_learned", LAYER1)
    assert len(layer1) == 4
    gamma, c = ([r[k] for r in layer1] for k in ("gamma_norm", "scale_c"))
    b3, b4 = ([r[k] for r in layer1] for k in ("b3", "b4"))
    assert f"‖γ‖ is {_span(gamma, 1)} against its start of 2, c = {_span(c, 1)}" in page
    assert f"b₃ = {_span(b3, 1)} and b₄ = {_span(b4, 1)} in layer 1" in page
    times3, times4 = ([v / START[i] for v in b] for i, b in ((3, b3), (4, b4)))
    assert f"**{_span(times3, 0)}× and {_span(times4, 0)}× their start**" in page
    layer0 = min(_best("polynomial_len50_10k_learned", LAYER0), key=lambda r: r["gamma_norm"])
    gamma0, c0 = layer0["gamma_norm"], layer0["scale_c"]
    assert f"Layer 0 goes the other way on one seed (‖γ‖ {gamma0:.2f}, c = {c0:.2f})" in page
    (s4,) = _best("polynomial_len50_10k_learned_s4", LAYER1)
    assert (
        f"‖γ‖ {s4['gamma_norm']:.2f}, c = {s4['scale_c']:.2f}, b₃ = {s4['b3']:.2f} and b₄ = "
        f"{s4['b4']:.2f}, {s4['b3'] / START[3]:.0f}× and {s4['b4'] / START[4]:.0f}× their start"
    ) in page
    assert min(times3) > s4["b3"] / START[3] and min(times4) > s4["b4"] / START[4]


def test_logged_coefficients_are_the_traces_csv():
    page = _page()
    last = {
        (seed, layer, key): values[max(values)]
        for seed in range(5)
        for layer in (LAYER0, LAYER1)
        for key in ("a0", "a1", "a2", "a3", "a4")
        if (values := _logged(seed, layer, key))
    }
    assert len(last) == 50
    largest = max(last, key=last.__getitem__)
    assert largest[1:] == (LAYER0, "a0")
    assert f"the largest is {last[largest]:.2f} (layer 0's a₀)" in page
    assert f"(every a_i ≤ {last[largest]:.2f})" in page
    drift = {k: _span([last[(s, LAYER1, k)] for s in range(5)], 2) for k in ("a0", "a2", "a3")}
    assert (
        f"(a₀ 1 → {drift['a0']}, a₂ 0.5 → {drift['a2']}, a₃ 0.167 → {drift['a3']}; five seeds)"
    ) in page
    c1, c0 = _logged(3, LAYER1, "c"), _logged(3, LAYER0, "c")
    end = max(c1)
    # the CSV keeps a log every 250 steps: step 500 is the traces table's "step 600" column
    assert 600 not in c1 and max(s for s in c1 if s <= 600) == 500
    climb = (
        f"1 → {c1[500]:.2f} (step 500, the last log the committed file keeps before the table's "
        f'"step 600") → {c1[2500]:.2f} (2,500) → {c1[5000]:.2f} (5,000)'
    )
    assert (
        f"layer 1's c climbs for the first half of the run, {climb}, and stays there "
        f"({c1[end]:.2f} at the end), layer 0's rises to {c0[500]:.2f} by step 500 and settles "
        f"at {c0[max(c0)]:.2f}"
    ) in page
    assert abs(c1[end] - c1[5000]) < 0.01
    seed4 = _logged(4, LAYER1, "c")
    assert f"(seed 4's layer 1: {seed4[max(seed4)]:.2f} at the end)" in page
    seed4_layer0 = _logged(4, LAYER0, "c")
    assert f"on seed 4 (logged c {seed4_layer0[max(seed4_layer0)]:.2f})" in page
