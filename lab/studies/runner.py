"""The one study runner: (config stack, variant, seed) -> a ``train.py`` run -> its record.

Every run takes ``train.py``'s own code path (``python -m attn_lightning.cli``, or in this
process) with the study's tags, so a study reads back what any run leaves: its ``record.json``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attn_lightning.attention import parse_attention_spec
from attn_lightning.cli.process import OMP_ENV, usable_cpus
from attn_lightning.records.run_files import RECORD
from lab.results.records import (
    NOT_RUN,
    OK,
    STOPPED,
    RunResult,
    find_ok,
    load_run,
    run_folder,
    run_label,
)

if TYPE_CHECKING:
    from attn_lightning.cli import AttnLightningCLI

log = logging.getLogger("lab.studies.runner")
QUIET = ("lightning", "lightning.pytorch", "lightning.fabric", "tensorboard")
# The checkout's configs/: a study runs from the repository root, where train.py's --config paths,
# logs/ and docs/results/ are (installed or not, the package holds no configs). Resolved once, on
# import, so a study that later changes folder still finds them.
CONFIGS = Path("configs").resolve()
SEED = "{seed}"  # in a variant's override: the run's seed (e.g. a per-seed checkpoint path)
# train.py's exits after Ctrl-C / SIGTERM (128 + the signal, ``cli.entry``) and the signals
# themselves (killed before its handler): the run stopped, and --resume continues it.
STOP_CODES = (130, 143, -2, -15)
SAVE_DIR = "trainer.logger.init_args.save_dir"  # the override that moves the runs' logs
CHECKPOINT_ROOT = "checkpoint.root"  # the override that moves their checkpoints
CRASHED = "crashed"

__all__ = ["CONFIGS", "SEED", "Runner", "Variant", "build_cli", "run_label", "run_name"]


def run_name(variant: Variant, seed: int) -> str:
    """A run's folder name (``--run_name``): ``<label>-s<seed>`` (``records.run_folder``)."""
    return run_folder(variant.name, seed)


@dataclass(frozen=True)
class Variant:
    """A named change to the base config: stacked ``configs``, then ``key=value`` overrides."""

    name: str
    configs: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    subcommand: str = "fit"  # "test" scores a checkpoint given in the overrides
    # The runs' tags (RunResult.info); not part of the variant's identity (hash, ==): its name is.
    info: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def from_attention(cls, spec: str) -> Variant:
        """The variant ``spec`` that sets the model's attention (``name[:key=value,...]``)."""
        attention = json.dumps(parse_attention_spec(spec))
        return cls(spec, overrides=(f"model.init_args.attention={attention}",))

    @classmethod
    def from_config(cls, path: str | Path) -> Variant:
        """The variant named after a config overlay's file stem.

        Raises:
            ValueError: not a YAML file name (an attention spec is a ``backends`` entry).
        """
        if Path(path).suffix not in (".yaml", ".yml"):
            raise ValueError(
                f"variant {str(path)!r} is not a config overlay (a .yaml file); attention specs "
                "(name:key=value) go to --backends"
            )
        return cls(Path(path).stem, configs=(str(path),))


@contextlib.contextmanager
def _train_argv() -> Iterator[None]:
    # LightningCLI given ``args`` still looks at sys.argv (the program name, help). Lightning's
    # and TensorBoard's loggers stay at WARNING meanwhile (hundreds of in-process runs would each
    # log their device and model banners), then are as they were.
    saved, sys.argv = sys.argv, ["train.py"]
    levels = {name: logging.getLogger(name).level for name in QUIET}
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        sys.argv = saved
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def build_cli(configs: Sequence[str | Path], overrides: Sequence[str] = ()) -> AttnLightningCLI:
    """Parse and instantiate a config stack as ``train.py`` does, without running anything, for a
    study that measures a variant's model (``.model``, ``.datamodule``, ``.trainer``,
    ``.config``); ``overrides`` as in ``Variant``."""
    from attn_lightning.cli import main as train_main

    args = [a for c in configs for a in ("--config", str(c))]
    with _train_argv():
        return train_main([*args, *(f"--{o}" for o in overrides)], run=False)


def child_env(parallel: int) -> dict[str, str] | None:
    """The environment of ``parallel`` runs at once: each gets ``usable CPUs // parallel`` torch
    threads (≥ 1) through ``OMP_NUM_THREADS``, unless it is set already (then it stands, as for one
    run at a time: None, this process's environment). Without it every run would take train.py's
    default, half the CPUs, and ``--jobs 12`` on 16 cores would run 96 threads."""
    if parallel <= 1 or os.environ.get(OMP_ENV):
        return None
    return {**os.environ, OMP_ENV: str(max(1, usable_cpus() // parallel))}


@dataclass
class Runner:
    """Runs variants of a base config stack through ``train.py`` and reads their run records.

    A (variant, seed) with an ``ok`` record with this run's tags under ``record_roots`` is taken
    from it, not trained; ``publish`` copies each new ``ok`` run's record (``records.publish_run``)
    and returns its new ``log_dir``. ``resume`` reuses an ``ok`` record in ``logs/`` and continues
    a fit from its ``last.ckpt`` (``tests/test_resume.py``: it equals the uninterrupted run; the
    folder, named by experiment, variant and seed, is trusted to hold the same run).
    """

    configs: tuple[str, ...] = ()  # before each variant's
    overrides: tuple[str, ...] = ()  # --set, after the variant's (SAVE_DIR moves logs/)
    experiment: str = "sweep"
    study: str | None = None  # the runs' study tag (default: experiment)
    tags: Mapping[str, Any] = field(default_factory=dict)  # before the variant's info
    record_roots: tuple[Path, ...] = ()
    publish: Callable[[Path], Path] | None = None
    train_script: Path | None = None  # instead of -m attn_lightning.cli (a stand-in in tests)
    resume: bool = False
    skip_runs: bool = False  # never train: whatever records exist
    blocked: Callable[[Variant, int], str | None] | None = None  # why not yet: NOT_RUN
    # The runs' environment: run_all's share of the CPUs among its parallel runs (child_env).
    _env: dict[str, str] | None = field(default=None, init=False, repr=False)

    def run_tags(self, variant: Variant, seed: int) -> dict[str, Any]:
        """The ``run_record.tags`` of one run: study, variant, seed, ``tags``, ``variant.info``."""
        own = {"study": self.study or self.experiment, "variant": variant.name, "seed": seed}
        return {**own, **self.tags, **variant.info}

    def train_args(
        self, variant: Variant, seed: int, *, ckpt_path: Path | None = None
    ) -> list[str]:
        """The ``train.py`` arguments of one run (subcommand first); ``ckpt_path`` resumes it."""
        args = [variant.subcommand]
        for config in (*self.configs, *variant.configs):
            args += ["--config", str(config)]
        args += [f"--{o.replace(SEED, str(seed))}" for o in variant.overrides]
        args += [
            f"--seed_everything={seed}",
            f"--experiment={self.experiment}",
            f"--run_name={run_name(variant, seed)}",
            f"--run_record.tags={json.dumps(self.run_tags(variant, seed))}",
            "--trainer.enable_progress_bar=false",
        ]
        if variant.subcommand == "fit":
            args.append("--test_after_fit=true")
        if ckpt_path is not None:
            args.append(f"--ckpt_path={ckpt_path}")
        return args + [f"--{o}" for o in self.overrides]

    def command(self, variant: Variant, seed: int, *, ckpt_path: Path | None = None) -> list[str]:
        """The subprocess command line of one run: ``python -m attn_lightning.cli <args>``."""
        script = self.train_script
        program = ["-m", "attn_lightning.cli"] if script is None else [str(script)]
        return [sys.executable, *program, *self.train_args(variant, seed, ckpt_path=ckpt_path)]

    def run_dir(self, variant: Variant, seed: int, key: str = SAVE_DIR) -> Path:
        """One run's log folder, where its ``record.json`` is: ``logs/<experiment>/<run>``
        (``key=CHECKPOINT_ROOT``: its checkpoint folder, ``checkpoints/<experiment>/<run>``)."""
        # The last --set of the folder wins, as on train.py's command line.
        moved = [o.partition("=")[2] for o in self.overrides if o.partition("=")[0] == key]
        root = moved[-1] if moved else ("logs" if key == SAVE_DIR else "checkpoints")
        return Path(root) / self.experiment / run_name(variant, seed)

    def _read(self, variant: Variant, seed: int) -> RunResult | None:
        """The run's record named as the job; None, with a warning, when it cannot be read."""
        try:
            result = load_run(self.run_dir(variant, seed))
        except (OSError, ValueError) as error:
            log.warning("run %s: no readable record (%s)", run_name(variant, seed), error)
            return None
        result.variant, result.seed = variant.name, seed
        return result

    def committed(self, variant: Variant, seed: int) -> RunResult | None:
        """The run's ok record under ``record_roots`` (taken, never re-run), or None."""
        return find_ok(self.record_roots, variant.name, seed, **self.run_tags(variant, seed))

    def run(self, variant: Variant, seed: int) -> RunResult:
        """Train (or reuse) one run and read its record."""
        label = run_name(variant, seed)
        info = {**self.tags, **variant.info}  # a run's tags but the runner's own three
        done = self.committed(variant, seed)
        if done is not None:
            log.info("run %s: taken from the committed record %s", label, done.log_dir)
            return done
        earlier = None
        if (self.skip_runs or self.resume) and (self.run_dir(variant, seed) / RECORD).is_file():
            earlier = self._read(variant, seed)
        if earlier is not None and (self.skip_runs or earlier.status == OK):
            result = earlier
        elif self.skip_runs:
            log.info("run %s: not run (--skip-runs; no record)", label)
            return RunResult(variant.name, seed, None, NOT_RUN, info=info)
        elif reason := self.blocked and self.blocked(variant, seed):
            log.warning("run %s: not run: %s", label, reason)
            return RunResult(variant.name, seed, None, NOT_RUN, info={**info, "reason": reason})
        else:
            result = self._train(variant, seed, info)
        if result.status == OK and self.publish is not None and result.log_dir is not None:
            result.log_dir = str(self.publish(Path(result.log_dir)))
        return result

    def _train(self, variant: Variant, seed: int, info: dict[str, Any]) -> RunResult:
        label = run_name(variant, seed)
        checkpoints = self.run_dir(variant, seed, CHECKPOINT_ROOT)
        last = checkpoints / "last.ckpt"
        ckpt_path = last if self.resume and variant.subcommand == "fit" and last.is_file() else None
        if ckpt_path is not None:
            log.info("run %s: continuing the stopped run from %s", label, ckpt_path)
        else:  # train.py refuses a fresh fit into an existing run folder: the study owns it
            for stale in (self.run_dir(variant, seed), checkpoints):
                if stale.is_dir():
                    log.info("replacing the earlier run folder %s", stale)
                    shutil.rmtree(stale)
        start = time.perf_counter()
        status = self._spawn(variant, seed, ckpt_path)
        seconds = time.perf_counter() - start
        result = self._read(variant, seed) if status == OK else None
        if result is None:
            status = CRASHED if status == OK else status
            return RunResult(variant.name, seed, seconds, status, info=info)
        # The fit's own time (FitClock, summed over resumes) where the record has it: the
        # process time adds start-up and the test. A fit ended by early stopping exits 0 and is
        # a finished run, though its record says "stopped" (resumable).
        result.seconds = seconds if result.seconds is None else result.seconds
        result.status = OK
        return result

    def _spawn(self, variant: Variant, seed: int, ckpt_path: Path | None) -> str:
        label = run_name(variant, seed)
        # The run's output goes to an unlinked temporary file, not a pipe: if this process dies
        # (a stopped study), a pipe would kill the run at its next print (SIGPIPE / broken pipe)
        # after training but before its record is final; a file lets it finish and be resumed.
        with tempfile.TemporaryFile("w+") as output:
            command = self.command(variant, seed, ckpt_path=ckpt_path)
            code = subprocess.run(
                command, stdout=output, stderr=subprocess.STDOUT, env=self._env
            ).returncode
            if code in STOP_CODES:
                log.warning("run %s stopped by a signal (exit %d)", label, code)
                return STOPPED
            if code:
                output.seek(0)
                log.warning("run %s failed (exit %d):\n%s", label, code, output.read()[-3000:])
                return CRASHED
        return OK

    def run_all(
        self,
        jobs: Sequence[tuple[Variant, int]],
        *,
        parallel: int = 1,
        on_result: Callable[[RunResult, list[RunResult]], None] | None = None,
    ) -> list[RunResult]:
        """Run ``(variant, seed)`` jobs, ``parallel`` at once; results in the order of ``jobs``.

        ``on_result(result, finished)`` is called after each run with the runs finished so far
        (in job order), e.g. to rewrite the tables part-way through a long study.
        """
        done: dict[int, RunResult] = {}

        def finish(index: int, result: RunResult) -> None:
            done[index] = result
            log.info(
                "%-40s seed %d: %s in %s s",
                result.variant,
                result.seed,
                result.status,
                "?" if result.seconds is None else f"{result.seconds:.0f}",
            )
            if on_result is not None:
                on_result(result, [done[i] for i in sorted(done)])

        if parallel <= 1:
            for index, (variant, seed) in enumerate(jobs):
                finish(index, self.run(variant, seed))
        else:
            self._env = child_env(parallel)  # for these runs only: a later run() inherits again
            try:
                with ThreadPoolExecutor(max_workers=parallel) as pool:
                    futures = {pool.submit(self.run, v, s): i for i, (v, s) in enumerate(jobs)}
                    for future in as_completed(futures):
                        finish(futures[future], future.result())
            finally:
                self._env = None
        return [done[i] for i in sorted(done)]
