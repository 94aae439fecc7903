"""The runs of the warm-start study, per task: one softmax base, then for each efficient backend
the base's weights zero-shot, fine-tuned (Performer with and without feature redraw), and the same
backend trained from scratch for the fine-tune's steps and for the base's steps plus those.

Every run is a ``train.py`` run of ``studies.runner``: the base a plain ``fit``; zero-shot a
``test`` of the base's ``last.ckpt`` with ``attention_override`` (no training: the backend's own
tensors are freshly drawn, the rest is the base's); a fine-tune a ``fit --init_from`` of that
checkpoint with the backend set (``cli.warm_start``: new optimizer, step 0). ``{seed}`` in an
override is the run's seed, so each seed's runs start from that seed's base.

Conditions (the ``condition`` of a row), each against the others of the same backend and seed:

* ``zero-shot``: the base's weights, the backend swapped, no training;
* ``fine-tune``: ``finetune_steps`` from the base's weights (Performer: feature redraw off);
* ``fine-tune + redraw``: the same with Performer's features redrawn every ``redraw_every`` steps;
* ``scratch``: the backend trained from random weights for ``finetune_steps`` (same steps);
* ``scratch, base + fine-tune steps``: for ``base_steps + finetune_steps`` (same total steps).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from lab.results.records import RunResult
from lab.studies.runner import SEED, Variant, run_label

# The backends swapped in (the list), as attention specs.
BACKENDS: dict[str, dict] = {
    "performer_m64": {"name": "performer", "num_features": 64},
    "performer_m256": {"name": "performer", "num_features": 256},
    "linear": {"name": "linear"},
    "polysketch": {"name": "polysketch"},
}
PERFORMERS = ("performer_m64", "performer_m256")
CONDITIONS = (
    "zero-shot",
    "fine-tune",
    "fine-tune + redraw",
    "scratch",
    "scratch, base + fine-tune steps",
)
# Feature redraw off: the fine-tune's control for "with redraw", and every run but that one.
NO_REDRAW = "feature_redraw.every_n_steps=0"
# What each experiment's runs need: its base config and its headline metrics.
TASKS = {
    "reversal": ("configs/reversal/base.yaml", ("test/token_acc", "test/exact_acc", "test/loss")),
    "digits": ("configs/digits/base.yaml", ("test/acc", "test/loss")),
}
# Tasks whose runs converge or stall (bimodal): the metric and threshold of "converged", the
# reversal pages' rule.
CONVERGED: dict[str, tuple[str, float]] = {"reversal": ("test/token_acc", 0.99)}


@dataclass(frozen=True)
class Plan:
    """The budgets of one task's study (optimiser steps)."""

    task: str
    base_steps: int
    finetune_steps: int
    redraw_every: int
    experiment: str

    def tags(self) -> dict[str, Any]:
        """Every run's tags besides its variant's: a committed record is reused only by a plan
        with the same task and budgets."""
        return {k: v for k, v in asdict(self).items() if k != "experiment"}

    def variants(self) -> list[Variant]:
        """The runs in run order, the base first (the others read it); each variant's ``info``
        (its runs' tags) is its backend and condition, the facts a row of the tables needs."""

        def variant(
            name: str, backend: str, condition: str, *overrides: str, sub: str = "fit"
        ) -> Variant:
            info = {"backend": backend, "condition": condition}
            return Variant(name, overrides=overrides, subcommand=sub, info=info)

        runs = [variant("softmax", "softmax", "base", f"trainer.max_steps={self.base_steps}")]
        # The base run's last.ckpt of the run's own seed ({seed} is filled per run).
        ckpt = f"checkpoints/{self.experiment}/{run_label('softmax')}-s{SEED}/last.ckpt"
        for key, spec in BACKENDS.items():
            attention = f"model.init_args.attention={json.dumps(spec)}"
            swap = f"model.init_args.attention_override={json.dumps(spec)}"
            runs.append(
                variant(f"{key}@zero-shot", key, "zero-shot", f"ckpt_path={ckpt}", swap, sub="test")
            )
            tune = (attention, f"init_from={ckpt}", f"trainer.max_steps={self.finetune_steps}")
            runs.append(variant(f"{key}@fine-tune", key, "fine-tune", *tune, NO_REDRAW))
            if key in PERFORMERS:
                redraw = f"feature_redraw.every_n_steps={self.redraw_every}"
                runs.append(
                    variant(f"{key}@fine-tune-redraw", key, "fine-tune + redraw", *tune, redraw)
                )
            for steps, condition in (
                (self.finetune_steps, "scratch"),
                (self.base_steps + self.finetune_steps, "scratch, base + fine-tune steps"),
            ):
                scratch = (attention, f"trainer.max_steps={steps}", NO_REDRAW)
                runs.append(variant(f"{key}@scratch-{steps}", key, condition, *scratch))
        return runs


def in_run_order(runs: Iterable[RunResult]) -> list[RunResult]:
    """``runs`` in the order ``run`` trains them (its per-run table's rows): every seed's base,
    then per seed each backend's conditions, as ``BACKENDS`` and ``CONDITIONS`` list them."""
    backends, conditions = list(BACKENDS), list(CONDITIONS)

    def key(run: RunResult) -> tuple[int, int, int, int]:
        backend, condition = run.info.get("backend"), run.info.get("condition")
        if condition == "base" or backend not in backends or condition not in conditions:
            return (0, run.seed, 0, 0)
        return (1, run.seed, backends.index(backend), conditions.index(condition))

    return sorted(runs, key=key)
