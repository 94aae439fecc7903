"""The run-record format: the files each run writes (``run_files``: ``record.json``,
``curves.csv``, ``spikes.csv``; ``docs/run_record.md``), CSV with a provenance header and markdown
tables (``files``), and the machine, versions and command a run names (``environment``).

The lowest layer: the callbacks and tasks write through it, and the lab (``lab/results``: tables,
paired statistics, curves) reads what it wrote.
"""

from attn_lightning.records.environment import environment, machine_line
from attn_lightning.records.files import (
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
