"""detection.md's section 2a table (12,000 steps), recomputed from ``detection_long``'s
committed CSVs: per-run test mAP and seconds, the validation curves and the paired interval."""

from __future__ import annotations

import statistics

import pytest

from lab.results.paired import paired_delta
from lab.results.tables import format_mean_std, mean_std
from tests.docs.pages import RESULTS, page_table, runs

PAGE = "detection.md"
METHOD, CONTROL = "optimization_encoder_self", "softmax_no_qk_encoder_self"


def _by_seed(rows: list[dict[str, str]], variant: str, key: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[key]) for r in rows if r["variant"] == variant}


def _signed(value: float, digits: int = 3) -> str:
    return f"{value:+.{digits}f}".replace("-", "−")


def test_section_2a_table_is_its_csvs():
    table = {row[0]: row[1:] for row in page_table(PAGE, "| variant | test mAP (n = 3) |")}
    per_run, curves = runs("detection_long_runs"), runs("detection_long_curves")
    summary = {r["variant"]: r for r in runs("detection_long")}
    method = _by_seed(per_run, METHOD, "test/mAP")
    control = _by_seed(per_run, CONTROL, "test/mAP")
    deltas = [_signed(method[s] - control[s]) for s in sorted(method)]
    interval = summary[METHOD]["Δ test mAP vs control [95 % CI]"].removesuffix(" (n=3)")
    for variant, tail in (
        (METHOD, [interval.replace("-", "−"), ", ".join(deltas)]),
        (CONTROL, ["–", "–"]),
    ):
        row = {k: float(v) for k, v in summary[variant].items() if k.endswith(("_mean", "_std"))}
        # the summary's means are the per-run CSV's (its seconds unrounded: 1,259.499 not 1,259.5)
        mean, std = mean_std(list(_by_seed(per_run, variant, "test/mAP").values()))
        assert (mean, std) == pytest.approx((row["test/mAP_mean"], row["test/mAP_std"]))
        seconds = mean_std(list(_by_seed(per_run, variant, "seconds").values()))
        assert seconds == pytest.approx((row["seconds_mean"], row["seconds_std"]), abs=0.1)
        val = [
            statistics.fmean(
                float(r["val/mAP"])
                for r in curves
                if r["variant"] == variant and int(r["optimizer_steps"]) == step
            )
            for step in (6000, 9000, 12000)
        ]
        assert table[f"`{variant}`"] == [
            format_mean_std(mean, std, digits=3),
            " / ".join(f"{v:.3f}" for v in val),
            *tail,
            f"{row['seconds_mean']:,.0f} ± {row['seconds_std']:,.0f}",
        ], variant


def test_section_2a_last_1500_steps_are_the_curves():
    curves = runs("detection_long_curves")
    page = (RESULTS / PAGE).read_text()
    for variant, label in ((METHOD, "the method"), (CONTROL, "the control")):
        at = {
            (int(r["seed"]), int(r["optimizer_steps"])): float(r["val/mAP"])
            for r in curves
            if r["variant"] == variant
        }
        changes = ", ".join(_signed(at[(s, 12000)] - at[(s, 10500)], 4) for s in range(3))
        assert f"{label} {changes}" in " ".join(page.split()), (label, changes)


def test_section_2a_opening_gap_is_the_main_studys_curves():
    at = {
        (r["variant"], int(r["optimizer_steps"])): float(r["val/mAP"])
        for r in runs("detection_runs_curves")
        if r["seed"] == "0"
    }
    gaps = [_signed(at[(METHOD, s)] - at[(CONTROL, s)]) for s in (3000, 4000, 6000)]
    quoted = "Δ val mAP {} at 3k, {} at 4k, {} at 6k steps, seed 0".format(*gaps)
    assert quoted in " ".join((RESULTS / PAGE).read_text().split())


def test_budget_table_is_its_csvs():
    table = {row[0]: row[1:] for row in page_table(PAGE, "| budget (steps) | test mAP |")}
    (short,) = [r for r in runs("detection_ablation_softmax_runs") if r["seed"] == "0"]
    metrics = ("test/mAP", "test/AP50", "test/AP75")
    assert table["2,000"] == [
        *(f"{float(short[k]):.3f}" for k in metrics),
        "–",
        f"{float(short['seconds']):,.0f}",
    ]
    for budget in (4000, 8000):
        (row,) = runs(f"detection_budget_{budget}")
        val = [float(r["val/mAP"]) for r in runs(f"detection_budget_{budget}_curves")
               if int(r["optimizer_steps"]) % 2000 == 0]  # fmt: skip
        cells = table[f"{budget:,}"]
        assert cells[:4] == [
            *(f"{float(row[f'{k}_mean']):.3f}" for k in metrics),
            " / ".join(f"{v:.3f}" for v in val),
        ], budget
        assert cells[4].startswith(f"{float(row['seconds_mean']):,.0f}"), budget


def test_digits_table_and_cost_are_the_optimization_digits_csvs():
    table = page_table(PAGE, "| variant | what differs from its control | test acc (%) (n = 5) |")
    summary = runs("optimization_digits")
    assert len(table) == len(summary)
    for cells, row in zip(table, summary, strict=True):
        assert cells[0].split()[0] == f"`{row['variant']}`"
        mean, std = float(row["test/acc_mean"]), float(row["test/acc_std"])
        delta = row["Δ test acc (%) vs control [95 % CI]"].removesuffix(" (n=5)")
        assert cells[2:] == [
            format_mean_std(mean, std, scale=100),
            delta.replace("-", "−") if delta else "–",
            f"{float(row['seconds_mean']):.0f}",
        ], row["variant"]
    seconds = {r["variant"]: float(r["seconds_mean"]) for r in summary}
    ratio = seconds["optimization"] / seconds["softmax_no_qk"]
    sentence = (
        f"At {ratio:.1f}× the training time of its control** ({seconds['optimization']:.0f} s "
        f"against {seconds['softmax_no_qk']:.0f} s per run"
    )
    assert sentence in " ".join((RESULTS / PAGE).read_text().split())
    curves = runs("optimization_digits_curves")
    at_100 = {
        v: [100 * float(r["val/acc"]) for r in curves
            if r["variant"] == v and r["optimizer_steps"] == "100"]
        for v in ("optimization", "softmax_no_qk", "softmax")
    }  # fmt: skip
    ranges = [f"{min(a):.1f}–{max(a):.1f} %" for a in at_100.values()]
    assert (
        f"after 100 steps {ranges[0]} (5 seeds) against {ranges[1]} for its control "
        f"`softmax_no_qk` and {ranges[2]} for full softmax"
    ) in " ".join((RESULTS / PAGE).read_text().split())


def _steps_cell(steps: dict[int, int]) -> str:
    """``250 on every seed`` or ``1,000 on seeds 0, 1, 3, 4; 750 on seed 2`` (most seeds first)."""
    groups: dict[int, list[int]] = {}
    for seed, step in sorted(steps.items()):
        groups.setdefault(step, []).append(seed)
    if len(groups) == 1:
        return f"{next(iter(groups)):,} on every seed"
    parts = sorted(groups.items(), key=lambda g: -len(g[1]))
    return "; ".join(
        f"{step:,} on seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}" for step, s in parts
    )


def test_reversal_encoder_table_is_its_csvs():
    table = {
        row[0].split()[0]: row[2:]
        for row in page_table(PAGE, "| variant | what differs from its control | converged |")
    }
    summary = {r["variant"]: r for r in runs("optimization_reversal")}
    report = {r["variant"]: r for r in runs("optimization_reversal_report")}
    per_run = runs("optimization_reversal_report_runs")
    assert set(table) == {f"`{v}`" for v in summary}
    for variant, row in summary.items():
        # the report holds Lightning's logged step (n − 1) of the first validation ≥ 99 %
        steps = {s: int(v) + 1 for s, v in _by_seed(per_run, variant, "steps_to_threshold").items()}
        assert table[f"`{variant}`"] == [
            f"{report[variant]['converged']}/{report[variant]['runs']}",
            *(
                format_mean_std(float(row[f"{k}_mean"]), float(row[f"{k}_std"]), scale=100)
                for k in ("test/token_acc", "test/exact_acc")
            ),
            _steps_cell(steps),
            f"{float(row['seconds_mean']):.0f}",
        ], variant


def _paired_cell(row: dict[str, str], key: str, digits: int) -> str:
    """``+0.00422 [+0.00208, +0.00686]``: the mean Δ and its interval as the page quotes them."""
    mean, low, high = (_signed(float(row[f"{key} {p}"]), digits) for p in ("mean", "low", "high"))
    return f"{mean} [{low}, {high}]"


def test_reversal_encoder_paired_sentences_are_its_csvs():
    page = " ".join((RESULTS / PAGE).read_text().split())
    paired = {r["variant"]: r for r in runs("optimization_reversal_report_paired")}
    method = paired["optimization"]
    assert method["control"] == "softmax_no_qk"
    loss, token, exact = (
        f"{_paired_cell(method, key, digits)}{unit} "
        f"({method[f'{key} > 0']} / {method[f'{key} < 0']})"
        for key, digits, unit in (
            ("Δ test loss", 5, ""),
            ("Δ token acc (pp)", 2, " pp"),
            ("Δ exact-seq acc (pp)", 2, " pp"),
        )
    )
    steps = _paired_cell(method, "Δ steps to threshold", 0)
    assert (
        f"test loss {loss}, token accuracy {token}, exact sequences {exact}, steps to 99 % {steps} "
        "(+500 on four seeds, +250 on seed 2)"
    ) in page
    assert method["Δ steps to threshold per seed"] == "s0 +500, s1 +500, s2 +250, s3 +500, s4 +500"
    # "The token-accuracy and exact-sequence intervals just reach 0": the sweep's own t-interval
    # of the token Δ is the same one, and both reach 0 while every seed is lower.
    (sweep,) = [r for r in runs("optimization_reversal") if r["variant"] == "optimization"]
    t_cell = sweep["Δ token acc (%) vs control [95 % CI]"].removesuffix(" (n=5)")
    assert t_cell.replace("-", "−") in token
    for key in ("Δ token acc (pp)", "Δ exact-seq acc (pp)"):
        assert float(method[f"{key} low"]) < 0 <= float(method[f"{key} high"]) < 0.2
        assert method[f"{key} < 0"] == "5"
    per_run = runs("optimization_reversal_report_runs")
    ours = _by_seed(per_run, "optimization", "test/exact_acc")
    exact_range = sorted(100 * v for v in ours.values())
    assert f"{exact_range[0]:.1f}–{exact_range[-1]:.1f} % of test sequences" in page
    # softmax_encoder − softmax_no_qk: the page states the reverse difference
    encoder = paired["softmax_encoder"]
    assert encoder["Δ steps to threshold per seed"] == ", ".join(f"s{s} -250" for s in range(5))
    assert (
        float(encoder["Δ token acc (pp) mean"]) == float(encoder["Δ exact-seq acc (pp) mean"]) == 0
    )
    higher = f"{-float(encoder['Δ test loss mean']):.0e}".replace("e-0", "e-")
    assert f"test loss higher by {higher} (both under 1e-5)" in page
    assert max(float(r["test/loss"]) for r in per_run if r["variant"] != "optimization") < 1e-5


def test_main_table_is_detection_runs_csv():
    table = page_table(PAGE, "| variant | what differs from its control | attention params |")
    summary = runs("detection_runs")
    assert len(table) == len(summary)
    for cells, row in zip(table, summary, strict=True):
        delta = row["Δ test mAP vs control [95 % CI]"].removesuffix(" (n=5)").replace("-", "−")
        stats = [
            format_mean_std(float(row[f"test/{k}_mean"]), float(row[f"test/{k}_std"]), digits=3)
            for k in ("mAP", "AP50", "AP75")
        ]
        # bold marks a reading, not a number: compared without it
        assert [c.strip("*") for c in cells] == [
            f"`{row['variant']}`",
            row["what differs from the control"] or "–",
            f"{int(row['attention params']):,}",
            f"{float(row['forward ms / image']):.2f}",
            f"{float(row['peak forward MiB']):.1f}",
            *stats,
            delta or "–",
            f"{float(row['seconds_mean']):.0f}",
        ], row["variant"]


def test_main_table_readings_are_detection_runs_runs_csv():
    page = " ".join((RESULTS / PAGE).read_text().split())
    per_run = [r for r in runs("detection_runs_runs") if r["status"] == "ok"]
    pool, method = (_by_seed(per_run, v, "test/mAP") for v in ("pool_encoder_self", METHOD))
    direct = paired_delta(pool, method)
    assert direct is not None and all(pool[s] > method[s] for s in method)
    quoted = direct.format(digits=3).removesuffix(" (n=5)").replace("-", "−")
    assert f"pooling − optimization = **{quoted}** test mAP (n = 5, higher on all 5 seeds" in page
    cross = _by_seed(per_run, "optimization_decoder_cross", "test/mAP")
    control = _by_seed(per_run, "softmax_no_qk_decoder_cross", "test/mAP")
    assert (
        f"fails on 5/5 seeds** ({', '.join(f'{cross[s]:.3f}' for s in sorted(cross))} against its "
        f"control's {min(control.values()):.3f}–{max(control.values()):.3f})"
    ) in page
    # cost ratios of every optimization row to its control, as ranges
    summary = {r["variant"]: r for r in runs("detection_runs")}
    ratios = {
        key: [
            float(r[key]) / float(summary[r["control"].strip("`")][key])
            for v, r in summary.items()
            if v.startswith("optimization")
        ]
        for key in ("seconds_mean", "forward ms / image")
    }
    fit, forward = (f"{min(x):.1f}–{max(x):.1f}×" for x in ratios.values())
    assert f"take {fit} the training wall time of their controls and {forward} the forward" in page
