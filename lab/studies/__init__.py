"""Studies: repeated real ``train.py`` runs over variants and seeds, and their pages.

``runner`` is the one runner (a (variant, seed) -> a ``train.py`` run -> its ``RunResult``, read
from the run's record), ``sweep`` the one command on top of it: it reads a plan
(``configs/studies/``), its ``pages:`` over the report kinds ``sweep.REPORTS``, and ``stages``
its ``grid:`` and ``stages:``. What a study's pages need beyond the common tables
are its report kinds: a module (``reversal``, ``trajectories`` over ``reversal_traces``) or a
folder (``detection``, ``lora``, ``warm_start``; ``image`` holds its checkpoint grids).
"""
