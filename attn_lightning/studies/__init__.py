"""Studies: the one runner (``sweep``) that repeats real ``train.py`` runs over variants and
seeds, and each experiment's study and report on top of it."""
