"""The running sums of a task's torchmetrics metrics, saved in a checkpoint and added back after
a resume, so the train-epoch averages of a run resumed mid-epoch cover the whole epoch."""

from __future__ import annotations

import logging
from typing import Any

from torch import nn
from torchmetrics import Metric

log = logging.getLogger("attn_lightning")


def metric_states(module: nn.Module, names: set[str]) -> dict[str, dict[str, Any]]:
    """The accumulated states of the torchmetrics metrics ``names`` of ``module`` (on the CPU).

    A metric logged ``on_epoch`` keeps its running sums itself, outside Lightning's checkpoint;
    saved here, a run resumed mid-epoch ends the epoch with the same average as one that was not
    stopped.
    """
    states: dict[str, dict[str, Any]] = {}
    for name, metric in module.named_modules():
        if name in names and isinstance(metric, Metric):
            state = {key: getattr(metric, key) for key in metric._defaults}
            states[name] = {
                key: [t.detach().cpu() for t in v] if isinstance(v, list) else v.detach().cpu()
                for key, v in state.items()
            }
    return states


def restore_metric_states(module: nn.Module, states: dict[str, dict[str, Any]]) -> None:
    """Add saved ``metric_states`` into the metrics of ``module`` that exist now.

    Called after the first step of a resumed run: a metric the task creates when first logged
    exists by then, and holds that step's value, to which the saved sums are added (in the order
    the uninterrupted run adds them: saved, then this step).
    """
    for name, metric in module.named_modules():
        saved = states.get(name)
        if saved is None or not isinstance(metric, Metric):
            continue
        device = metric.device
        incoming = {
            k: [t.to(device) for t in v] if isinstance(v, list) else v.to(device)
            for k, v in saved.items()
        }
        try:
            metric.merge_state(incoming)
        except (RuntimeError, ValueError) as error:  # a metric that cannot merge states
            log.warning("metric %s starts the resumed epoch afresh: %s", name, error)
