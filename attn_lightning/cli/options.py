"""The application's own options and always-on callbacks, added to LightningCLI's parser.

Top-level options (``--experiment``, ``--run_name``, ``--metrics_file``, ``--test_after_fit``,
``--init_from``/``--freeze_except``, ``--threads``, ``--debug``), the callbacks every run gets under
their own YAML keys (``checkpoint``, ``feature_redraw``, ..., ``run_record``, ``lr_monitor``) with
this project's defaults, and the links that state a data-decided size once (``LINKED_FROM_DATA``).
Kept apart from ``app`` so the CLI class holds the run's flow and this file what can be set.
"""

from __future__ import annotations

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
from attn_lightning.cli.upgrades import LINKED_FROM_DATA


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
        "the CPUs: a shared machine stays fast; see attn_lightning.cli.threads).",
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


def data_fact(name: str, data: Any) -> Any:
    """The DataModule's ``name`` (e.g. ``num_symbols``), or None when it has none: a task that
    needs it then says so (``tasks.base.require_from_data``)."""
    return getattr(data, name, None)
