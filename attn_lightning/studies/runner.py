"""The one study runner: (config stack, variant, seed) -> a ``train.py`` run -> its metrics.

A ``Variant`` is a name plus config files stacked on the study's base configs and ``key=value``
overrides (an attention spec is one override). ``Runner`` runs each (variant, seed) as a
``python -m attn_lightning.cli`` subprocess (``train.py``'s own code path; several at once with
``parallel``) or in this process, with ``--test_after_fit`` and a ``--metrics_file`` that it reads
back into a ``RunResult``. ``build_cli`` builds a config stack's model and data exactly as
``train.py`` would, for studies that measure a variant's model. ``CONFIGS`` is the checkout's
``configs/`` the studies stack their variants on. ``attn_lightning.studies.sweep`` is the command
line on top.
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
from attn_lightning.results.records import NOT_RUN, STOPPED, RunResult

if TYPE_CHECKING:
    from attn_lightning.cli import AttnLightningCLI

log = logging.getLogger("attn_lightning.studies.runner")
# The checkout's configs/: a study runs from the repository root, where train.py's --config paths,
# sweeps/, logs/ and docs/results/ are (installed or not, the package holds no configs). Resolved
# once, on import, so a study that later changes folder still finds them.
CONFIGS = Path("configs").resolve()
ROOT = CONFIGS.parent  # the checkout, as the LoRA study still spells it


SEED = "{seed}"
# train.py's exits after Ctrl-C / SIGTERM (128 + the signal, ``cli.entry``) and the signals
# themselves (killed before its handler): the run stopped, and --resume continues it.
STOP_CODES = (130, 143, -2, -15)


def run_label(spec: str) -> str:
    """A file-name-safe label: ``polynomial:form=sketch`` -> ``polynomial_form-sketch``."""
    return spec.replace(":", "_").replace("=", "-").replace(",", "_").replace("/", "-")


def run_name(variant: Variant, seed: int) -> str:
    """A run's folder and metrics-file name: ``<label>-s<seed>``."""
    return f"{run_label(variant.name)}-s{seed}"


@dataclass(frozen=True)
class Variant:
    """A named change to the base config: stacked ``configs``, then ``key=value`` overrides."""

    name: str
    configs: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    subcommand: str = "fit"  # "test" scores a checkpoint given in the overrides

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
    """Runs variants of a base config stack through ``train.py`` and reads their metrics files.

    Attributes:
        configs: base config stack, before each variant's configs.
        overrides: ``key=value`` arguments of every run (``--set``), after the variant's.
        experiment: ``--experiment`` of every run (logs/ and checkpoints/ folder).
        runs_dir: where the metrics files ``<label>-s<seed>.json`` go.
        python: the interpreter of the subprocesses, which run ``-m attn_lightning.cli``.
        train_script: a script to run instead (a stand-in ``train.py`` in tests).
        timeout: seconds per subprocess run (None: no limit).
        in_process: call ``attn_lightning.cli.main`` here instead (pays the imports once; one run
            at a time, no timeout).
        resume: reuse a run's metrics file when it exists instead of training again; a fit
            with no metrics file but a ``last.ckpt`` in its checkpoint folder (a run stopped
            part-way: Ctrl-C, SIGTERM, a machine or session that went away) continues from it
            (``--ckpt_path``) instead of starting over. A resumed fit equals the uninterrupted
            one (``tests/test_resume.py``). Like the metrics file, the folder is trusted to
            hold the same run: its name is the experiment, variant and seed.
        skip_runs: never train; read whatever metrics files exist (tables from earlier runs).
        earlier: runs of an earlier session by (variant, seed), e.g. read back from a committed
            ``<out>_runs.csv`` (``tables.read_runs_csv``): a job with no metrics file of its own
            is taken from here instead of trained.
    """

    configs: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    experiment: str = "sweep"
    runs_dir: Path = Path("sweeps/sweep")
    python: str = sys.executable
    train_script: Path | None = None
    timeout: float | None = None
    in_process: bool = False
    resume: bool = False
    skip_runs: bool = False
    earlier: Mapping[tuple[str, int], RunResult] = field(default_factory=dict)

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
            f"--metrics_file={self.runs_dir / f'{label}.json'}",
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

    def metrics_file(self, variant: Variant, seed: int) -> Path:
        """Where one run writes its metrics: ``<runs_dir>/<label>-s<seed>.json``."""
        return self.runs_dir / f"{run_name(variant, seed)}.json"

    def record(self, variant: Variant, seed: int) -> dict[str, Any]:
        """One run's metrics file as written (``metrics``, ``validate``, ``test``, ``global_step``,
        ``log_dir``, ``best_model_path``, ...); FileNotFoundError naming it when absent."""
        path = self.metrics_file(variant, seed)
        if not path.is_file():
            raise FileNotFoundError(f"no metrics file {path}")
        record: dict[str, Any] = json.loads(path.read_text())
        return record

    def run(self, variant: Variant, seed: int) -> RunResult:
        """Train (or reuse) one run and read its metrics file."""
        label = run_name(variant, seed)
        metrics_file = self.metrics_file(variant, seed)
        if not metrics_file.exists() and (variant.name, seed) in self.earlier:
            return self.earlier[variant.name, seed]
        if self.skip_runs and not metrics_file.exists():
            log.info("run %s: not run (--skip-runs; no metrics file %s)", label, metrics_file)
            return RunResult(variant.name, seed, None, NOT_RUN)
        reuse = self.skip_runs or (self.resume and metrics_file.exists())
        seconds: float | None = None
        status = "ok"
        if not reuse:
            metrics_file.unlink(missing_ok=True)
            ckpt_path = self.resume_point(variant, seed)
            if ckpt_path is not None:
                log.info("run %s: continuing the stopped run from %s", label, ckpt_path)
            # train.py refuses a fresh fit into an existing run folder; a run trained again by
            # the study replaces its own earlier folders (the study owns its experiment name).
            for root in ("logs", "checkpoints"):
                stale = Path(root) / self.experiment / label
                if ckpt_path is None and stale.is_dir():
                    log.info("replacing the earlier run folder %s", stale)
                    shutil.rmtree(stale)
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            start = time.perf_counter()
            status = (
                self._in_process(variant, seed, ckpt_path)
                if self.in_process
                else self._spawn(variant, seed, ckpt_path)
            )
            seconds = time.perf_counter() - start
        result = RunResult(variant.name, seed, seconds, status)
        if status == "ok" and metrics_file.exists():
            record = self.record(variant, seed)
            result.metrics = {
                **record.get("metrics", {}),
                **record.get("validate", {}),
                **record.get("test", {}),
            }
            result.global_step = record.get("global_step")
            result.log_dir = record.get("log_dir")
            # The fit's own time as train.py measured it, whether the run trained now or is
            # reused: one definition per column (the process time adds start-up and the test).
            result.seconds = record.get("fit_seconds", result.seconds)
        elif status == "ok":
            result.status = "crashed"
            log.warning("run %s wrote no metrics file %s", label, metrics_file)
        return result

    def _spawn(self, variant: Variant, seed: int, ckpt_path: Path | None = None) -> str:
        label = run_name(variant, seed)
        # The run's output goes to an unlinked temporary file, not a pipe: if this process dies
        # (a stopped study), a pipe would kill the run at its next print (SIGPIPE / broken pipe)
        # after training but before its metrics file; a file lets it finish and be resumed.
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
