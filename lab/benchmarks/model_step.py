"""One training step of the real models against N, and the share of it spent in attention.

Times one full step (forward, loss, backward, gradient clipping at 1.0, AdamW) of

* ``reversal``: ``SequenceTransformer`` as the reversal task's causal decoder over
  ``x SEP y_1..y_{n-1}`` (N tokens, n = N/2 of 10 symbols; cross-entropy on the n targets);
* ``pixel``: ``PixelTransformer`` over N pixels of 256 levels (bits per dim),

with d_model = width, d_ff = 4·width, H heads of width/H, dropout 0, on random inputs (speed does
not depend on the values): in a small model the feed-forward layers, projections, embeddings,
head and optimizer take their part of the step, which one attention call's speed-up ignores. A
series is ``budget.run_budgeted``'s loop, estimated from the fastest steps of its last two points.

Attention share: ``AttentionTimer`` hooks every ``MultiHeadAttention.backend`` and times, in the
timed steps, each call's forward (pre-hook → hook) and backward (the gradient of its output
arriving → the last gradient of q, k, v leaving; autograd runs nodes by decreasing sequence
number, so nothing outside a backend runs between those marks). Projections and head
split/merge are excluded. Checked against the backend timed alone on the same shapes: within 3%
on a quiet machine; the hooks' few µs per layer count in the step, not in attention.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_lightning.models.multihead import MultiHeadAttention
from attn_lightning.models.pixel import PixelTransformer, bits_per_dim
from attn_lightning.models.sequence import SequenceTransformer
from attn_lightning.models.specs import PixelSpec, TransformerSpec
from lab.benchmarks import report
from lab.benchmarks.budget import extrapolate, growth_exponent, run_budgeted
from lab.benchmarks.measure import (
    BackendSpec,
    add_backends,
    add_output,
    budget_settings,
    default_device,
    synchronize,
    timing_method,
)


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


log = logging.getLogger(__name__)

MODELS = ("reversal", "pixel")
# The backends of the blog's comparison: the default of ``--backends``.
MODEL_BACKENDS = ("softmax", "linear", "performer", "polysketch")
REVERSAL_SYMBOLS = 10
PIXEL_LEVELS = 256


@dataclass
class Row:
    """One measured (or skipped) point; times are per training step of the whole batch."""

    model: str
    width: int
    layers: int
    heads: int
    backend: str
    n: int
    batch: int
    dtype: str
    params: int = 0
    step_ms: float | None = None
    step_ms_min: float | None = None
    step_ms_max: float | None = None
    tokens_per_s: float | None = None
    attn_ms: float | None = None
    attn_share: float | None = None
    repeats: int = 0
    est_ms: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Settings:
    device: torch.device
    dtype: torch.dtype = torch.float32
    layers: int = 2
    heads: int = 4
    batch: int = 1
    repeats: int = 3
    warmup: int = 1
    budget_s: float = 20.0
    short_conv: int = 0  # TransformerSpec.short_conv: K, or 0 for none


def build_model(
    model: str, *, n: int, width: int, spec: BackendSpec, settings: Settings
) -> tuple[nn.Module, Callable[[], Tensor]]:
    """The model on ``settings.device`` and a closure computing its training loss on N tokens.

    Raises:
        ValueError: unknown model, or an odd or too small N for ``reversal`` (x SEP y needs N/2).
    """
    g = torch.Generator().manual_seed(0)
    # Each model keeps its own spec's other defaults (positions: sinusoidal / learned).
    sizes: dict[str, Any] = {"d_model": width, "num_heads": settings.heads, "d_ff": 4 * width}
    sizes.update(num_layers=settings.layers, short_conv=settings.short_conv)
    attention = {"name": spec.name, **spec.options}
    device, b = settings.device, settings.batch
    torch.manual_seed(0)  # the same weights and random features for every backend
    if model == "reversal":
        if n < 2 or n % 2:
            raise ValueError(f"reversal needs an even N >= 2 (x SEP y of N/2 each), got {n}")
        net = SequenceTransformer(
            TransformerSpec(**sizes),
            vocab_size=REVERSAL_SYMBOLS + 1,
            num_outputs=REVERSAL_SYMBOLS,
            max_len=n,
            attention=attention,
        ).to(device)
        source = torch.randint(REVERSAL_SYMBOLS, (b, n // 2), generator=g).to(device)
        target = source.flip(1)
        sep = source.new_full((b, 1), REVERSAL_SYMBOLS)
        tokens = torch.cat([source, sep, target[:, :-1]], dim=1)  # (B, N)

        def reversal_loss() -> Tensor:
            logits = net(tokens, causal=True)[:, n // 2 :]  # (B, N/2, V)
            return F.cross_entropy(logits.flatten(0, 1).float(), target.flatten())

        return net, reversal_loss
    if model == "pixel":
        pix = PixelTransformer(
            PixelSpec(**sizes),
            levels=PIXEL_LEVELS,
            seq_len=n,
            attention=attention,
        ).to(device)
        pixels = torch.randint(PIXEL_LEVELS, (b, n), generator=g).to(device)  # (B, N)
        return pix, lambda: bits_per_dim(pix.log_likelihood(pixels))
    raise ValueError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")


def _measure(row: Row, net: nn.Module, loss_fn: Callable[[], Tensor], settings: Settings) -> None:
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    timer = AttentionTimer(net, settings.device)
    half = settings.dtype != torch.float32

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        amp = torch.autocast(settings.device.type, dtype=settings.dtype) if half else None
        with amp or contextlib.nullcontext():
            loss = loss_fn()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)  # as every config's gradient_clip_val
        optimizer.step()

    def timed() -> tuple[float, float]:
        timer.reset()
        start = timer.mark()
        step()
        end = timer.mark()
        attention = timer.seconds()  # synchronises before the step's marks are read
        return timer.elapsed(start, end), attention

    for _ in range(settings.warmup):
        step()
    samples = [timed()]
    count = max(1, min(settings.repeats, int(settings.budget_s // max(samples[0][0], 1e-9))))
    samples += [timed() for _ in range(count - 1)]
    steps = [s for s, _ in samples]
    row.step_ms = statistics.median(steps) * 1e3
    row.step_ms_min, row.step_ms_max = min(steps) * 1e3, max(steps) * 1e3
    row.tokens_per_s = row.batch * row.n / (row.step_ms / 1e3)
    row.attn_ms = statistics.median(a for _, a in samples) * 1e3
    row.attn_share = statistics.median(a / s for s, a in samples)
    row.repeats = count
    if count == 1 and samples[0][0] > settings.budget_s:
        row.note = "1 run (over budget)"


def _skip(measured: Sequence[Row], row: Row, budget_s: float) -> str | None:
    """ "too slow" (the estimate kept in ``est_ms``) when the step is estimated over the budget:
    ``t·(N/N₀)^α`` from the last measured point's fastest step, α from the last two points
    clamped to [1, 2]."""
    # The fastest step, not the median: contention on a shared machine only adds time, and one
    # disturbed point must not cut its series short.
    points = [(r.n, r.step_ms_min) for r in measured[-2:]]
    n1, t1 = points[-1]
    est = extrapolate(t1 or 0.0, n1, row.n, growth_exponent(points))
    if est / 1e3 <= budget_s:
        return None
    row.est_ms = est
    return f"too slow (est. {est / 1e3:.3g} s/step)"


def run_series(
    model: str,
    width: int,
    spec: BackendSpec,
    lengths: Sequence[int],
    settings: Settings,
    dtype_name: str,
) -> list[Row]:
    """All N of one (model, width, backend), skipping what would exceed the budget
    (``budget.run_budgeted``)."""
    s = settings

    def measure(row: Row) -> None:
        net, loss_fn = build_model(model, n=row.n, width=width, spec=spec, settings=s)
        row.params = sum(p.numel() for p in net.parameters())  # a fact of the model, kept on OOM
        _measure(row, net.train(), loss_fn, s)

    def measured_line(row: Row) -> str:
        return (
            f"{model:8} w={width:<4} {spec.label:28} N={row.n:<6} {row.step_ms:9.1f} ms/step "
            f"{row.tokens_per_s:10.0f} tok/s, attention {100 * (row.attn_share or 0.0):4.1f}%"
        )

    return run_budgeted(
        lengths,
        new_row=lambda n: Row(model, width, s.layers, s.heads, spec.label, n, s.batch, dtype_name),
        skip=lambda measured, row: _skip(measured, row, s.budget_s),
        measure=measure,
        device=s.device,
        measured_line=measured_line,
    )


def run_model_steps(
    models: Sequence[str],
    widths: Sequence[int],
    specs: Sequence[BackendSpec],
    lengths: Sequence[int],
    settings: Settings,
    dtype_name: str,
) -> list[Row]:
    """Every (model, width, backend) series; backends without a causal form are left out."""
    rows: list[Row] = []
    for model in models:
        for width in widths:
            for spec in specs:
                if not spec.build(head_dim=max(1, width // settings.heads)).supports_causal:
                    log.info("%s: no causal form, left out (both models are causal)", spec.label)
                    continue
                rows += run_series(model, width, spec, lengths, settings, dtype_name)
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``model``."""
    add_output(parser)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    add_backends(
        parser,
        list(MODEL_BACKENDS),
        help=f"name[:key=value,...] (default: {' '.join(MODEL_BACKENDS)})",
    )
    parser.add_argument("--lengths", nargs="+", type=int, default=[256, 1024, 4096, 16384])
    parser.add_argument("--widths", nargs="+", type=int, default=[64, 256], help="d_model values")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4, help="H; head_dim = width / H")
    parser.add_argument("--short-conv", type=int, default=0, help="K of net.short_conv (0: none)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--budget",
        type=float,
        default=20.0,
        help="seconds per point; a step estimated slower is skipped (and larger N with it)",
    )
    parser.add_argument("--device", default=default_device())
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")


def run(args: argparse.Namespace) -> str:
    """Every series; write ``<out>/<tag>.{csv,md,png}``, return the two tables."""
    settings = Settings(
        **budget_settings(args), layers=args.layers, heads=args.heads, batch=args.batch,
        short_conv=args.short_conv,
    )  # fmt: skip
    rows = run_model_steps(
        args.models, args.widths, args.backends, args.lengths, settings, args.dtype
    )
    shape = f"B={args.batch}, layers={args.layers}, H={args.heads}, d_ff=4·width"
    shape += f", short_conv={args.short_conv}" if args.short_conv else ""
    meta = report.environment(
        settings.device,
        command=args.command_line,
        models="reversal: SequenceTransformer decoder over x SEP y (N tokens); "
        "pixel: PixelTransformer over N pixels, 256 levels",
        shape=shape,
        step="forward, loss, backward, clip_grad_norm 1.0, AdamW (lr 1e-3, wd 0.01)",
        dtype=args.dtype,
        repeats=args.repeats,
        warmup=args.warmup,
        budget_s=args.budget,
        timing=timing_method(settings.device),
        attention_share="hooks on every backend: forward pre-hook -> hook, output grad -> "
        "last q/k/v grad, in the timed steps; projections excluded",
    )
    text = (
        "## Training step: tokens/s (end-to-end speed-up vs softmax) [attention share]\n\n"
        + report.model_step_table(rows)
        + "\n\n## Crossover N vs softmax: end-to-end training step and attention alone\n\n"
        + report.crossover_table(rows)
    )
    tag = args.tag or f"model_step_{settings.device.type}_{args.dtype}"
    report.write_report(args.out, tag, meta, rows, text)
    report.model_step_figure(
        rows,
        args.out / f"{tag}.png",
        title="training step: tokens/s (top) and attention share (bottom) vs N",
        caption=f"{meta['device']} · torch {torch.__version__} · {shape} · {args.dtype}",
    )
    return text + "\n"
