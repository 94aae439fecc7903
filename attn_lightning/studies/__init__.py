"""Studies: repeated real ``train.py`` runs over variants and seeds, and their tables.

``runner`` is the one runner (a (variant, seed) -> a ``python -m attn_lightning.cli`` run -> its
``RunResult``), ``sweep`` the generic sweep CLI on top of it and ``arguments`` the command-line
flags every study shares. Each study is a folder runnable as ``python -m
attn_lightning.studies.<study> <subcommand>``: ``detection`` (``run | sensitivity | ablation |
sites | probe``), ``image`` (``samples``), ``lora`` (``mlp | variants | transformer | lrsweep |
report``) and ``reversal`` (``report | trajectories``). Their tables and CSVs are written by
``attn_lightning.results``.
"""
