"""The results room: the one place that writes and reads CSVs, markdown tables, curves, paired
statistics and the environment line, and the one run record every study shares.

Below studies and benchmarks (they import it; it imports neither): ``records`` (``RunResult``),
``tables`` (mean ± std / median [IQR] summaries and the study tables), ``curves`` (a logged
scalar of runs, from their records), ``paired`` (per-seed Δ with an interval), ``files`` (CSV
with a provenance header, markdown tables), ``environment`` (machine, versions, command) and
``run_files`` (the files each run writes: ``record.json``, ``curves.csv``, ``spikes.csv``;
``docs/run_record.md``).
"""

from attn_lightning.results.environment import environment, machine_line
from attn_lightning.results.files import (
    markdown_meta,
    markdown_records,
    markdown_table,
    read_csv,
    write_csv,
)

__all__ = [
    "environment",
    "machine_line",
    "markdown_meta",
    "markdown_records",
    "markdown_table",
    "read_csv",
    "write_csv",
]
