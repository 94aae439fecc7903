"""Studies: repeated real ``train.py`` runs over variants and seeds, and their tables.

``runner`` is the one runner (a (variant, seed) -> a ``python -m attn_lightning.cli`` run -> its
``RunResult``, read from the run's record), ``sweep`` the generic sweep CLI on top of it (plans:
``configs/studies/``) and ``arguments`` the command-line flags every study shares. Each study is a
folder runnable as ``python -m attn_lightning.studies.<study> <subcommand>``: ``detection``
(``run | sensitivity | ablation | sites | probe | report``), ``image`` (``samples | tables``),
``lora`` (``mlp | variants | transformer | lrsweep | report``), ``reversal`` (``report |
trajectories``) and ``warm_start`` (``run | tables``). Their tables and CSVs are written by
``attn_lightning.results`` from run records.
"""
