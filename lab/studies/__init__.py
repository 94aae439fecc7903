"""Studies: repeated real ``train.py`` runs over variants and seeds, and their tables.

``runner`` is the one runner (a (variant, seed) -> a ``python -m attn_lightning.cli`` run -> its
``RunResult``, read from the run's record), ``sweep`` the generic sweep CLI on top of it (plans:
``configs/studies/``, whose ``pages:`` select reports over records, e.g. ``reversal``'s) and
``arguments`` the command-line flags every study shares. A study with stages of its own is a
folder runnable as ``python -m lab.studies.<study> <subcommand>``: ``detection``
(``run | sensitivity | ablation | sites | probe | report``), ``image`` (``samples | tables``)
and ``warm_start`` (``run | tables``); ``lora`` is plans (``configs/studies/lora*.yaml``) and
its report kind. Their tables and CSVs are written by ``attn_lightning.records`` from run records.
"""
