"""The DETR attention-site study: which attention at which site, what it costs, why it fails.

The study is its plans, ``configs/studies/detection*.yaml``, run and rebuilt by the sweep
(``python -m lab.studies.sweep --plan ...``). What it analyses beyond the common tables are the
report kinds of ``report`` (its table with the controls and costs, the sensitivity and ablation
grids, the cross-attention probe, the per-site counts); the variants and their controls are in
``variants``, the grids in ``sensitivity``, the model costs and per-site rows in ``costs``, the
probe's statistics in ``probe``.
"""
