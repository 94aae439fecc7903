"""The DETR attention-site study: which attention at which site, what it costs, why it fails.

``python -m lab.studies.detection run | sensitivity | ablation | sites | probe``
(``cli``). The variants and their controls are in ``variants``, the sensitivity grid and the
ablation ladder in ``sensitivity``, the runs in ``study``, the model costs and the per-site table
in ``costs``, the tables in ``tables``, the cross-attention probe in ``probe``.
"""

from lab.studies.detection.cli import main
from lab.studies.detection.costs import build_model, measure
from lab.studies.detection.variants import variants

__all__ = ["build_model", "main", "measure", "variants"]
