"""MQAR over several settings through train.py: each eval setting's accuracy is logged, is the
accuracy of that setting alone, and adds up to the overall one; predictions say their setting;
two DDP ranks log what one process logs."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs import CONFIGS, DEBUG, ROOT, ddp_env, train

BASE = CONFIGS / "recall" / "base.yaml"
TRAIN = (
    "[{seq_len: 16, num_kv_pairs: 2, examples: 48}, {seq_len: 32, num_kv_pairs: 4, examples: 40}]"
)
# Uneven counts (5 and 13 of each setting per batch of 4) so that DDP ranks see different
# settings' batches, and a setting longer than any trained on.
EVAL = "[{seq_len: 16, num_kv_pairs: 2}, {seq_len: 48, num_kv_pairs: 6}]"
SETTINGS = {"L16_P2": (2, 13), "L48_P6": (6, 13)}  # name: (queries an example, examples)
OPTIONS = [
    "--data.init_args.vocab_size=64",
    f"--data.init_args.train_settings={TRAIN}",
    f"--data.init_args.eval_settings={EVAL}",
    "--data.init_args.val_size=13",
    "--data.init_args.test_size=13",
    "--data.init_args.batch_size=4",
    "--model.init_args.net.d_model=16",
    "--model.init_args.net.d_ff=32",
    "--trainer.limit_val_batches=1.0",
    "--trainer.limit_test_batches=1.0",
    "--trainer.limit_predict_batches=1.0",
    "--trainer.enable_progress_bar=false",
]


def run(subcommand: str, tmp: Path, *extra: str):
    return train(subcommand, tmp, (BASE, DEBUG), options=OPTIONS, extra=extra)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixture")
    cli = run("fit", tmp, "--trainer.max_steps=6", "--test_after_fit=true", "--run_name=one")
    return tmp, cli


@pytest.mark.usefixtures("cli_workdir")
def test_each_eval_setting_is_logged_and_they_add_up_to_the_overall_accuracy(trained):
    tmp, cli = trained
    assert cli.model.seq_len == 48  # linked: the longest setting
    ckpt = cli.trainer.checkpoint_callback.last_model_path
    validated = run("validate", tmp, f"--ckpt_path={ckpt}").trainer.callback_metrics
    metrics = {k: float(v) for k, v in (cli.trainer.callback_metrics | validated).items()}
    queries = {name: pairs * count for name, (pairs, count) in SETTINGS.items()}
    for split in ("val", "test"):
        per = {name: metrics[f"{split}/query_acc_{name}"] for name in SETTINGS}
        overall = sum(per[n] * queries[n] for n in SETTINGS) / sum(queries.values())
        assert metrics[f"{split}/query_acc"] == pytest.approx(overall, abs=1e-6)
        examples = sum(metrics[f"{split}/example_acc_{n}"] * SETTINGS[n][1] for n in SETTINGS)
        assert metrics[f"{split}/example_acc"] == pytest.approx(examples / 26, abs=1e-6)
    # Distance bins reach the longest setting, whichever batch came first.
    assert "test/query_acc_d32-63" in metrics


@pytest.mark.usefixtures("cli_workdir")
def test_a_settings_accuracy_is_that_of_the_setting_alone(trained):
    tmp, cli = trained
    ckpt = cli.trainer.checkpoint_callback.last_model_path
    for name, entry in [
        ("L16_P2", "{seq_len: 16, num_kv_pairs: 2}"),
        ("L48_P6", "{seq_len: 48, num_kv_pairs: 6}"),
    ]:
        alone = run(
            "test", tmp, f"--data.init_args.eval_settings=[{entry}]", f"--ckpt_path={ckpt}"
        ).trainer.callback_metrics
        full = run("test", tmp, f"--ckpt_path={ckpt}").trainer.callback_metrics
        assert float(alone["test/query_acc"]) == float(full[f"test/query_acc_{name}"])
        assert float(alone["test/example_acc"]) == float(full[f"test/example_acc_{name}"])


@pytest.mark.usefixtures("cli_workdir")
def test_predictions_name_each_examples_setting(trained):
    tmp, cli = trained
    ckpt = cli.trainer.checkpoint_callback.last_model_path
    out = tmp / "predictions"
    run("predict", tmp, f"--ckpt_path={ckpt}", f"--prediction_writer.dirpath={out}")
    with open(out / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    per_example = {}
    for row in rows:
        per_example.setdefault(int(row["index"]), set()).add(row["setting"])
    assert sorted(per_example) == list(range(26))  # every test example once, numbered in order
    assert {i: s.pop() for i, s in per_example.items()} == {
        i: "L16_P2" if i < 13 else "L48_P6" for i in range(26)
    }
    assert len(rows) == 13 * 2 + 13 * 6  # one row per query


def test_two_ddp_ranks_log_what_one_process_logs(tmp_path):
    cmd = [sys.executable, str(ROOT / "train.py"), "fit"]
    for config in (BASE, DEBUG):
        cmd += ["--config", str(config)]
    cmd += [
        *OPTIONS,
        "--trainer.max_steps=2",
        "--test_after_fit=true",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--run_name=ddp",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'logs'}",
        f"--checkpoint.root={tmp_path / 'checkpoints'}",
        f"--metrics_file={tmp_path / 'metrics.json'}",
    ]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=ddp_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    ddp = json.loads((tmp_path / "metrics.json").read_text())["test"]
    single = run("test", tmp_path, f"--ckpt_path={tmp_path / 'checkpoints/debug/ddp/last.ckpt'}")
    one = {k: float(v) for k, v in single.trainer.callback_metrics.items() if k.startswith("test/")}
    assert {f"test/query_acc_{n}" for n in SETTINGS} <= ddp.keys()
    assert ddp.keys() == one.keys()
    for key, value in ddp.items():
        if key.endswith("loss"):
            assert value == pytest.approx(one[key], rel=1e-6), key
        else:  # counts of right answers: exact (NaN for a distance no query has)
            assert value == one[key] or (value != value and one[key] != one[key]), key
