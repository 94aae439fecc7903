"""The ``lrsweep`` part's report (issue 15): our learning-rate sweep beside the student's table.

Per row (``SWEEP_GROUP``: domain, method, rank, head and the base adapted), ``choose_lr`` picks
the learning rate with the best mean validation accuracy over seeds, never reading a test value;
``sweep_section`` puts that learning rate's test accuracy beside the student's number
(``STUDENT``) and ``sweep_summary`` gives every learning rate's means (the rows of
``<out>_lrsweep_summary.csv``). ``studies.lora_report`` writes both into the study's report.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from attn_lightning.results.tables import format_mean_std, mean_std
from attn_lightning.studies.lora_runs import LABELS, SWEEP_GROUP

# The student's reproduction (MLP 784-64-64-10, 55,050 parameters, trained and adapted on MNIST),
# test accuracy in %, keyed (domain, method, rank, head) as the lrsweep rows are. Base and full
# fine-tuning: /work/shared/REFERENCES.md §6 (also docs/methods.md, "LoRA"). LoRA on the trained
# base, every layer adapted (head "lora": 1,050·r parameters): issue 15's text. The student also
# reported LoRA r = 1…64 and LoRA from scratch r = 1…64 (REFERENCES.md §6), but those numbers are
# not in our sources: their rows are left without a student number rather than guessed.
STUDENT: dict[tuple[str, str, int, str], float] = {
    ("original", "base", 0, ""): 93.2,
    ("quantized", "full", 0, ""): 93.57,
    ("rotated", "full", 0, ""): 91.97,
    ("inverted", "full", 0, ""): 76.41,
    ("inverted", "lora", 16, "lora"): 62.3,
    ("inverted", "lora", 64, "lora"): 71.9,
}
HEAD_LABELS = {
    "lora": "LoRA (fc1-fc3)",
    "frozen": "frozen (LoRA on fc1, fc2)",
    "trained": "trained whole (modules_to_save)",
}
SWEEP_METHODS = ("base", "before", "full", "lora", "lora_scratch")  # table order


@dataclass(frozen=True)
class LRChoice:
    """A row's learning rate, chosen on validation.

    Attributes:
        lr: the chosen learning rate, as written in the CSV.
        val_by_lr: mean validation accuracy of each learning rate tried (None: none logged).
        runs: the chosen learning rate's ok runs: their test accuracy is the row's result.
    """

    lr: str
    val_by_lr: dict[str, float | None]
    runs: list[dict[str, str]]


def _mean(runs: list[dict[str, str]], key: str) -> float | None:
    values = [float(r[key]) for r in runs if r.get(key) not in (None, "")]
    return statistics.fmean(values) if values else None


def choose_lr(rows: list[dict[str, str]]) -> dict[tuple[str, ...], LRChoice]:
    """Per ``SWEEP_GROUP``, the learning rate with the highest mean ``val_acc`` over its ok runs.

    Test accuracy is never read here. Ties go to the smaller learning rate. A group without any
    validation value (the test-only ``before`` runs) keeps its one learning rate, or gets no
    choice when it has several; so does a group whose runs all crashed.
    """
    groups: dict[tuple[str, ...], dict[str, list[dict[str, str]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in rows:
        if row["status"] == "ok":
            groups[tuple(row[k] for k in SWEEP_GROUP)][row["lr"]].append(row)
    choices = {}
    for group, by_lr in groups.items():
        val = {lr: _mean(runs, "val_acc") for lr, runs in by_lr.items()}
        scored = sorted((lr for lr, v in val.items() if v is not None), key=lambda x: float(x))
        if scored:
            lr = max(scored, key=lambda x: val[x] or 0.0)  # first maximum: the smaller lr
        elif len(by_lr) == 1:
            lr = next(iter(by_lr))
        else:
            continue
        choices[group] = LRChoice(lr, val, by_lr[lr])
    return choices


def current_sweep(rows: list[dict[str, str]]) -> tuple[str | None, list[dict[str, str]]]:
    """The base learning rate chosen on validation, and the rows that use no other base."""
    base = next(iter(choose_lr([r for r in rows if r["method"] == "base"]).values()), None)
    if base is None:
        return None, rows
    return base.lr, [r for r in rows if r["base_lr"] in ("", base.lr)]


def _sweep_order(key: tuple[str, str, int, str], domains: list[str]) -> tuple[int, ...]:
    domain, method, rank, head = key
    heads = ["", *HEAD_LABELS]
    return (
        domains.index(domain) if domain in domains else len(domains),
        SWEEP_METHODS.index(method) if method in SWEEP_METHODS else len(SWEEP_METHODS),
        heads.index(head) if head in heads else len(heads),
        rank,
    )


def missing_runs(rows: list[dict[str, str]]) -> dict[tuple[str, str, int, str], int]:
    """Per row of the table, the runs it still lacks: every learning rate tried for its method
    anywhere in ``rows``, at every seed of the sweep. A row with some missing picked its
    learning rate from a partial grid (a sweep stopped part-way)."""
    lrs: dict[str, set[str]] = defaultdict(set)
    seeds = {r["seed"] for r in rows}
    done: dict[tuple[str, str, int, str], set[tuple[str, str]]] = defaultdict(set)
    for r in rows:
        if r["status"] == "ok":
            lrs[r["method"]].add(r["lr"])
            done[(r["domain"], r["method"], int(r["rank"]), r["head"])].add((r["lr"], r["seed"]))
    return {key: len(lrs[key[1]]) * len(seeds) - len(runs) for key, runs in done.items()}


def _sweep_line(key: tuple[str, str, int, str], choice: LRChoice | None, missing: int = 0) -> str:
    domain, method, rank, head = key
    student = f"{STUDENT[key]:.2f}".rstrip("0").rstrip(".") if key in STUDENT else ""
    head_label = HEAD_LABELS.get(head) or ("every weight" if method in ("base", "full") else "–")
    cells = [domain, LABELS.get(method, method), str(rank or "–"), head_label]
    if choice is None:
        return "| " + " | ".join([*cells, "–", student, "–", "–", "–", "–", "–"]) + " |"
    tests = [float(r["acc"]) for r in choice.runs if r.get("acc") not in (None, "")]
    ours = format_mean_std(*mean_std(tests), scale=100, digits=1) + f" ({len(tests)})"
    val = choice.val_by_lr[choice.lr]
    tried = [
        (f"**{lr}: {v * 100:.1f}**" if lr == choice.lr else f"{lr}: {v * 100:.1f}")
        for lr, v in sorted(choice.val_by_lr.items(), key=lambda item: float(item[0] or 0))
        if v is not None
    ]
    epochs = _mean(choice.runs, "epochs")
    params = choice.runs[0]["trainable_params"]
    cells += [
        f"{int(params):,}" if params not in ("", "0") else "–",
        student,
        ours,
        "–" if val is None else f"{val * 100:.1f}",
        (choice.lr or "–") + (f" (partial grid: {missing} runs missing)" if missing else ""),
        " · ".join(tried) or "–",
        "–" if epochs is None else f"{epochs:.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def sweep_section(rows: list[dict[str, str]]) -> list[str]:
    """The student-vs-ours table of the ``lrsweep`` part, row by row."""
    if not rows:
        return ["(not run yet: `--part lrsweep`)", ""]
    base_lr, rows = current_sweep(rows)
    choices = {(g[0], g[1], int(g[2]), g[3]): choice for g, choice in choose_lr(rows).items()}
    domains = list(
        dict.fromkeys(["original", *(r["domain"] for r in rows), *(k[0] for k in STUDENT)])
    )
    keys = sorted({*choices, *STUDENT}, key=lambda k: _sweep_order(k, domains))

    def values(key: str) -> str:
        return ", ".join(sorted({r[key] for r in rows}))

    lines = [
        f"Data: {values('source')} at 28×28 (quantized: {values('levels')} grey levels; rotated: "
        f"{values('angle')}°). Up to {values('max_epochs')} epochs, early stopping after "
        f"{values('patience')} epochs without a lower `val/loss` (0: none); every run is "
        "scored at its best-`val/loss` checkpoint. Per row, the learning rate with the highest "
        "mean validation accuracy over seeds is chosen (bold in the last-but-one column); only "
        "its test accuracy is reported (mean ± std, n seeds). The base learning rate chosen "
        f"this way is {base_lr or '–'}: every row but LoRA from scratch adapts that base.",
        "",
        "Student: MNIST, from `REFERENCES.md` §6 and issue 15; empty where their number is not "
        "known to us."
        + ("" if values("source") == "mnist" else " Ours are **not** on MNIST (see Data)."),
        "",
        "| domain | method | r | head | trainable params | student (%) | ours: test (%) (n) "
        "| val (%) | lr | val (%) per lr | epochs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    missing = missing_runs(rows)
    lines += [_sweep_line(key, choices.get(key), missing.get(key, 0)) for key in keys]
    if any(missing.values()):
        lines += [
            "",
            "Rows marked *partial grid* chose their learning rate among the runs that finished; "
            "they are not comparable with the complete rows.",
        ]
    return [*lines, ""]


def sweep_summary(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """One row per (``SWEEP_GROUP``, lr): runs, val/test mean ± std, epochs, chosen or not."""
    chosen = {group: choice.lr for group, choice in choose_lr(rows).items()}
    groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        groups[(*(row[k] for k in SWEEP_GROUP), row["lr"])].append(row)
    summary = []
    for key, runs in groups.items():
        ok = [r for r in runs if r["status"] == "ok"]
        entry: dict[str, Any] = dict(zip((*SWEEP_GROUP, "lr"), key, strict=True))
        entry.update(runs=len(runs), crashed=len(runs) - len(ok))
        for metric in ("val_acc", "acc", "epochs"):
            values = [float(r[metric]) for r in ok if r.get(metric) not in (None, "")]
            entry[f"{metric}_mean"], entry[f"{metric}_std"] = mean_std(values)
        entry["chosen"] = chosen.get(key[:-1]) == key[-1]
        summary.append(entry)
    return summary
