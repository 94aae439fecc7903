"""The DETR attention-site study: which attention at which site, what it costs, why it fails.

The study is its plans, ``configs/studies/detection*.yaml``, run and rebuilt by the sweep. What
it analyses beyond the common tables are the report kinds of ``report`` (its table with the
controls and measured costs, the sensitivity and ablation grids, the per-site counts, the
cross-attention probe of ``probe``); the variants, their controls and grids are ``variants``'.
"""
