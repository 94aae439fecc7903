"""Benchmark and analysis suite behind ``python -m lab.benchmark``.

One command table, one module per benchmark, one measurement loop:

* ``cli``: ``COMMANDS``, a row per subcommand (its help, ``add_arguments``, ``run``), and the
  parser built from it; ``arguments``: the flags the commands share.
* The commands: ``latency`` (time, peak memory and counted FLOPs of one call vs N, measured by
  ``scaling`` under the shapes of ``protocols``), ``decode`` (per-token ``step`` latency),
  ``approximation_report`` (``approx``: relative error of the approximate backends, measured by
  ``approximation``), ``kernel_shapes`` (``kernels``: each similarity vs the angle between two
  vectors), ``model_step`` (``model``: one training step of the real models vs N, with
  ``attention_timer`` for the share spent inside attention), ``generation`` (a package: images/s
  of whole-image sampling, the histogram baseline, the decode-latency plot).
* ``budget``: the loop of a series (increasing N, skip what is estimated over budget, OOM ends
  it) that ``scaling`` and ``model_step`` share.
* ``measure``: timers (perf_counter / CUDA events), peak-memory probes, matmul roofline, forcing
  an SDPA kernel; ``specs``: the ``name:key=value,...`` backend syntax.
* ``flops`` (one formula per backend in ``FORMULAS``) and ``flop_count`` (what a count is):
  the forward FLOPs of one attention call; ``sites``: per DETR attention site, parameters and
  counted FLOPs (the detection study's ``--sites`` table).
* ``report`` and ``plots``: benchmark table layouts (through ``attn_lightning.records``) and PNG
  figures.
"""
