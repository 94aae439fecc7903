"""The GPU report's page from the files its stages wrote: ``python -m lab.benchmarks.gpu_page DIR``.

``gpu_report`` calls it after every stage; run alone it rebuilds ``<OUT>/gpu_report.md`` from what
is under ``<OUT>``: the provenance and the stages (``stages.csv``), the targets met or not
(``gpu_targets``), the CUDA tests (``*/tests.xml``), one table per regime of ms per causal
fwd+bwd (contender × N, speed-up vs flash; fla's op, the anchor, beside the ``linear`` rows,
from every ``*/race.csv``), the agreement of each contender with the float32 torch kernel and its
first call, each attention row's achieved bandwidth against the copy bandwidth
(``bandwidth/copy.csv``), ``auto``'s choice per shape, the profiler's top kernels, the training
step, decode and the per-call table of every backend. A section whose stage wrote nothing is
left out. Rows come back as the dataclasses that wrote them, each field by its declared type.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from attn_lightning.records import markdown_meta, markdown_table, read_csv
from lab.benchmarks import bandwidth, decode, gpu_targets, model_step, plots, report, scaling
from lab.benchmarks.contenders import CONTENDERS, LINEAR_OUTPUTS, Shape
from lab.benchmarks.race import KernelRow
from lab.benchmarks.top_kernels import KernelShare
from lab.benchmarks.top_kernels import table as top_kernels_table

log = logging.getLogger(__name__)

FLASH = "flash"
TOY = "toy shapes on the CPU"  # the shapes line of a --cpu run (gpu_report)
R = TypeVar("R")


def _value(raw: str, kind: str) -> Any:
    """A CSV cell as the field's declared type (``"float | None"`` etc.); empty -> None."""
    if raw == "":
        return None if "None" in kind else ("" if kind.startswith("str") else None)
    if kind.startswith("bool"):
        return raw == "True"
    if kind.startswith("int"):
        return int(float(raw))
    if kind.startswith("float"):
        return float(raw)
    return raw


def typed(cls: type[R], record: dict[str, str]) -> R:
    """``cls`` (a dataclass) from one CSV record; missing columns take the field's default."""
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in record:
            values[f.name] = _value(record[f.name], str(f.type))
    return cls(**values)


def _records(out: Path, pattern: str) -> Iterator[dict[str, str]]:
    for path in sorted(out.glob(pattern)):
        try:
            yield from read_csv(path)[1]
        except (OSError, ValueError) as err:  # a half-written file of a killed stage
            log.warning("gpu-page: %s unreadable (%s), left out", path, err)


def read_rows(cls: type[R], out: Path, pattern: str) -> list[R]:
    """Every record of the CSVs under ``out`` matching ``pattern``, as ``cls``."""
    return [typed(cls, r) for r in _records(out, pattern)]


def _cell(row: KernelRow | None, flash: float | None) -> str:
    """``ms (×flash)`` for an attention row, ``ms`` for the rest, the note when unmeasured."""
    if row is None:
        return ""
    if row.ms is None:
        return row.note
    ratio = row.contender in LINEAR_OUTPUTS and flash and row.contender != FLASH
    return f"{row.ms:.3g}" + (f" ({flash / row.ms:.2g}×)" if ratio and flash else "")


def kernel_section(rows: Sequence[KernelRow]) -> list[str]:
    """Per regime (H, D, B·N): ms per call, contender × N; then agreement and first calls."""
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
            cells = [_cell(index.get((label, s)), _flash_ms(index, s)) for s in shapes]
            if any(cells):
                body.append(
                    [f"{label}: {CONTENDERS[label][0]}" if label in CONTENDERS else label, *cells]
                )
        header = ["contender", *(f"N={s.n:,} (B {s.batch})" for s in shapes)]
        parts.append(
            f"## Per call, {regime}: ms per causal fwd+bwd (speed-up vs flash)\n\n"
            + markdown_table(header, body)
        )
    checked = [r for r in rows if r.ms is not None]
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
        for r in checked
    ]
    header = [
        "contender",
        "shape BxHxNxD",
        "kernel",
        "rel. error vs its fp32 reference",
        "first call s",
        "ms range",
        "timed calls",
    ]
    parts.append("## Agreement, first calls and spread\n\n" + markdown_table(header, body))
    return parts + normaliser_section(rows)


def bandwidth_section(rows: Sequence[KernelRow], copy_gb_s: float | None) -> list[str]:
    """Achieved bandwidth of every timed attention row, against the copy bandwidth if measured."""
    found = [
        bandwidth.achieved(r.contender, r.shape, r.dtype, r.ms, copy_gb_s)
        for r in rows
        if r.contender in bandwidth.ROWS and r.ms is not None
    ]
    if not found:
        return []
    copy = "not measured" if copy_gb_s is None else f"{copy_gb_s:,.0f} GB/s"
    return [
        f"## Achieved bandwidth vs the memory roofline (copy bandwidth: {copy})\n\n"
        f"{bandwidth.FORMULA}.\n\n{bandwidth.table(found)}"
    ]


def normaliser_section(rows: Sequence[KernelRow]) -> list[str]:
    """The fla path's normaliser alone, before (strided cumsum) and now, with the speed-up."""
    old = {r.shape: r.ms for r in rows if r.contender == "normaliser:old" and r.ms}
    new = {r.shape: r.ms for r in rows if r.contender == "normaliser:new" and r.ms}
    body = [
        [str(s), f"{old[s]:.3g}", f"{new[s]:.3g}", f"{old[s] / new[s]:.3g}×"]
        for s in old
        if s in new
    ]
    if not body:
        return []
    header = ["shape BxHxNxD", "before: cumsum(dim=2) ms", "now: by chunks ms", "speed-up"]
    return ["## The normaliser, fwd+bwd: before vs now\n\n" + markdown_table(header, body)]


def _flash_ms(index: Mapping[tuple[str, Shape], KernelRow], shape: Shape) -> float | None:
    row = index.get((FLASH, shape))
    return None if row is None else row.ms


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


@dataclass(frozen=True)
class JunitSummary:
    """One pytest run's counts from its JUnit XML."""

    name: str
    tests: int
    failures: int
    errors: int
    skipped: int
    failed: tuple[str, ...] = ()

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.errors - self.skipped

    def line(self) -> str:
        text = (
            f"{self.passed} passed, {self.failures} failed, {self.errors} errors, "
            f"{self.skipped} skipped"
        )
        shown = ", ".join(self.failed[:10]) + (" ..." if len(self.failed) > 10 else "")
        return text + (f" (failed: {shown})" if self.failed else "")


def junit_summary(path: Path) -> JunitSummary | None:
    """The counts of a JUnit XML file, or None when the run left none (killed, skipped)."""
    if not path.is_file():
        return None
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    failed = tuple(
        case.get("name", "?")
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    )
    return JunitSummary(path.parent.name, skipped=skipped, failed=failed, **counts)


def _latency_section(rows_: Sequence[scaling.Row], out: Path) -> list[str]:
    """Per (dtype, protocol, H): fwd and fwd+bwd ms, fwd+bwd peak memory; the command's figures."""
    parts = []
    for dtype, protocol, heads in dict.fromkeys((r.dtype, r.protocol, r.heads) for r in rows_):
        group = [r for r in rows_ if (r.dtype, r.protocol, r.heads) == (dtype, protocol, heads)]
        parts.append(f"## Per call: {protocol}, {dtype}, H = {heads}")
        for mode, title in plots.MODE_TITLES.items():
            if any(r.mode == mode for r in group):
                table = report.scaling_table(group, mode=mode)
                parts.append(f"### {title}: ms per call (speed-up vs softmax)\n\n{table}")
        if any(r.peak_mb is not None for r in group):
            table = report.scaling_table(group, mode="fwdbwd", value="peak_mb")
            parts.append(f"### forward + backward: peak memory (MiB)\n\n{table}")
    figures = sorted(out.glob("latency/*.png"))
    parts += [f"![{p.stem}](latency/{p.name})" for p in figures]
    return parts


def write_page(out: Path) -> str:
    """Write ``<out>/gpu_report.md`` from the files under ``out``; return its text."""
    meta, stages = read_csv(out / "stages.csv") if (out / "stages.csv").is_file() else ({}, [])
    kernels = read_rows(KernelRow, out, "*/race.csv")
    steps = read_rows(model_step.Row, out, "model/model_tokens_*.csv")
    decoded = read_rows(decode.DecodeRow, out, "decode/*.csv")
    copy_gb_s = bandwidth.read_copy(out / "bandwidth")
    found = gpu_targets.evaluate(kernels, steps, decoded, copy_gb_s=copy_gb_s)
    copy = "not measured" if copy_gb_s is None else f"{copy_gb_s:,.0f} GB/s"
    meta = {**meta, "copy_bandwidth": f"{copy} (device-to-device copy, read + write, median)"}
    stage_rows = [
        [s["stage"], s["what"], s["status"], f"{float(s['seconds']):.0f}", s["note"]]
        for s in stages
    ]
    tests = [junit_summary(p) for p in sorted(out.glob("*/tests.xml"))]
    cpu = meta.get("shapes") == TOY
    title = "# GPU report" + " (toy shapes on the CPU: nothing here is a GPU result)" * cpu
    top = read_rows(KernelShare, out, "profile/*.csv")
    model_table = f"{report.model_step_table(steps)}\n\n{report.crossover_table(steps)}"
    parts = [
        title,
        markdown_meta(meta),
        "## Targets\n\n"
        + markdown_table(
            ["target", "measured", "verdict"], [[t.what, t.measured, t.verdict] for t in found]
        ),
        "## Stages\n\n" + markdown_table(["stage", "what", "status", "s", "note"], stage_rows),
        "## Tests\n\n"
        + ("\n".join(f"- {s.name}: {s.line()}" for s in tests if s) or "No test results."),
        *kernel_section(kernels),
        *bandwidth_section(kernels, copy_gb_s),
        *gpu_targets.auto_section(kernels),
        *([f"## Top kernels by device time\n\n{top_kernels_table(top)}"] if top else []),
        *(
            [
                f"## Training step, B·N tokens constant: tokens/s (speed-up vs softmax) "
                f"[attention share]\n\n{model_table}"
            ]
            if steps
            else []
        ),
        *_decode_section(decoded),
        *_latency_section(read_rows(scaling.Row, out, "latency/*.csv"), out),
    ]
    text = "\n\n".join(parts) + "\n"
    (out / "gpu_report.md").write_text(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit(
            "usage: python -m lab.benchmarks.gpu_page DIR (a gpu_report folder), "
            f"got {sys.argv[1:]}"
        )
    print(write_page(Path(sys.argv[1]).resolve()), end="")
