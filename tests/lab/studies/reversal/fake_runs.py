"""Fake runs of a reversal sweep for the report's tests: run records (``record.json`` and
``curves.csv``) as a study run and the ``GradientTracker`` callback write them, under
``logs/<experiment>/<label>-s<seed>/``."""

from __future__ import annotations

import csv
from pathlib import Path

from attn_lightning.records.run_files import CURVE_COLUMNS, CURVES, write_record
from lab.results.records import Scalars
from lab.studies.reversal.dynamics import GROUPS

EXPERIMENT = "poly"
POLY = "polynomial_degree-4_normalize-false"
# Where every fake run ran: the pages' machine line is this, on any machine running the tests.
ENVIRONMENT = {"platform": "Linux-fake", "device": "cpu", "device_name": None, "python": "3.11.7"}


def fake_scalars(
    val: list[float],
    spikes: list[int],
    grads: dict[int, dict[str, float]] | None = None,
    steps: int = 200,
    val_loss: list[float] | None = None,
) -> Scalars:
    """A run's scalars as the study logs them; every gradient norm is 1.0 unless overridden.

    ``val``: ``val/token_acc`` at steps 49, 99, ... (the step Lightning logs after 50k steps).
    ``grads``: step -> {"global_norm" or a group: norm}, at the gradient steps 0, 20, ...
    ``val_loss``: ``val/loss`` at the same steps as ``val`` (not logged when None).
    """
    grads = grads or {}
    scalars: Scalars = {"val/token_acc": [(49 + 50 * i, v) for i, v in enumerate(val)]}
    if val_loss is not None:
        scalars["val/loss"] = [(49 + 50 * i, v) for i, v in enumerate(val_loss)]
    flags = [(s, 1.0 if s in spikes else 0.0) for s in range(steps)]
    scalars["train/loss_spike"] = flags
    scalars["train/loss_spikes"] = [(s, float(sum(s >= t for t in spikes))) for s in range(steps)]
    scalars["train/loss_step"] = [(s, 2.0) for s in range(19, steps, 20)]
    for name in ("global_norm", *GROUPS):
        scalars[f"grad/{name}"] = [
            (s, grads.get(s, {}).get(name, 1.0)) for s in range(0, steps, 20)
        ]
    return scalars


# Seed 0 crosses 0.99 at step 149; spikes at 130 (gradient logged at 120: global norm 10x the
# run median, attention 50x its median) and 160 (logged at that step: 4x, feedforward 8x); its
# validation loss is lowest (twice) at logged steps 99 and 149: the best checkpoint is step 100.
SEED0 = fake_scalars(
    [0.5, 0.98, 0.995, 0.999],
    val_loss=[0.5, 0.05, 0.05, 0.2],
    spikes=[130, 160],
    grads={
        120: {"global_norm": 10.0, "attention": 50.0, "feedforward": 2.0},
        160: {"global_norm": 4.0, "feedforward": 8.0},
    },
)
SEED1 = fake_scalars([0.7, 0.991, 0.999, 0.999], spikes=[])
SEED2 = fake_scalars(
    [0.2, 0.3, 0.35, 0.4],
    spikes=[100],
    grads={100: {"global_norm": 3.0, "attention": 6.0, "embedding": 5.0}},
)


def write_curves(folder: Path, scalars: Scalars) -> None:
    """``scalars`` as the run's ``curves.csv`` (``step, tag, value``, by step then tag)."""
    rows = sorted((step, tag, value) for tag, points in scalars.items() for step, value in points)
    with (folder / CURVES).open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(CURVE_COLUMNS)
        writer.writerows(rows)


def write_run(
    root: Path, label: str, seed: int, scalars: Scalars | None, test: dict[str, float] | None
) -> Path:
    """One run's record folder ``root/logs/<experiment>/<label>-s<seed>/``: its curves
    (``scalars``; None: none) and a record, ``ok`` with ``test`` as its test metrics, or
    ``running`` when ``test`` is None (a run still going, or crashed)."""
    folder = root / "logs" / EXPERIMENT / f"{label}-s{seed}"
    folder.mkdir(parents=True)
    if scalars is not None:
        write_curves(folder, scalars)
    record = {
        "schema": 1,
        "experiment": EXPERIMENT,
        "run": folder.name,
        "seed": seed,
        "tags": {"study": EXPERIMENT, "variant": label, "seed": seed},
        "status": "running" if test is None else "ok",
        "fit_seconds": None if test is None else 100.0 + seed,
        "global_step": 200,
        "metrics": {"fit": {"val/token_acc": 0.5}, "validate": {}, "test": test or {}},
        "environment": ENVIRONMENT,
    }
    write_record(folder, record)
    return folder


def test_metrics(token: float, exact: float, loss: float) -> dict[str, float]:
    """The test metrics of a reversal run (greedy = teacher-forced here)."""
    return {
        "test/token_acc": token,
        "test/exact_acc": exact,
        "test/gen_token_acc": token,
        "test/gen_exact_acc": exact,
        "test/loss": loss,
    }


test_metrics.__test__ = False  # type: ignore[attr-defined]  # not a test, despite its name


def write_study(root: Path) -> Path:
    """The study of the report's tests: three polynomial runs (two converge), one softmax run
    that converged and one still running."""
    write_run(root, POLY, 0, SEED0, test_metrics(0.999, 0.9, 0.01))
    write_run(root, POLY, 1, SEED1, test_metrics(0.995, 0.8, 0.02))
    write_run(root, POLY, 2, SEED2, test_metrics(0.40, 0.0, 1.5))
    write_run(root, "softmax", 0, SEED1, test_metrics(1.0, 1.0, 0.001))
    write_run(root, "softmax", 1, SEED2, None)  # unfinished: a running record
    return root


def write_mixed_study(root: Path) -> Path:
    """``write_study`` plus the runs a report meets less often: a ``linear`` run whose record
    has no test metrics (fit only), one with no curves, and a ``performer`` run with only some
    of the test metrics."""
    write_study(root)
    write_run(root, "linear", 0, SEED2, {})
    write_run(root, "linear", 1, None, test_metrics(0.99, 0.5, 0.05))
    write_run(root, "performer", 0, SEED0, {"test/token_acc": 0.992, "test/loss": 0.03})
    write_run(root, "performer", 2, SEED1, {"test/token_acc": 0.5, "test/loss": 0.9})
    return root
