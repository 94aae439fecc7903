"""The student's qualitative claim, tested per shift and rank: LoRA on the base vs from scratch.

The student's table says LoRA on the trained base beats LoRA from scratch on the quantized and
(at low rank) rotated shifts, and loses to it on the inverted shift. ``pattern_section`` sets,
for every (shift, rank) the student ran with the head adapted by LoRA, their two numbers and
their difference beside ours: the median test accuracy of each at the learning rate chosen on
validation (``lrsweep_report.choose_lr``, never a test value), and our difference paired by seed
(the same seed: the same LoRA initialisation and batch order on the same data) with its sign
count. With three seeds there is no interval: the sign count is the evidence.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from attn_lightning.records.files import markdown_table
from lab.results.paired import sign_count
from lab.results.records import RunResult
from lab.results.tables import format_number
from lab.studies.lora.lrsweep_report import current_sweep, student_numbers
from lab.studies.lora.records import DOMAINS, position

HEAD = "lora"  # the student's rows: every layer, the head included, adapted by LoRA
METHODS = ("lora", "lora_scratch")


def _by_seed(runs: Sequence[RunResult]) -> dict[int, float]:
    return {r.seed: 100 * r.metrics["acc"] for r in runs if "acc" in r.metrics}


def pattern_section(runs: Sequence[RunResult]) -> list[str]:
    """Markdown lines: one row per (shift, rank) with both methods in the student's table and
    in ours; nothing when no such row ran."""
    student = student_numbers()
    chosen = current_sweep(runs)[2]
    keys = sorted(
        {(d, r) for (d, m, r, h) in chosen if m in METHODS and h == HEAD and d != "original"},
        key=lambda k: (position(k[0], DOMAINS), *k),
    )
    body = []
    seeds_seen: set[int] = set()
    for domain, rank in keys:
        base, scratch = (chosen.get((domain, m, rank, HEAD)) for m in METHODS)
        if base is None or scratch is None:
            continue
        ours = [_by_seed(base.runs), _by_seed(scratch.runs)]
        seeds = sorted(set(ours[0]) & set(ours[1]))
        seeds_seen.update(seeds)
        deltas = [ours[0][s] - ours[1][s] for s in seeds]
        medians = [
            format_number(statistics.median(o.values()), digits=1) if o else "–" for o in ours
        ]
        their_base, their_scratch = (student.get((domain, m, rank, HEAD)) for m in METHODS)
        delta = None if their_base is None or their_scratch is None else their_base - their_scratch
        body.append(
            [
                domain,
                str(rank),
                format_number(their_base),
                medians[0],
                format_number(their_scratch),
                medians[1],
                " / ".join(f"{d:+.1f}" for d in deltas) or "–",
                sign_count(deltas),
                "–" if delta is None else f"{delta:+.1f}",
            ]
        )
    if not body:
        return []
    seed_list = " / ".join(map(str, sorted(seeds_seen)))
    header = [
        "shift",
        "r",
        "LoRA on the base: student",
        "ours",
        "LoRA from scratch: student",
        "ours",
        f"base − scratch, ours per seed ({seed_list})",
        "sign count",
        "student",
    ]
    return [
        "Per shift and rank, LoRA on the trained base against LoRA from scratch (the head "
        "adapted by LoRA, as in the student's table): their test accuracies (%) and ours (median "
        "over seeds at each row's learning rate chosen on validation), then base − scratch: ours "
        "on every seed (paired: the same seed on both), how many seeds favour the base / "
        "scratch, and the student's single difference.",
        "",
        *markdown_table(header, body).splitlines(),
        "",
    ]
