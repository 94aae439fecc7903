"""The warm-start study on run records: its committed pages rebuilt from the committed records
alone, a continued study training only what has no ok record, and a new run committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.results.records import RunResult, load_run
from lab.studies.runner import Runner, Variant
from lab.studies.warm_start.cli import main
from lab.studies.warm_start.plan import in_run_order

ROOT = Path(__file__).resolve().parents[4]
RESULTS = ROOT / "docs" / "results"


@pytest.mark.parametrize("task", ["digits", "reversal"])
def test_the_committed_pages_are_rebuilt_from_the_committed_records(
    task, tmp_path, monkeypatch, elsewhere
):
    # Rebuilt as by another machine: the page's machine line is the records' own.
    monkeypatch.chdir(ROOT)  # the records' default folder is the checkout's docs/results/
    out = tmp_path / f"warm_start_{task}"
    main(["tables", "--task", task, "--out", str(out)])
    for suffix in (".csv", "_paired.csv", "_runs.csv"):
        committed = (RESULTS / f"warm_start_{task}{suffix}").read_text()
        assert (tmp_path / f"warm_start_{task}{suffix}").read_text() == committed, suffix
    page = (tmp_path / f"warm_start_{task}.md").read_text()
    assert page == (RESULTS / f"warm_start_{task}.md").read_text().replace(
        f"--out docs/results/warm_start_{task}", f"--out {out}"
    )
    assert f"Rebuilt from the committed run records `warm_start/runs/{task}/`" in page


def test_tables_without_records_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no docs/results/warm_start/runs/ here
    with pytest.raises(SystemExit):
        main(["tables", "--task", "digits", "--out", str(tmp_path / "w")])
    assert "no digits run records under docs/results/warm_start/runs" in capsys.readouterr().err


def test_in_run_order_puts_every_base_first_then_seed_backend_condition():
    def run(backend: str, condition: str, seed: int) -> RunResult:
        return RunResult(f"{backend}@{condition}", seed, None, "ok", info=dict(
            backend=backend, condition=condition))  # fmt: skip

    runs = [
        run("linear", "zero-shot", 0),
        run("performer_m64", "scratch", 1),
        run("softmax", "base", 1),
        run("performer_m64", "fine-tune", 0),
        run("performer_m64", "zero-shot", 0),
        run("softmax", "base", 0),
    ]
    assert [(r.variant, r.seed) for r in in_run_order(runs)] == [
        ("softmax@base", 0),
        ("softmax@base", 1),
        ("performer_m64@zero-shot", 0),
        ("performer_m64@fine-tune", 0),
        ("linear@zero-shot", 0),
        ("performer_m64@scratch", 1),
    ]


DIGITS = ["run", "--task", "digits", "--seeds", "0", "--finetune-steps", "200"]


def test_run_trains_only_what_has_no_ok_record_and_commits_what_it_trains(tmp_path, monkeypatch):
    trained: list[str] = []

    def fake_spawn(self: Runner, variant: Variant, seed: int, ckpt_path=None) -> str:
        # A stand-in train.py: the record a finished run leaves in logs/<experiment>/<run>/.
        trained.append(variant.name)
        folder = self.run_dir(variant, seed)
        folder.mkdir(parents=True)
        record = {"seed": seed, "status": "ok", "tags": self.run_tags(variant, seed)}
        record |= {"fit_seconds": 1.5, "global_step": 200}
        record["metrics"] = {"test": {"test/acc": 0.5, "test/loss": 1.25}}
        (folder / "record.json").write_text(json.dumps(record))
        return "ok"

    monkeypatch.setattr(Runner, "_spawn", fake_spawn)
    # In the checkout, the plan the pages were made with: every run is a committed record.
    monkeypatch.chdir(ROOT)
    runs = main([*DIGITS, "--base-steps", "800", "--out", str(tmp_path / "same")])
    assert trained == [] and len(runs) == 19
    committed = RESULTS / "warm_start" / "runs" / "digits"
    assert {Path(r.log_dir).parent for r in runs} == {committed.relative_to(ROOT)}
    # Elsewhere (no committed records), or with other budgets: trained, then committed.
    monkeypatch.chdir(tmp_path)
    runs = main([*DIGITS, "--base-steps", "700", "--out", str(tmp_path / "new")])
    assert len(trained) == 19 and trained[0] == "softmax"
    published = tmp_path / "docs" / "results" / "warm_start" / "runs" / "digits"
    assert len(list(published.glob("*/record.json"))) == 19
    base = load_run(published / "softmax-s0")
    assert base.info == {
        "task": "digits",
        "base_steps": 700,
        "finetune_steps": 200,
        "redraw_every": 100,
        "backend": "softmax",
        "condition": "base",
    }
    # Run again: everything is now a committed record, nothing trains.
    again = main([*DIGITS, "--base-steps", "700", "--out", str(tmp_path / "again")])
    assert len(trained) == 19 and [r.value("test/acc") for r in again] == [0.5] * 19
    assert (tmp_path / "again_runs.csv").read_text() == (tmp_path / "new_runs.csv").read_text()
