"""Studies: repeated real ``train.py`` runs over variants and seeds, and their tables.

``runner`` is the one runner (a (variant, seed) -> a ``python -m attn_lightning.cli`` run -> its
``RunResult``, read from the run's record), ``sweep`` the generic sweep CLI on top of it (plans:
``configs/studies/``; a plan's ``grid:`` and ``stages:`` are read by ``stages``, its ``pages:``
select report kinds over records, ``reports.REPORTS``, e.g. ``reversal``'s) and ``arguments``
the command-line flags every study shares. A study is a plan run by the sweep (one
command); a study's folder holds what its pages need beyond the common tables: ``reversal``'s and
``warm_start``'s, ``detection``'s and ``lora``'s report kinds, ``image``'s paired tables and
checkpoint grids. Their tables and CSVs are written by ``attn_lightning.records`` from run
records.
"""
