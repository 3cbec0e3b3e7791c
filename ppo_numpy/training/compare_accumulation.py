"""Gradient accumulation against one pass, run side by side (``python -m ppo_numpy
accumulation``): the same training run with each normaliser of
:mod:`ppo_numpy.training.accumulation`, how far the parameters drift from the one-pass run's.

Apart from :mod:`ppo_numpy.training.accumulation` because it runs the training loop, which
uses that module (the imports run one way).
"""

from __future__ import annotations

import time

import numpy as np

from .accumulation import NORMALISERS
from .config import PPOConfig
from .loop import fork_run, new_run, ppo_iteration

__all__ = ["compare_accumulation"]


def compare_accumulation(config=None, micro_batches: int = 4) -> dict:
    """The run of ``config`` in one pass per minibatch against the same run accumulating
    ``micro_batches`` micro-batches with each of :data:`NORMALISERS` (one warm-up, shared;
    the runs in lockstep).

    Returns ``{label: result}`` (labels ``"one pass"``, ``"global, K micro-batches"``,
    ``"micro-batch-mean, K micro-batches"``), each result:

    * ``drift``: per iteration, the largest difference of a parameter from the one-pass
      run's after that iteration, relative to the largest entry of its array:
      max_k max |a_k - b_k| / max |b_k| over the parameter arrays k;
    * ``param_ulps``: the last one in units in the last place of that largest entry
      (max |a - b| / spacing(max |b|));
    * ``row_rel``: the largest relative difference of a logged number over the run,
      |a - b| / max(|a|, |b|);
    * ``rows_identical``, ``params_identical``: bit for bit;
    * ``final_score``, ``cpu_seconds`` (the iterations, not the warm-up).
    """
    config = PPOConfig() if config is None else config
    start = new_run(config)
    configs = {"one pass": config.replace(micro_batches=1)}
    for name in NORMALISERS:
        configs[f"{name}, {micro_batches} micro-batches"] = config.replace(
            micro_batches=micro_batches, normaliser=name)
    states = {label: fork_run(start, cfg) for label, cfg in configs.items()}
    rows = {label: [] for label in configs}
    drift = {label: [] for label in configs}
    seconds = dict.fromkeys(configs, 0.0)
    for _ in range(config.iterations):
        for label, state in states.items():
            clock = time.process_time()
            rows[label].append(ppo_iteration(state))
            seconds[label] += time.process_time() - clock
        base = states["one pass"].policy.params
        for label, state in states.items():
            drift[label].append(_param_drift(state.policy.params, base, np.max))
    base_params, base_rows = states["one pass"].policy.params, rows["one pass"]
    table = {}
    for label, state in states.items():
        params = state.policy.params
        table[label] = {
            "drift": drift[label],
            "param_ulps": _param_drift(params, base_params, lambda x: np.spacing(np.max(x))),
            "row_rel": max((_rel(r[c], r0[c]) for r, r0 in zip(rows[label], base_rows)
                            for c in r0), default=0.0),
            "rows_identical": rows[label] == base_rows,
            "params_identical": all(np.array_equal(params[k], base_params[k])
                                    for k in base_params),
            "final_score": rows[label][-1]["score"],
            "cpu_seconds": seconds[label],
        }
    return table


def _param_drift(params, base, unit) -> float:
    """max over the arrays k of max |params_k - base_k| / unit(|base_k|)."""
    return max(float(np.max(np.abs(params[k] - base[k])) / unit(np.abs(base[k])))
               for k in base)


def _rel(a, b) -> float:
    """|a - b| / max(|a|, |b|) of two logged numbers (0 for equal ones, NaN and NaN)."""
    if a == b or (a != a and b != b):
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))
