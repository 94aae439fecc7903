"""The evidence for ``auto``: per measured shape, the fastest ``linear`` kernel and auto's pick.

The rule ``auto`` must keep: at a measured shape it never picks a kernel more than ``TOLERANCE``
(10 %) slower than another kernel measured there. Per shape where at least one of ``KERNELS`` was
timed, this names the fastest, what ``auto`` picks today (the ``linear:auto`` row's kernel, which
``attention/ops/fla.py``'s ``resolve``/``choose`` chose for that call on that device; without that
row, ``choose`` asked for a CUDA call of the row's dtype), the pick's time over the fastest, and
what ``auto`` should take there: its pick when within the rule, else the fastest. So a report
measured on a GPU says what ``auto`` should become.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from attn_lightning.attention.ops import dispatch, fla
from attn_lightning.records import markdown_table
from lab.benchmarks.arguments import DTYPES
from lab.benchmarks.gpu_report.calls import Shape
from lab.benchmarks.gpu_report.kernels import KernelRow

KERNELS = ("linear:torch", "linear:fla", "linear:triton")
AUTO = "linear:auto"
TOLERANCE = 0.10


@dataclass(frozen=True)
class Choice:
    """One shape: each kernel's ms, the fastest, auto's pick and whether the pick keeps the rule."""

    shape: Shape
    dtype: str
    ms: dict[str, float]  # kernel name (torch, fla, triton) -> median ms
    fastest: str
    pick: str
    pick_ms: float | None  # None: auto's pick was not timed at this shape
    ratio: float | None  # pick_ms / the fastest's ms
    within: bool | None  # None: cannot be judged (the pick not timed)

    @property
    def should_take(self) -> str:
        """What ``auto`` should take here: its pick if it keeps the rule, else the fastest."""
        return self.pick if self.within else self.fastest


def _kernel(label: str) -> str:
    return label.split(":", 1)[1]


def _pick(rows: Sequence[KernelRow], shape: Shape, dtype: str) -> str:
    """The kernel ``auto`` took at ``shape``: its row's ``auto: <kernel>``, else ``choose``."""
    for r in rows:
        if r.contender == AUTO and r.shape == shape and r.kernel.startswith("auto: "):
            return r.kernel.removeprefix("auto: ")
    installed = fla.missing_reason() is None
    return dispatch.choose("auto", "cuda", DTYPES[dtype], installed=installed)


def choices(rows: Sequence[KernelRow]) -> list[Choice]:
    """A ``Choice`` per (shape, dtype) where a kernel of ``KERNELS`` was timed, in row order."""
    timed = [r for r in rows if r.contender in KERNELS and r.ms is not None]
    found = []
    for shape, dtype in dict.fromkeys((r.shape, r.dtype) for r in timed):
        ms: dict[str, float] = {
            _kernel(r.contender): r.ms
            for r in timed
            if (r.shape, r.dtype) == (shape, dtype) and r.ms is not None
        }
        fastest = min(ms, key=ms.__getitem__)
        pick = _pick(rows, shape, dtype)
        pick_ms = ms.get(pick)
        ratio = None if pick_ms is None else pick_ms / ms[fastest]
        within = None if ratio is None else ratio <= 1 + TOLERANCE
        found.append(Choice(shape, dtype, ms, fastest, pick, pick_ms, ratio, within))
    return found


def section(rows: Sequence[KernelRow]) -> list[str]:
    """The page's "auto's choice" section, or nothing when no linear kernel was timed."""
    found = choices(rows)
    if not found:
        return []
    names = [_kernel(k) for k in KERNELS]
    body = []
    for c in found:
        verdict = {None: "pick not timed", True: "yes", False: "no"}[c.within]
        body.append(
            [
                str(c.shape),
                c.dtype,
                *(f"{c.ms[n]:.3g}" if n in c.ms else "" for n in names),
                c.fastest,
                c.pick,
                "" if c.ratio is None else f"{c.ratio:.2f}×",
                verdict,
                c.should_take,
            ]
        )
    header = ["shape BxHxNxD", "dtype", *(f"{n} ms" for n in names), "fastest", "auto picks"]
    header += ["pick / fastest", f"within {TOLERANCE:.0%}", "auto should take"]
    return [
        "## auto's choice: the fastest linear kernel per measured shape\n\n"
        f"The rule: `auto` never picks a kernel more than {TOLERANCE:.0%} slower than another "
        "measured at the same shape. 'auto picks' is the kernel the `linear:auto` row ran "
        "(`attention/ops/fla.py` `choose`).\n\n" + markdown_table(header, body)
    ]
