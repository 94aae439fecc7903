"""Tables of the LoRA study (``studies.lora``) from its per-run CSVs: mean ± std over seeds.

Reads ``<out>_<part>_runs.csv`` of the parts ``mlp``, ``variants`` and ``transformer``
(whichever exist; mean ± std by ``results.tables``), writes ``<out>_summary.csv`` and
``<out>.md``. Text between ``<!-- notes:begin -->`` and ``<!-- notes:end -->`` in an existing
``<out>.md`` (the hand-written discussion) is kept. The ``lrsweep`` part (issue 15) gets its own
table beside the student's numbers and ``<out>_lrsweep_summary.csv``, both made by
``studies.lora_lrsweep_report`` (learning rates chosen on validation, never on test).
"""

from __future__ import annotations

import csv
import platform
from collections import defaultdict
from pathlib import Path
from typing import Any

from attn_lightning.results.tables import format_mean_std, mean_std
from attn_lightning.studies.lora_lrsweep_report import sweep_section, sweep_summary
from attn_lightning.studies.lora_runs import LABELS, read_rows

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


def write_report(out: Path) -> None:
    """Write ``<out>_summary.csv`` and ``<out>.md`` from the parts' run CSVs (none: nothing)."""
    rows = [row for part in PARTS for row in read_rows(Path(f"{out}_{part}_runs.csv"))]
    sweep = read_rows(Path(f"{out}_lrsweep_runs.csv"))
    if not rows and not sweep:
        return
    summary = summarize(rows)
    for path, table in (
        (f"{out}_summary.csv", summary),
        (f"{out}_lrsweep_summary.csv", sweep_summary(sweep)),
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
        *sweep_section(sweep),
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
