"""The LoRA study's report kind ``lora``: its page and CSVs from its run records (the parts of
``records.PARTS``, by their ``part`` tag): ``<out>.md``, ``<out>_summary.csv`` (mean ± std by
``results.tables``), ``<out>_lrsweep_summary.csv`` and each part's ``<out>_<part>_runs.csv``
(outputs: nothing reads them back). The hand-written discussion between ``NOTES`` in the page
named by ``notes`` (a committed page: kept when the page is rebuilt elsewhere) is kept. The
``lrsweep`` tables come from ``lrsweep_report``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import machine_line
from attn_lightning.records.files import markdown_table, write_csv
from lab.results import tables
from lab.results.records import OK, RunResult
from lab.results.tables import format_mean_std
from lab.studies.lora.lrsweep_report import pattern_section, sweep_section, sweep_summary
from lab.studies.lora.records import ADAPTATION_COLUMN, LABELS, load_parts, write_runs

TABLE_PARTS = ("mlp", "variants", "transformer")  # the parts of the summary and its tables
NOTES = ("<!-- notes:begin -->", "<!-- notes:end -->")


def summarize(runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    """One row per (part, domain, adaptation, rank), a job name each: its tags, the seeds that
    finished, and ``results.tables.summarize``'s counts and means."""
    summary = []
    for row in tables.summarize(runs, metrics=("acc", "exact_acc"), label="variant"):
        ok = [r for r in runs if r.variant == row["variant"] and r.status == OK]
        info = next(r.info for r in runs if r.variant == row["variant"])
        tags = [info["part"], info["domain"], info["adaptation"], int(info["rank"])]
        entry = dict(zip(("part", "domain", ADAPTATION_COLUMN, "rank"), tags, strict=True))
        entry.update(runs=row["runs"], crashed=row["crashed"])
        entry["seeds"] = " ".join(str(r.seed) for r in ok)
        entry["trainable_params"] = ok[0].metrics.get("trainable_params") if ok else None
        summary.append({**entry, **{k: v for k, v in row.items() if k.endswith(("_mean", "_std"))}})
    return summary


def _pct(entry: dict[str, Any] | None, key: str = "acc") -> str:
    if entry is None:
        return "–"
    return format_mean_std(entry[f"{key}_mean"], entry[f"{key}_std"], scale=100, digits=1)


def _params(entry: dict[str, Any] | None) -> str:
    if entry is None or not entry["trainable_params"]:  # 0: not logged by that run
        return "–"
    return f"{int(entry['trainable_params']):,}"


def _label(entry: dict[str, Any]) -> str:
    return LABELS.get(entry[ADAPTATION_COLUMN], entry[ADAPTATION_COLUMN])


def _mlp_tables(entries: list[dict[str, Any]]) -> list[str]:
    index = {(e["domain"], e[ADAPTATION_COLUMN], e["rank"]): e for e in entries}
    base = index.get(("original", "base", 0))
    lines = [
        f"Base MLP (784-64-64-10, {_params(base)} parameters) on the original domain: "
        f"test accuracy {_pct(base)} % (seeds {base['seeds'] if base else '–'}).",
        "",
    ]
    domains = list(dict.fromkeys(e["domain"] for e in entries))
    for domain in (d for d in domains if d != "original"):
        before, full = index.get((domain, "before", 0)), index.get((domain, "full", 0))
        ranks = sorted({e["rank"] for e in entries if e["domain"] == domain and e["rank"] > 0})
        lines += [
            f"### {domain}",
            "",
            f"Before adaptation: {_pct(before)} %. Full fine-tune ({_params(full)} trainable): "
            f"{_pct(full)} %. Seeds: {full['seeds'] if full else '–'}.",
            "",
        ]
        body = []
        for r in ranks:
            lora, scratch = index.get((domain, "lora", r)), index.get((domain, "lora_scratch", r))
            seconds = lora["seconds_mean"] if lora and lora["seconds_mean"] else 0.0
            body.append([r, _params(lora or scratch), _pct(lora), _pct(scratch), f"{seconds:.0f}"])
        header = ["r", "trainable params", "LoRA acc (%)", "LoRA from scratch acc (%)", "s / run"]
        lines += [markdown_table(header, body), ""]
    return lines


def _variants_table(entries: list[dict[str, Any]]) -> list[str]:
    header = ["domain", "variant", "r", "trainable params", "test acc (%)", "seeds"]
    body = [[e["domain"], _label(e), e["rank"], _params(e), _pct(e), e["seeds"]] for e in entries]
    return [markdown_table(header, body), ""]


def _transformer_table(entries: list[dict[str, Any]]) -> list[str]:
    header = ["task", ADAPTATION_COLUMN, "r", "trainable params", "token acc (%)"]
    header += ["exact-seq acc (%)", "runs", "s / run"]
    body = []
    for e in entries:
        crashed = f" ({e['crashed']} crashed)" if e["crashed"] else ""
        cells = [e["domain"], _label(e), e["rank"] or "–", _params(e), _pct(e)]
        cells += [_pct(e, "exact_acc"), f"{e['runs'] - e['crashed']}{crashed}"]
        body.append([*cells, f"{e['seconds_mean'] or 0:.0f}"])
    return [markdown_table(header, body), ""]


TABLES = {  # a part's section of the page: its title and its tables, from its summary rows
    "mlp": ("## MLP on shifted digits (test accuracy, mean ± std over seeds)", _mlp_tables),
    "variants": ("### LoRA variants: the head and the biases", _variants_table),
    "transformer": (
        "## LoRA on the attention projections of a reversal transformer",
        _transformer_table,
    ),
}


def _notes(page: Path) -> str:
    """The hand-written discussion of ``page`` (a placeholder where it has none)."""
    if page.exists() and NOTES[0] in (text := page.read_text()) and NOTES[1] in text:
        return text[text.index(NOTES[0]) : text.index(NOTES[1]) + len(NOTES[1])]
    return f"{NOTES[0]}\n(discussion goes here)\n{NOTES[1]}"


def report(
    roots: Sequence[Path], out: Path, *, command: str, notes: str | Path | None = None
) -> None:
    """Write the files of the module docstring from the runs under ``roots``.

    Args:
        roots: folders of the study's run records (``records.load_parts``).
        out: output path without extension.
        command: the command line that rebuilds the page (its "Regenerate" section).
        notes: the page whose hand-written discussion is kept (default: ``<out>.md``).

    Raises:
        FileNotFoundError: naming a folder of ``roots`` without run records.
    """
    by_part = load_parts(roots)
    runs = [run for part in TABLE_PARTS for run in by_part.get(part, [])]
    sweep = by_part.get("lrsweep", [])
    ran = list(by_part)
    not_run = ", ".join(part for part in (*TABLE_PARTS, "lrsweep") if part not in ran)
    for part in ran:
        write_runs(out, part, by_part[part])
    summary = summarize(runs)
    written = (("", summary), ("lrsweep_", sweep_summary(sweep)))
    for name, table in written:
        if table:
            write_csv(Path(f"{out}_{name}summary.csv"), table)
    walls = {part: sum(run.seconds or 0.0 for run in by_part[part]) for part in ran}
    crashed = sum(r.status != OK for r in (*runs, *sweep))
    lines = [
        "# LoRA adaptation study (peft)",
        "",
        "Generated from the run records by its plan (below) — the discussion between the",
        "notes markers is hand-written and kept on regeneration.",
        "",
        _notes(Path(notes) if notes else out.with_suffix(".md")),
        "",
        "## Regenerate",
        "",
        "```bash",
        command,
        "```",
        "",
        # Where the runs ran (their records'; this machine's when none says), one after another.
        (tables.records_machine_line([*runs, *sweep]) or machine_line())
        + " Sum of run wall times: "
        + ", ".join(f"{part} {seconds / 60:.1f} min" for part, seconds in walls.items())
        + f". Runs: {len(runs) + len(sweep)}, crashed: {crashed}. Run records: "
        + ", ".join(f"`{root}/`" for root in roots)
        + "; per-run rows: "
        + ", ".join(f"`{out.name}_{part}_runs.csv`" for part in ran)
        + "; summaries: "
        + ", ".join(f"`{out.name}_{name}summary.csv`" for name, rows in written if rows)
        + "."
        + (f" Not run into this prefix (no tables below): {not_run}." if not_run else ""),
        "",
    ]
    if sweep:
        lines += [
            "## Against the student's table (learning rates chosen on validation)",
            "",
            *sweep_section(sweep),
        ]
        if pattern := pattern_section(sweep):
            lines += [
                "### LoRA on the base against LoRA from scratch, paired by seed",
                "",
                *pattern,
            ]
    for part, (title, tables_of) in TABLES.items():
        if entries := [e for e in summary if e["part"] == part]:
            lines += [title, "", *tables_of(entries)]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
