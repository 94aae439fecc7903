"""sequence_reversal.md's hand-laid tables, recomputed from the committed per-run CSVs: the
length ladder and the one-seed 3,000-step follow-up at length 256."""

from __future__ import annotations

from lab.results.tables import format_mean_std, format_median_iqr, mean_std, median_iqr
from tests.docs.pages import page_table, runs, values

PAGE = "sequence_reversal.md"
PERFORMER = "performer:num_features=64"
ACC = "test/token_acc"


def _converged(accs: list[float]) -> str:
    return f"{sum(a >= 0.99 for a in accs)}/{len(accs)}"


def _per_seed(accs: list[float]) -> str:
    return f"{' / '.join(f'{100 * a:.2f}' for a in accs)}, **{_converged(accs)}**"


def test_ladder_table_is_its_runs_csvs():
    rows = {r[0]: r[1:4] for r in page_table(PAGE, "| n (tokens) | softmax |")}
    len50 = runs("sequence_reversal_len50_runs")
    soft = values(len50, "softmax", ACC)
    linear = values(runs("sequence_reversal_len50_1500steps_runs"), "linear", ACC)
    perf = values(runs("sequence_reversal_len50_1500steps_performer_runs"), PERFORMER, ACC)
    assert rows["50 (101)"] == [
        f"{100 * min(soft):.2f}, {_converged(soft)} (at 600 steps)",
        f"{format_mean_std(*mean_std(linear), scale=100)}, **{_converged(linear)}**",
        f"{format_mean_std(*mean_std(perf), scale=100)}, **{_converged(perf)}**",
    ]
    assert {r["global_step"] for r in len50 if r["backend"] == "softmax"} == {"600"}
    for n, tokens in ((100, 201), (150, 301)):
        ladder = runs(f"sequence_reversal_ladder_len{n}_runs")
        (control,) = values(runs(f"sequence_reversal_ladder_len{n}_softmax_runs"), "softmax", ACC)
        assert rows[f"{n} ({tokens})"] == [
            f"{100 * control:.2f} (s0), {_converged([control])}",
            _per_seed(values(ladder, "linear", ACC)),
            _per_seed(values(ladder, PERFORMER, ACC)),
        ]
    five = runs("sequence_reversal_len256_3000steps_5seeds_runs")
    soft = values(five, "softmax", ACC)
    cells = [f"{100 * min(soft):.0f}, {_converged(soft)}"]
    for backend in ("linear", PERFORMER):
        accs = values(five, backend, ACC)
        cells.append(f"{format_median_iqr(*median_iqr(accs), scale=100)}, **{_converged(accs)}**")
    assert rows["256 (513), batch 16, 3,000 steps"] == cells


def test_one_seed_3000_step_table_is_its_runs_csvs():
    table = page_table(PAGE, "| backend | seed | token acc (%) | exact-seq acc (%) | greedy token")
    csv_rows = runs("sequence_reversal_len256_3000steps_softmax_runs") + runs(
        "sequence_reversal_len256_3000steps_linear_runs"
    )
    expected = [
        [
            f"`{r['backend']}`",
            r["seed"],
            *(f"{100 * float(r[k]):.2f}" for k in (ACC, "test/exact_acc", "test/gen_token_acc")),
            f"{float(r['test/loss']):.4f}",
            f"{float(r['seconds']):.0f}",
        ]
        for r in csv_rows
    ]
    assert table == expected
