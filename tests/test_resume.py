"""kill -9 and resume equals the uninterrupted run, bit for bit on CPU fp32.

Each experiment runs ``train.py fit`` three times in subprocesses: uninterrupted; interrupted by
a real SIGKILL at a random step after the first checkpoint; resumed from that run's
``last.ckpt``. The per-step training losses, every TensorBoard curve (train, validation, epoch
averages, gradients, learning rate), the final validation metrics, the best checkpoint (its step
and score), the test of it (``--test_after_fit``) and the final weights must be equal exactly.
Dropout is on, so the RNG states must be restored as well as the data order. A run killed before
its first checkpoint is retried under the same ``--run_name`` and equals the uninterrupted run
too. The other DataModules' loaders are covered by ``tests/data/test_sampling.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
# last.ckpt every EVERY steps from step EVERY on, before the first validation (step 9 or 10) too,
# so the kill step is drawn from EVERY + 1 on; a kill before it leaves no checkpoint.
EVERY = 7
TINY_MODEL = [
    "--model.init_args.net.d_model=32",
    "--model.init_args.net.num_heads=2",
    "--model.init_args.net.num_layers=1",
    "--model.init_args.net.d_ff=64",
    "--model.init_args.net.dropout=0.1",  # draws from the torch RNG at every step
    "--model.init_args.warmup_steps=5",
]
COMMON = [
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.precision=32-true",
    "--trainer.val_check_interval=null",
    "--trainer.check_val_every_n_epoch=1",
    "--trainer.log_every_n_steps=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    f"--checkpoint.every_n_train_steps={EVERY}",
    "--test_after_fit=true",
    "--trainer.callbacks+=tests.test_resume.StepLog",
]
EXPERIMENTS = {
    # 10 batches an epoch: last.ckpt at 7, 14, 21, 28, 35; validation (and the best) at 10s.
    "reversal": (
        40,
        [
            "--config",
            str(CONFIGS / "reversal" / "base.yaml"),
            *TINY_MODEL,
            "--model.init_args.generate_max_batches=1",
            "--data.init_args.seq_len=8",
            "--data.init_args.train_size=80",
            "--data.init_args.val_size=20",
            "--data.init_args.test_size=8",
            "--data.init_args.batch_size=8",
        ],
    ),
    # A hybrid stack (softmax in layer 0, linear in layer 1) on associative recall.
    "recall": (
        40,
        [
            "--config",
            str(CONFIGS / "recall" / "base.yaml"),
            *TINY_MODEL,
            "--model.init_args.net.num_layers=2",
            "--model.init_args.attention={name: linear, layers: {0: {name: softmax}}}",
            "--data.init_args.vocab_size=64",
            "--data.init_args.seq_len=16",
            "--data.init_args.train_size=80",
            "--data.init_args.val_size=20",
            "--data.init_args.test_size=8",
            "--data.init_args.batch_size=8",
        ],
    ),
    # Several settings, a batch of one setting each, in a shuffled order: 5 + 6 batches an epoch,
    # two of them short (the whole-batch sampler resumes by batches, not examples). 40 steps end
    # inside an epoch: a run killed after the last validation (step 33) resumes with its metrics.
    "recall_mixture": (
        40,
        [
            "--config",
            str(CONFIGS / "recall" / "base.yaml"),
            *TINY_MODEL,
            "--data.init_args.vocab_size=64",
            "--data.init_args.train_settings=[{seq_len: 16, num_kv_pairs: 2, examples: 40}, "
            "{seq_len: 24, num_kv_pairs: 3, examples: 43}]",
            "--data.init_args.order=shuffled",
            "--experiment=recall_mixture",
            "--data.init_args.val_size=10",
            "--data.init_args.test_size=4",
            "--data.init_args.batch_size=8",
        ],
    ),
    # Epochs cut to 9 of the 79 batches: a resumed epoch must not continue the cut one.
    "image": (
        36,
        [
            "--config",
            str(CONFIGS / "image" / "base.yaml"),
            *TINY_MODEL,
            "--data.init_args.batch_size=16",
            "--trainer.limit_train_batches=9",
            "--trainer.limit_val_batches=2",
            "--image_grids.every_n_epochs=0",
        ],
    ),
}


class StepLog(Callback):
    """Test helper run inside train.py: appends ``step loss.hex()`` per training step to
    ``$RESUME_TEST_LOG``, saves the final weights beside it, and at step ``$RESUME_TEST_KILL_AT``
    writes ``<log>.ready`` and waits to be killed."""

    def __init__(self) -> None:
        self.path = Path(os.environ["RESUME_TEST_LOG"])
        self.kill_at = int(os.environ.get("RESUME_TEST_KILL_AT", "-1"))

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        with self.path.open("a") as f:
            f.write(f"{trainer.global_step} {float(loss).hex()}\n")
        if trainer.global_step == self.kill_at:
            self.path.with_suffix(".ready").touch()
            time.sleep(600)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        torch.save(pl_module.state_dict(), self.path.with_suffix(".weights"))


def _env(**extra: str) -> dict[str, str]:
    prefixes = ("PL_", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_", "RANK", "SLURM_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}


class Run:
    """One ``train.py fit`` subprocess writing ``<name>.log|.json|.weights|.stderr`` in ``tmp``."""

    def __init__(
        self, tmp: Path, experiment: str, name: str, args: list[str], *extra: str, **env: str
    ) -> None:
        self.tmp, self.experiment, self.name = tmp, experiment, name
        cmd = [
            sys.executable,
            str(ROOT / "train.py"),
            "fit",
            *args,
            *COMMON,
            f"--trainer.logger.init_args.save_dir={tmp / 'logs'}",
            f"--checkpoint.root={tmp / 'checkpoints'}",
            f"--metrics_file={tmp / name}.json",
            f"--run_name={name}",
            *extra,
        ]
        with open(tmp / f"{name}.stderr", "w") as stderr:
            self.proc = subprocess.Popen(
                cmd,
                cwd=tmp,
                env=_env(RESUME_TEST_LOG=str(tmp / f"{name}.log"), **env),
                stderr=stderr,
            )

    def error(self) -> str:
        return (self.tmp / f"{self.name}.stderr").read_text()[-4000:]

    def finish(self) -> None:
        assert self.proc.wait(timeout=300) == 0, self.error()

    def losses(self) -> dict[int, str]:
        steps = [line.split() for line in (self.tmp / f"{self.name}.log").read_text().splitlines()]
        return {int(step): loss for step, loss in steps}


def _wait_and_kill(run: Run) -> None:
    """SIGKILL ``run`` once it reached its kill step (a real kill -9: nothing runs after it)."""
    deadline = time.monotonic() + 300
    while not (run.tmp / f"{run.name}.ready").exists():
        assert run.proc.poll() is None, run.error()
        assert time.monotonic() < deadline, "the run to kill never reached its kill step"
        time.sleep(0.1)
    os.kill(run.proc.pid, signal.SIGKILL)
    assert run.proc.wait(timeout=60) == -signal.SIGKILL


def _scalars(run: Run) -> dict[str, dict[int, float]]:
    """Every TensorBoard curve of ``run``: tag -> {step: value} (hex: NaN equals NaN)."""
    events = EventAccumulator(str(run.tmp / "logs" / run.experiment / run.name))
    events.Reload()
    return {
        tag: {e.step: float(e.value).hex() for e in events.Scalars(tag)}
        for tag in events.Tags()["scalars"]
    }


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """Per experiment: the uninterrupted run, the losses logged before the kill, the step of the
    checkpoint resumed from, the resumed run, and (reversal) the retry of a run killed before
    its first checkpoint. All runs of a phase share the cores."""
    started: list[Run] = []
    try:
        phase: dict[str, tuple[Path, int, Run, Run, Run | None]] = {}
        for experiment, (max_steps, args) in EXPERIMENTS.items():
            tmp = tmp_path_factory.mktemp(experiment)
            args = [*args, f"--trainer.max_steps={max_steps}"]
            # After the first checkpoint; ATTN_RESUME_KILL_AT replays a failure's step.
            drawn = random.randint(EVERY + 1, max_steps - 3)
            kill_at = int(os.environ.get("ATTN_RESUME_KILL_AT", drawn))
            full = Run(tmp, experiment, "full", args)
            doomed = Run(tmp, experiment, "crash", args, RESUME_TEST_KILL_AT=str(kill_at))
            early = None
            if experiment == "reversal":  # killed before its first checkpoint (step EVERY)
                early = Run(tmp, experiment, "early", args, RESUME_TEST_KILL_AT=str(EVERY - 2))
            started += [full, doomed, *([early] if early else [])]
            phase[experiment] = (tmp, kill_at, full, doomed, early)
        for _, _, _, doomed, early in phase.values():
            for run in (doomed, *([early] if early else [])):
                _wait_and_kill(run)
        results = {}
        for experiment, (tmp, kill_at, full, doomed, early) in phase.items():
            full.finish()
            last = tmp / "checkpoints" / experiment / "crash" / "last.ckpt"
            saved_at = torch.load(last, weights_only=True)["global_step"]
            before_kill = doomed.losses()
            (tmp / "crash.log").rename(tmp / "crash-before-kill.log")
            max_steps, args = EXPERIMENTS[experiment]
            args = [*args, f"--trainer.max_steps={max_steps}"]
            again = Run(tmp, experiment, "crash", args, f"--ckpt_path={last}")
            retry = None
            if early is not None:
                assert not list((tmp / "checkpoints").rglob("early/*.ckpt"))
                (tmp / "early.log").unlink()
                retry = Run(tmp, experiment, "early", args)  # the same command, run again
            started += [again, *([retry] if retry else [])]
            results[experiment] = (full, before_kill, kill_at, saved_at, again, retry)
        for *_, again, retry in results.values():
            for run in (again, *([retry] if retry else [])):
                run.finish()
        yield results
    finally:
        for run in started:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_kill_and_resume_equals_the_uninterrupted_run(experiment, resumed):
    full, before_kill, kill_at, saved_at, again, retry = resumed[experiment]
    max_steps = EXPERIMENTS[experiment][0]
    context = f"killed at step {kill_at}, resumed from step {saved_at}"
    assert EVERY <= saved_at < kill_at, context
    reference, after = full.losses(), again.losses()
    assert sorted(reference) == list(range(1, max_steps + 1))
    assert before_kill == {s: reference[s] for s in range(1, kill_at + 1)}, context
    assert after == {s: reference[s] for s in range(saved_at + 1, max_steps + 1)}, context
    _assert_same_outcome(full, again, context)
    # fit_seconds counts the killed process up to its checkpoint plus the resumed one (FitClock).
    fresh, continued = (json.loads((r.tmp / f"{r.name}.json").read_text()) for r in (full, again))
    assert "resumed_from_step" not in fresh and fresh["fit_seconds"] > 0
    assert continued["resumed_from_step"] == saved_at, context
    assert 0 < continued["earlier_fit_seconds"] < continued["fit_seconds"], continued
    if retry is not None:  # killed before its first checkpoint, then run again from scratch
        assert retry.losses() == reference
        _assert_same_outcome(full, retry, "killed before the first checkpoint and retried")


def _assert_same_outcome(full: Run, other: Run, context: str) -> None:
    """Curves, final metrics, best checkpoint, its test and final weights equal exactly."""
    curves = [_scalars(run) for run in (full, other)]
    assert curves[0].keys() == curves[1].keys(), context
    for tag, points in curves[0].items():
        assert curves[1][tag] == points, f"{tag} differs; {context}"
    records = [json.loads((run.tmp / f"{run.name}.json").read_text()) for run in (full, other)]
    assert records[0]["global_step"] == records[1]["global_step"]

    def val(record: dict[str, Any]) -> dict[str, float]:
        return {k: v for k, v in record["metrics"].items() if k.startswith(("val/", "hp/"))}

    assert val(records[0]) and val(records[1]) == val(records[0]), context
    best = [Path(record["best_model_path"]).name for record in records]
    assert best[0].startswith("best-step=") and best[1] == best[0], context
    assert records[1]["best_model_score"] == records[0]["best_model_score"], context
    assert records[0]["test"] and records[1]["test"] == records[0]["test"], context
    weights = [
        torch.load(run.tmp / f"{run.name}.weights", weights_only=True) for run in (full, other)
    ]
    assert weights[0].keys() == weights[1].keys()
    for key, tensor in weights[0].items():
        assert torch.equal(weights[1][key], tensor), f"{key} differs; {context}"
