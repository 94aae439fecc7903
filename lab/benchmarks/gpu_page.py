"""The GPU report's page, targets and ``auto``'s choice: ``python -m lab.benchmarks.gpu_page DIR``.

``gpu_report`` calls ``write_page`` after every stage; run alone it rebuilds ``<DIR>/gpu_report.md``
from what is under ``DIR``: the provenance and stages (``stages.csv``), the targets met or not, the
CUDA tests (``*/tests.xml``), per regime the ms per causal fwd+bwd (contender × N, speed-up vs
flash, from every ``*/race.csv``), agreement and first calls, the normaliser before vs now, each
attention row's bandwidth against the copy bandwidth (``bandwidth/copy.csv``), ``auto``'s choice,
the profiler's top kernels, the training step, decode and the per-call table of every backend. A
section whose stage wrote nothing is left out; rows come back as the dataclasses that wrote them.

The targets (docs/benchmarks.md, "Running the report"; bf16 causal fwd+bwd ``race`` rows, the
``model`` and ``decode`` rows): our fla path within 1.15× of fla's op at every shape; ``linear``
(auto) ≥ 2.5× flash at N 32k (H 4, D 64), ≥ 1.5× at N 16k (H 32, D 128); the torch kernel ≥ 2×
faster than ``TORCH_KERNEL_BEFORE``; the reversal step with ``linear`` faster than softmax from
some N ≤ 8,192; decode at 64k context ≥ 10× the KV cache; ``linear:triton`` within 5× of the
memory roofline at N 32k. ``auto``'s rule: at a measured shape it never picks a kernel more than
``TOLERANCE`` slower than another measured there; the page says per shape what it should take.
"""

from __future__ import annotations

import logging
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.attention.ops import dispatch, fla
from attn_lightning.records import markdown_meta, markdown_table, read_csv
from lab.benchmarks import decode, model_step, race, report
from lab.benchmarks.contenders import CONTENDERS, LINEAR_OUTPUTS, Shape
from lab.benchmarks.measure import DTYPES
from lab.benchmarks.race import KernelRow, KernelShare, read_rows

log = logging.getLogger(__name__)

FLASH, SOFTMAX, LINEAR, AUTO, TRITON = "flash", "softmax", "linear", "linear:auto", "linear:triton"
TOY = "toy shapes on the CPU"  # the shapes line of a --cpu run (gpu_report)

FLA_PATH_LIMIT = 1.15
AUTO_VS_FLASH = ((Shape(2, 4, 32768, 64), 2.5), (Shape(1, 32, 16384, 128), 1.5))
# ms per causal fwd+bwd of ``linear`` on the torch kernel, bf16, B·N = 16k tokens, H 32, D 128.
TORCH_KERNEL_BEFORE = {
    Shape(16, 32, 1024, 128): 15.9,
    Shape(4, 32, 4096, 128): 17.4,
    Shape(1, 32, 16384, 128): 17.6,
}
TORCH_KERNEL_SOURCE = "an H100 on 2026-11-28, bf16, CUDA events, median of 5 (docs/benchmarks.md)"
TORCH_KERNEL_SPEEDUP = 2.0
MODEL_CROSSOVER_N = 8192
DECODE_CONTEXT, DECODE_RATIO = 65536, 10.0
ROOFLINE_SHAPE, ROOFLINE_LIMIT = Shape(2, 4, 32768, 64), 5.0
KERNELS = ("linear:torch", "linear:fla", "linear:triton")  # auto's candidates
TOLERANCE = 0.10
BANDWIDTH_FORMULA = (
    "bytes moved = 8 · B·H·N·D · bytes per element (q, k, v, out and their gradients, each read "
    "or written once at the call's dtype: a lower bound); GB/s = bytes / time; roofline = bytes "
    "/ the copy bandwidth; × roofline = time / roofline"
)


# ---------------------------------------------------------------- targets
def _ms(rows: Sequence[KernelRow], contender: str) -> dict[Shape, float]:
    """Shape -> median ms of ``contender`` (the last row of a shape measured twice)."""
    return {r.shape: r.ms for r in rows if r.contender == contender and r.ms is not None}


def _short(shape: Shape) -> str:
    return f"H {shape.heads} D {shape.head_dim} N {shape.n:,}"


def targets(
    kernels: Sequence[KernelRow],
    steps: Sequence[model_step.Row],
    decoded: Sequence[decode.DecodeRow],
    copy_gb_s: float | None,
) -> list[tuple[str, str, str]]:
    """Every target as (what, measured, verdict: met, not met or not measured), in the order of
    the module doc; a target without its numbers is not measured."""
    found = []

    def add(what: str, said: str = "", ok: bool | None = None) -> None:
        found.append((what, said or "–", {None: "not measured", True: "met", False: "not met"}[ok]))

    mine, anchor = _ms(kernels, "linear:fla"), _ms(kernels, "fla-op")
    ratios = {s: mine[s] / anchor[s] for s in mine if s in anchor}
    what = f"our fla path within {FLA_PATH_LIMIT}× of fla's op at every measured shape"
    if ratios:
        worst = max(ratios, key=ratios.__getitem__)
        cells = ", ".join(f"{r:.2f}× ({_short(s)})" for s, r in ratios.items())
        said = f"worst {ratios[worst]:.2f}× at {_short(worst)}, {len(ratios)} shapes: {cells}"
        add(what, said, ratios[worst] <= FLA_PATH_LIMIT)
    else:
        add(what)

    auto, flash = _ms(kernels, AUTO), _ms(kernels, FLASH)
    took = {r.shape: r.kernel for r in kernels if r.contender == AUTO}
    for shape, wanted in AUTO_VS_FLASH:
        what = f"linear (auto) ≥ {wanted}× SDPA flash at {_short(shape)}"
        if shape in auto and shape in flash:
            up = flash[shape] / auto[shape]
            add(
                what,
                f"{flash[shape]:.3g} / {auto[shape]:.3g} ms = {up:.2f}× ({took[shape]})",
                up >= wanted,
            )
        else:
            add(what)

    now, before = _ms(kernels, "linear:torch"), TORCH_KERNEL_BEFORE
    ups = {s: before[s] / now[s] for s in before if s in now}
    said = ", ".join(
        f"{before[s]:.3g} → {now[s]:.3g} ms = {u:.2f}× (N {s.n:,})" for s, u in ups.items()
    )
    if ups and len(ups) < len(before):
        said += f"; {len(before) - len(ups)} shape(s) not measured"
    # Met only when every shape was measured; one slow shape is enough for not met.
    slow = bool(ups) and min(ups.values()) < TORCH_KERNEL_SPEEDUP
    what = f"torch kernel ≥ {TORCH_KERNEL_SPEEDUP:g}× faster than on 2026-11-28 at H 32, D 128"
    add(
        f"{what} (before: {TORCH_KERNEL_SOURCE})",
        said,
        False if slow else (len(ups) == len(before) or None),
    )

    step: dict[str, dict[int, float]] = {}
    for s in steps:
        if s.step_ms:
            step.setdefault(s.backend, {})[s.n] = s.step_ms
    fast, base = step.get(LINEAR, {}), step.get(SOFTMAX, {})
    what = "reversal training step (width 256, B·N = 64k): linear faster than softmax from N ≤ "
    if common := sorted(set(fast) & set(base)):
        n = report.crossover(fast, base)
        cells = ", ".join(f"{base[k] / fast[k]:.2f}× at {k:,}" for k in common)
        said = f"faster from N = {n:,}" if n else "not faster at the largest N"
        add(
            f"{what}{MODEL_CROSSOVER_N:,}",
            f"{said} ({cells})",
            n is not None and n <= MODEL_CROSSOVER_N,
        )
    else:
        add(f"{what}{MODEL_CROSSOVER_N:,}")

    ms = {r.backend: r.ms for r in decoded if r.context == DECODE_CONTEXT and r.ms}
    lin, cache = ms.get(LINEAR), ms.get(SOFTMAX)
    what = f"decode per token at 64k context: ≥ {DECODE_RATIO:g}× the preallocated KV cache"
    if lin and cache:
        add(what, f"{cache:.3g} / {lin:.3g} ms = {cache / lin:.3g}×", cache / lin >= DECODE_RATIO)
    else:
        add(what)

    what = f"triton kernel within {ROOFLINE_LIMIT:g}× of the memory roofline at "
    what += _short(ROOFLINE_SHAPE)
    row = next((r for r in kernels if r.contender == TRITON and r.shape == ROOFLINE_SHAPE), None)
    if row is None or row.ms is None or copy_gb_s is None:
        add(what, "no copy bandwidth" if row and row.ms is not None else (row.note if row else ""))
        return found
    roof = race.roofline_ms(row.shape, row.dtype, copy_gb_s)
    moved = race.bytes_moved(row.shape, row.dtype)
    said = (
        f"{row.ms:.3g} ms / {roof:.3g} ms roofline = {row.ms / roof:.2f}× ({moved / 1e6:,.0f} MB "
        f"at {copy_gb_s:,.0f} GB/s copy; {moved / row.ms / 1e6:,.0f} GB/s achieved)"
    )
    add(what, said, row.ms / roof <= ROOFLINE_LIMIT)
    return found


# ---------------------------------------------------------------- auto's choice
def choices(rows: Sequence[KernelRow]) -> list[dict[str, Any]]:
    """Per (shape, dtype) where a kernel of ``KERNELS`` was timed, in row order: each kernel's
    ``ms``, the ``fastest``, auto's ``pick`` (the ``linear:auto`` row's kernel; without one,
    ``dispatch.choose`` for a CUDA call), ``ratio`` (pick / fastest, None: pick not timed),
    ``within`` the rule (None: cannot be judged) and what auto ``should_take``."""
    timed = [r for r in rows if r.contender in KERNELS and r.ms is not None]
    found = []
    for shape, dtype in dict.fromkeys((r.shape, r.dtype) for r in timed):
        ms = {
            r.contender.split(":")[1]: r.ms
            for r in timed
            if (r.shape, r.dtype) == (shape, dtype) and r.ms is not None
        }
        fastest = min(ms, key=ms.__getitem__)
        picked = [r.kernel for r in rows if r.contender == AUTO and r.shape == shape]
        picked = [k.removeprefix("auto: ") for k in picked if k.startswith("auto: ")]
        if picked:
            pick = picked[0]
        else:  # no auto row: what ``choose`` takes for a CUDA call of this dtype
            installed = fla.missing_reason() is None
            pick = dispatch.choose("auto", "cuda", DTYPES[dtype], installed=installed)
        ratio = ms[pick] / ms[fastest] if pick in ms else None
        within = None if ratio is None else ratio <= 1 + TOLERANCE
        found.append(
            dict(shape=shape, dtype=dtype, ms=ms, fastest=fastest, pick=pick, ratio=ratio)
            | dict(within=within, should_take=pick if within else fastest)
        )
    return found


def auto_section(rows: Sequence[KernelRow]) -> list[str]:
    """The page's "auto's choice" section, or nothing when no linear kernel was timed."""
    names = [k.split(":")[1] for k in KERNELS]
    body = [
        [
            str(c["shape"]),
            c["dtype"],
            *(f"{c['ms'][n]:.3g}" if n in c["ms"] else "" for n in names),
            c["fastest"],
            c["pick"],
            "" if c["ratio"] is None else f"{c['ratio']:.2f}×",
            {None: "pick not timed", True: "yes", False: "no"}[c["within"]],
            c["should_take"],
        ]
        for c in choices(rows)
    ]
    if not body:
        return []
    header = ["shape BxHxNxD", "dtype", *(f"{n} ms" for n in names), "fastest", "auto picks"]
    header += ["pick / fastest", f"within {TOLERANCE:.0%}", "auto should take"]
    return [
        "## auto's choice: the fastest linear kernel per measured shape\n\n"
        f"The rule: `auto` never picks a kernel more than {TOLERANCE:.0%} slower than another "
        "measured at the same shape. 'auto picks' is the kernel the `linear:auto` row ran "
        "(`attention/ops/dispatch.py` `choose`).\n\n" + markdown_table(header, body)
    ]


# ---------------------------------------------------------------- sections
def _cell(row: KernelRow | None, flash: float | None) -> str:
    """``ms (×flash)`` for an attention row, ``ms`` for the rest, the note when unmeasured."""
    if row is None:
        return ""
    if row.ms is None:
        return row.note
    ratio = row.contender in LINEAR_OUTPUTS and flash and row.contender != FLASH
    return f"{row.ms:.3g}" + (f" ({flash / row.ms:.2g}×)" if ratio and flash else "")


def kernel_section(rows: Sequence[KernelRow]) -> list[str]:
    """Per regime (H, D, B·N): ms per call, contender × N; agreement and first calls; the
    normaliser before vs now."""
    if not rows:
        return []
    parts = []
    index = {(r.contender, r.shape): r for r in rows}
    order = {label: i for i, label in enumerate(CONTENDERS)}
    labels = sorted({r.contender for r in rows}, key=lambda c: order.get(c, len(order)))
    for regime in dict.fromkeys(r.shape.regime for r in rows):
        shapes = sorted({r.shape for r in rows if r.shape.regime == regime}, key=lambda s: s.n)
        body = []
        for label in labels:
            flash = [index[(FLASH, s)].ms if (FLASH, s) in index else None for s in shapes]
            cells = [_cell(index.get((label, s)), f) for s, f in zip(shapes, flash, strict=True)]
            if any(cells):
                name = f"{label}: {CONTENDERS[label][0]}" if label in CONTENDERS else label
                body.append([name, *cells])
        header = ["contender", *(f"N={s.n:,} (B {s.batch})" for s in shapes)]
        parts.append(
            f"## Per call, {regime}: ms per causal fwd+bwd (speed-up vs flash)\n\n"
            + markdown_table(header, body)
        )
    body = [
        [
            r.contender,
            str(r.shape),
            r.kernel,
            "" if r.rel_err is None else f"{r.rel_err:.2e}",
            "" if r.first_ms is None else f"{r.first_ms / 1e3:.1f}",
            "" if r.min_ms is None or r.max_ms is None else f"{r.min_ms:.3g}–{r.max_ms:.3g}",
            str(r.repeats),
        ]
        for r in rows
        if r.ms is not None
    ]
    header = ["contender", "shape BxHxNxD", "kernel", "rel. error vs its fp32 reference"]
    header += ["first call s", "ms range", "timed calls"]
    parts.append("## Agreement, first calls and spread\n\n" + markdown_table(header, body))
    old, new = _ms(rows, "normaliser:old"), _ms(rows, "normaliser:new")
    body = [
        [str(s), f"{old[s]:.3g}", f"{new[s]:.3g}", f"{old[s] / new[s]:.3g}×"]
        for s in old
        if new.get(s)
    ]
    if body:
        header = ["shape BxHxNxD", "before: cumsum(dim=2) ms", "now: by chunks ms", "speed-up"]
        parts.append("## The normaliser, fwd+bwd: before vs now\n\n" + markdown_table(header, body))
    return parts


def bandwidth_section(rows: Sequence[KernelRow], copy_gb_s: float | None) -> list[str]:
    """Achieved bandwidth of every timed attention row, against the copy bandwidth if measured."""
    body = []
    for r in rows:
        if r.contender in (FLASH, *LINEAR_OUTPUTS) and r.ms is not None:
            moved = race.bytes_moved(r.shape, r.dtype)
            roof = None if copy_gb_s is None else race.roofline_ms(r.shape, r.dtype, copy_gb_s)
            body.append(
                [r.contender, str(r.shape), r.dtype, f"{moved / 1e6:,.1f}", f"{r.ms:.3g}"]
                + [f"{moved / (r.ms * 1e-3) / 1e9:,.0f}"]
                + (["", ""] if roof is None else [f"{roof:.3g}", f"{r.ms / roof:.2f}×"])
            )
    if not body:
        return []
    copy = "not measured" if copy_gb_s is None else f"{copy_gb_s:,.0f} GB/s"
    header = ["contender", "shape BxHxNxD", "dtype", "MB moved", "ms", "GB/s", "roofline ms"]
    return [
        f"## Achieved bandwidth vs the memory roofline (copy bandwidth: {copy})\n\n"
        f"{BANDWIDTH_FORMULA}.\n\n{markdown_table([*header, '× roofline'], body)}"
    ]


def junit_line(path: Path) -> str | None:
    """``- <stage>: N passed, …`` from a JUnit XML file, or None when the run left none."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):  # killed or skipped: no file, or half of one
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    n = {
        k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")
    }
    failed = [
        case.get("name", "?")
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    text = f"{passed} passed, {n['failures']} failed, {n['errors']} errors, {n['skipped']} skipped"
    shown = ", ".join(failed[:10]) + (" ..." if len(failed) > 10 else "")
    return f"- {path.parent.name}: {text}" + (f" (failed: {shown})" if failed else "")


def stage_pages(out: Path, *stages: str) -> list[str]:
    """What each stage's own command wrote (``<stage>/*.md``: its tables, below its provenance,
    one heading level down), and the stage's figures."""
    parts = []
    for stage in stages:
        for page in sorted(out.glob(f"{stage}/*.md")):
            _, found, tables = page.read_text().partition("\n## ")
            if found:
                tables = "### " + tables.replace("\n## ", "\n### ").strip()
                parts.append(f"## {stage}: `{stage}/{page.name}`\n\n{tables}")
        parts += [f"![{p.stem}]({stage}/{p.name})" for p in sorted(out.glob(f"{stage}/*.png"))]
    return parts


def write_page(out: Path) -> str:
    """Write ``<out>/gpu_report.md`` from the files under ``out``; return its text."""
    meta, stages = read_csv(out / "stages.csv") if (out / "stages.csv").is_file() else ({}, [])
    kernels = read_rows(KernelRow, out, "*/race.csv")
    steps = read_rows(model_step.Row, out, "model/model_tokens_*.csv")
    decoded = read_rows(decode.DecodeRow, out, "decode/*.csv")
    top = read_rows(KernelShare, out, "profile/*.csv")
    copy_gb_s = race.read_copy(out / "bandwidth")
    copy = "not measured" if copy_gb_s is None else f"{copy_gb_s:,.0f} GB/s"
    meta = {**meta, "copy_bandwidth": f"{copy} (device-to-device copy, read + write, median)"}
    stage_rows = [
        [s["stage"], s["what"], s["status"], f"{float(s['seconds']):.0f}", s["note"]]
        for s in stages
    ]
    tests = [line for p in sorted(out.glob("*/tests.xml")) if (line := junit_line(p))]
    found = targets(kernels, steps, decoded, copy_gb_s)
    title = "# GPU report" + " (toy shapes on the CPU: nothing here is a GPU result)" * (
        meta.get("shapes") == TOY
    )
    step_title = "## Training step, B·N tokens constant: tokens/s (speed-up vs softmax)"
    model_table = f"{report.model_step_table(steps)}\n\n{report.crossover_table(steps)}"
    parts = [
        title,
        markdown_meta(meta),
        "## Targets\n\n" + markdown_table(["target", "measured", "verdict"], found),
        "## Stages\n\n" + markdown_table(["stage", "what", "status", "s", "note"], stage_rows),
        "## Tests\n\n" + ("\n".join(tests) or "No test results."),
        *kernel_section(kernels),
        *bandwidth_section(kernels, copy_gb_s),
        *auto_section(kernels),
        *([f"## Top kernels by device time\n\n{race.kernels_table(top)}"] if top else []),
        *([f"{step_title} [attention share]\n\n{model_table}"] if steps else []),
        *stage_pages(out, "decode", "latency"),
    ]
    text = "\n\n".join(parts) + "\n"
    (out / "gpu_report.md").write_text(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit(
            f"usage: python -m lab.benchmarks.gpu_page DIR (a gpu_report folder), "
            f"got {sys.argv[1:]}"
        )
    print(write_page(Path(sys.argv[1]).resolve()), end="")
