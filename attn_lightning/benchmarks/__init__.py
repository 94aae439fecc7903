"""Benchmark and analysis suite behind ``python -m attn_lightning.benchmark``.

One module per concern:

* ``cli`` (argument parsing) and ``commands`` (one function per subcommand).
* ``specs``: the ``name:key=value,...`` backend syntax of the command line.
* ``measure``: timers (perf_counter / CUDA events), peak-memory probes, matmul roofline,
  forcing an SDPA kernel.
* ``protocols`` and ``scaling``: latency and peak memory against N (``latency``).
* ``flops``: the forward FLOPs of one attention call, counted per backend from its algorithm
  (a column and a table of ``latency``).
* ``sites``: per DETR attention site, parameters and counted FLOPs (the detection study's
  ``--sites`` table).
* ``decode``: per-token ``step`` latency against context length (``decode``).
* ``approximation`` and ``approximation_report``: relative error of approximate backends
  against exact softmax (``approx``).
* ``kernel_shapes``: each similarity as a function of the angle between two vectors
  (``kernels``).
* ``model_step``: one training step of the real reversal / pixel models against N, and the
  share of it spent inside the attention backends (``model``).
* ``report`` and ``plots``: CSV / markdown tables with the environment recorded, PNG figures.
"""
