"""The sequence-reversal study, from run records: outcome pages (``python -m
attn_lightning.studies.reversal report``) and long runs' training traces (``trajectories``).

``cli`` is the command line; ``report`` writes the files; ``runs`` reads the runs' records as
``RunResult``s with their training facts in ``info``; ``dynamics`` turns a record's curves into
those facts (steps to a threshold, loss spikes, gradients at spikes); ``summary`` and
``markdown`` make the numbers and the tables; ``trajectories``, ``traces`` and
``trace_figures`` the training traces.
"""
