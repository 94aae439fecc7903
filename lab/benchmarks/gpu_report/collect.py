"""Read the stages' files back: typed rows of every CSV, the CUDA tests' JUnit summaries.

Each stage job writes its own ``<tag>.csv`` (``results.write_csv``); the page merges them, e.g.
the anchor's and the kernels' rows of one shape into one table. Rows come back as the dataclasses
that wrote them (``kernels.KernelRow``, ``profile.KernelShare``, ``scaling.Row``,
``model_step.Row``, ``decode.DecodeRow``), each field converted by its declared type.
"""

from __future__ import annotations

import dataclasses
import logging
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from attn_lightning.records import read_csv
from lab.benchmarks import decode, model_step, scaling
from lab.benchmarks.gpu_report.kernels import KernelRow
from lab.benchmarks.gpu_report.profile import KernelShare

log = logging.getLogger(__name__)

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


def _records(folder: Path, pattern: str) -> Iterator[dict[str, str]]:
    for path in sorted(folder.glob(pattern)):
        try:
            yield from read_csv(path)[1]
        except (OSError, ValueError) as err:  # a half-written file of a killed stage
            log.warning("gpu-report: %s unreadable (%s), left out", path, err)


def kernel_rows(out: Path) -> list[KernelRow]:
    """Every row of the ``kernels`` jobs (anchor, kernels, normaliser, N = 64k)."""
    return [typed(KernelRow, r) for r in _records(out / "kernels", "*.csv")]


def profile_rows(out: Path) -> list[KernelShare]:
    return [typed(KernelShare, r) for r in _records(out / "profile", "*.csv")]


def latency_rows(out: Path) -> list[scaling.Row]:
    """Every row of the ``latency`` jobs."""
    return [typed(scaling.Row, r) for r in _records(out / "latency", "*.csv")]


def model_rows(out: Path, pattern: str) -> list[model_step.Row]:
    """Training-step rows of the ``model`` jobs whose file names match ``pattern``."""
    return [typed(model_step.Row, r) for r in _records(out / "model", pattern)]


def decode_rows(out: Path) -> list[decode.DecodeRow]:
    return [typed(decode.DecodeRow, r) for r in _records(out / "decode", "*.csv")]


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
    return JunitSummary(path.stem, skipped=skipped, failed=failed, **counts)
