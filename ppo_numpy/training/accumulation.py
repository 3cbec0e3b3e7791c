"""Gradient accumulation: a minibatch's update from K micro-batches (notebook 16).

``python -m ppo_numpy train --micro-batches K`` cuts each minibatch (its rows already in
a random order) into K consecutive micro-batches of equal row counts. Each micro-batch's
loss is normalised by the run's ``normaliser`` (:mod:`ppo_numpy.step.normalisers`, one
rank), its backward pass gives its parameter gradients, and their sum is the update's
gradient (then clipped, then Adam), as a trainer accumulates gradients before one
optimizer step:

* ``"global"``: every term divided by the minibatch's divisors of ``agg`` (its token count
  for the token mean). Every token has the weight it has in the one-batch update, the same
  float; only the order of the parameter gradients' sums differs.
* ``"micro-batch-mean"``: ``agg`` over each micro-batch alone, divided by K: the
  transformers ``Trainer`` before 4.46. A token of a micro-batch with few tokens weighs more.

The statistics of the update: the losses add (each micro-batch's is its share), the ratio's
minimum and maximum are over all micro-batches, the other statistics (token means within a
micro-batch) are averaged with the micro-batches' token counts as weights.
"""

from __future__ import annotations

import numpy as np

from ..objective import PolicyLossOptions
from ..policy.loss import loss_and_grads_kernel
from ..rollout import Rollout
from ..step.normalisers import Normaliser, micro_batch_divisors

__all__ = ["NORMALISERS", "accumulated_loss_and_grads", "compare_accumulation"]

#: the normalisers a training run may accumulate with (one rank)
NORMALISERS = ("global", "micro-batch-mean")
#: statistics that are each micro-batch's share of the update's loss: they add
SUMMED = ("policy_loss", "value_loss", "entropy", "kl", "loss")


def accumulated_loss_and_grads(model, batch: Rollout, opts: PolicyLossOptions, *,
                               micro_batches: int, normaliser: str, is_weights=None,
                               **loss_keywords):
    """``(loss, grads, stats)`` of ``batch`` as ``micro_batches`` consecutive micro-batches
    whose gradients are added (unchecked kernel: ``micro_batches`` divides the batch's rows,
    ``normaliser`` one of :data:`NORMALISERS`). ``loss_keywords``: ``c_v``, ``c_H``,
    ``value_clip`` of :func:`~ppo_numpy.policy.loss.loss_and_grads_kernel`."""
    m = batch.mask
    b = m.shape[0] // micro_batches
    layout = [[np.arange(k * b, (k + 1) * b) for k in range(micro_batches)]]
    # one rank: the micro-batches' (d, D), in float64 as the one-batch call's
    divs = micro_batch_divisors(Normaliser(normaliser, opts.agg, opts.norm), m, layout,
                                np.empty(0))[0]
    loss, grads, parts = 0.0, None, []
    for rows, dv in zip(layout[0], divs):
        part_loss, part_grads, stats = loss_and_grads_kernel(
            model, batch.rows(rows), opts, divs=dv,
            is_weights=None if is_weights is None else is_weights[rows], **loss_keywords)
        # each backward adds into the accumulated gradient
        grads = part_grads if grads is None else {k: grads[k] + part_grads[k] for k in grads}
        loss += part_loss
        parts.append((int(np.count_nonzero(m[rows])), stats))
    return loss, grads, combined_stats(parts)


def combined_stats(parts) -> dict:
    """The update's statistics from ``(token count, stats)`` of each micro-batch: losses
    added, the ratio's min and max, the others weighted by the token counts."""
    n_total = sum(n for n, _ in parts)
    out = {}
    for name in parts[0][1]:
        values = [stats[name] for _, stats in parts]
        if name in SUMMED:
            out[name] = float(sum(values))
        elif name == "ratio_min":
            out[name] = min(values)
        elif name == "ratio_max":
            out[name] = max(values)
        else:
            # sum_k n_k x_k / sum_k n_k   (x_k a token mean over the n_k tokens of micro-batch k)
            out[name] = float(sum(n * v for (n, _), v in zip(parts, values)) / n_total)
    return out


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
    import time

    from .config import PPOConfig
    from .loop import fork_run, new_run, ppo_iteration

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
