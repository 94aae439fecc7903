"""The sequence-reversal study's reports, over run records: outcome pages (``report``: ``runs``
-> ``summary`` -> ``markdown``, the facts from ``dynamics``) and long runs' training traces
(``trajectories``: ``traces``, ``trace_figures``). A plan's ``pages:`` section selects them
(``report: reversal | trajectories``, ``studies.sweep``); its runs are trained by the sweep.
"""
