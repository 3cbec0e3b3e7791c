"""Generalized Advantage Estimation of the objective (docs/objective.md; notebook ``05_gae``).

    A_hat_t = sum_{l=0}^{T-t} (gamma lambda)^l delta_{t+l}

computed by the backward recursion everyone recognises

    A_hat_T = delta_T,    A_hat_t = delta_t + gamma lambda A_hat_{t+1},

and returns R_t = A_hat_t + V(s_t) (the value head's regression target).

The recursion below is the definition, and what :func:`gae` runs. A caller that needs the
speed on large batches chooses the fast form of ``ppo_numpy.fast.gae_blocked``
(``method="blocked"``), tested equal to the recursion and to the sum definition in
``tests/test_td_gae.py``.
"""

from __future__ import annotations

import numpy as np

from .._checks import (
    check_choice,
    check_int,
    check_scalar,
    is_exact,
    prepare,
    scalar_for,
    where_valid,
)
from ..fast.gae_blocked import BLOCK, gae_blocked, gae_blocked_kernel
from .td import td_errors_kernel

__all__ = ["METHODS", "gae", "gae_kernel"]

METHODS = ("blocked", "loop")


def gae(rewards, values, gamma=1.0, lam=0.95, mask=None, *, method="loop", block=BLOCK):
    """Advantages A_hat_t = sum_l (gamma lam)^l delta_{t+l} and returns A_hat_t + V(s_t).

    Parameters
    ----------
    rewards : array (T,) or (B, T)
        Per-token rewards r~_t.
    values : array, same shape
        V(s_t), the value of the state before response token y_t.
    gamma : float in [0, 1]
        Discount factor. Default 1.0.
    lam : float in [0, 1]
        GAE parameter lambda. Default 0.95. ``lam=0`` gives the TD errors,
        ``lam=1`` Monte Carlo returns minus values.
    mask : array of 0/1, optional
        1 for response tokens. Padding is skipped (see :func:`td_errors`):
        the recursion runs over response tokens only, and outputs are 0 at padding.
    method : {"loop", "blocked"}
        ``"loop"`` (default): the backward recursion below. ``"blocked"``: its fast form,
        chosen by a caller that needs the speed (``ppo_numpy.fast.gae_blocked``; float64
        only, equal up to rounding, see ``tests/test_td_gae.py``). ``None`` is ``"loop"``.
    block : int >= 1
        Block length C of the blocked form (speed only; 1 behaves as 2). Default 8.

    Returns
    -------
    advantages, returns : float64 arrays (exact Fractions for Fraction input), same shape.

    Examples
    --------
    The running example at beta = 0 (docs/objective.md): delta = [0.1, 0.1, 0.3],
    gamma 1, lambda 0.95:
    A_3 = 0.3, A_2 = 0.1 + 0.95 * 0.3 = 0.385, A_1 = 0.1 + 0.95 * 0.385 = 0.46575.

    >>> A, R = gae([0, 0, 1], [0.5, 0.6, 0.7], gamma=1.0, lam=0.95)
    >>> [round(float(a), 12) for a in A]
    [0.46575, 0.385, 0.3]
    >>> [round(float(x), 12) for x in R]
    [0.96575, 0.985, 1.0]
    """
    lam = check_scalar(lam, "lam", low=0, high=1)
    gamma = check_scalar(gamma, "gamma", low=0, high=1)
    method = "loop" if method is None else check_choice(method, "method", METHODS, "method")
    block = check_int(block, "block")
    if method == "blocked":
        if is_exact(rewards) or is_exact(values):
            raise ValueError("method: 'blocked' computes in float64; exact Fraction input "
                             "needs method='loop'")
        # the fast form, chosen by the caller
        return gae_blocked(rewards, values, gamma, lam, mask, block)
    (r, v), m = prepare({"rewards": rewards, "values": values}, mask)
    gamma, lam = scalar_for(gamma, v), scalar_for(lam, v)
    # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
    delta = td_errors_kernel(r, v, gamma, m)
    # A_hat_t = delta_t + gamma lambda A_hat_{t+1}, backwards from A_hat_{T+1} = 0
    advantages = _backward_recursion(delta, m, gamma * lam)
    # R_t = A_hat_t + V(s_t)
    returns = advantages + v
    return advantages, returns


def _backward_recursion(x, mask, g):
    """y_t = x_t + g y_{t+1} backwards over the response tokens of each row, y = 0 after the
    last one and at padding. ``x`` must be 0 at padding.

    GAE's recursion (``x`` the TD errors, ``g`` = gamma lambda) and the returns-to-go
    G_t = r~_t + gamma G_{t+1} of :mod:`ppo_numpy.family.advantages`.
    """
    # at padding y_{t+1} passes through to the token before: x_t is 0 there, its factor 1
    factor = np.where(mask, g, 1)
    y = np.zeros_like(x)
    y_next = x[..., 0] * 0  # nothing after the last response token
    # time-major views (.T), so that step t reads and writes one index
    for t in reversed(range(x.shape[-1])):
        # y_t = x_t + g y_{t+1}
        y_next = x.T[t] + factor.T[t] * y_next
        y.T[t] = y_next
    return where_valid(mask, y)


def gae_kernel(r, v, gamma, lam, m, method="loop", block=BLOCK):
    """:func:`gae` on checked arrays (unchecked kernel; the training loop's and the presets'):
    ``r``, ``v`` 0 at padding (not written into), ``gamma``, ``lam`` in their arithmetic,
    ``m`` a bool mask; ``method`` as in :func:`gae`. Returns ``(advantages, returns)``."""
    if method == "blocked":
        return gae_blocked_kernel(r, v, gamma, lam, m, block)
    advantages = _backward_recursion(td_errors_kernel(r, v, gamma, m), m, gamma * lam)
    return advantages, advantages + v
