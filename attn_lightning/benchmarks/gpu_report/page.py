"""The report's one markdown page: provenance, the targets met or not, stages, tables, figures.

Targets (each stated met, not met or not measured, with its numbers):

* causal linear attention, fwd+bwd, bf16, N = 32k at B·N = 64k tokens: ``linear`` on fla at
  least 5× faster than SDPA (flash), and within 1.2× of fla's own op (``anchor``);
* the reversal model's training step (2 layers, width 256, B·N = 64k tokens): ``linear`` on fla
  faster than softmax from some N ≤ 4,096 on (``report.crossover``);
* decode at 64k tokens of context: ``linear``'s step at least 10× faster than softmax's
  preallocated KV cache.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from attn_lightning.benchmarks import decode, model_step, plots, report, scaling
from attn_lightning.benchmarks.gpu_report import collect
from attn_lightning.benchmarks.gpu_report.anchor import LABEL as ANCHOR_LABEL
from attn_lightning.benchmarks.gpu_report.plan import HEADS, SOFTMAX, label
from attn_lightning.benchmarks.gpu_report.runner import StageResult
from attn_lightning.results import markdown_meta, markdown_table

log = logging.getLogger(__name__)

LINEAR_FLA, LINEAR_TORCH = label("linear", "fla"), label("linear", "torch")
KERNEL = {LINEAR_FLA: "fla", LINEAR_TORCH: "torch kernel"}
TARGET_N, TARGET_CONTEXT = 32768, 65536


@dataclass(frozen=True)
class Target:
    """One of the issue's targets: what, the measured numbers, and the verdict."""

    what: str
    measured: str
    verdict: str  # met, not met, not measured


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "not met")


def attention_target(rows: Sequence[scaling.Row], backend: str = LINEAR_FLA) -> list[Target]:
    """The per-call targets at N = 32k, bf16, B·N = 64k tokens, causal fwd+bwd, for ``backend``
    (the overhead over fla's own op only for fla)."""
    ms = {
        r.backend: r.ms
        for r in rows
        if (r.dtype, r.protocol, r.mode, r.causal, r.n, r.heads)
        == ("bfloat16", "constant-tokens", "fwdbwd", True, TARGET_N, HEADS)
        and r.ms
    }
    mine, flash, anchor = ms.get(backend), ms.get(SOFTMAX), ms.get(ANCHOR_LABEL)
    speedup = flash / mine if mine and flash else None
    overhead = mine / anchor if mine and anchor else None
    speed = Target(
        f"causal linear ({KERNEL[backend]}) fwd+bwd, bf16, N = 32k: ≥ 5× SDPA flash",
        f"{flash:.3g} / {mine:.3g} ms = {speedup:.2f}×" if speedup else "–",
        _verdict(None if speedup is None else speedup >= 5),
    )
    if backend != LINEAR_FLA:
        return [speed]
    return [
        speed,
        Target(
            "… and within 1.2× of fla's own op",
            f"{mine:.3g} / {anchor:.3g} ms = {overhead:.2f}×" if overhead else "–",
            _verdict(None if overhead is None else overhead <= 1.2),
        ),
    ]


def model_target(rows: Sequence[model_step.Row], backend: str = LINEAR_FLA) -> Target:
    """The training-step target: ``backend`` faster than softmax from N ≤ 4,096 on."""
    steps: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.step_ms:
            steps.setdefault(r.backend, {})[r.n] = r.step_ms
    mine, base = steps.get(backend, {}), steps.get(SOFTMAX, {})
    common = sorted(set(mine) & set(base))
    what = f"training step (2 layers, width 256), B·N = 64k: linear ({KERNEL[backend]}) faster "
    what += "from N ≤ 4,096"
    if not common:
        return Target(what, "–", _verdict(None))
    n = report.crossover(mine, base)
    ratios = ", ".join(f"{base[k] / mine[k]:.2g}× at {k}" for k in common)
    found = "faster from N = " + str(n) if n else "not faster at the largest N"
    return Target(
        what,
        f"{found} ({ratios})",
        _verdict(n is not None and n <= 4096),
    )


def decode_target(rows: Sequence[decode.DecodeRow]) -> Target:
    ms = {r.backend: r.ms for r in rows if r.context == TARGET_CONTEXT and r.ms}
    mine, cache = ms.get(LINEAR_FLA), ms.get(SOFTMAX)
    ratio = cache / mine if mine and cache else None
    return Target(
        "decode per token at 64k context: ≥ 10× the preallocated KV cache",
        f"{cache:.3g} / {mine:.3g} ms = {ratio:.3g}×" if ratio else "–",
        _verdict(None if ratio is None else ratio >= 10),
    )


def _latency_section(rows: Sequence[scaling.Row], out: Path, caption: str) -> list[str]:
    """Per (dtype, protocol, H): fwd and fwd+bwd time, fwd+bwd peak memory, and two figures."""
    parts = []
    for dtype, protocol, heads in dict.fromkeys((r.dtype, r.protocol, r.heads) for r in rows):
        group = [r for r in rows if (r.dtype, r.protocol, r.heads) == (dtype, protocol, heads)]
        tag = f"latency_{protocol}_{dtype}" + (f"_H{heads}" if heads != HEADS else "")
        parts.append(f"## Per call: {protocol}, {dtype}, H = {heads}")
        for mode, title in plots.MODE_TITLES.items():
            if any(r.mode == mode for r in group):
                table = report.scaling_table(group, mode=mode)
                parts.append(f"### {title}: ms per call (speed-up vs softmax)\n\n{table}")
        if any(r.peak_mb is not None for r in group):
            table = report.scaling_table(group, mode="fwdbwd", value="peak_mb")
            parts.append(f"### forward + backward: peak memory (MiB)\n\n{table}")
        for value, ylabel in (("time", "ms"), ("speedup", "speed-up vs softmax")):
            path = out / "figures" / f"{tag}_{value}.png"
            title = f"{protocol}, {dtype}, H = {heads}: {value} vs N"
            try:
                made = plots.scaling_figure(
                    group, path, value=value, ylabel=ylabel, title=title, caption=caption
                )
            except (ValueError, RuntimeError) as err:  # a figure must not cost the report
                log.warning("gpu-report: figure %s not drawn (%s)", path.name, err)
                made = None
            if made is not None:
                parts.append(f"![{title}](figures/{path.name})")
    return parts


def _model_section(out: Path) -> list[str]:
    parts = []
    for pattern, title in (
        ("model_tokens_*.csv", "B·N = 64k tokens"),
        ("model_b1*.csv", "B = 1"),
        ("model_smoke*.csv", "toy sizes"),
    ):
        rows = collect.model_rows(out, pattern)
        if rows:
            parts.append(
                f"## Training step, {title}: tokens/s (speed-up vs softmax) [attention share]"
                f"\n\n{report.model_step_table(rows)}\n\n{report.crossover_table(rows)}"
            )
    return parts


def _decode_section(rows: Sequence[decode.DecodeRow]) -> list[str]:
    if not rows:
        return []
    contexts = sorted({r.context for r in rows})
    index = {(r.backend, r.context): r.ms for r in rows}
    body = [
        [b, *(f"{index[(b, t)]:.3g}" if index.get((b, t)) else "" for t in contexts)]
        for b in dict.fromkeys(r.backend for r in rows)
    ]
    header = ["backend", *(f"T={t}" for t in contexts)]
    return [f"## Decode: ms per token after T tokens\n\n{markdown_table(header, body)}"]


def write_page(
    out: Path,
    meta: Mapping[str, str],
    results: Sequence[StageResult],
    *,
    smoke: bool,
) -> str:
    """Write ``<out>/gpu_report.md`` from the stages' files; return its text."""
    latency, decode_rows = collect.latency_rows(out), collect.decode_rows(out)
    model_rows = collect.model_rows(out, "model_tokens_*.csv")
    targets = [
        *attention_target(latency),
        *attention_target(latency, LINEAR_TORCH),
        model_target(model_rows),
        model_target(model_rows, LINEAR_TORCH),
        decode_target(decode_rows),
    ]
    stage_rows = [
        [r.name, r.what, r.status, f"{r.seconds:.0f}", r.note or (r.log and f"`{r.log}`")]
        for r in results
    ]
    tests = [collect.junit_summary(p) for p in sorted((out / "parity").glob("*.xml"))]
    parts = [
        "# GPU report" + (" (CPU smoke run: toy sizes, nothing here is a GPU result)" * smoke),
        markdown_meta(meta),
        "## Targets\n\n"
        + markdown_table(
            ["target", "measured", "verdict"], [[t.what, t.measured, t.verdict] for t in targets]
        ),
        "## Stages\n\n" + markdown_table(["stage", "what", "status", "s", "note"], stage_rows),
        "## Tests\n\n"
        + ("\n".join(f"- {s.name}: {s.line()}" for s in tests if s) or "No test results."),
        *_latency_section(latency, out, caption=meta.get("device", "")),
        *_model_section(out),
        *_decode_section(decode_rows),
    ]
    text = "\n\n".join(parts) + "\n"
    (out / "gpu_report.md").write_text(text)
    return text
