"""Reversal tables rebuilt from committed per-run CSVs: sweep and report layouts, paired Δ."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_lightning.results import write_csv
from attn_lightning.studies.reversal.cli import main
from attn_lightning.studies.reversal.committed import read_runs


def _sweep_csv(path):
    # A sweep's layout: label column "backend", seconds; softmax converges on 2 seeds of 3.
    rows = []
    for seed, (soft, lin) in enumerate([(1.0, 0.5), (0.999, 0.6), (0.4, 0.995)]):
        for backend, acc in (("softmax", soft), ("linear", lin)):
            rows.append(
                {
                    "backend": backend,
                    "seed": seed,
                    "status": "ok",
                    "seconds": 10.0 + seed,
                    "global_step": 100,
                    "test/token_acc": acc,
                    "test/exact_acc": acc / 2,
                    "test/loss": 1 - acc,
                }
            )
    return write_csv(path, rows)


def test_tables_give_k_of_n_median_iqr_and_seed_deltas(tmp_path):
    runs = _sweep_csv(tmp_path / "sweep_runs.csv")
    out = tmp_path / "outcomes"
    main(["tables", "--runs", str(runs), "--control", "softmax", "--out", str(out)])
    text = out.with_suffix(".md").read_text()
    assert "| `softmax` | 2/3 | 0 | 99.90 [69.95, 99.95] |" in text
    assert "| `linear` | 1/3 | 0 |" in text and "±" not in text
    paired = (tmp_path / "outcomes_paired.csv").read_text()
    assert "s0 -50.00, s1 -39.90, s2 +59.50" in paired  # every seed's Δ token acc (pp)
    assert "(n=3, t: 1+ 2− 0=)" in text  # three seeds: a t-interval, marked


def test_paired_only_replaces_the_section_of_a_report_page(tmp_path):
    runs = _sweep_csv(tmp_path / "sweep_runs.csv")
    page = tmp_path / "report.md"
    page.write_text("tables from logs\n\nPaired differences, variant − `softmax`, old t-table\n")
    argv = [
        "tables",
        "--runs",
        str(runs),
        "--control",
        "softmax",
        "--out",
        str(page.with_suffix("")),
    ]
    main([*argv, "--paired-only"])
    text = page.read_text()
    assert text.startswith("tables from logs\n") and "old t-table" not in text
    assert (
        "a percentile bootstrap (10,000 resamples)" in text
        and "Recomputed from the per-run CSV" in text
    )
    assert not (tmp_path / "report.csv").exists()
    with pytest.raises(SystemExit):
        main(["tables", "--runs", str(runs), "--out", str(tmp_path / "nope"), "--paired-only"])


def test_a_report_layout_keeps_its_facts_in_info(tmp_path):
    path = write_csv(
        tmp_path / "report_runs.csv",
        [
            {
                "variant": "softmax",
                "seed": 0,
                "status": "ok",
                "test/token_acc": 1.0,
                "steps_to_threshold": 250,
                "spikes": 2,
                "fit_seconds": 12.5,
                "global_step": 600,
                "max_grad_norm": 1.5,
            }
        ],
    )
    (run,) = read_runs(path)
    assert run.info == {"steps_to_threshold": 250, "spikes": 2, "max_grad_norm": 1.5}
    assert run.seconds == 12.5 and run.metrics == {"test/token_acc": 1.0}
    with pytest.raises(FileNotFoundError, match=r"absent_runs\.csv"):
        read_runs(tmp_path / "absent_runs.csv")


def test_the_committed_len256_3000_step_outcomes_regenerate_and_the_page_shows_them(tmp_path):
    docs = Path(__file__).resolve().parents[3] / "docs" / "results"
    name = "sequence_reversal_len256_3000steps"
    out = tmp_path / f"{name}_outcomes"
    runs = docs / f"{name}_5seeds_runs.csv"
    main(["tables", "--runs", str(runs), "--control", "softmax", "--out", str(out)])
    for suffix in (".csv", "_paired.csv"):
        ours = out.with_name(out.name + suffix).read_text()
        assert ours == (docs / f"{name}_outcomes{suffix}").read_text()
    table = next(
        block.strip()
        for block in out.with_suffix(".md").read_text().split("\n\n")
        if block.startswith("| variant | converged")
    )
    assert table in (docs / "sequence_reversal.md").read_text()
    assert "| `softmax` | 5/5 |" in table and "| `linear` | 0/5 |" in table


def test_the_10k_step_section_quotes_its_generated_tables():
    """Every table row of polynomial.md's 10,000-step section is a row of a committed file the
    study's commands wrote (traces, outcomes, learned kernels): nothing copied by hand."""
    docs = Path(__file__).resolve().parents[3] / "docs" / "results"
    page = (docs / "polynomial.md").read_text()
    section = page.split("## Results: length 50 at 10,000 steps")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert len(rows) >= 6, "the section's tables are gone"
    generated = "\n".join(path.read_text() for path in docs.glob("polynomial_len50_10k*.md"))
    for row in rows:
        assert row in generated, row


def test_a_run_finished_in_a_later_csv_replaces_its_unfinished_row(tmp_path):
    # Session 1's report has softmax s1 unfinished; session 2 finished it (and added s2).
    def run(seed, status, acc):
        row = {"variant": "softmax", "seed": seed, "status": status, "global_step": 100}
        loss = None if acc is None else 1 - acc
        return {**row, "test/token_acc": acc, "test/exact_acc": acc, "test/loss": loss}

    early = write_csv(tmp_path / "a_runs.csv", [run(0, "ok", 1.0), run(1, "unfinished", None)])
    later = write_csv(tmp_path / "b_runs.csv", [run(1, "ok", 0.5), run(2, "ok", 1.0)])
    for order in ([early, later], [later, early]):
        out = tmp_path / "all"
        main(["tables", "--runs", *map(str, order), "--out", str(out)])
        assert "| `softmax` | 2/3 | 0 |" in out.with_suffix(".md").read_text()
