"""The lab: what measures and reports on the product, outside the installed package.

``benchmarks/`` (``python -m lab.benchmark <command>``), ``studies/`` (plans under
``configs/studies/`` run into ``docs/results/``) and ``results/`` (the tables, paired statistics,
curves and references those pages are built from). Run from the repository root. The lab
imports ``attn_lightning``; nothing in ``attn_lightning`` imports the lab.
"""
