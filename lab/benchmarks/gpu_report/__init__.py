"""``gpu-report``: the GPU efficiency measurements, within a wall-clock budget, in one command.

    python -m lab.benchmark gpu-report --budget-s 480 --fla-autotune reduced \\
        --out out/gpu_report
    python -m lab.benchmark gpu-report --dry-run --out out/gpu_dry   # CPU, toy shapes

The stages (``plan``), in order of value, each a child process with an estimated cost and a
timeout (``runner``): fla's own op first (the anchor), then flash and ``linear`` on each kernel at
three regimes (``calls``, ``kernels``: bf16, causal fwd+bwd, CUDA events, median
of 10), the normaliser before vs now, ``torch.profiler``'s top kernels of each contender at one
shape (``profile``), the reversal model's training step, decode vs the KV cache, N = 64k, then
the CUDA tests and the broader per-call table as time allows. After every stage it rewrites
``<out>/gpu_report.md`` (the targets of docs/benchmarks.md met or not with their numbers,
``targets``; the tables, ``page``; each row's achieved bandwidth against the device's copy
bandwidth, ``bandwidth``; ``auto``'s pick against the fastest linear kernel, ``auto_choice``)
and ``<out>/gpu_report.tar.gz`` (every file), so a run killed from outside keeps what its
finished stages measured.

Without CUDA it refuses (one line) unless ``--dry-run``: the same pipeline at toy shapes on the
CPU. This process never touches the GPU: the stages do, so a wedged kernel costs its stage only.
The command's code is in ``command``; this package's import stays light, as every stage's child
process imports it.
"""
