"""The sweep CLI: backend specs, aggregation, and one tiny real sweep writing md + csv."""

from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path

import pytest

from lab.results.records import RunResult, run_label
from lab.results.tables import Convergence, summarize
from lab.studies.runner import Runner, Variant
from lab.studies.sweep import main

ROOT = Path(__file__).resolve().parents[3]  # the checkout


def test_run_label_is_file_name_safe():
    assert run_label("polysketch:sketch=learned") == "polysketch_sketch-learned"


def test_summarize_mean_std_and_failures():
    results = [
        RunResult("a", 0, 10.0, "ok", {"test/token_acc": 1.0, "test/exact_acc": 1.0}),
        RunResult("a", 1, 20.0, "ok", {"test/token_acc": 0.98, "test/exact_acc": 0.5}),
        RunResult("a", 2, 5.0, "crashed"),
        RunResult("b", 0, 1.0, "ok", {"test/token_acc": 0.995}),
    ]
    rows = {
        r["backend"]: r for r in summarize(results, convergence=Convergence("test/token_acc", 0.99))
    }
    a, b = rows["a"], rows["b"]
    assert (a["runs"], a["crashed"], a["not_converged"]) == (3, 1, 1)
    assert a["test/token_acc_mean"] == pytest.approx(0.99)
    assert a["test/token_acc_std"] == pytest.approx(0.0141421, rel=1e-4)  # sample std
    assert a["seconds_mean"] == pytest.approx(15.0)  # crashed runs excluded
    assert (b["not_converged"], b["test/token_acc_std"]) == (0, 0.0)
    assert b["test/exact_acc_mean"] is None


# What every stand-in train.py shares: its arguments, and the record.json a run leaves in
# logs/<experiment>/<run_name>/ (the fields the runner reads; docs/run_record.md).
FAKE_RECORD = """
import json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[2:] if a.startswith("--") and "=" in a)


def write_record(metrics, global_step, fit_seconds=None, **extra):
    folder = os.path.join("logs", args["experiment"], args["run_name"])
    os.makedirs(folder, exist_ok=True)
    record = {"seed": int(args["seed_everything"]), "tags": json.loads(args["run_record.tags"]),
              "status": "ok", "global_step": global_step, "fit_seconds": fit_seconds,
              "metrics": metrics, **extra}
    with open(os.path.join(folder, "record.json"), "w") as f:
        f.write(json.dumps(record))
"""

FAKE_TRAIN = (
    FAKE_RECORD
    + """
name = json.loads(args["model.init_args.attention"])["name"]
if name == "crash":
    sys.exit("crash: bad option")
if name == "stop" and args["seed_everything"] == "1":
    sys.exit(143)  # train.py after a SIGTERM: last.ckpt saved, resumable
acc = {"good": 1.0, "stop": 1.0, "flaky": 0.9 + 0.1 * (args["seed_everything"] == "0")}[name]
write_record({"test": {"test/token_acc": acc, "test/exact_acc": acc}}, 7)
"""
)


def test_sweep_counts_crashes_and_unconverged_runs(tmp_path, monkeypatch, caplog):
    # A stand-in train.py (no torch import) keeps this fast; the real one runs below.
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    out = tmp_path / "fake"
    results = main(
        [
            "--config",
            "unused.yaml",
            "--backends",
            "good",
            "flaky",
            "crash",
            "stop",
            "--seeds",
            "0",
            "1",
            "--train-script",
            str(script),
            "--metric",
            "test/token_acc",
            "--threshold",
            "0.99",
            "--out",
            str(out),
        ]
    )
    assert [r.status for r in results] == ["ok"] * 4 + ["crashed"] * 2 + ["ok", "stopped"]
    with (tmp_path / "fake.csv").open() as f:
        rows = {row["backend"]: row for row in csv.DictReader(f)}
    assert rows["good"]["not_converged"] == "0"
    assert rows["flaky"]["not_converged"] == "1"
    assert float(rows["flaky"]["test/token_acc_mean"]) == pytest.approx(0.95)
    assert rows["crash"]["crashed"] == "2"
    page = (tmp_path / "fake.md").read_text()
    assert "| `crash` | 2 | 0 | 2 |" in page
    # A stopped run is no failure: left out of the counts, named under the table.
    assert rows["stop"]["runs"] == "1" and rows["stop"]["crashed"] == "0"
    assert (
        "Stopped part-way after saving `last.ckpt` (`--resume` continues them): `stop` seeds 1."
        in page
    )
    # The run's output (a file, not a pipe, so a stopped study cannot kill a finishing run)
    # still reaches the log of a failed run.
    assert "crash: bad option" in caplog.text


def test_runs_spawn_the_package_cli_not_a_script_path(tmp_path, caplog):
    runner = Runner(configs=("base.yaml",))
    command = runner.command(Variant.from_attention("softmax"), 3)
    assert command[:4] == [sys.executable, "-m", "attn_lightning.cli", "fit"]
    assert not any(a.endswith("train.py") for a in command)
    assert "--seed_everything=3" in command and "--config" in command
    stand_in = Runner(train_script=tmp_path / "fake.py").command(Variant("v"), 0)
    assert stand_in[:3] == [sys.executable, str(tmp_path / "fake.py"), "fit"]
    # The sweep CLI spawns the same (its --dry-run prints the commands).
    argv = ["--config", "base.yaml", "--backends", "softmax", "--seeds", "0", "--out", "x"]
    caplog.set_level("INFO")
    assert main([*argv, "--dry-run"]) == []
    assert f"{sys.executable} -m attn_lightning.cli fit --config base.yaml" in caplog.text


def test_sweep_cli_runs_train_py_and_writes_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results" / "tiny"
    args = [
        "--config",
        str(ROOT / "configs" / "reversal" / "base.yaml"),
        "--config",
        str(ROOT / "configs" / "presets" / "debug.yaml"),
        "--backends",
        "linear:feature_map=relu",
        "--seeds",
        "0",
        "--set",
        "data.init_args.train_size=32",
        "--set",
        "data.init_args.val_size=16",
        "--set",
        "data.init_args.test_size=16",
        "--set",
        "data.init_args.batch_size=16",
        "--set",
        "trainer.max_steps=2",
        "--curve",
        "train/loss",
        "--out",
        str(out),
    ]
    results = main(args)
    assert [(r.status, r.global_step) for r in results] == [("ok", 2)]
    with (out.parent / "tiny_curves.csv").open() as f:  # read back from the run's record
        assert {r["variant"] for r in csv.DictReader(f)} == {"linear:feature_map=relu"}
    md = (out.parent / "tiny.md").read_text()
    assert "python -m lab.studies.sweep --config" in md
    assert "| `linear:feature_map=relu` | 1 |" in md
    with (out.parent / "tiny.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert 0.0 <= float(row["test/token_acc_mean"]) <= 1.0
    with (out.parent / "tiny_runs.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 1
    ckpt_dir = tmp_path / "checkpoints" / "sweep-tiny" / "linear_feature_map-relu-s0"
    assert (ckpt_dir / "last.ckpt").is_file()
    # The result is the run's record.json, tagged by the runner; no metrics file is written.
    folder = tmp_path / "logs" / "sweep-tiny" / "linear_feature_map-relu-s0"
    record = json.loads((folder / "record.json").read_text())
    assert record["tags"] == {"study": "tiny", "variant": "linear:feature_map=relu", "seed": 0}
    # ... published under the page's records (<out>/runs/), where the tables read it from.
    published = out / "runs" / "linear_feature_map-relu-s0"
    assert results[0].log_dir == str(published)
    assert json.loads((published / "record.json").read_text()) == record
    assert (published / "curves.csv").read_bytes() == (folder / "curves.csv").read_bytes()
    assert results[0].value("test/token_acc") == record["metrics"]["test"]["test/token_acc"]
    assert not list(tmp_path.rglob("*-s0.json"))
    # A run's seconds are its fit's own time, the same whether it trained now or is reused.
    assert results[0].seconds == record["fit_seconds"]
    (again,) = main([*args, "--resume"])
    assert again.seconds == record["fit_seconds"] and again.metrics == results[0].metrics


FAKE_OVERLAY_TRAIN = (
    FAKE_RECORD
    + """
argv = sys.argv[2:]
configs = [argv[i + 1] for i, a in enumerate(argv) if a == "--config"]
loss = {"small.yaml": 1.0, "large.yaml": 3.0}[configs[-1].rsplit("/", 1)[-1]]
loss += 0.1 * int(args["seed_everything"]) * (2 if loss > 2 else 1)
test = {"test/loss": loss, "test/bits_per_dim": loss / 2}
write_record({"fit": {"val/loss": loss}, "test": test}, 5)
"""
)


def test_sweep_variants_metrics_direction_and_jobs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_OVERLAY_TRAIN)
    common = ["--config", "base.yaml", "--variants", "small.yaml", "large.yaml"]
    common += ["--seeds", "0", "1", "--train-script", str(script), "--out", "img"]
    results = main(
        [
            *common,
            *("--metrics", "test/loss", "val/loss", "--metric", "test/loss", "--threshold", "2"),
            *("--direction", "min", "--jobs", "2"),
        ]
    )
    assert [(r.variant, r.seed, r.status) for r in results] == [
        (variant, seed, "ok") for variant in ("small", "large") for seed in (0, 1)
    ]
    md = (tmp_path / "img.md").read_text()
    assert "| variant | runs | not converged | crashed | test loss | val/loss |" in md
    assert '"not converged" = test/loss > 2.0' in md and "2 runs at a time" in md
    assert "| `small` | 2 | 0 | 0 | 1.0500 ± 0.0707 | 1.0500 ± 0.0707 |" in md
    assert "| `large` | 2 | 2 | 0 |" in md
    assert "bits/dim" not in md  # only the columns asked for
    with (tmp_path / "img_runs.csv").open() as f:
        assert next(csv.DictReader(f))["val/loss"] == "1.0"

    # --skip-runs rebuilds the tables from the run records; default columns: test/ metrics.
    script.write_text("raise SystemExit(1)")
    again = main([*common, "--skip-runs"])
    assert [r.value("test/loss") for r in again] == [r.value("test/loss") for r in results]
    md = (tmp_path / "img.md").read_text()
    assert "| variant | runs | crashed | test bits/dim | test loss |" in md
    # --resume reuses the ok records and runs only what is missing (here: nothing).
    assert [r.status for r in main([*common, "--resume"])] == ["ok"] * 4
    # --skip-runs over a seed never run: "not run", named under the table, in no count.
    more = list(common)
    seeds = more.index("--seeds")
    more[seeds + 1 : seeds + 3] = ["0", "1", "2"]
    skipped = main([*more, "--skip-runs"])
    assert [r.status for r in skipped].count("not run") == 2
    md = (tmp_path / "img.md").read_text()
    assert "| `small` | 2 | 0 |" in md and "| `large` | 2 | 0 |" in md  # 2 runs, 0 crashed
    assert "Not run yet (no run record): `small` seeds 2; `large` seeds 2." in md
    with (tmp_path / "img_runs.csv").open() as f:
        assert {row["status"] for row in csv.DictReader(f)} == {"ok"}

    # --pair: the paired Δ by seed (2.0 and 2.1: mean 2.05, t(0.975, 1) · 0.0707 / √2 = 0.635).
    main([*common, "--skip-runs", "--metrics", "test/loss", "--pair", "large", "small"])
    with (tmp_path / "img.csv").open() as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    assert rows["large"]["control"] == "`small`" and rows["small"]["control"] == ""
    delta = rows["large"]["Δ test loss vs control [95 % CI]"]
    assert delta == "+2.0500 [+1.4147, +2.6853] (n=2)"
    assert "Δ vs control: per seed" in (tmp_path / "img.md").read_text()
    for bad in (["--pair", "large", "nope"], ["--pair", "large", "small"]):
        metrics = ["--metrics", "test/loss"] if "nope" in bad else []
        with pytest.raises(SystemExit):  # an unknown name; no metric to compare
            main([*common, "--skip-runs", *metrics, *bad])


def test_sweep_rejects_metric_without_threshold(tmp_path):
    with pytest.raises(SystemExit):
        main(["--config", "c.yaml", "--backends", "softmax", "--out", "x", "--metric", "a"])
    with pytest.raises(SystemExit):
        main(["--config", "c.yaml", "--out", str(tmp_path / "x")])


def _record(folder: Path, seed: int, status: str, **tags) -> None:
    folder.mkdir(parents=True)
    record = {"seed": seed, "status": status, "metrics": {"test": {"test/loss": seed / 4}}}
    record["tags"] = {"study": "s", "variant": "softmax", "seed": seed, **tags}
    (folder / "record.json").write_text(json.dumps(record))


def test_runner_takes_an_ok_record_instead_of_training_it(tmp_path, monkeypatch):
    # Committed records (another machine's runs) stand in for the jobs with an ok one of the same
    # tags; with --resume a local ok record is reused; the rest would train (here: fail fast).
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "docs" / "results" / "s" / "runs"
    _record(committed / "softmax-s0", 0, "ok", task="a")
    _record(committed / "softmax-s1", 1, "crashed", task="a")
    _record(committed / "other-task-s3", 3, "ok", task="b")
    _record(tmp_path / "logs" / "exp" / "softmax-s2", 2, "ok", task="a")
    runner = Runner(
        experiment="exp",
        study="s",
        tags={"task": "a"},
        record_roots=(committed,),
        train_script=tmp_path / "missing_train.py",
        resume=True,
    )
    softmax = Variant.from_attention("softmax")
    results = runner.run_all([(softmax, s) for s in range(4)])
    assert [r.status for r in results] == ["ok", "crashed", "ok", "crashed"]
    assert results[0].log_dir == str(committed / "softmax-s0") and results[0].info == {"task": "a"}
    assert results[2].value("test/loss") == 0.5  # the local record, reused
    assert results[3].info == {"task": "a"}  # a failed run keeps its tags
    runner.resume = False  # the local record is trained again; the committed one still counts
    first, third = runner.run_all([(softmax, 0), (softmax, 2)])
    assert (first.status, third.status) == ("ok", "crashed")


def test_run_tags_are_the_study_the_variant_and_its_info(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "fake_train.py"
    # An early stop: train.py exits 0, its record says "stopped"; the study counts a finished run.
    script.write_text(
        FAKE_RECORD + 'write_record({"test": {"test/loss": 1.0}}, 3, status="stopped")'
    )
    variant = Variant("tuned", info={"backend": "linear", "lr": 0.01})
    assert variant == Variant("tuned") and hash(variant) == hash(Variant("tuned"))
    runner = Runner(experiment="e", study="s", tags={"task": "digits"}, train_script=script)
    args = runner.train_args(variant, 2)
    assert (
        "--run_record.tags="
        + json.dumps(
            {
                "study": "s",
                "variant": "tuned",
                "seed": 2,
                "task": "digits",
                "backend": "linear",
                "lr": 0.01,
            }
        )
        in args
    )
    assert not any(a.startswith("--metrics_file") for a in args)
    (result,) = runner.run_all([(variant, 2)])
    assert (result.status, result.global_step, result.seed) == ("ok", 3, 2)
    assert result.info == {"task": "digits", "backend": "linear", "lr": 0.01}
    skipped = Runner(experiment="e", study="s", skip_runs=True).run(Variant("never"), 0)
    assert skipped.status == "not run"
    # A study that moves the logs (--set of the logger's save_dir) finds its records there.
    moved = Runner(experiment="e", overrides=("trainer.logger.init_args.save_dir=work/logs",))
    assert moved.run_dir(variant, 2) == Path("work/logs/e/tuned-s2")


ARGS_TRAIN = (
    FAKE_RECORD
    + """
write_record({"test": {"test/loss": 0.5}}, 7, 3.0, args=args)
"""
)


@pytest.mark.parametrize("root", ["checkpoints", "work/ckpts"])
def test_resume_continues_a_stopped_run_from_its_last_checkpoint(tmp_path, monkeypatch, root):
    # s0 stopped part-way (a last.ckpt, its record "stopped"), s1 never saved (a log folder only).
    # A --set checkpoint.root moves where the runner looks for (and clears) its checkpoints.
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "args_train.py"
    script.write_text(ARGS_TRAIN)
    stopped = tmp_path / root / "exp" / "softmax-s0"
    stopped.mkdir(parents=True)
    (stopped / "last.ckpt").write_bytes(b"ckpt")
    log_dir = tmp_path / "logs" / "exp"
    _record(log_dir / "softmax-s0", 0, "stopped")
    (log_dir / "softmax-s1").mkdir(parents=True)
    softmax = Variant.from_attention("softmax")

    def run(resume: bool) -> list[dict]:
        moved = () if root == "checkpoints" else (f"checkpoint.root={root}",)
        runner = Runner(experiment="exp", train_script=script, overrides=moved)
        runner.resume = resume
        for path in log_dir.glob("*/record.json"):  # as if the runs had stopped again
            path.write_text(path.read_text().replace('"ok"', '"stopped"'))
        runner.run_all([(softmax, 0), (softmax, 1)])
        return [json.loads((log_dir / f"softmax-s{s}" / "record.json").read_text()) for s in (0, 1)]

    first, second = run(resume=True)
    assert first["args"]["ckpt_path"] == str(Path(root, "exp/softmax-s0/last.ckpt"))
    assert (stopped / "last.ckpt").is_file()  # the run continues in its own folder
    assert "ckpt_path" not in second["args"]  # nothing to continue: started afresh
    first, _ = run(resume=False)  # without --resume every run starts over
    assert "ckpt_path" not in first["args"] and not stopped.exists()


def test_lightning_is_quiet_only_while_a_run_is_in_this_process():
    from lab.studies.runner import _train_argv

    lightning = logging.getLogger("lightning.pytorch")
    lightning.setLevel(logging.INFO)
    argv = list(sys.argv)
    with _train_argv():
        assert lightning.level == logging.WARNING and sys.argv == ["train.py"]
    assert lightning.level == logging.INFO and sys.argv == argv
    lightning.setLevel(logging.NOTSET)
