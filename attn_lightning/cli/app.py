"""The training application: ``LightningCLI`` with this project's defaults.

``python train.py {fit,validate,test,predict} --config base.yaml [--config more.yaml ...]``.
Tasks and DataModules are chosen by ``class_path``; every run also gets, configurable from YAML
under their own top-level keys:

* ``checkpoint``: ``RunCheckpoint`` -> ``checkpoints/<experiment>/<run>/`` with ``last.ckpt`` and
  the best checkpoint by ``val/loss``;
* ``feature_redraw``, ``sample_predictions``, ``image_grids``, ``detection_images``,
  ``adapter_export``, ``lr_monitor``: see ``attn_lightning.callbacks`` (a task without a
  callback's hook is skipped);
* a ``TensorBoardLogger`` under ``logs/<experiment>/<run>/`` (``trainer.logger`` replaces it).

Top-level options: ``experiment`` and ``run_name`` name the logger (and so the checkpoint folder;
without ``run_name`` runs are ``version_0``, ``version_1``, ...); ``metrics_file`` writes the final
metrics as JSON (the sweep reads it); ``test_after_fit`` tests the best checkpoint after fitting.

With ``--ckpt_path``, LightningCLI (2.5.5+, checked on 2.6) parses the checkpoint's saved model
hyper-parameters *over* the config and the command line: ``--model.init_args.attention`` or a
model size given with a checkpoint is silently replaced by the checkpoint's value. Use
``--model.init_args.attention_override`` (not saved as a hyper-parameter, so it survives) to
evaluate a checkpoint with other backend options. DataModule and trainer arguments are not
affected. A checkpoint that saved a class under a path that has since moved
(``config_checks.MOVED_CLASS_PATHS``) loads from the new path with a warning; a config file that
names one fails before parsing with the new path (as does a backend overlay given without its
``base.yaml``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from attn_lightning.callbacks import (
    AdapterExport,
    DetectionImages,
    FeatureRedraw,
    ImageGrids,
    RunCheckpoint,
    SamplePredictions,
)
from attn_lightning.cli.config_checks import check_command_line, rename_moved

TENSORBOARD = "lightning.pytorch.loggers.TensorBoardLogger"


class RunConfigSaver(SaveConfigCallback):
    """Save the run's config as ``config.yaml``, or ``config-N.yaml`` when the log dir is reused
    (resume into the same ``run_name``), instead of refusing to start as the stock callback does.
    Without a logger (``fast_dev_run``, ``logger: false``) nothing is saved: the stock callback
    would write into the working directory."""

    def setup(self, trainer: Any, pl_module: LightningModule, stage: str) -> None:
        if not trainer.loggers:
            return
        if not self.already_saved and self.save_to_log_dir:
            log_dir = Path(str(trainer.log_dir))
            name = None
            if trainer.is_global_zero:
                name, n = "config.yaml", 0
                while (log_dir / name).exists():
                    n += 1
                    name = f"config-{n}.yaml"
            self.config_filename = trainer.strategy.broadcast(name)
        super().setup(trainer, pl_module, stage)


class AttnLightningCLI(LightningCLI):
    """LightningCLI with run naming, always-on callbacks and a metrics file."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--experiment",
            type=str | None,
            default=None,
            help="Experiment name: logs/<experiment>/ and checkpoints/<experiment>/.",
        )
        parser.add_argument(
            "--run_name",
            type=str | None,
            default=None,
            help="Run folder under the experiment (default: version_N). Reuse it to resume "
            "into the same TensorBoard run.",
        )
        parser.add_argument(
            "--metrics_file",
            type=str | None,
            default=None,
            help="Write final metrics (JSON) here after fit/validate/test.",
        )
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=False,
            help="After fit, test the best checkpoint (by the checkpoint monitor).",
        )
        parser.add_lightning_class_args(RunCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/loss",
                "checkpoint.mode": "min",
                "checkpoint.save_last": True,
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": "best-{step}",
            }
        )
        # Always on: each does nothing for a task without its hook (see attn_lightning.callbacks).
        parser.add_lightning_class_args(FeatureRedraw, "feature_redraw")
        parser.add_lightning_class_args(SamplePredictions, "sample_predictions")
        parser.add_lightning_class_args(ImageGrids, "image_grids")
        parser.add_lightning_class_args(DetectionImages, "detection_images")
        parser.add_lightning_class_args(AdapterExport, "adapter_export")
        parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")
        parser.set_defaults({"lr_monitor.logging_interval": "step"})

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        # Name the file and the fix for two mistakes jsonargparse reports as a long union error.
        raw = sys.argv[1:] if args is None else args
        if isinstance(raw, Sequence) and not isinstance(raw, str):
            message = check_command_line([str(a) for a in raw])
            if message:
                parser.error(message)
        super().parse_arguments(parser, args)

    def _parse_ckpt_path(self) -> None:
        # LightningCLI's own (2.6), plus one step: a class saved under a path that has moved is
        # loaded from its new path. Lightning reads ``_class_path`` from the checkpoint's
        # hyper-parameters and parses it as the model's class_path, with no hook in between.
        if not self.config.get("subcommand"):
            return
        ckpt_path = self.config[self.config.subcommand].get("ckpt_path")
        if not ckpt_path or not Path(ckpt_path).is_file():
            return
        ckpt = torch.load(ckpt_path, weights_only=True, map_location="cpu")
        hparams = dict(ckpt.get("hyper_parameters", {}))
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {
                "class_path": rename_moved(hparams.pop("_class_path")),
                "dict_kwargs": hparams,
            }
        try:
            self.config = self.parser.parse_object(
                {self.config.subcommand: {"model": hparams}}, self.config
            )
        except SystemExit:
            sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
            raise

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        logger = config.trainer.logger
        if isinstance(logger, Namespace) and logger.get("class_path") == TENSORBOARD:
            if config.experiment is not None:
                logger.init_args.name = config.experiment
            if config.run_name is not None:
                logger.init_args.version = config.run_name
        self._started = time.perf_counter()

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except ValueError as error:
            # jsonargparse wraps a constructor's error (unknown backend, bad option) in a long
            # "Does not validate against any of the Union subtypes" report; raise the cause.
            cause = _constructor_error(error)
            if cause is error:
                raise
            raise cause from None
        if self.trainer is not None and not self.trainer.loggers:  # LR monitor needs a logger
            self.trainer.callbacks = [  # type: ignore[attr-defined]  # set in Trainer.__init__
                c
                for c in self.trainer.callbacks  # type: ignore[attr-defined]
                if not isinstance(c, LearningRateMonitor)
            ]

    # ------------------------------------------------------------------ after each subcommand
    def after_fit(self) -> None:
        fit_seconds = time.perf_counter() - self._started
        record: dict[str, Any] = {"fit_seconds": fit_seconds, **self._fit_record()}
        if self._config_value("test_after_fit"):
            best_path = getattr(self.trainer.checkpoint_callback, "best_model_path", None)
            ckpt = "best" if best_path else None
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt)
            record["test"] = _scalars(self.trainer.callback_metrics, prefix="test/")
        self._write_metrics(record)

    def after_validate(self) -> None:
        self._write_metrics({"validate": _scalars(self.trainer.callback_metrics)})

    def after_test(self) -> None:
        self._write_metrics({"test": _scalars(self.trainer.callback_metrics, prefix="test/")})

    def _fit_record(self) -> dict[str, Any]:
        ckpt = self.trainer.checkpoint_callback
        best = getattr(ckpt, "best_model_score", None)
        return {
            "global_step": self.trainer.global_step,
            "epoch": self.trainer.current_epoch,
            "metrics": _scalars(self.trainer.callback_metrics),
            "best_model_score": None if best is None else float(best),
            "best_model_path": getattr(ckpt, "best_model_path", None),
            "last_model_path": getattr(ckpt, "last_model_path", None),
            "log_dir": self.trainer.log_dir,
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


def _constructor_error(error: BaseException) -> BaseException:
    """The first exception in the chain not raised by jsonargparse itself (else ``error``)."""
    current: BaseException | None = error
    while current is not None and _raised_in(current, "jsonargparse"):
        current = current.__cause__ or current.__context__
    return current if current is not None else error


def _raised_in(error: BaseException, package: str) -> bool:
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__", "").startswith(package)


def _scalars(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    return {
        k: float(v)
        for k, v in sorted(metrics.items())
        if k.startswith(prefix) and (not isinstance(v, torch.Tensor) or v.numel() == 1)
    }


def cli_options() -> dict[str, Any]:
    """The ``LightningCLI`` arguments of this application (tests build parse-only variants)."""
    return {
        "model_class": LightningModule,
        "datamodule_class": LightningDataModule,
        "subclass_mode_model": True,
        "subclass_mode_data": True,
        "save_config_callback": RunConfigSaver,
        "trainer_defaults": {
            "logger": {
                "class_path": TENSORBOARD,
                "init_args": {"save_dir": "logs", "name": "default", "default_hp_metric": False},
            },
        },
        "seed_everything_default": 0,
    }


def main(args: list[str] | None = None, *, run: bool = True) -> AttnLightningCLI:
    """Entry point of ``train.py``; ``args`` (a list of CLI strings) is for tests."""
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere+; fp32 elsewhere
    return AttnLightningCLI(**cli_options(), args=args, run=run)
