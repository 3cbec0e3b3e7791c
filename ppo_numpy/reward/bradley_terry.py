"""The Bradley-Terry preference model and its loss, with the gradient by hand
(notebook ``12_reward_model_overoptimisation``).

A reward model r(x, y) scores a response; Bradley and Terry (1952) model the
probability that a labeller prefers y_w over y_l as

    p(y_w > y_l | x) = sigma(r(x, y_w) - r(x, y_l)),     sigma(z) = 1 / (1 + e^{-z})

and the reward model is fitted by minimising the negative log-likelihood of the
labelled pairs, averaged over the n pairs (InstructGPT, Ouyang et al. 2022, eq. 1):

    L_BT = (1/n) sum_i -log sigma(Delta_i),      Delta_i = r(x_i, y_w,i) - r(x_i, y_l,i)

Only differences of r enter: r and r + c(x) give the same loss, so a learned
reward is defined up to a shift per prompt (and its scale is whatever the data's
confidence made it).
"""

from __future__ import annotations

import numpy as np

from .._checks import prepare


def _pairs(r_w, r_l):
    (r_w, r_l), _ = prepare({"r_w": r_w, "r_l": r_l}, None, ranks=(1,), exact=False)
    return r_w, r_l


def bradley_terry_loss(r_w, r_l) -> float:
    """Mean Bradley-Terry loss -log sigma(r_w - r_l) over n labelled pairs.

    Parameters
    ----------
    r_w : array (n,)
        Reward of the preferred ("chosen", winning) response of each pair.
    r_l : array (n,)
        Reward of the other ("rejected", losing) response.

    Returns
    -------
    float
        (1/n) sum_i log(1 + exp(-(r_w,i - r_l,i))), computed as ``logaddexp(0, -Delta)``
        so that a large |Delta| neither overflows nor rounds to log(1) = 0 too early.

    Examples
    --------
    Equal rewards: the model says 50/50, the loss is log 2. A margin of log 3 means
    p = 3/4 and a loss of log(4/3):

    >>> round(bradley_terry_loss([0.0], [0.0]), 6), round(float(np.log(2)), 6)
    (0.693147, 0.693147)
    >>> round(bradley_terry_loss([np.log(3)], [0.0]), 6), round(float(np.log(4 / 3)), 6)
    (0.287682, 0.287682)
    """
    r_w, r_l = _pairs(r_w, r_l)
    # -log sigma(Delta) = log(1 + e^{-Delta})
    return float(np.mean(np.logaddexp(0.0, -(r_w - r_l))))


def bradley_terry_grad(r_w, r_l):
    """Gradient of :func:`bradley_terry_loss` with respect to ``r_w`` and ``r_l``.

        d L_BT / d r_w,i = -sigma(-Delta_i) / n = (sigma(Delta_i) - 1) / n
        d L_BT / d r_l,i = +sigma(-Delta_i) / n

    Returns
    -------
    (dr_w, dr_l) : two float64 arrays (n,)

    Examples
    --------
    At Delta = 0 the gradient of one pair's loss is -1/2 for the winner and +1/2 for the
    loser; at Delta = log 3 it is -(1 - 3/4) = -1/4. Two pairs: each divided by n = 2.

    >>> dr_w, dr_l = bradley_terry_grad([0.0, np.log(3)], [0.0, 0.0])
    >>> [round(float(v), 12) for v in dr_w], [round(float(v), 12) for v in dr_l]
    ([-0.25, -0.125], [0.25, 0.125])
    """
    r_w, r_l = _pairs(r_w, r_l)
    n = r_w.shape[0]
    # sigma(-Delta) = 1 / (1 + e^{Delta}) = exp(-log(1 + e^{Delta})), stable for any Delta
    s = np.exp(-np.logaddexp(0.0, r_w - r_l))
    return -s / n, s / n


def preference_probability(r_a, r_b) -> np.ndarray:
    """p(y_a > y_b) = sigma(r_a - r_b) for each pair: float64 (n,).

    >>> preference_probability([np.log(3), 0.0], [0.0, 0.0]).tolist()
    [0.75, 0.5]
    """
    r_a, r_b = _pairs(r_a, r_b)
    return np.exp(-np.logaddexp(0.0, -(r_a - r_b)))


def preference_accuracy(r_w, r_l) -> float:
    """Fraction of pairs the reward model orders like the label: r_w > r_l counts 1, a tie 1/2.

    A model that ignores its input (all ties) scores exactly 1/2, the chance level.

    >>> preference_accuracy([1.0, 0.0, 2.0, 5.0], [0.0, 0.0, 3.0, 1.0])
    0.625
    """
    r_w, r_l = _pairs(r_w, r_l)
    return float(np.mean((r_w > r_l) + 0.5 * (r_w == r_l)))
