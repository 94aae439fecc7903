"""One training step of the reversal study's model with the learned sketch, its sketch levels
whole (the form before ``fa75777``) and in chunks (``ops/sketches.py`` since then), in one
process: equal weights first (loss, logits, gradients), then timed steps interleaved.

A record of the measurement quoted in ``docs/results/polynomial.md``; the whole-level form lives
only here (the package keeps it only as the CUDA path). The model is ``benchmark model``'s
reversal decoder at the study's shape: d_model 64, 4 heads, 2 layers, d_ff 256, batch 64,
N = 100 tokens, ``polysketch`` with ``sketch: learned, sketch_size: 64``; a step is forward,
loss, backward, clip at 1.0 and AdamW. Per step: wall time (``perf_counter``), and from
``getrusage``: minor page faults, system and user CPU time. Run from the repository root::

    OMP_NUM_THREADS=1 python docs/results/learned_sketch_chunks/step_old_vs_new.py --repeats 9
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import time
from datetime import datetime

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_lightning.attention.ops import sketches
from lab.benchmarks.measure import BackendSpec
from lab.benchmarks.model_step import Settings, build_model

CHUNKED = sketches._FFSketch.forward


def whole(self: sketches._FFSketch, x: Tensor) -> Tensor:
    """``_FFSketch.forward`` before ``fa75777``, verbatim: the level in one piece."""
    dt = x.dtype
    weight, bias = self.norm.weight.to(dt), self.norm.bias.to(dt)
    x = F.layer_norm(x, self.norm.normalized_shape, weight, bias, self.norm.eps)
    x = F.gelu(F.linear(x, self.fc1.weight.to(dt), sketches._cast(self.fc1.bias, dt)))
    return F.linear(x, self.fc2.weight.to(dt), sketches._cast(self.fc2.bias, dt))


FORMS = {"whole (old)": whole, "chunked (new)": CHUNKED}


def cpu_name() -> str:
    with open("/proc/cpuinfo") as info:  # Linux, as the measurement (glibc's allocator)
        names = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
    return f"{names[0] if names else platform.machine()}, glibc {platform.libc_ver()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    repeats = parser.parse_args().repeats
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"date {datetime.now().isoformat(timespec='seconds')}, commit {commit}")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {cpu_name()}")
    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} CPUs")

    spec = BackendSpec(
        label="learned-64", name="polysketch", options={"sketch": "learned", "sketch_size": 64}
    )
    settings = Settings(device=torch.device("cpu"), layers=2, heads=4, batch=64)
    models = {}
    for form in FORMS:  # build_model seeds torch: the same weights for both
        net, loss_fn = build_model("reversal", n=100, width=64, spec=spec, settings=settings)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
        models[form] = (net, loss_fn, optimizer)

    results = {}
    tokens = torch.randint(11, (64, 100), generator=torch.Generator().manual_seed(1))
    for form, (net, loss_fn, _) in models.items():
        sketches._FFSketch.forward = FORMS[form]
        with torch.no_grad():
            logits = net(tokens, causal=True)
        loss = loss_fn()
        loss.backward()
        grads = {name: p.grad.clone() for name, p in net.named_parameters()}
        results[form] = (logits, loss.detach(), grads)
    (l0, loss0, g0), (l1, loss1, g1) = results.values()
    rel = {n: ((g1[n] - g).norm() / g.norm()).item() for n, g in g0.items() if g.norm() > 0}
    worst = max(rel, key=rel.__getitem__)
    print(f"logits equal: {torch.equal(l0, l1)}, loss equal: {torch.equal(loss0, loss1)}")
    print(f"largest relative gradient difference: {rel[worst]:.2e} ({worst})")

    def step(form: str) -> None:
        net, loss_fn, optimizer = models[form]
        sketches._FFSketch.forward = FORMS[form]
        optimizer.zero_grad(set_to_none=True)
        loss_fn().backward()
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()

    samples: dict[str, list[tuple[float, float, float, float]]] = {f: [] for f in FORMS}
    order = list(FORMS)
    for rep in range(repeats):  # alternating order, so drift in the load hits both
        for form in order if rep % 2 == 0 else order[::-1]:
            before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            step(form)
            wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
            samples[form].append(
                (
                    wall,
                    after.ru_minflt - before.ru_minflt,
                    after.ru_stime - before.ru_stime,
                    after.ru_utime - before.ru_utime,
                )
            )
    print(f"load average after: {os.getloadavg()}")
    print(f"{repeats} timed steps each (after one untimed), medians [min, max]:")
    base: dict[str, float] = {}
    for form, rows in samples.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[2] + r[3] for r in rows)
        base.setdefault("wall", wall)
        base.setdefault("cpu", cpu)
        print(
            f"  {form:>13}: wall {wall:.3f} s [{min(r[0] for r in rows):.3f}, "
            f"{max(r[0] for r in rows):.3f}] ({base['wall'] / wall:.2f}x), "
            f"page faults {statistics.median(r[1] for r in rows):,.0f}, "
            f"sys {statistics.median(r[2] for r in rows):.3f} s, "
            f"user {statistics.median(r[3] for r in rows):.3f} s, "
            f"user+sys {cpu:.3f} s ({base['cpu'] / cpu:.2f}x)"
        )


if __name__ == "__main__":
    main()
