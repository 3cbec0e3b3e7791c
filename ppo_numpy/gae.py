"""Generalized Advantage Estimation of the seed (notebook ``05_gae``).

    A_hat_t = sum_{l=0}^{T-t} (gamma lambda)^l delta_{t+l}

computed by the backward recursion everyone recognises

    A_hat_T = delta_T,    A_hat_t = delta_t + gamma lambda A_hat_{t+1},

and returns R_t = A_hat_t + V(s_t) (the value head's regression target).

Two implementations, tested equal to each other and to the sum definition:

* ``method="loop"``: the recursion, one vectorised step per time index
  (the readable reference);
* ``method="blocked"`` (default for floats): the sum definition evaluated in
  blocks of ``C`` time steps. Inside a block, A = delta @ W with the upper
  triangular W[j, i] = (gamma lambda)^(j - i); across blocks one carry
  A_next_block_start is added with weight (gamma lambda)^(C - i). Powers never
  exceed C, so nothing underflows, and the work is a few matrix products.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_scalar, prepare, scalar_for, where_valid
from .td import td_errors

METHODS = ("blocked", "loop")


def gae(rewards, values, gamma=1.0, lam=0.95, mask=None, *, method=None, block=64):
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
    method : {"blocked", "loop"}, optional
        ``None`` picks ``"blocked"`` for floats and ``"loop"`` for exact Fractions.
    block : int
        Block length C of the blocked method.

    Returns
    -------
    advantages, returns : float64 arrays (exact Fractions for Fraction input), same shape.

    Examples
    --------
    The seed's running example: delta = [0.1, 0.1, 0.3], gamma 1, lambda 0.95:
    A_3 = 0.3, A_2 = 0.1 + 0.95 * 0.3 = 0.385, A_1 = 0.1 + 0.95 * 0.385 = 0.46575.

    >>> A, R = gae([0, 0, 1], [0.5, 0.6, 0.7], gamma=1.0, lam=0.95)
    >>> [round(float(a), 12) for a in A]
    [0.46575, 0.385, 0.3]
    >>> [round(float(x), 12) for x in R]
    [0.96575, 0.985, 1.0]
    """
    lam = check_scalar(lam, "lam", low=0, high=1)
    gamma = check_scalar(gamma, "gamma", low=0, high=1)
    if method is not None and method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; valid ones are {', '.join(METHODS)}")
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block: must be a positive integer, got {block!r}")
    (r, v), m = prepare({"rewards": rewards, "values": values}, mask)
    delta = td_errors(r, v, gamma, m)
    gl = scalar_for(gamma, v) * scalar_for(lam, v)
    if method is None:
        method = "loop" if v.dtype == object else "blocked"
    if method == "loop":
        advantages = _gae_loop(delta, m, gl)
    else:
        advantages = _gae_blocked(delta, m, float(gl), int(block))
    returns = where_valid(m, advantages + v)
    return advantages, returns


def _gae_loop(delta, mask, gl):
    """The backward recursion A_t = delta_t + gamma lambda A_{t+1} over response tokens."""
    advantages = np.zeros_like(delta)
    last = delta[..., 0] * 0  # A_hat after the last response token is 0
    for t in reversed(range(delta.shape[-1])):
        # A_hat_t = delta_t + gamma lambda A_hat_{t+1}   (padding carries A_hat_{t+1} through)
        last = np.where(mask[..., t], delta[..., t] + gl * last, last)
        advantages[..., t] = last
    return where_valid(mask, advantages)


def _compact(x, mask):
    """Move each row's valid entries to its front, keeping their order."""
    pos = np.cumsum(mask, axis=-1) - 1
    out = np.zeros_like(x)
    rows, cols = np.nonzero(mask)
    out[rows, pos[rows, cols]] = x[rows, cols]
    return out, rows, cols, pos


def _gae_blocked(delta, mask, gl, C):
    """The sum definition A_t = sum_l (gl)^l delta_{t+l}, evaluated block by block."""
    squeeze = delta.ndim == 1
    if squeeze:
        delta, mask = delta[None], mask[None]
    # A row whose mask has holes is compacted first, so the sum skips padding.
    runs = mask[:, 0] + np.sum(np.diff(mask.astype(np.int8), axis=-1) == 1, axis=-1)
    compacted = bool(np.any(runs > 1))
    if compacted:
        delta, rows, cols, pos = _compact(delta, mask)
    B, T = delta.shape
    C = min(C, T)
    nb = -(-T // C)
    d = np.zeros((B, nb * C))
    d[:, :T] = delta
    d = d.reshape(B, nb, C)  # (B, nb, C)
    k = np.arange(C)
    expo = k[:, None] - k[None, :]  # W[j, i] = gl^(j - i) for j >= i
    W = np.where(expo >= 0, gl ** np.maximum(expo, 0), 0.0)
    local = d @ W  # (B, nb, C): sums inside each block
    # carry: A at the start of block b = local[b, 0] + gl^C * A at the start of block b+1
    start = np.empty((B, nb + 1))
    start[:, nb] = 0.0
    glC = gl**C
    for b in range(nb - 1, -1, -1):
        start[:, b] = local[:, b, 0] + glC * start[:, b + 1]
    A = local + (gl ** (C - k))[None, None, :] * start[:, 1:, None]
    A = A.reshape(B, nb * C)[:, :T]
    if compacted:
        out = np.zeros_like(A)
        out[rows, cols] = A[rows, pos[rows, cols]]
        A = out
    A = where_valid(mask, A)
    return A[0] if squeeze else A
