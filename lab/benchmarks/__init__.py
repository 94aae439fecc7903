"""Benchmark and analysis suite behind ``python -m lab.benchmark``.

* ``cli``: ``COMMANDS``, a row per subcommand (its help, ``add_arguments``, ``run``), and the
  parser built from it.
* The commands: ``latency`` (time, peak memory and counted FLOPs of one call vs N, measured by
  ``scaling``), ``decode`` (per-token ``step`` latency), ``approximation`` (``approx``: relative
  error of the approximate backends), ``kernel_shapes`` (``kernels``: each similarity vs the
  angle; ``learned``: what trained polynomials learned), ``model_step`` (``model``: one training
  step of the real models vs N and its attention share), ``generation`` (images/s of sampling,
  measured by ``throughput``), ``triton_static``, ``race`` (``race``, ``profile``, ``bandwidth``
  over ``contenders``).
* ``budget``: the loop of a series that ``scaling`` and ``model_step`` share; ``measure``: timers,
  peak memory, the matmul roofline, SDPA kernels, the shared flags and backend specs.
* ``flops``: the forward FLOPs of one attention call, a formula per backend; ``sites``: per DETR
  attention site, parameters and counted FLOPs. ``report``: tables and PNG figures.
"""
