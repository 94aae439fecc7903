"""Time spent inside the attention backends of a model during a training step (``model``).

``AttentionTimer``: hooks on every ``MultiHeadAttention.backend`` time, in the timed steps,
each backend call's forward (pre-hook → hook) and backward (the gradient of its output arriving →
the last gradient of q, k, v leaving); both clocks are ``perf_counter`` on CPU and CUDA events on
a GPU. Autograd runs nodes by decreasing sequence number, so nothing outside a backend runs
between those two backward marks. The share excludes projections and head split/merge. Checked
against the backend timed alone on the same shapes (forward + backward): within 3% when the
machine was quiet; the hooks add a few µs per layer, counted in the step time, not in attention.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from attn_lightning.models.transformer import MultiHeadAttention
from lab.benchmarks.measure import synchronize


@dataclass
class _Call:
    """Clock marks of one backend call: forward start/end, backward start/end."""

    marks: list[Any] = field(default_factory=lambda: [None] * 4)
    inputs_left: int = 0


class AttentionTimer:
    """Time spent inside every attention backend of a model, forward and backward.

    Attach once; ``reset()`` before a step, ``seconds()`` after it (see the module doc).
    """

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._calls: list[_Call] = []
        self._device = device
        for module in model.modules():
            if isinstance(module, MultiHeadAttention):
                module.backend.register_forward_pre_hook(self._before)
                module.backend.register_forward_hook(self._after)

    def mark(self) -> Any:
        """A point in time: ``perf_counter`` seconds, or a CUDA event recorded on the stream."""
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def elapsed(self, start: Any, end: Any) -> float:
        """Seconds between two marks (CUDA events must have completed)."""
        return start.elapsed_time(end) / 1e3 if self._cuda else end - start

    def _before(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        call = _Call()
        inputs = [t for t in args if isinstance(t, Tensor) and t.requires_grad]
        call.inputs_left = len(inputs)

        def input_grad(grad: Tensor) -> None:
            call.inputs_left -= 1
            if call.inputs_left == 0:  # the last of q, k, v: the backend's backward is done
                call.marks[3] = self.mark()

        for tensor in inputs:
            tensor.register_hook(input_grad)
        self._calls.append(call)
        call.marks[0] = self.mark()  # last, so the hook registration above is not counted

    def _after(self, module: nn.Module, args: tuple[Any, ...], output: Tensor) -> None:
        call = self._calls[-1]
        call.marks[1] = self.mark()
        if output.requires_grad:

            def output_grad(grad: Tensor) -> None:
                call.marks[2] = self.mark()

            output.register_hook(output_grad)

    def reset(self) -> None:
        self._calls.clear()

    def seconds(self) -> float:
        """Forward + backward seconds in the backends since ``reset`` (synchronises)."""
        synchronize(self._device)
        total = 0.0
        for call in self._calls:
            start, end, back_start, back_end = call.marks
            total += self.elapsed(start, end)
            if back_start is not None and back_end is not None:
                total += self.elapsed(back_start, back_end)
        return total
