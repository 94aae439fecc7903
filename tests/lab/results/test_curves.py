"""The curves table's columns (the ``<out>_curves.csv`` and tables of the committed pages are
rebuilt from their records by ``tests/docs/test_plan_pages``)."""

from __future__ import annotations

from lab.results.curves import _shown_steps, curves_table


def test_shown_steps_keep_the_last_and_at_most_max_columns():
    assert _shown_steps([1, 2, 3], 8) == [1, 2, 3]
    assert _shown_steps(list(range(20, 820, 20)), 8) == [100, 200, 300, 400, 500, 600, 700, 800]
    shown = _shown_steps(list(range(1, 11)), 4)
    assert shown[-1] == 10 and len(shown) <= 4


def test_curves_table_can_show_every_step_with_its_own_digits():
    rows = [
        {"variant": "v", "seed": 0, "optimizer_steps": step, "val/token_acc": step / 100}
        for step in range(10, 100, 10)
    ]
    header, _, row = curves_table(rows, "val/token_acc", max_columns=None, digits=1)
    assert header.count("|") == 2 + 9 + 1  # every one of the 9 steps
    assert row.startswith("| `v` | 0 | 10.0 | 20.0 |")
    assert curves_table(rows, "val/token_acc")[0].count("|") <= 2 + 8 + 1  # at most 8 steps
    assert "| 10.00 |" in curves_table(rows[:1], "val/token_acc")[2]  # its column's 2 digits
