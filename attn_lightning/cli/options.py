"""The application's own options and always-on callbacks, added to LightningCLI's parser.

Top-level options (``--experiment``, ``--run_name``, ``--metrics_file``, ``--test_after_fit``,
``--init_from``/``--freeze_except``, ``--threads``, ``--debug``), the callbacks every run gets under
their own YAML keys (``checkpoint``, ``feature_redraw``, ..., ``run_record``, ``lr_monitor``) with
this project's defaults, and the links that state a data-decided size once (``LINKED_FROM_DATA``).
Kept apart from ``app`` so the CLI class holds the run's flow and this file what can be set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.cli import LightningArgumentParser

from attn_lightning.callbacks import (
    AdapterExport,
    AttentionDiagnostics,
    DetectionImages,
    FeatureRedraw,
    GradientTracker,
    ImageGrids,
    NonFiniteStop,
    PredictionWriter,
    RunCheckpoint,
    RunRecord,
    SamplePredictions,
)
from attn_lightning.cli.config_checks import read_configs
from attn_lightning.cli.errors import accepted_options

# Facts of the data the CLI links into the task's arguments of the same name (below).
LINKED_FROM_DATA = (
    "num_symbols",
    "seq_len",
    "image_size",
    "levels",
    "num_classes",
    "category_ids",
    "input_size",
    "vocab_size",
)


def add_app_arguments(parser: LightningArgumentParser) -> None:
    """Add the application's options and always-on callbacks to ``parser`` (see the module)."""
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
    parser.add_argument(
        "--init_from",
        type=str | None,
        default=None,
        help="fit only: start a NEW run from this checkpoint's model weights, with the "
        "attention the configs name (backend tensors fresh; new optimizer, step 0). Unlike "
        "--ckpt_path, which resumes a run. See attn_lightning.cli.warm_start.",
    )
    parser.add_argument(
        "--freeze_except",
        type=list[str] | None,
        default=None,
        help="with --init_from: glob patterns of the parameters that train (e.g. '*.attn.*'); "
        "every other parameter is frozen",
    )
    parser.add_argument(
        "--threads",
        type=int | None,
        default=None,
        help="torch CPU threads per process (default: OMP_NUM_THREADS when set, else half "
        "the CPUs: a shared machine stays fast; see attn_lightning.cli.process).",
    )
    parser.add_argument(
        "--debug",
        type=bool,
        default=False,
        help="Full error reports and tracebacks instead of one line (also ATTN_LIGHTNING_DEBUG=1).",
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
    parser.add_lightning_class_args(PredictionWriter, "prediction_writer")
    parser.add_lightning_class_args(GradientTracker, "gradient_tracker")
    parser.add_lightning_class_args(NonFiniteStop, "nonfinite_stop")
    parser.add_lightning_class_args(AttentionDiagnostics, "attention_diagnostics")
    parser.add_lightning_class_args(RunRecord, "run_record")  # record.json, curves, spikes
    parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")
    parser.set_defaults({"lr_monitor.logging_interval": "step"})
    # Sizes the data decides are stated once, by the DataModule, and linked into the task's
    # argument of the same name when both are built (a task without it ignores the link).
    for name in LINKED_FROM_DATA:
        parser.link_arguments(
            "data",
            f"model.init_args.{name}",
            compute_fn=partial(data_fact, name),
            apply_on="instantiate",
        )


def linked_size_given(args: Sequence[str]) -> str | None:
    """One line when a config or flag sets a size of ``LINKED_FROM_DATA`` on the model, or None.

    The link from the DataModule would replace such a value without a word, so it is refused,
    naming the DataModule option that sets it.
    """
    loaded, _ = read_configs(args)  # a config's own mistake is check_command_line's to report
    for path, tree in loaded:
        model = tree.get("model")
        init = model.get("init_args") if isinstance(model, Mapping) else None
        for key in LINKED_FROM_DATA:
            if isinstance(init, Mapping) and key in init:
                return f"{path}: model.init_args.{key} {_LINKED}: set data.init_args.{key}"
    for arg in args:
        flag = arg.partition("=")[0]
        for prefix in ("--model.init_args.", "--model."):
            key = flag[len(prefix) :] if flag.startswith(prefix) else ""
            if key in LINKED_FROM_DATA:
                return f"{flag} {_LINKED}: give --data.init_args.{key}"
    return None


_LINKED = "is linked from the DataModule, which decides it"


def data_fact(name: str, data: Any) -> Any:
    """The DataModule's ``name`` (e.g. ``num_symbols``), or None when it has none: a task that
    needs it then says so (``tasks.base.require_from_data``)."""
    return getattr(data, name, None)


class AcceptedLinks:
    """Wraps LightningCLI's model instantiator so a task's hyper-parameters record only the
    links it takes: every link of ``LINKED_FROM_DATA`` is applied (a task without the argument
    ignores it), but Lightning would write all of them, ``levels: None`` included, into the
    hyper-parameters, and a checkpoint of those could not be loaded back."""

    def __init__(self, instantiator: Any, key: str = "model") -> None:
        self.instantiator = instantiator
        self.key = key

    def __call__(
        self, class_type: type, *args: Any, applied_instantiation_links: dict, **kwargs: Any
    ) -> Any:
        accepted = accepted_options(class_type)
        prefix = f"{self.key}.init_args."
        links = {
            k: v
            for k, v in applied_instantiation_links.items()
            if not k.startswith(prefix) or k[len(prefix) :] in accepted
        }
        return self.instantiator(class_type, *args, applied_instantiation_links=links, **kwargs)
