"""Tables and provenance: every result file records the machine, versions and settings.

CSV files start with ``# key: value`` lines (read back with ``read_csv`` or
``pandas.read_csv(path, comment="#")``); markdown files start with the same as a bullet list.
"""

from __future__ import annotations

import csv
import datetime
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch

from attn_lightning.benchmarks import flops


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(device: torch.device, **settings: Any) -> dict[str, str]:
    """Machine, versions, the command line and the run's settings, as strings."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        hardware = f"{props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}"
    else:
        hardware = f"{_cpu_model()}, {os.cpu_count()} logical CPUs"
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": "python -m attn_lightning.benchmark " + " ".join(sys.argv[1:]),
        "device": f"{device.type}: {hardware}",
        "torch_threads": str(torch.get_num_threads()),
        "versions": f"python {platform.python_version()}, torch {torch.__version__}",
        "platform": platform.platform(),
        "git_commit": _git_commit(),
    }
    meta.update({k: str(v) for k, v in settings.items()})
    return meta


def _as_dict(row: Any) -> dict[str, Any]:
    return asdict(row) if is_dataclass(row) and not isinstance(row, type) else dict(row)


def write_csv(path: Path, rows: Iterable[Any], meta: Mapping[str, str]) -> Path:
    """Rows (dataclasses or dicts with the same keys) under a ``# key: value`` header."""
    records = [_as_dict(r) for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        for key, value in meta.items():
            fh.write(f"# {key}: {value}\n")
        if records:
            writer = csv.DictWriter(fh, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(
                {
                    k: "" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)
                    for k, v in r.items()
                }
                for r in records
            )
    return path


def read_csv(path: Path) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The ``# key: value`` header and the rows (as strings) of a file from ``write_csv``."""
    meta: dict[str, str] = {}
    with path.open() as fh:
        lines = fh.read().splitlines()
    body = []
    for line in lines:
        if line.startswith("# "):
            key, _, value = line[2:].partition(": ")
            meta[key] = value
        else:
            body.append(line)
    return meta, list(csv.DictReader(body))


def markdown_meta(meta: Mapping[str, str]) -> str:
    return "\n".join(f"- **{key}**: `{value}`" for key, value in meta.items())


def markdown_table(header: Sequence[str], body: Iterable[Sequence[Any]]) -> str:
    """A GitHub markdown table; ``None`` cells print empty."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cells in body:
        lines.append("| " + " | ".join("" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)


def _fmt(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def _skipped_cell(r: Any, value: str) -> str:
    """A skipped time shows its (upper-bound) estimate; memory shows only OOM notes."""
    if r is None:
        return ""
    if value == "peak_mb":
        return r.note if r.note.startswith("OOM") else "–"
    if r.est_ms is not None and value == "step_ms":  # a model_step.Row: seconds per step
        return f"too slow (est. {_fmt(r.est_ms / 1e3)} s)"
    if r.est_ms is not None:
        per = r.batch if value == "ms_per_sample" else 1
        return f"too slow (est. {_fmt(r.est_ms / per)})"
    return r.note or "n/a"


def scaling_table(
    rows: Sequence[Any], *, mode: str, value: str = "ms", baseline: str | None = "softmax"
) -> str:
    """One row per (backend, causal), one column per N for ``mode``.

    ``value`` is ``ms``, ``ms_per_sample`` or ``peak_mb``. Time cells read
    ``12.3 (4.1×) [35 GF/s]``: the value, the speed-up over ``baseline`` at the same
    (causal, mode, N) and, for feature-map backends, the achieved GFLOP/s of the minimal
    linear-attention work. Skipped points show their note.
    """
    rows = [r for r in rows if r.mode == mode]
    lengths = sorted({r.n for r in rows})
    index = {(r.backend, r.causal, r.n): r for r in rows}
    body = []
    for backend, causal in dict.fromkeys((r.backend, r.causal) for r in rows):
        cells: list[str] = []
        for n in lengths:
            r = index.get((backend, causal, n))
            got = None if r is None else getattr(r, value)
            if r is None or got is None:
                cells.append(_skipped_cell(r, value))
                continue
            cell = _fmt(got)
            base = index.get((baseline, causal, n))
            if value != "peak_mb" and base is not None and base.ms and backend != baseline:
                cell += f" ({base.ms / r.ms:.2g}×)"
            if value != "peak_mb" and r.gflops is not None:
                cell += f" [{r.gflops:.0f} GF/s]"
            cells.append(cell)
        body.append([backend, "causal" if causal else "full", *cells])
    return markdown_table(["backend", "mask", *(f"N={n}" for n in lengths)], body)


def flops_table(rows: Sequence[Any]) -> str:
    """Forward FLOPs per call (``Row.fwd_flops``): one row per (backend, mask), one column per N.

    Cells read ``1.2 GFLOP [35 GF/s]``: the counted forward FLOPs of one call (whole batch) and,
    where the forward point was measured, the rate they were done at (FLOPs / forward time).
    ``n/a``: no formula for that backend. The count is the same on fwd and fwdbwd rows.
    """
    lengths = sorted({r.n for r in rows})
    by_point: dict[tuple[str, bool, int], Any] = {}
    for r in rows:  # the forward row when there is one: it carries the forward time
        key = (r.backend, r.causal, r.n)
        if key not in by_point or r.mode == "fwd":
            by_point[key] = r
    body = []
    for backend, causal in dict.fromkeys((r.backend, r.causal) for r in rows):
        cells = []
        for n in lengths:
            r = by_point.get((backend, causal, n))
            if r is None:
                cells.append("")
                continue
            cell = flops.format_flops(r.fwd_flops)
            if r.fwd_flops and r.mode == "fwd" and r.ms:
                cell += f" [{r.fwd_flops / (r.ms * 1e-3) / 1e9:.3g} GF/s]"
            cells.append(cell)
        body.append([backend, "causal" if causal else "full", *cells])
    return markdown_table(["backend", "mask", *(f"N={n}" for n in lengths)], body)


def crossover(times: Mapping[int, float], baseline: Mapping[int, float]) -> int | None:
    """Smallest N from which ``times`` < ``baseline`` at every larger N measured by both.

    Args:
        times: N -> a backend's time (lower is faster).
        baseline: N -> the baseline's time at the same points.

    Returns:
        That N, or None when the backend is not faster at the largest N measured by both.
    """
    found = None
    for n in sorted(set(times) & set(baseline), reverse=True):
        if times[n] >= baseline[n]:
            break
        found = n
    return found


def _series(rows: Sequence[Any], value: str) -> dict[tuple[str, int, str], dict[int, float]]:
    """(model, width, backend) -> {N: value} over the measured points."""
    out: dict[tuple[str, int, str], dict[int, float]] = {}
    for r in rows:
        series = out.setdefault((r.model, r.width, r.backend), {})
        if getattr(r, value) is not None:
            series[r.n] = getattr(r, value)
    return out


def model_step_table(rows: Sequence[Any], *, baseline: str = "softmax") -> str:
    """Training-step rows (``model_step.Row``): one row per (model, width, backend), N columns.

    Cells read ``12.3k (0.8×) [41%]``: tokens/s, the end-to-end speed-up over ``baseline`` at the
    same point, and the share of the step spent inside the attention backends. Skipped points
    show their estimate or note.
    """
    lengths = sorted({r.n for r in rows})
    index = {(r.model, r.width, r.backend, r.n): r for r in rows}
    body = []
    for model, width, backend in _series(rows, "step_ms"):
        cells = []
        for n in lengths:
            r = index.get((model, width, backend, n))
            if r is None or r.step_ms is None:
                cells.append(_skipped_cell(r, "step_ms"))
                continue
            cell = f"{_fmt(r.tokens_per_s / 1e3)}k"
            base = index.get((model, width, baseline, n))
            if backend != baseline and base is not None and base.step_ms:
                cell += f" ({base.step_ms / r.step_ms:.2g}×)"
            cells.append(cell + f" [{100 * r.attn_share:.0f}%]")
        body.append([model, width, backend, *cells])
    return markdown_table(["model", "width", "backend", *(f"N={n}" for n in lengths)], body)


def crossover_table(rows: Sequence[Any], *, baseline: str = "softmax") -> str:
    """Per (model, width, backend): the end-to-end and attention-only crossover N vs ``baseline``.

    End-to-end compares whole training steps; attention-only compares the time inside the
    backends in the same steps. The speed-ups are at the largest N both measured.
    """
    steps, attention = _series(rows, "step_ms"), _series(rows, "attn_ms")
    body = []
    for key in steps:
        model, width, backend = key
        base_key = (model, width, baseline)
        if backend == baseline or base_key not in steps:
            continue
        cells: list[Any] = [model, width, backend]
        for series in (steps, attention):
            base, mine = series[base_key], series[key]
            common = sorted(set(base) & set(mine))
            n = crossover(mine, base)
            cells.append("none" if n is None else f"N={n}")
            cells.append(
                f"{base[common[-1]] / mine[common[-1]]:.2g}× at N={common[-1]}" if common else ""
            )
        body.append(cells)
    header = ["model", "width", "backend", "end-to-end crossover", "end-to-end speed-up"]
    return markdown_table([*header, "attention-only crossover", "attention speed-up"], body)
