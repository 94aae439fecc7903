"""A plan's grid and stages: runs crossed with a grid, stages started from an earlier stage's
checkpoint of the same seed, their record layout, NOT_RUN sources, --dry-run and the errors."""

from __future__ import annotations

import json
import logging
import re
import shutil

import pytest

from lab.results.records import run_label
from lab.studies.sweep import REPORTS, main, parse
from tests.lab.studies.test_sweep import FAKE_RECORD

# A stand-in train.py whose "weights" are one number in last.ckpt: a fit adds its max_steps to
# the number it starts from (--init_from), a test scores the checkpoint it is given. Every run
# records what it started from and with which attention; softmax fits of seed 1 crash.
FAKE_STAGED = (
    FAKE_RECORD
    + """
sub = sys.argv[1]
attention = args.get("model.init_args.attention") or args["model.init_args.attention_override"]
name = json.loads(attention)["name"]
source = args.get("init_from") or args.get("ckpt_path")
if sub == "fit" and name == "softmax" and args["seed_everything"] == "1":
    sys.exit("crash")
start = float(open(source).read()) if source else 0.0
value = start + (float(args.get("trainer.max_steps", 1)) if sub == "fit" else 0.0)
if sub == "fit":
    folder = os.path.join("checkpoints", args["experiment"], args["run_name"])
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, "last.ckpt"), "w").write(str(value))
write_record({"test": {"test/loss": value}}, 1, source=source, attention=attention, sub=sub)
"""
)

STAGED = """
config: [base.yaml]
seeds: [0, 1]
metrics: [test/loss]
set: [trainer.max_steps=3]
stages:
  finetune: {from: base, backends: [linear], set: [trainer.max_steps=5]}
  base: {backends: [softmax]}
  zero_shot: {from: base, subcommand: test, backends: [linear]}
"""


def _plan(tmp_path, text: str) -> list[str]:
    plan = tmp_path / "page.yaml"
    plan.write_text(text)
    script = tmp_path / "fake_train.py"
    if not script.exists():
        script.write_text(FAKE_STAGED)
    return ["--plan", str(plan), "--out", "results/page", "--train-script", str(script)]


def _record(tmp_path, stage: str, run: str) -> dict:
    return json.loads((tmp_path / "results/page/runs" / stage / run / "record.json").read_text())


def test_stages_start_from_their_source_stage_of_the_same_seed(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    argv = _plan(tmp_path, STAGED)
    runs = main(argv)
    # finetune is written first but runs after base, its source; zero_shot keeps its place.
    assert [(r.variant, r.seed, r.status, r.value("test/loss")) for r in runs] == [
        ("base/softmax", 0, "ok", 3.0),
        ("base/softmax", 1, "crashed", None),
        ("finetune/linear", 0, "ok", 8.0),  # 3 steps of the base, then 5
        ("finetune/linear", 1, "not run", None),
        ("zero_shot/linear", 0, "ok", 3.0),  # the base's weights, scored as they are
        ("zero_shot/linear", 1, "not run", None),
    ]
    assert "run linear-s1: not run: its source run base/softmax-s1 is crashed" in caplog.text
    tuned, zero = (
        _record(tmp_path, "finetune", "linear-s0"),
        _record(tmp_path, "zero_shot", "linear-s0"),
    )
    assert tuned["source"] == "checkpoints/sweep-page-base/softmax-s0/last.ckpt"
    assert (tuned["sub"], tuned["tags"]["stage"]) == ("fit", "finetune")
    # A test stage scores the source checkpoint with its backend swapped in.
    assert (zero["sub"], zero["source"]) == ("test", tuned["source"])
    assert json.loads(zero["attention"]) == {"name": "linear"}
    page = (tmp_path / "results" / "page.md").read_text()
    assert "`finetune/linear`" in page and "`base/softmax`" in page
    # Another machine with the committed records only: nothing is trained again, and the records
    # alone give the same page; a fine-tune whose record is missing cannot start without the
    # base's checkpoint, which records do not keep.
    shutil.rmtree(tmp_path / "logs")
    shutil.rmtree(tmp_path / "checkpoints")
    shutil.rmtree(tmp_path / "results/page/runs/finetune/linear-s0")
    caplog.clear()
    again = main([*argv, "--report-only", "--into", str(tmp_path / "check")])
    assert [r.status for r in again] == ["ok", "not run", "not run", "not run", "ok", "not run"]
    elsewhere = main(argv)
    assert [r.status for r in elsewhere][2:5] == ["not run", "not run", "ok"]
    ckpt = "checkpoints/sweep-page-base/softmax-s0/last.ckpt"
    assert f"its source run base/softmax-s0 is ok but its checkpoint {ckpt} is not" in caplog.text


def test_a_grid_crosses_every_variant_and_a_stage_starts_from_its_own_cell(tmp_path):
    text = """
config: [base.yaml]
seeds: [0]
grid: {model.init_args.width: [64, 128], data.init_args.flag: [true]}
stages:
  base: {backends: [softmax]}
  tune: {from: base, backends: [linear, performer:num_features=8]}
  one: {from: {stage: base, variant: "softmax,width=64,flag=true"}, backends: [linear], grid: {}}
  lr:
    from: base
    backends: [linear]
    grid: {model.init_args.width: [128], data.init_args.flag: [true], model.init_args.lr: [0.1, 1]}
"""
    _, stages, _ = parse(_plan(tmp_path, text))
    base, tune, one, lr = stages
    assert [v.name for v in base.variants] == [
        "softmax,width=64,flag=true",
        "softmax,width=128,flag=true",
    ]
    assert base.variants[1].overrides[1:] == (
        "model.init_args.width=128",
        "data.init_args.flag=true",
    )
    assert base.variants[1].info == {"width": 128, "flag": True}  # the runs' tags
    assert dict(tune.sources) == {
        "linear,width=64,flag=true": "softmax,width=64,flag=true",
        "linear,width=128,flag=true": "softmax,width=128,flag=true",
        "performer:num_features=8,width=64,flag=true": "softmax,width=64,flag=true",
        "performer:num_features=8,width=128,flag=true": "softmax,width=128,flag=true",
    }
    assert tune.variants[1].overrides[-1] == (
        "init_from=checkpoints/sweep-page-base/softmax_width-128_flag-true-s{seed}/last.ckpt"
    )
    assert dict(one.sources) == {"linear": "softmax,width=64,flag=true"}
    # a stage whose grid adds a key starts each cell from the source's cell it extends
    assert set(lr.sources.values()) == {"softmax,width=128,flag=true"} and len(lr.sources) == 2


def test_a_plan_without_stages_keeps_its_records_layout_and_a_grid_labels_its_runs(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    text = (
        "config: [base.yaml]\nbackends: [linear]\nseeds: [0]\ngrid: {trainer.max_steps: [2, 4]}\n"
    )
    runs = main(_plan(tmp_path, text))
    assert [(r.variant, r.value("test/loss")) for r in runs] == [
        ("linear,max_steps=2", 2.0),
        ("linear,max_steps=4", 4.0),
    ]
    assert sorted(p.name for p in (tmp_path / "results/page/runs").iterdir()) == [
        "linear_max_steps-2-s0",
        "linear_max_steps-4-s0",
    ]


def test_dry_run_lists_every_run_with_its_stage_seed_source_and_command(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    assert main([*_plan(tmp_path, STAGED), "--dry-run"]) == []
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stage ")]
    assert len(lines) == 6 and lines[0].startswith("stage base | softmax | seed 0 | from - | ")
    ckpt = "checkpoints/sweep-page-base/softmax-s1/last.ckpt"
    assert lines[3].startswith(f"stage finetune | linear | seed 1 | from {ckpt} | ")
    assert "fit --config base.yaml '--model.init_args.attention=" in lines[3]
    assert f"--init_from={ckpt}" in lines[3] and "--trainer.max_steps=5" in lines[3]
    assert " test --config base.yaml " in lines[5] and f"--ckpt_path={ckpt}" in lines[5]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ("a: {from: b, backends: [x]}", "stages: a: from 'b' is not a stage; the stages are ['a']"),
        (
            "a: {from: b, backends: [x]}\n  b: {from: a, backends: [x]}",
            "stages: a cycle of from: a -> b -> a",
        ),
        ("a: {backends: [x], grid: {width: [1]}}", "stages: a: grid: key 'width' is not a dotted"),
        (
            "a: {backends: [x], grid: {m.width: []}}",
            "grid: m.width: give a non-empty list of values, not []",
        ),
        (
            "a: {backends: [x], grid: {m.width: 3}}",
            "grid: m.width: give a non-empty list of values, not 3",
        ),
        (
            "a: {backends: [x], subcommand: predict}",
            "subcommand 'predict'; the subcommands are fit, test",
        ),
        ("a: {backends: [x], seed: 1}", "stages: a: unknown key 'seed'; the keys are from, "),
        ("a: {backends: [x], subcommand: test}", "stages: a: a test stage tests a checkpoint"),
        (
            "a: {backends: [x, y]}\n  b: {from: a, backends: [z]}",
            "stages: b: which source run does 'z' start from? Its source stage has ['x', 'y']",
        ),
        (
            "a: {backends: [x]}\n  b: {from: {stage: a, variant: y}, backends: [z]}",
            "stages: b: from variant 'y'; it has ['x']",
        ),
        ("[a, b]", "stages: give a mapping of stage names to {from, subcommand, "),
        ("a: {from: {name: b}, backends: [x]}", "stages: a: from {'name': 'b'}; give a stage name"),
        ("../a: {backends: [x]}", "stages: the stage '../a' is not a folder name"),
        (
            "a: {backends: [x]}\n  b: {from: a, subcommand: test, backends: [y]}\n"
            "  c: {from: b, backends: [z]}",
            "stages: c: from 'b', a test stage: it saves no checkpoint",
        ),
        (
            "a: {backends: [x]}\n  b: {from: a, checkpoint: first, backends: [y]}",
            "stages: b: checkpoint 'first'; the checkpoints are last, best",
        ),
        (
            "a: {backends: [x]}\n  b: {from: a, checkpoint: best, backends: [y]}",
            "stages: b: checkpoint best: its source stage a names its best checkpoint only when "
            "run (checkpoint.filename=best-{step}); set checkpoint.filename=best there",
        ),
        (
            "a: {backends: [x], set: [checkpoint.save_last=false]}\n  b: {from: a, backends: [y]}",
            "stages: b: checkpoint last: its source stage a sets checkpoint.save_last=false",
        ),
        (
            "a: {backends: [x]}\n  b: {from: a, start: base, backends: [y]}",
            "stages: b: start 'base'; give init_from, ckpt_path or a dotted config option",
        ),
        (
            "a: {backends: [x]}\n  b: {from: a, subcommand: test, start: init_from, backends: [y]}",
            "stages: b: start init_from is a fit's; a test stage has ckpt_path",
        ),
        ("a: {backends: [x], start: ckpt_path}", "stages: a: start goes with from: (no source"),
        (
            "a: {backends: [x]}\n  b: {from: {stage: a, seed: -1}, backends: [y]}",
            "stages: b: from seed -1; give a seed (an int >= 0)",
        ),
        (
            "a: {backends: [x]}\n  b: {from: {stage: a, seed: 7}, backends: [y]}",
            "stages: b: from seed 7: its source stage a runs the seeds [0, 1, 2]",
        ),
        (
            "a: {backends: [x], seeds: [0]}\n  b: {from: a, backends: [y]}",
            "stages: b: from seed 1: its source stage a runs the seeds [0]",
        ),
        ("a: {backends: [x], seeds: []}", "stages: a: seeds []; give a list of seeds (ints >= 0)"),
        (
            "a: {backends: [x], tags: {seed: 3}}",
            "stages: a: tags: 'seed' is not a tag name of its own (a word, not study, variant,",
        ),
        (
            "a: {backends: [x], grid: {m.width: [1]}, tags: {width: 2}}",
            "stages: a: tags: 'width' is a grid's tag: its cells set it",
        ),
        (
            "a: {backends: [x], tags: {part: [1]}}",
            "stages: a: tags: part: [1]; give a string, number or boolean",
        ),
        (
            "a: {backends: [x], grid: {m.r: {tag: 2r, values: [1]}}}",
            "stages: a: grid: m.r: tag '2r' is not a word (like rank)",
        ),
        (
            "a: {backends: [x], grid: {m.t: {values: {'a b': [1]}}}}",
            "stages: a: grid: m.t: value label 'a b' is not a word (like lora)",
        ),
        (
            "a: {backends: [x], grid: {m.t: {name: t, values: [1]}}}",
            "stages: a: grid: m.t: give {tag: NAME, values: ...}, not {'name': 't', 'values': [1]}",
        ),
    ],
)
def test_a_bad_stage_or_grid_is_one_clear_error(tmp_path, capsys, stages, message):
    argv = _plan(tmp_path, f"config: [base.yaml]\nstages:\n  {stages}\n")
    with pytest.raises(SystemExit):
        parse(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err and err.startswith("usage:") is False and "page.yaml" in err


def test_a_stage_starts_from_a_pinned_seeds_best_checkpoint_through_a_config_option(
    tmp_path, caplog
):
    """What the LoRA plans need: a base of seed 0 for every seed, its best checkpoint loaded as
    the task loads a base, a test of the model as built, tags, labelled grid values."""
    text = """
config: [base.yaml]
seeds: [0, 1]
stages:
  base: {backends: [softmax], seeds: [0], set: [checkpoint.filename=best]}
  adapt:
    from: {stage: base, seed: 0}
    checkpoint: best
    start: model.init_args.base_checkpoint
    backends: [linear]
    grid:
      model.init_args.lora_r: {tag: rank, values: [2]}
      model.init_args.target_modules: {tag: head, values: {frozen: [fc1, fc2]}}
    tags: {part: mlp, adaptation: lora}
  before: {from: {stage: base, seed: 0}, checkpoint: best, start: model.init_args.base_checkpoint,
           subcommand: test, backends: [linear]}
"""
    caplog.set_level(logging.INFO)
    assert main([*_plan(tmp_path, text), "--dry-run"]) == []
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stage ")]
    assert len(lines) == 5  # the base once, each later stage at both seeds
    ckpt = "checkpoints/sweep-page-base/softmax-s0/best.ckpt"
    adapt = lines[2]
    assert adapt.startswith(f"stage adapt | linear,rank=2,head=frozen | seed 1 | from {ckpt} | ")
    assert f"--model.init_args.base_checkpoint={ckpt}" in adapt and "--init_from" not in adapt
    assert '\'--model.init_args.target_modules=["fc1", "fc2"]\'' in adapt
    assert "--run_name=linear_rank-2_head-frozen-s1" in adapt
    tags = json.loads(adapt.split("--run_record.tags=")[1].split("' ")[0])
    assert tags == {"study": "page", "variant": "linear,rank=2,head=frozen", "seed": 1,
                    "stage": "adapt", "part": "mlp", "adaptation": "lora", "rank": 2,
                    "head": "frozen"}  # fmt: skip
    assert f"--model.init_args.base_checkpoint={ckpt}" in lines[4]
    assert "--ckpt_path=initial" in lines[4] and " test " in lines[4]


def test_a_run_name_of_a_list_value_is_a_safe_stable_folder_name():
    name = 'lora,target_modules=["fc1", "fc2"]'
    assert re.fullmatch(r"lora_target_modules-_fc1___fc2_-[0-9a-f]{6}", run_label(name))
    assert run_label(name) == run_label(name)  # a digest of the name, not of the process
    assert re.fullmatch(r"[A-Za-z0-9._-]+", run_label(name))
    assert run_label('lora,target_modules=["fc1","fc2"]') != run_label(name)
    assert run_label("performer:num_features=64") == "performer_num_features-64"  # as before


def test_report_kinds_are_plain_functions():
    assert all(callable(write) for write in REPORTS.values())
