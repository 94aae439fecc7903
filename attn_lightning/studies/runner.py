"""The one study runner: (config stack, variant, seed) -> a ``train.py`` run -> its record.

A ``Variant`` is a name plus config files stacked on the study's base configs and ``key=value``
overrides (an attention spec is one override), and ``info``: the study's own facts of it (a
backend, a condition), which become the run's tags. ``Runner`` runs each (variant, seed) as a
``python -m attn_lightning.cli`` subprocess (``train.py``'s own code path; several at once with
``parallel``) or in this process, with ``--test_after_fit`` and ``--run_record.tags`` = {study,
variant, seed, the runner's and the variant's tags}; the ``RunResult`` is the run's
``record.json`` (``logs/<experiment>/<run>/``, ``results.records.load_run``). A (variant, seed)
with an ``ok`` record under ``record_roots`` (a study's committed ``docs/results/<study>/runs/``)
with the same tags is taken from there, not trained. ``build_cli`` builds a config stack's model
and data exactly as ``train.py`` would, for studies that measure a variant's model. ``CONFIGS`` is
the checkout's ``configs/`` the studies stack their variants on.
``attn_lightning.studies.sweep`` is the command line on top.
"""

from __future__ import annotations

import contextlib
import json
import logging
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
from attn_lightning.results.records import (
    NOT_RUN,
    OK,
    STOPPED,
    RunResult,
    find_ok,
    load_run,
    run_folder,
    run_label,
)
from attn_lightning.results.run_files import RECORD

if TYPE_CHECKING:
    from attn_lightning.cli import AttnLightningCLI

log = logging.getLogger("attn_lightning.studies.runner")
# The checkout's configs/: a study runs from the repository root, where train.py's --config paths,
# sweeps/, logs/ and docs/results/ are (installed or not, the package holds no configs). Resolved
# once, on import, so a study that later changes folder still finds them.
CONFIGS = Path("configs").resolve()


SEED = "{seed}"
# train.py's exits after Ctrl-C / SIGTERM (128 + the signal, ``cli.entry``) and the signals
# themselves (killed before its handler): the run stopped, and --resume continues it.
STOP_CODES = (130, 143, -2, -15)
SAVE_DIR = "trainer.logger.init_args.save_dir"  # the override that moves the runs' logs


__all__ = ["CONFIGS", "SEED", "Runner", "Variant", "build_cli", "run_label", "run_name"]
# Tags the runner sets on every run (a study's own facts go beside them).
OWN_TAGS = ("study", "variant", "seed")


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
    # The study's own facts of this variant (a backend, a condition): the runs' tags, read back
    # in ``RunResult.info``. Not part of the variant's identity (hash, ==): its name is.
    info: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def from_attention(cls, spec: str) -> Variant:
        """The variant ``spec`` that sets the model's attention (``name[:key=value,...]``)."""
        attention = json.dumps(parse_attention_spec(spec))
        return cls(spec, overrides=(f"model.init_args.attention={attention}",))

    @classmethod
    def from_config(cls, path: str | Path) -> Variant:
        """The variant named after a config overlay's file stem."""
        return cls(Path(path).stem, configs=(str(path),))


@contextlib.contextmanager
def _train_argv() -> Iterator[None]:
    # LightningCLI given ``args`` still looks at sys.argv (the program name, help).
    saved, sys.argv = sys.argv, ["train.py"]
    try:
        yield
    finally:
        sys.argv = saved


def build_cli(configs: Sequence[str | Path], overrides: Sequence[str] = ()) -> AttnLightningCLI:
    """Parse and instantiate a config stack as ``train.py`` does, without running anything.

    Returns the ``AttnLightningCLI`` (``.model``, ``.datamodule``, ``.trainer``, ``.config``), for
    studies that measure a variant's model (no YAML read or merged by hand). ``overrides`` are
    ``key=value`` arguments, as in ``Variant``.
    """
    from attn_lightning.cli import main as train_main

    args = [a for c in configs for a in ("--config", str(c))]
    with _train_argv():
        return train_main([*args, *(f"--{o}" for o in overrides)], run=False)


@dataclass
class Runner:
    """Runs variants of a base config stack through ``train.py`` and reads their run records.

    Attributes:
        configs: base config stack, before each variant's configs.
        overrides: ``key=value`` arguments of every run (``--set``), after the variant's.
        experiment: ``--experiment`` of every run (logs/ and checkpoints/ folder).
        study: the runs' ``study`` tag (default: ``experiment``).
        tags: more tags of every run (e.g. ``{"task": "digits"}``), before the variant's ``info``.
        record_roots: folders of committed records (``results.records.study_runs_dir``): a
            (variant, seed) with an ``ok`` record there with this run's tags is taken from it,
            not trained (a study continued on another machine trains only the rest).
        log_root: the runs' logger ``save_dir``: a run's record is in
            ``<log_root>/<experiment>/<label>-s<seed>/record.json`` (an override
            ``trainer.logger.init_args.save_dir=DIR`` in ``overrides`` moves it to ``DIR``).
        python: the interpreter of the subprocesses, which run ``-m attn_lightning.cli``.
        train_script: a script to run instead (a stand-in ``train.py`` in tests).
        timeout: seconds per subprocess run (None: no limit).
        in_process: call ``attn_lightning.cli.main`` here instead (pays the imports once; one run
            at a time, no timeout).
        resume: reuse a run's ``ok`` record in ``log_root`` instead of training again; a fit
            without one but with a ``last.ckpt`` in its checkpoint folder (a run stopped
            part-way: Ctrl-C, SIGTERM, a machine or session that went away) continues from it
            (``--ckpt_path``) instead of starting over. A resumed fit equals the uninterrupted
            one (``tests/test_resume.py``). The folder is trusted to hold the same run: its name
            is the experiment, variant and seed.
        skip_runs: never train; read whatever records exist (tables from earlier runs).
    """

    configs: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    experiment: str = "sweep"
    study: str | None = None
    tags: Mapping[str, Any] = field(default_factory=dict)
    record_roots: tuple[Path, ...] = ()
    log_root: Path = Path("logs")
    python: str = sys.executable
    train_script: Path | None = None
    timeout: float | None = None
    in_process: bool = False
    resume: bool = False
    skip_runs: bool = False

    def run_tags(self, variant: Variant, seed: int) -> dict[str, Any]:
        """The ``run_record.tags`` of one run: study, variant, seed, ``tags``, ``variant.info``."""
        own = {"study": self.study or self.experiment, "variant": variant.name, "seed": seed}
        return {**own, **self.tags, **variant.info}

    def train_args(
        self, variant: Variant, seed: int, *, ckpt_path: Path | None = None
    ) -> list[str]:
        """The ``train.py`` arguments of one run (subcommand first); ``ckpt_path`` resumes it."""
        label = run_name(variant, seed)
        args = [variant.subcommand]
        for config in (*self.configs, *variant.configs):
            args += ["--config", str(config)]
        # ``{seed}`` in a variant's override is the run's seed (e.g. a per-seed checkpoint path).
        args += [f"--{o.replace(SEED, str(seed))}" for o in variant.overrides]
        args += [
            f"--seed_everything={seed}",
            f"--experiment={self.experiment}",
            f"--run_name={label}",
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
        return [self.python, *program, *self.train_args(variant, seed, ckpt_path=ckpt_path)]

    def resume_point(self, variant: Variant, seed: int) -> Path | None:
        """The ``last.ckpt`` a stopped fit continues from with ``resume`` (None: start afresh)."""
        if not self.resume or variant.subcommand != "fit":
            return None
        last = Path("checkpoints") / self.experiment / run_name(variant, seed) / "last.ckpt"
        return last if last.is_file() else None

    def run_dir(self, variant: Variant, seed: int) -> Path:
        """One run's log folder, where its ``record.json`` is: ``<log_root>/<experiment>/<run>``."""
        return self._log_root() / self.experiment / run_name(variant, seed)

    def _log_root(self) -> Path:
        # The last --set of the logger's folder wins, as on train.py's command line.
        for override in reversed(self.overrides):
            key, _, value = override.partition("=")
            if key == SAVE_DIR:
                return Path(value)
        return self.log_root

    def _read(self, variant: Variant, seed: int, seconds: float | None) -> RunResult | None:
        """The run's record as a ``RunResult`` named as the job (None, with a warning, when it
        cannot be read); ``seconds`` where the record has no fit time."""
        folder = self.run_dir(variant, seed)
        try:
            result = load_run(folder)
        except (OSError, ValueError) as error:
            log.warning("run %s: no readable record (%s)", run_name(variant, seed), error)
            return None
        result.variant, result.seed = variant.name, seed
        # The fit's own time (FitClock, summed over resumes), whether the run trained now or is
        # reused: one definition per column (the process time adds start-up and the test).
        if result.seconds is None:
            result.seconds = seconds
        return result

    def run(self, variant: Variant, seed: int) -> RunResult:
        """Train (or reuse) one run and read its record."""
        label = run_name(variant, seed)
        tags = self.run_tags(variant, seed)
        info = {k: v for k, v in tags.items() if k not in OWN_TAGS}
        done = find_ok(self.record_roots, variant.name, seed, **tags)
        if done is not None:
            log.info("run %s: taken from the committed record %s", label, done.log_dir)
            return done
        has_record = (self.run_dir(variant, seed) / RECORD).is_file()
        if self.skip_runs or (self.resume and has_record):
            earlier = self._read(variant, seed, None) if has_record else None
            if earlier is not None and (self.skip_runs or earlier.status == OK):
                return earlier
            if self.skip_runs:
                log.info(
                    "run %s: not run (--skip-runs; no record %s)",
                    label,
                    self.run_dir(variant, seed),
                )
                return RunResult(variant.name, seed, None, NOT_RUN, info=info)
        ckpt_path = self.resume_point(variant, seed)
        if ckpt_path is not None:
            log.info("run %s: continuing the stopped run from %s", label, ckpt_path)
        # train.py refuses a fresh fit into an existing run folder; a run trained again by
        # the study replaces its own earlier folders (the study owns its experiment name).
        for root in (self._log_root(), Path("checkpoints")):
            stale = root / self.experiment / label
            if ckpt_path is None and stale.is_dir():
                log.info("replacing the earlier run folder %s", stale)
                shutil.rmtree(stale)
        start = time.perf_counter()
        status = (
            self._in_process(variant, seed, ckpt_path)
            if self.in_process
            else self._spawn(variant, seed, ckpt_path)
        )
        seconds = time.perf_counter() - start
        if status != OK:
            return RunResult(variant.name, seed, seconds, status, info=info)
        result = self._read(variant, seed, seconds)
        if result is None:
            return RunResult(variant.name, seed, seconds, "crashed", info=info)
        # The process's own outcome: a fit that ended by early stopping exits 0 and is a
        # finished run, though its record says "stopped" (resumable).
        result.status = OK
        return result

    def _spawn(self, variant: Variant, seed: int, ckpt_path: Path | None = None) -> str:
        label = run_name(variant, seed)
        # The run's output goes to an unlinked temporary file, not a pipe: if this process dies
        # (a stopped study), a pipe would kill the run at its next print (SIGPIPE / broken pipe)
        # after training but before its record is final; a file lets it finish and be resumed.
        with tempfile.TemporaryFile("w+") as output:
            try:
                proc = subprocess.run(
                    self.command(variant, seed, ckpt_path=ckpt_path),
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=self.timeout,
                )
            except subprocess.TimeoutExpired:
                log.warning("run %s timed out after %s s", label, self.timeout)
                return "timeout"
            if proc.returncode in STOP_CODES:
                log.warning("run %s stopped by a signal (exit %d)", label, proc.returncode)
                return STOPPED
            if proc.returncode:
                output.seek(0)
                tail = output.read()[-3000:]
                log.warning("run %s failed (exit %d):\n%s", label, proc.returncode, tail)
                return "crashed"
        return "ok"

    def _in_process(self, variant: Variant, seed: int, ckpt_path: Path | None = None) -> str:
        from attn_lightning.cli import main as train_main

        try:
            with _train_argv():
                train_main(self.train_args(variant, seed, ckpt_path=ckpt_path))
        except (Exception, SystemExit) as error:  # one failed run must not end the study
            log.warning(
                "run %s-s%d failed: %s: %s", variant.name, seed, type(error).__name__, error
            )
            return "crashed"
        return "ok"

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
        if self.in_process and parallel > 1:
            raise ValueError("in-process runs go one at a time; use parallel=1")
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
            with ThreadPoolExecutor(max_workers=parallel) as pool:
                futures = {pool.submit(self.run, v, s): i for i, (v, s) in enumerate(jobs)}
                for future in as_completed(futures):
                    finish(futures[future], future.result())
        return [done[i] for i in sorted(done)]
