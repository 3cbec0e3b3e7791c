"""Timing helpers: candidates measured side by side in interleaved rounds, medians reported.

The machine is shared and its speed drifts, so every candidate of one
comparison (ppo_numpy, the streaming floor, a scalar loop, PyTorch) is timed
in the same round, one after the other, and each reports the median over the
rounds. Ratios are then taken between medians of the same run.
"""

from __future__ import annotations

import gc
import statistics
import time

import numpy as np


def warm_heap(mib: int = 30) -> None:
    """Allocate and free one block of ``mib`` MiB once, before any timing.

    Why: glibc serves large arrays with mmap until a freed block raises its
    dynamic mmap threshold (and its trim threshold to twice that), up to
    32 MiB. Until then every function that grows the heap pays fresh page
    faults on each call (about 0.7 ms per 2 MiB array here), an effect of the
    process's history rather than of the code timed. Any process that has
    once handled a large array (a trainer, a test suite with a model in it)
    is in the warm state; so is this benchmark after this call. The cold
    figures are measured separately (``--cold``, ``benchmarks/cold.py``).
    """
    block = np.ones(mib * (1 << 20) // 8)
    del block


def _time_calls(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def calibrate(fn, target: float, max_number: int = 10_000) -> int:
    """Number of calls per sample so that one sample lasts about ``target`` seconds."""
    number = 1
    while True:
        elapsed = _time_calls(fn, number)
        if elapsed >= target or number >= max_number:
            return number
        grow = 2 if elapsed <= 0 else min(10, max(2, int(target / elapsed) + 1))
        number = min(max_number, number * grow)


def measure(candidates: dict, *, rounds: int, target: float) -> dict:
    """Median seconds per call of each candidate, timed in interleaved rounds.

    ``candidates`` maps a name to a zero-argument callable (or None to skip).
    Each round times every candidate once, ``number`` calls per sample
    (calibrated first, which also warms caches). Garbage collection is off
    while timing, as in :mod:`timeit`.
    """
    samples = measure_samples(candidates, rounds=rounds, target=target)
    return {name: statistics.median(values) for name, values in samples.items()}


def paired_ratio(samples: dict, a: str, b: str) -> float:
    """Median over the rounds of a's sample / b's sample of the same round (taken one just
    after the other), from :func:`measure_samples`."""
    return statistics.median(x / y for x, y in zip(samples[a], samples[b]))


def measure_samples(candidates: dict, *, rounds: int, target: float) -> dict:
    """Seconds per call of each candidate in each round (lists), as :func:`measure` times
    them."""
    live = {name: fn for name, fn in candidates.items() if fn is not None}
    numbers = {name: calibrate(fn, target) for name, fn in live.items()}
    return _interleaved(live, rounds,
                        lambda name, fn: _time_calls(fn, numbers[name]) / numbers[name])


def cache_cold_samples(candidates: dict, *, rounds: int, evict_mib: int = 64) -> dict:
    """Seconds of single calls of each candidate with the CPU caches emptied before each
    call (lists, one sample per round; the candidates interleaved as in
    :func:`measure_samples`).

    Before every call one array of ``evict_mib`` MiB is read (twice the L3 cache of the
    machines measured here), so the call's inputs come from main memory: as in a trainer,
    where GAE runs once per iteration on arrays written long before. The heap is as the
    caller left it (warm after :func:`warm_heap`).
    """
    junk = np.ones(evict_mib * (1 << 20) // 8)

    def one_call(name, fn):
        junk.sum()
        return _time_calls(fn, 1)

    live = {name: fn for name, fn in candidates.items() if fn is not None}
    return _interleaved(live, rounds, one_call)


def _interleaved(live: dict, rounds: int, sample) -> dict:
    """``{name: [sample(name, fn) for each round]}``: in every round each candidate once, in
    order; garbage collection off meanwhile, as in :mod:`timeit`."""
    samples = {name: [] for name in live}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in live.items():
                samples[name].append(sample(name, fn))
    finally:
        if enabled:
            gc.enable()
    return samples


def rerun_with_one_blas_thread(module: str, argv: list) -> int | None:
    """Run ``python -m module argv`` again with OPENBLAS_NUM_THREADS=1, unless it is set already
    (then None: go on in this process). OpenBLAS reads the variable when NumPy loads, so only a
    new process can change it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    if os.environ.get("OPENBLAS_NUM_THREADS") == "1":
        return None
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return subprocess.call([sys.executable, "-m", module, *argv], env=env, cwd=root)
