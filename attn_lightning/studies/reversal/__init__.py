"""The sequence-reversal study: the report of a sweep's runs (``python -m
attn_lightning.studies.reversal report``).

``cli`` is the command line; ``report`` writes the files; ``runs`` reads the sweep's runs as
``RunResult``s (metrics files through the runner, TensorBoard through ``results.curves``) with
their training facts in ``info``; ``dynamics`` turns scalars into those facts (steps to a
threshold, loss spikes, gradients at spikes); ``summary`` and ``markdown`` make the numbers and
the tables.
"""
