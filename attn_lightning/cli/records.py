"""What each subcommand leaves when it ends: the metrics file (``--metrics_file``, JSON; the study
runner reads it), ``--test_after_fit``'s test of the best checkpoint, and the summary lines
(where the checkpoints, logs and predictions went, and the final metrics).

``AfterRun`` holds LightningCLI's ``after_<subcommand>`` hooks; ``AttnLightningCLI`` inherits it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.callbacks import FitClock, collect_diagnostics
from attn_lightning.callbacks.run_record import scalars
from attn_lightning.cli.progress import summary_lines

log = logging.getLogger("attn_lightning")


class AfterRun:
    """LightningCLI's ``after_fit|validate|test|predict`` hooks of this application.

    Expects the CLI's ``trainer``, ``model``, ``datamodule``, ``subcommand`` and ``config``,
    and ``_started`` (``time.perf_counter()`` at the start) and ``_ckpt_step`` (the step of
    ``--ckpt_path``, 0 without one), which ``AttnLightningCLI`` sets.
    """

    trainer: Any
    model: Any
    datamodule: Any
    subcommand: str | None
    config: Any
    _started: float
    _ckpt_step: int

    def after_fit(self) -> None:
        record: dict[str, Any] = {**self._fit_seconds(), **self._fit_record()}
        if self._config_value("test_after_fit"):
            best_path = getattr(self.trainer.checkpoint_callback, "best_model_path", None)
            ckpt = "best" if best_path else None
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt, verbose=False)
            record["test"] = scalars(self.trainer.callback_metrics, prefix="test/")
        self._write_metrics(record)
        self._summarize(best=record["best_model_path"], last=record["last_model_path"])

    def after_validate(self) -> None:
        self._write_metrics({"validate": scalars(self.trainer.callback_metrics)})
        self._summarize()

    def after_test(self) -> None:
        self._write_metrics({"test": scalars(self.trainer.callback_metrics, prefix="test/")})
        self._summarize()

    def after_predict(self) -> None:
        written = [path for c in self.trainer.callbacks for path in getattr(c, "written", [])]
        self._summarize(predictions=written)

    def _summarize(
        self,
        *,
        best: str | None = None,
        last: str | None = None,
        predictions: Sequence[Path] = (),
    ) -> None:
        """Log where the run's outputs went and its final metrics (rank 0)."""
        # trainer.log_dir broadcasts from rank 0: every rank must ask before rank 0 alone logs.
        log_dir = self.trainer.log_dir if self.trainer.loggers else None
        if not self.trainer.is_global_zero:
            return
        fit = self.subcommand == "fit"
        ckpt_path = self._config_value("ckpt_path")
        lines = summary_lines(
            str(self.subcommand),
            seconds=time.perf_counter() - self._started,
            metrics=self.trainer.callback_metrics,
            global_step=self.trainer.global_step if fit else None,
            checkpoint=(str(ckpt_path), self._ckpt_step) if ckpt_path and not fit else None,
            best=best or None,
            last=last or None,
            log_dir=log_dir,
            predictions=predictions,
        )
        log.info("\n".join(lines))

    def _fit_seconds(self) -> dict[str, Any]:
        """``fit_seconds``: the run's fit time over all its processes (``FitClock``); a resumed
        run adds ``resumed_from_step`` and ``earlier_fit_seconds`` (None: a checkpoint from before
        the clock, so ``fit_seconds`` is this process's alone)."""
        clock = next((c for c in self.trainer.callbacks if isinstance(c, FitClock)), None)
        if clock is None:  # a trainer built without the CLI's clock
            return {"fit_seconds": time.perf_counter() - self._started}
        earlier = clock.earlier_seconds
        record: dict[str, Any] = {"fit_seconds": clock.seconds()}  # started at self._started
        if self._ckpt_step:
            record |= {"resumed_from_step": self._ckpt_step, "earlier_fit_seconds": earlier}
        return record

    def _fit_record(self) -> dict[str, Any]:
        ckpt = self.trainer.checkpoint_callback
        best = getattr(ckpt, "best_model_score", None)
        return {
            "global_step": self.trainer.global_step,
            "epoch": self.trainer.current_epoch,
            # + the backends' diagnostics after the last step (e.g. optimization's keys90), so
            # studies can tabulate them without reading TensorBoard.
            "metrics": {
                **scalars(self.trainer.callback_metrics),
                **collect_diagnostics(self.model),
            },
            "best_model_score": None if best is None else float(best),
            "best_model_path": getattr(ckpt, "best_model_path", None),
            "last_model_path": getattr(ckpt, "last_model_path", None),
            "log_dir": self.trainer.log_dir,
            "init_from": self._config_value("init_from"),
        }

    def _config_value(self, key: str) -> Any:
        config = self.config[self.subcommand] if self.subcommand else self.config
        return config.get(key)

    def _write_metrics(self, record: dict[str, Any]) -> None:
        path = self._config_value("metrics_file")
        if not path or not self.trainer.is_global_zero:
            return
        record = {"subcommand": self.subcommand, **record}
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
