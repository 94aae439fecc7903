"""Tables of the LoRA study (``studies.lora``) from its per-run CSVs: mean ± std over seeds.

Reads ``<out>_<part>_runs.csv`` of the parts ``mlp``, ``variants`` and ``transformer``
(whichever exist; mean ± std by ``studies.tables``), writes ``<out>_summary.csv`` and
``<out>.md``. Text between ``<!-- notes:begin -->`` and ``<!-- notes:end -->`` in an existing
``<out>.md`` (the hand-written discussion) is kept. The ``lrsweep`` part (issue 15) gets its own
table beside the student's numbers (``STUDENT``): per row, the learning rate with the best mean
validation accuracy over seeds (``choose_lr``, which never reads a test value) and that learning
rate's test accuracy; every learning rate's means go to ``<out>_lrsweep_summary.csv``.
"""

from __future__ import annotations

import csv
import platform
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_lightning.studies.tables import format_mean_std, mean_std

FIELDS = [
    "part",
    "domain",
    "method",
    "rank",
    "seed",
    "status",
    "trainable_params",
    "acc",
    "exact_acc",
    "seconds",
]
SWEEP_FIELDS = [
    "part",
    "source",
    "levels",
    "angle",
    "max_epochs",
    "patience",
    "domain",
    "method",
    "rank",
    "head",
    "lr",
    "base_lr",
    "seed",
    "status",
    "trainable_params",
    "val_acc",
    "val_loss",
    "acc",
    "epochs",
    "best_epoch",
    "seconds",
]
# A row of the student-vs-ours table; the learning rate is chosen within it. base_lr: the base
# the run adapted ("" for runs that load none), so a changed base choice never mixes bases.
SWEEP_GROUP = ("domain", "method", "rank", "head", "base_lr")
SWEEP_KEY = (*SWEEP_GROUP, "lr", "seed")  # one run, for resuming
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
PARTS = ("mlp", "variants", "transformer")
NOTES = ("<!-- notes:begin -->", "<!-- notes:end -->")
COMMANDS = """```bash
nice -n 19 python -m attn_lightning.studies.lora --part mlp          # ~130 runs
nice -n 19 python -m attn_lightning.studies.lora --part variants     # ~18 runs, after mlp
nice -n 19 python -m attn_lightning.studies.lora --part transformer  # ~25 runs
nice -n 19 python -m attn_lightning.studies.lora --part lrsweep      # 801 runs (--plan: count)
python -m attn_lightning.studies.lora --part report                  # tables from the CSVs
```

`mlp` and `transformer` can run at the same time (separate CSVs); `variants` reuses the base
checkpoints of `mlp`. A part re-run skips the runs already in its CSV (`--fresh` starts over).
Options: `--seeds`, `--ranks`, `--domains`, `--levels`, `--angle`, `--epochs`, `--lr`,
`--transformer-ranks`, `--reversal-adapt-steps`, ... (`--help`)."""
LABELS = {
    "base": "base, trained on the original task",
    "before": "base before adaptation",
    "full": "full fine-tune",
    "lora": "LoRA",
    "lora_scratch": "LoRA from scratch",
    "lora_head_frozen": "LoRA on fc1, fc2; head frozen",
    "lora_head_saved": "LoRA on fc1, fc2; head trained whole (modules_to_save)",
    "lora_bias_all": "LoRA on fc1-fc3 + every bias trained (bias='all')",
}


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a run CSV (none when it does not exist)."""
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def summarize(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """One row per (part, domain, method, rank): counts and mean/std of the metrics."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        groups[(row["part"], row["domain"], row["method"], row["rank"])].append(row)
    summary = []
    for (part, domain, method, rank), runs in groups.items():
        ok = [r for r in runs if r["status"] == "ok"]
        entry: dict[str, Any] = {
            "part": part,
            "domain": domain,
            "method": method,
            "rank": int(rank),
            "runs": len(runs),
            "crashed": len(runs) - len(ok),
            "seeds": " ".join(r["seed"] for r in ok),
            "trainable_params": ok[0]["trainable_params"] if ok else "",
        }
        for key in ("acc", "exact_acc", "seconds"):
            values = [float(r[key]) for r in ok if r.get(key) not in (None, "")]
            entry[f"{key}_mean"], entry[f"{key}_std"] = mean_std(values)
        summary.append(entry)
    return summary


def _pct(entry: dict[str, Any] | None, key: str = "acc") -> str:
    if entry is None:
        return "–"
    return format_mean_std(entry[f"{key}_mean"], entry[f"{key}_std"], scale=100, digits=1)


def _params(entry: dict[str, Any] | None) -> str:
    if entry is None or entry["trainable_params"] in ("", "0"):  # "0": not logged by that run
        return "–"
    return f"{int(entry['trainable_params']):,}"


def _mlp_tables(summary: list[dict[str, Any]]) -> list[str]:
    index = {(e["domain"], e["method"], e["rank"]): e for e in summary if e["part"] == "mlp"}
    base = index.get(("original", "base", 0))
    lines = [
        f"Base MLP (784-64-64-10, {_params(base)} parameters) on the original domain: "
        f"test accuracy {_pct(base)} % (seeds {base['seeds'] if base else '–'}).",
        "",
    ]
    domains = list(dict.fromkeys(e["domain"] for e in summary if e["part"] == "mlp"))
    for domain in (d for d in domains if d != "original"):
        before, full = index.get((domain, "before", 0)), index.get((domain, "full", 0))
        ranks = sorted({e["rank"] for e in summary if e["domain"] == domain and e["rank"] > 0})
        lines += [
            f"### {domain}",
            "",
            f"Before adaptation: {_pct(before)} %. Full fine-tune ({_params(full)} trainable): "
            f"{_pct(full)} %. Seeds: {full['seeds'] if full else '–'}.",
            "",
            "| r | trainable params | LoRA acc (%) | LoRA from scratch acc (%) | s / run |",
            "|---|---|---|---|---|",
        ]
        for r in ranks:
            lora, scratch = index.get((domain, "lora", r)), index.get((domain, "lora_scratch", r))
            seconds = lora["seconds_mean"] if lora and lora["seconds_mean"] else 0.0
            lines.append(
                f"| {r} | {_params(lora or scratch)} | {_pct(lora)} | {_pct(scratch)} "
                f"| {seconds:.0f} |"
            )
        lines.append("")
    return lines


def _variants_table(summary: list[dict[str, Any]]) -> list[str]:
    entries = [e for e in summary if e["part"] == "variants"]
    if not entries:
        return ["(not run yet)", ""]
    lines = [
        "| domain | variant | r | trainable params | test acc (%) | seeds |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        lines.append(
            f"| {e['domain']} | {LABELS.get(e['method'], e['method'])} | {e['rank']} "
            f"| {_params(e)} | {_pct(e)} | {e['seeds']} |"
        )
    return [*lines, ""]


def _transformer_table(summary: list[dict[str, Any]]) -> list[str]:
    entries = [e for e in summary if e["part"] == "transformer"]
    if not entries:
        return ["(not run yet)", ""]
    lines = [
        "| task | method | r | trainable params | token acc (%) | exact-seq acc (%) | runs "
        "| s / run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        crashed = f" ({e['crashed']} crashed)" if e["crashed"] else ""
        lines.append(
            f"| {e['domain']} | {LABELS.get(e['method'], e['method'])} | {e['rank'] or '–'} "
            f"| {_params(e)} | {_pct(e)} | {_pct(e, 'exact_acc')} | {e['runs'] - e['crashed']}"
            f"{crashed} | {e['seconds_mean'] or 0:.0f} |"
        )
    return [*lines, ""]


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


def _sweep_line(key: tuple[str, str, int, str], choice: LRChoice | None) -> str:
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
        choice.lr or "–",
        " · ".join(tried) or "–",
        "–" if epochs is None else f"{epochs:.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def _sweep_section(rows: list[dict[str, str]]) -> list[str]:
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
    return [*lines, *(_sweep_line(key, choices.get(key)) for key in keys), ""]


def _sweep_summary(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
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


def write_report(out: Path) -> None:
    """Write ``<out>_summary.csv`` and ``<out>.md`` from the parts' run CSVs (none: nothing)."""
    rows = [row for part in PARTS for row in read_rows(Path(f"{out}_{part}_runs.csv"))]
    sweep = read_rows(Path(f"{out}_lrsweep_runs.csv"))
    if not rows and not sweep:
        return
    summary = summarize(rows)
    for path, table in (
        (f"{out}_summary.csv", summary),
        (f"{out}_lrsweep_summary.csv", _sweep_summary(sweep)),
    ):
        if table:
            with Path(path).open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(table[0]))
                writer.writeheader()
                writer.writerows(table)
    md = out.with_suffix(".md")
    notes = f"{NOTES[0]}\n(discussion goes here)\n{NOTES[1]}"
    if md.exists() and NOTES[0] in (text := md.read_text()) and NOTES[1] in text:
        notes = text[text.index(NOTES[0]) : text.index(NOTES[1]) + len(NOTES[1])]
    walls: dict[str, float] = defaultdict(float)
    for row in (*rows, *sweep):
        walls[row["part"]] += float(row["seconds"] or 0)
    crashed = sum(r["status"] != "ok" for r in (*rows, *sweep))
    lines = [
        "# LoRA adaptation study (peft)",
        "",
        "Generated by `attn_lightning.studies.lora` (tables) — the discussion between the",
        "notes markers is hand-written and kept on regeneration.",
        "",
        notes,
        "",
        "## Regenerate",
        "",
        COMMANDS,
        "",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, CPU only, "
        f"each part runs its runs one after another under `nice -n 19`. Sum of run wall times: "
        + ", ".join(f"{part} {seconds / 60:.1f} min" for part, seconds in walls.items())
        + f". Runs: {len(rows) + len(sweep)}, crashed: {crashed}. Per-run rows: "
        "`lora_mlp_runs.csv`, `lora_variants_runs.csv`, `lora_transformer_runs.csv`, "
        "`lora_lrsweep_runs.csv`; means: `lora_summary.csv`, `lora_lrsweep_summary.csv`.",
        "",
        "## Against the student's table (issue 15: learning rates chosen on validation)",
        "",
        *_sweep_section(sweep),
        "## MLP on shifted digits (test accuracy, mean ± std over seeds)",
        "",
        *_mlp_tables(summary),
        "### LoRA variants: the head and the biases",
        "",
        *_variants_table(summary),
        "## LoRA on the attention projections of a reversal transformer",
        "",
        *_transformer_table(summary),
    ]
    md.write_text("\n".join(lines) + "\n")
