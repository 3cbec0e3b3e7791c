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

from ..batch import Rollout
from ..models.loss import loss_and_grads_kernel
from ..policy_loss.options import PolicyLossOptions
from ..step.normalisers import Normaliser, micro_batch_divisors

__all__ = ["NORMALISERS", "accumulated_loss_and_grads"]

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
    ``value_clip`` of :func:`~ppo_numpy.models.loss.loss_and_grads_kernel`."""
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
