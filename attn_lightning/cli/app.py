"""The training application: ``LightningCLI`` with this project's defaults.

``python train.py {fit,validate,test,predict} --config base.yaml [--config more.yaml ...]``.
Tasks and DataModules are chosen by ``class_path``. Every run also gets the always-on callbacks
(``checkpoint``: ``RunCheckpoint`` -> ``checkpoints/<experiment>/<run>/``, ``run_record``,
``gradient_tracker``, ``nonfinite_stop``, ``attention_diagnostics``, ...), each configurable
from YAML under its own top-level key, and a ``TensorBoardLogger`` under
``logs/<experiment>/<run>/``; they and the top-level options (``experiment``, ``run_name``,
``metrics_file``, ``test_after_fit``, ``threads``, ...) are added by ``options``. Run folders:
``run_folders``, ``fresh_runs``; after each subcommand: ``records``; ``<subcommand> --help`` is
short, ``--help <group>``/``all`` in full (``help``).

With ``--ckpt_path``, LightningCLI (2.5.5+, checked on 2.6) parses the checkpoint's saved model
hyper-parameters *over* the config and the command line: ``--model.init_args.attention`` or a
model size given with a checkpoint is replaced by the checkpoint's value (one warning line
names what it replaced: ``checkpoints.say_replaced``). Use
``--model.init_args.attention_override`` (not saved as a hyper-parameter, so it survives) to
evaluate a checkpoint with other backend options. DataModule and trainer arguments are not
affected. A backend overlay given without its ``base.yaml`` fails before parsing
(``config_checks``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import (
    LightningArgumentParser,
    LightningCLI,
    _get_module_type,
    _InstantiatorFn,
)

from attn_lightning.callbacks import FitClock, LastValidation, RunCheckpoint
from attn_lightning.cli.checkpoints import (
    check_classes,
    check_evaluated_weights,
    load_checkpoint,
    model_options,
    say_replaced,
)
from attn_lightning.cli.config_checks import check_command_line, debug_requested, expand_help_names
from attn_lightning.cli.errors import AppArgumentParser, constructor_error, trainer_refusals
from attn_lightning.cli.fresh_runs import check_writable_folders, discard_unused, prepare_run_folder
from attn_lightning.cli.help import (
    CKPT_PATH_HELP,
    DESCRIPTION,
    SUBCOMMANDS,
    help_request,
    print_help,
)
from attn_lightning.cli.options import AcceptedLinks, add_app_arguments, linked_size_given
from attn_lightning.cli.process import (
    debug_checks,
    enable_debug_checks,
    quiet,
    quiet_own_resume,
    set_threads,
)
from attn_lightning.cli.progress import progress_callbacks, terminal
from attn_lightning.cli.records import AfterRun
from attn_lightning.cli.run_folders import (
    NAMED_CHECKPOINTS,
    RunConfigSaver,
    check_names,
    continue_run,
    purge_replayed_steps,
    resolve_named_checkpoint,
)
from attn_lightning.cli.warm_start import warm_start_from_config

TENSORBOARD = "lightning.pytorch.loggers.TensorBoardLogger"
log = logging.getLogger("attn_lightning")


class AttnLightningCLI(AfterRun, LightningCLI):
    """LightningCLI with run naming, always-on callbacks, a thread count, a short ``--help`` and a
    metrics file and summary after each subcommand (``records.AfterRun``)."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        add_app_arguments(parser)

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        # LightningCLI's own, with one-line descriptions (it cuts Trainer docstrings mid-sentence)
        # and no table of metrics after validate/test (the summary lists them once).
        self._subcommand_parsers: dict[str, LightningArgumentParser] = {}
        subcommands = parser.add_subcommands()
        for subcommand in self.subcommands():
            sub = self._prepare_subcommand_parser(
                Trainer,
                subcommand,
                description=SUBCOMMANDS[subcommand],
                **kwargs.get(subcommand, {}),
            )
            if subcommand in ("validate", "test"):
                sub.set_defaults(verbose=False)
            for action in sub._actions:  # Lightning's text for it is 25 lines long
                if action.dest == "ckpt_path":
                    action.help = CKPT_PATH_HELP[subcommand]
            self._subcommand_parsers[subcommand] = sub
            subcommands.add_subcommand(subcommand, sub, help=SUBCOMMANDS[subcommand])

    def _add_instantiators(self) -> None:
        # LightningCLI's own (2.6: one _InstantiatorFn per key) with the model's wrapped so that
        # the hyper-parameters keep only the data links the task takes (``AcceptedLinks``).
        model = _InstantiatorFn(cli=self, key="model")
        self.parser.add_instantiator(
            AcceptedLinks(model), _get_module_type(self._model_class), subclasses=True
        )
        self.parser.add_instantiator(
            _InstantiatorFn(cli=self, key="data"),
            _get_module_type(self._datamodule_class),
            subclasses=True,
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        # Name the file and the fix for two mistakes jsonargparse reports as a long union error.
        raw = sys.argv[1:] if args is None else args
        if isinstance(raw, Sequence) and not isinstance(raw, str):
            subcommands = getattr(self, "_subcommand_parsers", {})  # none when run=False
            asked = help_request([str(a) for a in raw], list(subcommands))
            if asked:
                print_help(subcommands[asked[0]], *asked)
            message = check_command_line([str(a) for a in raw])
            message = message or linked_size_given([str(a) for a in raw])
            if message:
                parser.error(message)
            given = [str(a) for a in raw]
            expanded = expand_help_names(given)  # --model.help by class name
            if expanded != given and args is None:
                sys.argv[1:] = expanded  # LightningCLI warns when given args and sys.argv both
            elif expanded != given:
                args = expanded
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        message = check_names(self.config[subcommand] if subcommand else self.config)
        if message:  # a run or experiment name that is a path: one line, exit 2
            parser.error(message)

    def _parse_ckpt_path(self) -> None:
        # LightningCLI's own (2.6) with a guard: a missing, corrupt or foreign file, or a
        # checkpoint of another task/DataModule than the config's, is one clear error here
        # (Lightning would parse the checkpoint's task over the config's and fail late), and the
        # step it was saved at is kept for the summary. Lightning reads ``_class_path`` from the
        # hyper-parameters with no hook in between, hence the override.
        self._ckpt_step = 0
        if not self.config.get("subcommand"):
            return
        config = self.config[self.config.subcommand]
        check_evaluated_weights(self.config.subcommand, config)  # "initial" becomes None
        resolve_named_checkpoint(config, self.config.subcommand)  # "last"/"best": the run's
        ckpt_path = config.get("ckpt_path")
        if not ckpt_path or ckpt_path in NAMED_CHECKPOINTS:
            return
        ckpt = load_checkpoint(ckpt_path)
        check_classes(ckpt, ckpt_path, config)
        self._ckpt_step = int(ckpt.get("global_step", 0))
        hparams = dict(ckpt.get("hyper_parameters", {}))
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        given = model_options(config.get("model"))
        try:
            self.config = self.parser.parse_object(
                {self.config.subcommand: {"model": hparams}}, self.config
            )
        except SystemExit:
            sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
            raise
        after = model_options(self.config[self.config.subcommand].get("model"))
        say_replaced(given, after, str(ckpt_path))  # the values replaced, said once

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        continue_run(config, self.subcommand)  # a run folder's checkpoint: that run's folders
        logger = config.trainer.logger
        if isinstance(logger, Namespace) and logger.get("class_path") == TENSORBOARD:
            if config.experiment is not None:
                logger.init_args.name = config.experiment
            if config.run_name is not None:
                logger.init_args.version = config.run_name
        set_threads(config.get("threads"))
        check_writable_folders(config, self.subcommand)
        self._made_folders = prepare_run_folder(config) if self.subcommand == "fit" else []
        self._started = time.perf_counter()

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        # ``checkpoint`` (RunCheckpoint) is always added; with
        # ``--trainer.enable_checkpointing=false`` Lightning would refuse it with a
        # MisconfigurationException, so the flag drops it instead and the run writes no
        # checkpoint (``test_after_fit`` then tests the final weights).
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        callbacks = [
            self._get(self.config_init, key) for key in self._parser(self.subcommand).callback_keys
        ]
        if trainer_config.get("enable_checkpointing") is False:
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        with trainer_refusals(trainer_config):  # a trainer option Lightning refuses: one line
            return self._instantiate_trainer(trainer_config, callbacks)

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except BaseException as error:
            discard_unused(getattr(self, "_made_folders", []))  # the run never started
            cause = constructor_error(error) if isinstance(error, ValueError) else error
            if cause is error:
                raise
            raise cause from None
        if self.trainer is None:
            return
        config = self.config[self.subcommand] if self.subcommand else self.config
        for callback in self.trainer.callbacks:
            if isinstance(callback, RunCheckpoint):  # its folder's names when there is no logger
                callback.experiment, callback.run = config.get("experiment"), config.get("run_name")
        callbacks = self.trainer.callbacks
        if not self.trainer.loggers:  # the LR monitor needs a logger
            callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
        # fit_seconds and the last validation over all the run's processes (resumes). On every
        # subcommand: Lightning restores callback states for validate/test/predict too, and a
        # checkpoint's state without its callback warns "Please add the following callbacks".
        callbacks = [*callbacks, FitClock(started=self._started), LastValidation()]
        self.trainer.callbacks = progress_callbacks(callbacks, terminal=terminal())
        if self.subcommand == "fit":
            purge_replayed_steps(self.trainer.logger, getattr(self, "_ckpt_step", 0))
            quiet_own_resume(self.config[self.subcommand].get("ckpt_path"))
        record = warm_start_from_config(
            self.config[self.subcommand] if self.subcommand else self.config,
            self.subcommand,
            self.model,
        )
        if record is not None:
            log.info(record.line())


def cli_options() -> dict[str, Any]:
    """The ``LightningCLI`` arguments of this application (tests build parse-only variants)."""
    return {
        "model_class": LightningModule,
        "datamodule_class": LightningDataModule,
        "subclass_mode_model": True,
        "subclass_mode_data": True,
        "save_config_callback": RunConfigSaver,
        "parser_class": AppArgumentParser,
        "parser_kwargs": {"description": DESCRIPTION},
        "auto_configure_optimizers": False,  # every task configures its own optimiser
        "trainer_defaults": {
            "logger": {
                "class_path": TENSORBOARD,
                "init_args": {"save_dir": "logs", "name": "default", "default_hp_metric": False},
            },
        },
        "seed_everything_default": 0,
    }


def main(args: list[str] | None = None, *, run: bool = True) -> AttnLightningCLI:
    """Build and run the CLI; errors propagate (``command_line`` is ``train.py``'s entry).

    Args:
        args: command-line strings (default ``sys.argv[1:]``), e.g. for tests and studies.
        run: run the subcommand (False: parse and instantiate only, no subcommand).
    """
    if torch.cuda.is_available():
        torch.set_float32_matmul_precision("high")  # TF32 matmuls on Ampere+; fp32 elsewhere
    quiet()  # Lightning's advertisement and a deprecation warning of its own code
    debug = debug_requested(sys.argv[1:] if args is None else args)
    AppArgumentParser.debug = debug
    if not run:  # the caller goes on with the built CLI: the check stays as --debug asked
        if debug:
            enable_debug_checks()
        return AttnLightningCLI(**cli_options(), args=args, run=False)
    with debug_checks(debug):  # restored after the run (in-process runs, tests)
        return AttnLightningCLI(**cli_options(), args=args, run=True)
