"""polynomial.md's PolySketch dip sentence, recomputed from the committed CSVs: each seed's last
spike burst (``_traces_bursts.csv``), best checkpoint, its test loss and the last validation loss
(``_continued_runs.csv``)."""

from __future__ import annotations

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
POLYSKETCH = "polysketch_sketch_size-64"


def _sci(value: float) -> str:
    """``7.5·10⁻⁸``: two significant figures, the page's exponent notation."""
    mantissa, exponent = f"{value:.1e}".split("e")
    superscript = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
    return f"{mantissa}·10{str(int(exponent)).translate(superscript)}"


def test_polysketch_dip_sentence_is_the_csvs():
    text = " ".join((RESULTS / PAGE).read_text().split())
    bursts = runs("polynomial_len50_10k_traces_bursts")
    per_run = {r["seed"]: r for r in runs("polynomial_len50_10k_continued_runs")
               if r["variant"] == POLYSKETCH}  # fmt: skip
    seeds = ("3", "4")
    ends = [max(int(b["last_step"]) for b in bursts if b["variant"] == POLYSKETCH
                and b["seed"] == s) for s in seeds]  # fmt: skip
    best = [int(per_run[s]["best_ckpt_step"]) for s in seeds]
    test = [_sci(float(per_run[s]["test/loss"])) for s in seeds]
    final = [_sci(float(per_run[s]["final_val_loss"])) for s in seeds]
    assert f"last bursts end at steps {ends[0]:,} and {ends[1]:,}" in text
    assert f"at steps {best[0]:,} and {best[1]:,} (test loss there {test[0]} and {test[1]})" in text
    assert f"at step 10,000, is {final[0]} and {final[1]}" in text
