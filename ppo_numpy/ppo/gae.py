"""Generalized Advantage Estimation of the objective (docs/objective.md; notebook ``05_gae``).

    A_hat_t = sum_{l=0}^{T-t} (gamma lambda)^l delta_{t+l}

computed by the backward recursion everyone recognises

    A_hat_T = delta_T,    A_hat_t = delta_t + gamma lambda A_hat_{t+1},

and returns R_t = A_hat_t + V(s_t) (the value head's regression target).

The recursion below is the definition, and what :func:`gae` runs on small
batches (``method="loop"``). On batches of at least ``BLOCKED_FROM`` tokens it
runs the fast form of ``ppo_numpy.fast.gae_blocked`` (``method="blocked"``: the
same sums, block by block, with matrix products instead of a Python step per
time index), tested equal to the recursion and to the sum definition in
``tests/test_td_gae.py``; measured speed in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import numpy as np

from .._checks import (
    check_choice,
    check_finite,
    check_int,
    check_scalar,
    prepare,
    scalar_for,
    where_valid,
)
from ..fast.gae_blocked import BLOCK, gae_blocked_kernel, gae_blocked_with_sums
from .td import td_errors_kernel

__all__ = ["METHODS", "gae", "gae_kernel"]

METHODS = ("blocked", "loop")

#: ``method=None`` runs the blocked form from this many entries (B T) on: below it the
#: recursion's T Python steps cost less than the blocked form's fixed overhead would save
BLOCKED_FROM = 1 << 15


def gae(rewards, values, gamma=1.0, lam=0.95, mask=None, *, method=None, block=BLOCK):
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
    method : {"loop", "blocked"}, optional
        ``"loop"``: the backward recursion below. ``"blocked"``: its fast form
        (``ppo_numpy.fast.gae_blocked``; float64 only, equal up to rounding, see
        ``tests/test_td_gae.py``). ``None`` (default): ``"blocked"`` for float input of
        at least ``BLOCKED_FROM`` = 32768 entries, ``"loop"`` otherwise (and always for
        exact Fractions).
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
    if method is not None:
        check_choice(method, "method", METHODS, "method")
    block = check_int(block, "block")
    # shapes and the mask checked here, the values below; large float arrays come back as
    # given (the blocked form reads no padding)
    (r, v), m = prepare({"rewards": rewards, "values": values}, mask, zero_padding=False,
                        check_values=False)
    if method == "blocked" and v.dtype == object:
        raise ValueError("method: 'blocked' computes in float64; exact Fraction input needs "
                         "method='loop' (or None, which picks it)")
    if _blocked(method, v):
        advantages, returns, sums = gae_blocked_with_sums(r, v, gamma, lam, m, block)
        # why: one short read instead of two long ones: a NaN or inf in rewards or values at
        # a response token makes delta_t there non-finite, and with it its block's sum (or
        # R_t = A_t + V(s_t), when there are no sums); only then are the inputs read, to name
        # the argument (finite inputs that overflow pass)
        with np.errstate(over="ignore", invalid="ignore"):
            finite = np.isfinite((returns if sums is None else sums).sum())
        if not finite:
            check_finite(r, "rewards", m)
            check_finite(v, "values", m)
        return advantages, returns
    check_finite(r, "rewards", m)
    check_finite(v, "values", m)
    # the recursion reads r and v as 0 at padding
    r, v = where_valid(m, r), where_valid(m, v)
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


def _blocked(method, v) -> bool:
    """The size rule: ``method`` given, or None and float ``v`` of >= BLOCKED_FROM entries."""
    return method == "blocked" or (method is None and v.dtype != object
                                   and v.size >= BLOCKED_FROM)


def gae_kernel(r, v, gamma, lam, m, method=None, block=BLOCK):
    """:func:`gae` on checked arrays (unchecked kernel; the training loop's and the presets'):
    ``r``, ``v`` 0 at padding (not written into), ``gamma``, ``lam`` in their arithmetic,
    ``m`` a bool mask; ``method`` as in :func:`gae` (None: the same size rule). Returns
    ``(advantages, returns)``."""
    if _blocked(method, v):
        return gae_blocked_kernel(r, v, gamma, lam, m, block)
    advantages = _backward_recursion(td_errors_kernel(r, v, gamma, m), m, gamma * lam)
    return advantages, advantages + v
