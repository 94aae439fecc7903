"""The sweep on its study's records: plans, continuing elsewhere, --report-only, the machine;
a plan's ``pages:`` and the clear errors of a page that is not one (the pages themselves are
rebuilt from committed records: ``tests/docs/test_plan_pages.py``)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
import yaml

from attn_lightning.records.run_files import write_record
from lab.studies.sweep import REPORTS, main, parse
from tests.lab.studies.test_sweep import FAKE_OVERLAY_TRAIN

# Its runs report their fit time, as a real record does (FitClock).
FAKE_TRAIN = FAKE_OVERLAY_TRAIN.replace("test}, 5)", "test}, 5, fit_seconds=2.0)")

PLAN = """
config: [base.yaml]
variants: [small.yaml, large.yaml]
seeds: [0, 1]
metrics: [test/loss]
set: [trainer.max_steps=5]
"""


def _rows(path):
    with path.open() as f:
        return list(csv.DictReader(f))


def test_a_plan_is_the_command_line_it_stands_for(tmp_path):
    plan = tmp_path / "page.yaml"
    plan.write_text(PLAN + "pair: [[large, small]]\nresume: true\n")
    args, _, command = parse(["--plan", str(plan)])
    assert args.config == ["base.yaml"] and args.variants == ["small.yaml", "large.yaml"]
    assert (args.seeds, args.pair, args.resume) == ([0, 1], [["large", "small"]], True)
    assert str(args.out) == "docs/results/page"  # by default the page named after the plan
    assert command == f"python -m lab.studies.sweep --plan {plan}"
    # The command line overrides it (repeatable options add to it); --report-only, --into and
    # --jobs change no number, so the page's command leaves them out.
    argv = ["--into", "x", "--plan", str(plan), "--jobs", "2", "--seeds", "3", "--set", "a=1"]
    for extra in (["--report-only"], ["--jobs=3"]):
        args, _, command = parse([*argv, *extra])
        assert args.seeds == [3] and args.set == ["trainer.max_steps=5", "a=1"]
        assert command == f"python -m lab.studies.sweep --plan {plan} --seeds 3 --set a=1"


def test_a_variant_is_an_overlay_file_not_a_spec(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        parse(["--config", "c.yaml", "--variants", "performer:num_features=256", "--out", "x"])
    err = capsys.readouterr().err
    assert "variant 'performer:num_features=256' is not a config overlay (a .yaml file)" in err
    assert "go to --backends" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (PLAN + "seed: [0]\n", "unknown key 'seed'; the keys are "),
        (PLAN + "report-only: true\n", "unknown key 'report-only'"),
        (PLAN + "resume: yes please\n", "resume is a flag, give true or false"),
        ("- a list\n", "is not a YAML mapping"),
    ],
)
def test_a_bad_plan_is_one_clear_error(tmp_path, capsys, text, message):
    plan = tmp_path / "page.yaml"
    plan.write_text(text)
    with pytest.raises(SystemExit):
        parse(["--plan", str(plan)])
    err = capsys.readouterr().err
    assert message in err and str(plan) in err
    if "keys are" in message:
        assert "backends" in err and "seeds" in err  # the allowed keys are listed


def test_a_sweep_continued_elsewhere_trains_only_what_its_records_lack(tmp_path, monkeypatch):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    monkeypatch.chdir(here)
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    plan = tmp_path / "page.yaml"
    plan.write_text(PLAN)
    common = ["--plan", str(plan), "--out", "results/page", "--train-script", str(script)]
    first = main([*common, "--seeds", "0"])
    records = here / "results" / "page" / "runs"
    assert sorted(p.name for p in records.iterdir()) == ["large-s0", "small-s0"]
    assert all(r.log_dir == str(records.relative_to(here) / f"{r.variant}-s0") for r in first)
    # Another machine: the results folder (as committed) without logs/; seed 0 is not trained
    # again (the stand-in now logs which runs it trains), seed 1 is.
    shutil.copytree(here / "results", there / "results")
    monkeypatch.chdir(there)
    trained = tmp_path / "trained.txt"
    script.write_text(
        f"import sys\nopen({str(trained)!r}, 'a').write(sys.argv[sys.argv.index('fit') + 1:][0])\n"
        + FAKE_TRAIN
    )
    runs = main(common)
    assert [(r.variant, r.seed, r.status) for r in runs] == [
        (v, s, "ok") for v in ("small", "large") for s in (0, 1)
    ]
    assert trained.read_text().count("--config") == 2  # the two seed-1 runs only
    assert not (there / "logs" / "sweep-page" / "small-s0").exists()
    assert len(list((there / "results" / "page" / "runs").iterdir())) == 4
    # The page from the records alone equals the one the sweep wrote while training.
    page = (there / "results" / "page.md").read_text()
    shutil.rmtree(there / "logs")
    script.write_text("raise SystemExit('must not train')")
    again = main([*common, "--report-only", "--into", str(tmp_path / "check")])
    assert [r.metrics for r in again] == [r.metrics for r in runs]
    assert (tmp_path / "check" / "page.md").read_text() == page
    assert _rows(tmp_path / "check" / "page_runs.csv") == _rows(there / "results" / "page_runs.csv")


def test_report_only_names_a_missing_record_and_takes_the_records_machine(tmp_path):
    runs = tmp_path / "page" / "runs"
    for variant, environment, tags in (
        ("small", None, {"machine": "Box A, x86_64, Python 3.11.7"}),
        ("large", {"platform": "Linux-x", "device": "cuda:0", "device_name": "H200"}, {}),
    ):
        (runs / f"{variant}-s0").mkdir(parents=True)
        write_record(
            runs / f"{variant}-s0",
            {
                "seed": 0,
                "status": "ok",
                "environment": environment and {**environment, "python": "3.12.3"},
                "tags": {"study": "page", "variant": variant, "seed": 0, **tags},
                "metrics": {"test": {"test/loss": 1.0}},
            },
        )
    plan = tmp_path / "page.yaml"
    plan.write_text(PLAN)
    out = tmp_path / "page"
    results = main(["--plan", str(plan), "--out", str(out), "--report-only"])
    assert [r.status for r in results] == ["ok", "not run", "ok", "not run"]
    md = (tmp_path / "page.md").read_text()
    assert (
        "Machines: Box A, x86_64, Python 3.11.7; Linux-x, H200, Python 3.12.3; "
        "runs one after another." in md
    )
    assert "`small` seeds 1; `large` seeds 1." in md


def test_a_plans_pages_are_written_once_its_runs_are_done(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    plan = tmp_path / "page.yaml"
    # Its own page replaced by a paired page, and a second page over the same records.
    pages = "pages:\n  page: {report: paired, control: small, metrics: [test/loss]}\n"
    pages += "  other: {report: paired, variants: [large], metrics: [test/loss]}\n"
    plan.write_text(PLAN + pages)
    runs = main(["--plan", str(plan), "--out", "results/page", "--train-script", str(script)])
    assert [r.status for r in runs] == ["ok"] * 4
    page = (tmp_path / "results" / "page.md").read_text()
    assert f"studies.sweep --plan {plan} --out results/page --train-script" in page
    assert "| large | 0 1 | 3.1000 ± 0.1414 |" in page  # the paired tables, not the sweep's
    assert "| large | +2.0000 / +2.1000 | 2+ 0− of 2, sign p 0.50 |" in page
    assert not (tmp_path / "results" / "page_runs.csv").exists()
    assert "small" not in (tmp_path / "results" / "other.csv").read_text()


def test_records_also_are_runs_not_trained_again(tmp_path, monkeypatch):
    # The study's runs recorded in two folders (runs made after the first folder was committed).
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    plan = tmp_path / "page.yaml"
    plan.write_text(PLAN)
    main(["--plan", str(plan), "--out", "later/page", "--train-script", str(script)])
    script.write_text("raise SystemExit('must not train')")
    argv = ["--plan", str(plan), "--out", "results/page", "--train-script", str(script)]
    runs = main([*argv, "--records-also", "later/page/runs"])
    assert [r.status for r in runs] == ["ok"] * 4
    assert all(r.log_dir.startswith("later/page/runs/") for r in runs)
    report = main([*argv, "--records-also", "later/page/runs", "--report-only"])
    assert [r.metrics for r in report] == [r.metrics for r in runs]


def _plan(tmp_path: Path, pages: dict, **options) -> list[str]:
    """A plan of one backend whose pages are ``pages``; the argv of its ``--report-only`` run."""
    plan = tmp_path / "page.yaml"
    text = {"config": ["base.yaml"], "backends": ["softmax"], "pages": pages, **options}
    plan.write_text(yaml.safe_dump(text))
    return ["--plan", str(plan), "--out", str(tmp_path / "page"), "--report-only"]


@pytest.mark.parametrize(
    ("pages", "message"),
    [
        ({"x": {"report": "outcomes"}}, "pages: x: report 'outcomes'; the reports are"),
        (
            {"x": {"runs": ["a"]}},
            f"pages: x: report None; the reports are {list(REPORTS)}",
        ),
        (
            {"x": {"report": "reversal", "control_": "softmax"}},
            "pages: x: unknown key 'control_'; the keys of a reversal page are report, runs, ",
        ),
        ({"x": "reversal"}, "pages: give a mapping of page names to {report: KIND"),
    ],
)
def test_a_bad_page_is_one_clear_error_before_any_run(tmp_path, capsys, pages, message):
    argv = _plan(tmp_path, pages)
    with pytest.raises(SystemExit) as exit_info:
        main(argv[:-1])  # not --report-only: nothing may train
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and "page.yaml" in err
    assert not (tmp_path / "page").exists()


def test_a_missing_runs_folder_is_an_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "nope" / "runs"
    with pytest.raises(SystemExit):
        main(_plan(tmp_path, {"x": {"report": "reversal", "runs": [str(missing)]}}))
    assert f"page x: runs folder {missing} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()
