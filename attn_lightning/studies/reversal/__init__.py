"""The sequence-reversal study, from run records: outcome pages (``report``: ``runs`` ->
``summary`` -> ``markdown``, the facts from ``dynamics``) and long runs' training traces
(``trajectories``: ``traces``, ``trace_figures``); ``cli`` is the command line.
"""
