"""Lightning callbacks: random-feature redraw, run checkpoints (resumable from the first step,
ranked on fresh scores, written atomically, saved on Ctrl-C/SIGTERM), the fit clock across
resumes, the run record every run writes (record.json, curves.csv, spikes.csv), the stop of a
run whose loss is no longer finite, attention diagnostics, logging from
the first validation batch (one base: sample tables, image grids, detections), adapter export
and prediction files.

Each callback that needs something of the task names it as a ``runtime_checkable`` Protocol
(``SampleRows``, ``ImageSampler``, ``Detector``, ``AdapterExporter``, ``PredictionSaver``) and
skips tasks without it.
"""

from attn_lightning.callbacks.backends import (
    AttentionDiagnostics,
    FeatureRedraw,
    collect_diagnostics,
    redraw_all_features,
    redraw_generator,
)
from attn_lightning.callbacks.checkpoints import RunCheckpoint
from attn_lightning.callbacks.exports import (
    AdapterExport,
    AdapterExporter,
    PredictionSaver,
    PredictionWriter,
)
from attn_lightning.callbacks.gradients import (
    GradientTracker,
    LossSpikeDetector,
    ParameterGroups,
)
from attn_lightning.callbacks.resume import (
    AtomicCheckpointIO,
    FitClock,
    LastValidation,
    is_partial,
)
from attn_lightning.callbacks.run_record import RunRecord
from attn_lightning.callbacks.samples import (
    DetectionImages,
    Detector,
    ImageGrids,
    SamplePredictions,
    SampleRows,
    ValidationBatchLogger,
)
from attn_lightning.callbacks.stopping import NonFiniteStop, NonFiniteTraining
from attn_lightning.data.image_grids import ImageSampler

__all__ = [
    "AdapterExport",
    "AdapterExporter",
    "AtomicCheckpointIO",
    "AttentionDiagnostics",
    "DetectionImages",
    "Detector",
    "FeatureRedraw",
    "FitClock",
    "GradientTracker",
    "ImageGrids",
    "ImageSampler",
    "LastValidation",
    "LossSpikeDetector",
    "NonFiniteStop",
    "NonFiniteTraining",
    "ParameterGroups",
    "PredictionSaver",
    "PredictionWriter",
    "RunCheckpoint",
    "RunRecord",
    "SamplePredictions",
    "SampleRows",
    "ValidationBatchLogger",
    "collect_diagnostics",
    "is_partial",
    "redraw_all_features",
    "redraw_generator",
]
