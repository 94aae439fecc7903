"""The converter: a committed runs CSV -> one record folder per row -> the same rows back."""

from __future__ import annotations

import csv
import io
import json

import pytest

from attn_lightning.results.convert_runs import convert_runs, main
from attn_lightning.results.files import read_csv
from attn_lightning.results.records import load_run, load_runs, run_curves

RUNS = (
    "# machine: test host\n"
    "variant,backend,condition,seed,status,seconds,global_step,test/acc,test/loss,val/acc,spikes\n"
    "softmax,softmax,base,0,ok,149.1,800,0.9630996584892273,0.14975397288799286,0.5,3\n"
    "lin@zero-shot,linear,zero-shot,0,ok,,,0.3247232437133789,4.701631546020508,,0\n"
    'lin@scratch,linear,"scratch, long",1,crashed,8.3,200,1e-07,nan,0.25,1\n'
)


def _rows_back(folders, columns, label="variant"):
    """The runs read back through load_run, as the CSV's rows (the tables' writer's text)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for folder in folders:
        run = load_run(folder)
        row = {label: run.variant, "seed": run.seed, "status": run.status, **run.metrics}
        row |= {"seconds": run.seconds, "global_step": run.global_step, **run.info}
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})
    return out.getvalue()


def test_a_runs_csv_round_trips_through_records_exactly(tmp_path):
    path = tmp_path / "w_runs.csv"
    path.write_text(RUNS)
    folders = convert_runs(path, "w", tags={"task": "digits"}, results=tmp_path / "results")
    assert [f.name for f in folders] == ["softmax-s0", "lin@zero-shot-s0", "lin@scratch-s1"]
    assert folders[0].parent == tmp_path / "results" / "w" / "runs"
    _, rows = read_csv(path)
    expected = RUNS.split("\n", 1)[1]
    assert _rows_back(folders, list(rows[0])) == expected
    record = json.loads((folders[0] / "record.json").read_text())
    assert record["metrics"] == {
        "fit": {"spikes": 3},
        "test": {"test/acc": 0.9630996584892273, "test/loss": 0.14975397288799286},
        "validate": {"val/acc": 0.5},
    }
    assert record["tags"] == {
        "study": "w",
        "variant": "softmax",
        "seed": 0,
        "backend": "softmax",
        "condition": "base",
        "task": "digits",
    }
    assert record["source"] == {
        "converted_from": str(path),
        "holds": ["metrics"],
        "header": {"machine": "test host"},
    }
    assert record["environment"] is None and record["fit_seconds"] == 149.1
    assert not (folders[0] / "curves.csv").exists()
    assert [r.variant for r in load_runs(tmp_path / "results", task="digits")] == [
        "lin@scratch",
        "lin@zero-shot",
        "softmax",
    ]


def test_layouts_are_options_label_name_fit_seconds_and_tag_columns(tmp_path):
    path = tmp_path / "l_runs.csv"
    path.write_text(
        "part,method,rank,seed,status,acc,fit_seconds\n"
        "a,lora,4,0,ok,0.5,1.5\n"
        "b,lora,4,0,ok,0.6,2.5\n"
    )
    with pytest.raises(ValueError, match="two rows are run 'lora-s0'"):
        convert_runs(path, "l", label="method", results=tmp_path)
    folders = convert_runs(
        path, "l", label="method", name=["part", "method"], tag_columns=["rank"], results=tmp_path
    )
    run = load_run(folders[1])
    assert (folders[1].name, run.variant, run.seconds) == ("b_lora-s0", "lora", 2.5)
    assert run.info == {"part": "b", "rank": 4} and run.metrics == {"acc": 0.6}
    with pytest.raises(ValueError, match="no column 'variant'"):
        convert_runs(path, "l", results=tmp_path)


def test_curves_csv_becomes_each_runs_curves(tmp_path):
    runs = tmp_path / "c_runs.csv"
    runs.write_text("variant,seed,status,test/loss\nsoftmax,0,ok,0.5\nsoftmax,1,ok,0.25\n")
    curves = tmp_path / "c_curves.csv"
    curves.write_text(
        "variant,seed,optimizer_steps,val/acc\nsoftmax,0,500,0.137\nsoftmax,0,250,0.1\n"
    )
    folders = main([str(runs), "--study", "c", "--curves", str(curves), "--results", str(tmp_path)])
    assert (folders[0] / "curves.csv").read_text() == (
        "step,tag,value\n250,val/acc,0.1\n500,val/acc,0.137\n"
    )
    assert run_curves(folders[0])[1] == {"step": 500, "tag": "val/acc", "value": 0.137}
    assert not (folders[1] / "curves.csv").exists()  # seed 1 has no curve rows
    record = json.loads((folders[0] / "record.json").read_text())
    assert record["source"]["holds"] == ["metrics", "curves"]
    bad = tmp_path / "bad.csv"
    bad.write_text("steps,val\n1,2\n")
    with pytest.raises(ValueError, match="not a curves CSV"):
        convert_runs(runs, "c", curves=bad, results=tmp_path)


def test_the_command_line_takes_tags_and_refuses_a_bad_one(tmp_path, capsys):
    runs = tmp_path / "t_runs.csv"
    runs.write_text("variant,seed,status\nsoftmax,0,ok\n")
    argv = [str(runs), "--study", "t", "--tags", "task=digits", "n=3"]
    (folder,) = main([*argv, "--results", str(tmp_path), "--group", "digits"])
    assert folder == tmp_path / "t" / "runs" / "digits" / "softmax-s0"
    assert load_run(folder).info == {"task": "digits", "n": 3}
    with pytest.raises(SystemExit):
        main([str(runs), "--study", "t", "--tags", "novalue"])
    assert "key=value" in capsys.readouterr().err
