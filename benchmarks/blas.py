"""One large matrix product against the stack of small ones that GAE's blocked form uses.

``python -m benchmarks.blas`` prints the medians. The product is GAE's inner
one: (B T / C, C) @ (C, C) with C = 32, at (B, T) = (256, 1024). BLAS splits
a large product over every core, and a small one (``rows_per_product(C)`` rows) runs
on one; when other processes hold the cores, the split product waits for them.
Measured as the machine is, then while as many other processes as cores run
the same product in a loop; the load average is printed beside the figures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

from benchmarks.timing import measure


def products(B: int = 256, T: int = 1024, C: int = 32, *, busy: int = 0, rounds: int = 9,
             target: float = 0.02) -> dict:
    """Median seconds of one product, the stack and the floor, while ``busy`` other
    processes run NumPy matrix products of the same shape in a loop, as parallel test
    jobs do (each stopped afterwards, and after 120 s at the latest)."""
    gae_module = sys.modules["ppo_numpy.fast.gae_blocked"]
    x = np.random.default_rng(0).normal(size=(B * T // C, C))
    W = gae_module._power_matrix(0.95, C)
    spin = (f"import time, numpy as np\nx = np.ones({x.shape}); W = np.ones({W.shape})\n"
            "end = time.monotonic() + 120\nwhile time.monotonic() < end: x @ W")
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(busy)]
    try:
        if spinners:
            time.sleep(0.5)
        times = measure({
            "floor": lambda: x - x,
            "one product": lambda: x @ W,
            "stack": lambda: gae_module._matmul(x, W),
        }, rounds=rounds, target=target)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"B": B, "T": T, "C": C, "rows": gae_module.rows_per_product(C), "load": load,
            "busy": busy, **times}


def markdown(results: list[dict]) -> list[str]:
    r = results[0]
    lines = [
        f"GAE's inner product at (B, T) = ({r['B']}, {r['T']}), C = {r['C']}: "
        f"({r['B'] * r['T'] // r['C']}, {r['C']}) @ ({r['C']}, {r['C']}), as one BLAS call "
        f"or as the stack of {r['rows']}-row products `_matmul` makes "
        f"(`benchmarks/blas.py`), on the machine as it was and while other processes run "
        "the same NumPy product in a loop, as parallel test jobs would (1-minute load "
        "average at the end of each measurement):",
        "",
        "| other processes running products | load average | one product ms | stack ms | floor ms "
        "| one product / stack |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        load = "unknown" if r["load"] is None else f"{r['load']:.1f}"
        lines.append(
            f"| {r['busy']} | {load} | {r['one product'] * 1e3:.3f} | {r['stack'] * 1e3:.3f} "
            f"| {r['floor'] * 1e3:.3f} | {r['one product'] / r['stack']:.1f}x |")
    return lines


def main() -> int:
    import ppo_numpy  # noqa: F401  (registers ppo_numpy.gae)
    from benchmarks.timing import warm_heap

    warm_heap()
    print("\n".join(markdown([products(), products(busy=os.cpu_count() or 1)])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
