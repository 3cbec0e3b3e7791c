"""Fitting a :class:`~ppo_numpy.reward.model.RewardModel` to preference pairs by the
Bradley-Terry loss, and measuring it on held-out pairs
(notebook ``12_reward_model_overoptimisation``).

    loss = L_BT + (weight_decay / 2) (|W_x|^2 + |W_y|^2 + |w_2|^2)

The chosen and rejected responses go through the model as one batch of 2n
rows; d L_BT / d r comes from :func:`~ppo_numpy.reward.bradley_terry.bradley_terry_grad`
and :meth:`RewardModel.backward` carries it to the parameters.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_int, check_scalar
from ..models.optim import Adam
from .bradley_terry import bradley_terry_grad, bradley_terry_loss, preference_accuracy

#: parameters under weight decay (the hidden bias b1 is not)
DECAYED = ("W_x", "W_y", "w2")


def pair_rewards(model, pairs, params=None):
    """(r_w (n,), r_l (n,), cache): one forward pass over the chosen and rejected responses."""
    x = np.concatenate([pairs.prompts, pairs.prompts])
    y = np.concatenate([pairs.chosen, pairs.rejected])
    m = np.concatenate([pairs.chosen_mask, pairs.rejected_mask])
    r, cache = model.forward(x, y, m, params)
    n = len(pairs)
    return r[:n], r[n:], cache


def reward_loss_and_grads(model, pairs, *, weight_decay=0.0, params=None):
    """Bradley-Terry loss plus weight decay, its gradient for every parameter, and stats.

    Parameters
    ----------
    model : RewardModel
    pairs : PreferencePairs
    weight_decay : float >= 0
        Coefficient of the L2 penalty on ``W_x``, ``W_y`` and ``w2``. Default 0.
    params : dict, optional
        Evaluate at these parameters instead of ``model.params``.

    Returns
    -------
    (loss, grads, stats) with stats ``bt_loss`` (without the penalty) and ``accuracy``
    (against the labels).
    """
    wd = check_scalar(weight_decay, "weight_decay", low=0, allow_exact=False)
    p = model.resolve_params(params)
    r_w, r_l, cache = pair_rewards(model, pairs, params)  # forward resolves params itself
    bt = bradley_terry_loss(r_w, r_l)
    penalty = 0.5 * wd * sum(float(np.sum(p[k] ** 2)) for k in DECAYED)
    dr_w, dr_l = bradley_terry_grad(r_w, r_l)
    grads = model.backward(cache, np.concatenate([dr_w, dr_l]))
    for k in DECAYED:
        grads[k] = grads[k] + wd * p[k]
    stats = {"bt_loss": bt, "accuracy": preference_accuracy(r_w, r_l)}
    return bt + penalty, grads, stats


def evaluate_reward_model(model, pairs) -> dict:
    """How well ``model`` orders ``pairs``: a dict of floats.

    ``bt_loss``; ``accuracy``, the fraction ordered like the (noisy) labels; and
    ``gold_accuracy``, the fraction ordered like the gold scores among the pairs
    whose gold scores differ (ties counted 1/2 as in
    :func:`~ppo_numpy.reward.bradley_terry.preference_accuracy`; NaN if every pair
    is a gold tie). ``label_gold_accuracy``: the same for the labels themselves,
    the ceiling set by the label noise.
    """
    r_w, r_l, _ = pair_rewards(model, pairs)
    sign = pairs.label_agrees_with_gold
    decided = sign != 0
    out = {"bt_loss": bradley_terry_loss(r_w, r_l), "accuracy": preference_accuracy(r_w, r_l)}
    if np.any(decided):
        # orient every decided pair so that its first response is the gold-better one
        good = np.where(sign > 0, r_w, r_l)[decided]
        bad = np.where(sign > 0, r_l, r_w)[decided]
        out["gold_accuracy"] = preference_accuracy(good, bad)
        out["label_gold_accuracy"] = float(np.mean(sign[decided] > 0))
    else:
        out["gold_accuracy"] = out["label_gold_accuracy"] = float("nan")
    return out


def fit_reward_model(model, pairs, *, steps=300, lr=0.02, weight_decay=1e-3, heldout=None,
                     log_every=25) -> list[dict]:
    """Full-batch Adam on :func:`reward_loss_and_grads`; ``model.params`` updated in place.

    Deterministic: no sampling (the data's randomness is in ``pairs``).

    Parameters
    ----------
    model : RewardModel
    pairs : PreferencePairs
        The training pairs.
    steps : int >= 1
    lr : float > 0
        Adam learning rate.
    weight_decay : float >= 0
    heldout : PreferencePairs, optional
        Also logged: :func:`evaluate_reward_model` on these pairs, prefixed ``heldout_``.
    log_every : int >= 1
        Log every this many steps (and the last).

    Returns
    -------
    list of dicts: ``step``, ``loss``, ``bt_loss``, ``accuracy`` (train, before the step's
    update for step 0, after it otherwise) and the held-out statistics.
    """
    check_int(steps, "steps")
    check_int(log_every, "log_every")
    opt = Adam(model.params, lr=lr)
    history = []
    for step in range(steps + 1):
        loss, grads, stats = reward_loss_and_grads(model, pairs, weight_decay=weight_decay)
        if step % log_every == 0 or step == steps:
            row = {"step": step, "loss": loss, **stats}
            if heldout is not None:
                held = evaluate_reward_model(model, heldout)
                row.update({f"heldout_{k}": v for k, v in held.items()})
            history.append(row)
        if step < steps:
            opt.step(grads)
    return history
