"""image_completion.md's generation-speed table, recomputed from the committed benchmark CSV
(``image28_mnist5k_generation_cpu.csv``): images/s as batch over the best batch's seconds, and
the ratios divided from those unrounded rates."""

from __future__ import annotations

import re

from tests.docs.pages import RESULTS, page_table, runs

PAGE = "image_completion.md"
BACKENDS = {
    "softmax, preallocated KV cache": "softmax",
    "linear (elu + 1), recurrent step": "linear:feature_map=elu",
    "performer (m = 64), recurrent step": (
        "performer:num_features=64,kernel=positive,projection=orthogonal"
    ),
    "polysketch (r = 32), recurrent step": "polysketch:sketch=random,degree=4,sketch_size=32",
}
BATCHES = ("1", "32", "128")


def _rates() -> dict[tuple[str, str, str], float]:
    rows = runs("image28_mnist5k_generation_cpu")
    return {
        (r["backend"], r["method"], r["batch"]): int(r["batch"]) / float(r["seconds"]) for r in rows
    }


def test_generation_table_is_the_benchmark_csv():
    rate = _rates()
    table = {row[0]: row[1:] for row in page_table(PAGE, "| images/s (2 × 64, CPU, 1 thread) |")}
    recompute = rate[("softmax", "recompute", "1")]
    assert table["softmax, prefix recompute (what the student timed)"][0] == f"{recompute:.3g}"
    assert not any(("softmax", "recompute", b) in rate for b in BATCHES[1:])
    for label, backend in BACKENDS.items():
        assert table[label] == [f"{rate[(backend, 'step', b)]:.2f}" for b in BATCHES], label
    linear = [rate[("linear:feature_map=elu", "step", b)] for b in BATCHES]
    kv = [rate[("softmax", "step", b)] for b in BATCHES]
    assert table["**linear ÷ softmax recompute**"] == [
        f"**{linear[0] / recompute:.1f}×**",
        "–",
        "–",
    ]
    assert table["**linear ÷ softmax KV cache**"] == [
        f"**{x / k:.2f}×**" for x, k in zip(linear, kv)
    ]


def _histogram(source: str) -> tuple[float, float]:
    """(all pixels, held-out pixels) bits/dim of the committed histogram output line that
    starts with ``source``."""
    for line in (RESULTS / "image_histogram_baselines.md").read_text().splitlines():
        output = line.strip("| ").rsplit(" | ", 1)[-1]
        if output.startswith(source):
            found = re.search(r"([\d.]+) bits/dim on all \d+ pixels, ([\d.]+) on the held", output)
            assert found, line
            return float(found[1]), float(found[2])
    raise AssertionError(f"no histogram output for {source}")


def test_histogram_baselines_on_the_page_are_the_committed_outputs():
    page = (RESULTS / PAGE).read_text()
    for source, digits in (
        ("mnist5k 28x28, 256 levels, per-pixel histogram fitted on train (4000 images, add-0.5 "
         "over the 256 levels used), test", 3),
        ("mnist5k 28x28, 256 levels, per-pixel histogram fitted on train (4000 images, add-0.5 "
         "over the 256 levels used), val", 3),
        ("digits 28x28", 3),
        ("digits 8x8", 2),
    ):  # fmt: skip
        for value in _histogram(source):
            assert f"{value:.{digits}f}" in page, (source, value)
