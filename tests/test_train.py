"""End-to-end runs of train.py from the real reversal configs (tiny data, few steps, CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from tests.runs import ddp_env, smoke_fit, train

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
BASE = CONFIGS / "reversal" / "base.yaml"
DEBUG = CONFIGS / "presets" / "debug.yaml"
BACKENDS = sorted(p for p in (CONFIGS / "reversal").glob("*.yaml") if p.name != "base.yaml")
# Tiny data keeps each run to a few seconds; the model is the config's own.
TINY = [
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=32",
    "--data.init_args.test_size=32",
    "--data.init_args.batch_size=16",
    "--trainer.enable_progress_bar=false",
]


class StepRecorder(Callback):
    """Records the global step at which training starts (class attribute: the CLI builds it)."""

    started_at: ClassVar[list[int]] = []

    def on_train_start(self, trainer, pl_module):
        StepRecorder.started_at.append(trainer.global_step)


def run(subcommand: str, tmp: Path, *configs: Path, extra: tuple[str, ...] = ()):
    return train(subcommand, tmp, (BASE, *configs), options=TINY, extra=extra)


pytestmark = pytest.mark.usefixtures("cli_workdir")


@pytest.mark.parametrize("config", BACKENDS, ids=[p.stem for p in BACKENDS])
def test_fast_dev_run_per_backend(config, tmp_path):
    cli = smoke_fit(run, config, tmp_path)
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics["test/loss"])
    assert 0.0 <= float(metrics["test/token_acc"]) <= 1.0
    if cli.model.mode == "decoder":  # greedy decoding ran on the test batches
        assert "test/gen_exact_acc" in metrics


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One short fit with performer (random features: exercises redraw and override)."""
    tmp = tmp_path_factory.mktemp("trained")
    cwd = os.getcwd()
    os.chdir(tmp)
    argv, sys.argv = sys.argv, ["train.py"]
    try:
        cli = run(
            "fit",
            tmp,
            CONFIGS / "reversal" / "performer.yaml",
            DEBUG,
            extra=(
                "--model.init_args.attention={name: performer, num_features: 16}",
                "--run_name=first",
                "--feature_redraw.every_n_steps=2",
                f"--metrics_file={tmp / 'metrics.json'}",
            ),
        )
    finally:
        os.chdir(cwd)
        sys.argv = argv
    # Snapshot the best checkpoint: the resume test continues this run and replaces it.
    best = tmp / "best-of-first.ckpt"
    shutil.copy(cli.trainer.checkpoint_callback.best_model_path, best)
    return tmp, cli, best, cli.trainer.checkpoint_callback.best_model_score.cpu()


def test_fit_writes_logs_checkpoints_and_metrics(trained):
    tmp = trained[0]
    run_dir = tmp / "checkpoints" / "debug" / "first"
    assert (run_dir / "last.ckpt").is_file()
    assert list(run_dir.glob("best-step=*.ckpt"))
    assert (tmp / "logs" / "debug" / "first" / "config.yaml").is_file()
    assert list((tmp / "logs" / "debug" / "first").glob("events.out.tfevents.*"))
    record = json.loads((tmp / "metrics.json").read_text())
    assert record["global_step"] == 4 and record["subcommand"] == "fit"
    assert record["best_model_score"] == pytest.approx(record["metrics"]["val/loss"])
    ckpt = torch.load(run_dir / "last.ckpt", weights_only=True)  # primitive hparams only
    assert ckpt["hyper_parameters"]["attention"] == {"name": "performer", "num_features": 16}


def test_resume_continues_at_saved_step(trained):
    tmp = trained[0]
    last = tmp / "checkpoints" / "debug" / "first" / "last.ckpt"
    StepRecorder.started_at.clear()
    cli = run(
        "fit",
        tmp,
        DEBUG,
        extra=(
            f"--ckpt_path={last}",
            "--run_name=first",  # same run folder: config-1.yaml, no error
            "--trainer.max_steps=6",
            "--trainer.max_epochs=3",
            "--trainer.limit_train_batches=2",  # epoch 1 = steps 5-6, then validation
            "--trainer.callbacks+=tests.test_train.StepRecorder",
        ),
    )
    assert StepRecorder.started_at == [4]
    assert cli.trainer.global_step == 6
    assert torch.load(last, weights_only=True)["global_step"] == 6
    assert (tmp / "logs" / "debug" / "first" / "config-1.yaml").is_file()


def test_validate_reproduces_logged_validation_metrics(trained):
    tmp, _, best, logged = trained
    val = run("validate", tmp, DEBUG, extra=(f"--ckpt_path={best}",))
    torch.testing.assert_close(val.trainer.callback_metrics["val/loss"], logged.cpu())


def test_predict_from_checkpoint(trained):
    tmp, _, best, _ = trained
    pred = run("predict", tmp, DEBUG, extra=(f"--ckpt_path={best}",))
    (first, *_) = pred.trainer.predict_loop.predictions
    assert first["prediction"].shape == first["source"].shape == (16, 50)


def test_ckpt_hparams_win_and_attention_override_survives(trained):
    tmp, _, best, _ = trained
    # Lightning re-applies the checkpoint's hyper-parameters over command-line model arguments.
    val = run(
        "validate",
        tmp,
        DEBUG,
        extra=(
            f"--ckpt_path={best}",
            "--model.init_args.net.num_layers=1",
            "--model.init_args.attention={name: performer, num_features: 99}",
        ),
    )
    assert val.model.hparams.net["num_layers"] == 2
    assert val.model.attention_config["num_features"] == 16
    # attention_override is not a saved hyper-parameter, so it reaches the model.
    with pytest.warns(UserWarning, match="not loaded from the checkpoint"):
        val = run(
            "validate",
            tmp,
            DEBUG,
            extra=(
                f"--ckpt_path={best}",
                "--model.init_args.attention_override={num_features: 32}",
            ),
        )
    backend = val.model.net.encoder.layers[0].attn.backend
    assert backend.projection_matrix.shape == (32, 16)
    assert torch.isfinite(val.trainer.callback_metrics["val/loss"])


def test_bf16_mixed_run_completes(tmp_path):
    cli = run(
        "fit",
        tmp_path,
        CONFIGS / "presets" / "bf16.yaml",
        DEBUG,
        extra=("--trainer.fast_dev_run=true", "--trainer.accelerator=cpu"),
    )
    assert cli.trainer.precision == "bf16-mixed"
    assert torch.isfinite(cli.trainer.callback_metrics["val/loss"])


def _ddp_fit(tmp: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """``train.py fit`` of the base and debug configs (plus ``args``: config paths or options) on
    two CPU processes, run ``ddp`` under ``tmp``; asserts it exited 0."""
    configs = [BASE, *(a for a in args if isinstance(a, Path)), DEBUG]
    cmd = [sys.executable, str(ROOT / "train.py"), "fit"]
    for config in configs:
        cmd += ["--config", str(config)]
    cmd += [
        *TINY,
        *(a for a in args if isinstance(a, str)),
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--run_name=ddp",
        f"--trainer.logger.init_args.save_dir={tmp / 'logs'}",
        f"--checkpoint.root={tmp / 'checkpoints'}",
        f"--metrics_file={tmp / 'metrics.json'}",
    ]
    proc = subprocess.run(cmd, cwd=tmp, env=ddp_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_two_process_ddp_on_cpu(tmp_path):
    # strategy=ddp re-launches the script per rank, so it must run in a fresh process.
    _ddp_fit(
        tmp_path,
        CONFIGS / "reversal" / "performer.yaml",
        "--feature_redraw.every_n_steps=2",
        "--data.init_args.train_size=128",  # 4 batches of 16 per rank
    )
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["global_step"] == 4
    assert (tmp_path / "checkpoints" / "debug" / "ddp" / "last.ckpt").is_file()


# 33 samples in batches of 16 on 2 ranks: rank 0 evaluates 17 (2 batches), rank 1 16 (1 batch).
# A padded DistributedSampler would count one sample twice. Generation covers every batch.
UNEVEN = (
    "--data.init_args.seq_len=12",
    "--data.init_args.val_size=33",
    "--data.init_args.test_size=33",
    "--model.init_args.generate_max_batches=100",
    "--trainer.limit_val_batches=1.0",
    "--trainer.limit_test_batches=1.0",
)


def test_ddp_metrics_equal_single_process_metrics(tmp_path):
    proc = _ddp_fit(tmp_path, *UNEVEN, "--trainer.max_steps=2", "--test_after_fit=true")
    assert "sync_dist" not in proc.stderr  # every epoch-level scalar is reduced over the ranks
    ddp = json.loads((tmp_path / "metrics.json").read_text())
    # The end-of-fit validation ran on the step-2 weights, which last.ckpt holds.
    last = tmp_path / "checkpoints" / "debug" / "ddp" / "last.ckpt"
    val = run("validate", tmp_path, DEBUG, extra=(*UNEVEN, f"--ckpt_path={last}"))
    test = run("test", tmp_path, DEBUG, extra=(*UNEVEN, f"--ckpt_path={ddp['best_model_path']}"))
    single = {k: float(v) for k, v in val.trainer.callback_metrics.items() if "/" in k}
    single |= {k: float(v) for k, v in test.trainer.callback_metrics.items() if "/" in k}
    multi = {k: v for k, v in ddp["metrics"].items() if k.startswith(("val/", "hp/"))}
    multi |= ddp["test"]
    assert "val/gen_exact_acc" in multi and "test/gen_token_acc" in multi
    assert multi.keys() <= single.keys()
    for key, value in multi.items():
        if key.endswith("loss"):  # sums of other batches: the last bits may differ
            assert value == pytest.approx(single[key], rel=1e-6, abs=0), key
        else:  # counts of correct tokens: exact
            assert value == single[key], key


@pytest.mark.parametrize(
    ("attention", "message"),
    [
        ("{name: performr}", r"unknown attention 'performr'; available: .*softmax"),
        (
            "{name: performer, num_feature: 8}",
            r"unknown option\(s\) 'num_feature' for attention 'performer'; allowed: num_features",
        ),
    ],
)
def test_unknown_backend_or_option_fails_clearly(attention, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        run("fit", tmp_path, DEBUG, extra=(f"--model.init_args.attention={attention}",))


def test_typo_in_yaml_names_the_key(tmp_path, capsys):
    typo = tmp_path / "typo.yaml"
    typo.write_text("model:\n  init_args:\n    d_modle: 32\n")
    with pytest.raises(SystemExit):
        run("fit", tmp_path, typo)
    assert "d_modle" in capsys.readouterr().err


def test_data_and_model_mismatch_is_reported(tmp_path):
    with pytest.raises(ValueError, match=r"raise model\.init_args\.net\.max_len"):
        run("fit", tmp_path, DEBUG, extra=("--model.init_args.net.max_len=16",))


def test_enable_checkpointing_false_writes_no_checkpoint(tmp_path):
    # The always-added RunCheckpoint used to make Lightning refuse this flag outright.
    cli = run(
        "fit",
        tmp_path,
        DEBUG,
        extra=(
            "--trainer.max_steps=2",
            "--trainer.enable_checkpointing=false",
            "--test_after_fit=true",
            f"--metrics_file={tmp_path / 'metrics.json'}",
        ),
    )
    assert cli.trainer.checkpoint_callback is None
    assert not (tmp_path / "checkpoints").exists()
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["global_step"] == 2 and "test/loss" in record["test"]
