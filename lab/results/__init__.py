"""The lab's reading of run records: ``records`` (``RunResult``, a study's record folders),
``tables`` (mean ± std / median [IQR] summaries, the study tables, a logged scalar's curves),
``paired`` (per-seed Δ with an interval) and ``references`` (the published
numbers a page quotes beside ours). Files are written through ``attn_lightning.records``.
"""
