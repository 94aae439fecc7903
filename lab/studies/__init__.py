"""Studies: repeated real ``train.py`` runs over variants and seeds, and their pages.

``runner`` is the one runner (a (variant, seed) -> a ``train.py`` run -> its ``RunResult``, read
from the run's record), ``sweep`` the one command on top of it; a plan (``configs/studies/``) is
read by ``plans`` (its options, its ``pages:`` over the report kinds ``plans.REPORTS``) and
``stages`` (its ``grid:`` and ``stages:``). A study's folder holds what its pages need beyond the
common tables: its report kinds.
"""
