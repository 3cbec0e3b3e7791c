"""One large matrix product against the stack of small ones that GAE's blocked form uses.

``python -m benchmarks.blas`` prints the medians. The product is GAE's inner
one: (B T / C, C) @ (C, C) with C = 32, at (B, T) = (256, 1024). BLAS splits
a large product over every core, and a small one (ROWS_PER_PRODUCT rows) runs
on one; when other processes hold the cores, the split product waits for them.
The load average is printed beside the figures.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from benchmarks.timing import measure


def products(B: int = 256, T: int = 1024, C: int = 32, *, rounds: int = 9,
             target: float = 0.02) -> dict:
    gae_module = sys.modules["ppo_numpy.gae"]
    x = np.random.default_rng(0).normal(size=(B * T // C, C))
    W = gae_module._power_matrix(0.95, C)
    times = measure({
        "floor": lambda: x - x,
        "one product": lambda: x @ W,
        "stack": lambda: gae_module._matmul(x, W),
    }, rounds=rounds, target=target)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"B": B, "T": T, "C": C, "rows": gae_module.ROWS_PER_PRODUCT, "load": load, **times}


def markdown(result: dict) -> list[str]:
    r = result
    load = "unknown" if r["load"] is None else f"{r['load']:.1f}"
    return [
        f"GAE's inner product at (B, T) = ({r['B']}, {r['T']}), C = {r['C']}: "
        f"({r['B'] * r['T'] // r['C']}, {r['C']}) @ ({r['C']}, {r['C']}), as one BLAS call "
        f"or as the stack of {r['rows']}-row products `_matmul` makes "
        f"(`benchmarks/blas.py`; 1-minute load average {load} on {os.cpu_count()} cores "
        "while measuring):",
        "",
        "| one product ms | stack ms | floor ms | one product / stack |",
        "|---:|---:|---:|---:|",
        f"| {r['one product'] * 1e3:.3f} | {r['stack'] * 1e3:.3f} | {r['floor'] * 1e3:.3f} "
        f"| {r['one product'] / r['stack']:.1f}x |",
    ]


def main() -> int:
    import ppo_numpy  # noqa: F401  (registers ppo_numpy.gae)
    from benchmarks.timing import warm_heap

    warm_heap()
    print("\n".join(markdown(products())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
