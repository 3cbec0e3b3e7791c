"""Generalized Advantage Estimation of the objective (docs/objective.md; notebook ``05_gae``).

    A_hat_t = sum_{l=0}^{T-t} (gamma lambda)^l delta_{t+l}

computed by the backward recursion everyone recognises

    A_hat_T = delta_T,    A_hat_t = delta_t + gamma lambda A_hat_{t+1},

and returns R_t = A_hat_t + V(s_t) (the value head's regression target).

Two implementations, tested equal to each other and to the sum definition:

* ``method="loop"``: the recursion, one vectorised step per time index
  (the readable reference);
* ``method="blocked"`` (default for floats): the sum definition evaluated in
  blocks of ``C`` time steps. Inside a block, A = delta @ W with the triangular
  W[j, i] = (gamma lambda)^(j - i) for j >= i. The advantage at each block's
  first step obeys the same recursion with (gamma lambda)^C from block to
  block, so it comes from a recursive call on T / C numbers, and enters the
  block before it as gamma lambda A_next_block_start added to its last delta.
  Powers never exceed C (smaller ones flush to 0, they weigh < 1e-308), and the
  work is one matrix product over the whole batch: no Python loop over time.
  Measured speed against the loop: ``docs/benchmarks.md``.
"""

from __future__ import annotations

import functools

import numpy as np

from ._validation import check_choice, check_int, check_scalar, prepare, scalar_for, where_valid
from .td import has_holes, td_errors_kernel

__all__ = ["METHODS", "gae", "gae_kernel"]

METHODS = ("blocked", "loop")


def gae(rewards, values, gamma=1.0, lam=0.95, mask=None, *, method=None, block=32):
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
        ``None`` picks ``"blocked"`` for floats and ``"loop"`` for exact Fractions
        (``"blocked"`` computes in float64 and refuses Fractions).
    block : int >= 1
        Block length C of the blocked method (speed only; 1 behaves as 2). Default 32.

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
    (r, v), m = prepare({"rewards": rewards, "values": values}, mask)
    if method is None:
        method = "loop" if v.dtype == object else "blocked"
    elif method == "blocked" and v.dtype == object:
        raise ValueError("method: 'blocked' computes in float64; exact Fraction input needs "
                         "method='loop' (or None, which picks it)")
    return gae_kernel(r, v, scalar_for(gamma, v), scalar_for(lam, v), m, method, block)


def gae_kernel(r, v, gamma, lam, m, method="blocked", block=32):
    """:func:`gae` on checked arrays (unchecked kernel): ``r``, ``v`` 0 at padding and this
    call's own (``r`` becomes the TD errors, ``v`` the returns), ``gamma``, ``lam`` in their
    arithmetic, ``m`` a bool mask, ``method`` resolved. Returns ``(advantages, returns)``."""
    holes = has_holes(m)
    delta = td_errors_kernel(r, v, gamma, m, holes, overwrite_r=True)
    gl = gamma * lam
    if method == "loop":
        advantages = _gae_loop(delta, m, gl)
    else:
        advantages = _gae_blocked(delta, m, float(gl), block, holes)
    # advantages and v are both exactly 0 at padding, so returns are too
    returns = np.add(advantages, v, out=v)
    return advantages, returns


def _gae_loop(delta, mask, gl):
    """The backward recursion A_t = delta_t + gamma lambda A_{t+1} over response tokens.

    Also the returns-to-go G_t = r~_t + gamma G_{t+1} of :mod:`ppo_numpy.group_advantages`
    (``delta`` the rewards, ``gl`` gamma); 0 at padding.
    """
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


@functools.lru_cache(maxsize=64)
def _power_matrix(g, n):
    """W[j, i] = g^(j - i) for j >= i, else 0: (x @ W)_i = sum_{j >= i} g^(j - i) x_j.

    Cached (read-only): the same few (g, n) come back at every call.
    """
    k = np.arange(n)
    expo = k[:, None] - k[None, :]
    W = np.where(expo >= 0, g ** np.maximum(expo, 0).astype(np.float64), 0.0)
    # why: subnormal weights make the matrix product slow on x86 and weigh < 1e-308
    W[W < np.finfo(np.float64).tiny] = 0.0
    W.flags.writeable = False
    return W


ROWS_PER_PRODUCT = 128


def _matmul(x, W):
    """x @ W for a C-contiguous 2-D x, as a stack of products of ROWS_PER_PRODUCT rows.

    Why: BLAS runs a small product on one thread and a large one on every core;
    on a busy machine the large one waits for the other cores and takes many
    times longer than the stack (measured in ``docs/benchmarks.md``).
    """
    M, R = x.shape[0], ROWS_PER_PRODUCT
    head = M - M % R
    out = np.empty((M, W.shape[1]))
    if head:
        np.matmul(x[:head].reshape(-1, R, x.shape[1]), W,
                  out=out[:head].reshape(-1, R, W.shape[1]))
    if head < M:
        np.matmul(x[head:], W, out=out[head:])
    return out


def _suffix_sums(x, g, C):
    """y_t = sum_{l >= 0} g^l x_{t+l} along the last axis of a dense (B, n) array.

    Blocks of C steps: inside a block y = x @ W (W from :func:`_power_matrix`).
    The value at the start of each block obeys the same recursion with g^C
    over blocks, so it is computed by a recursive call on (B, n / C) numbers;
    it enters the block before as an extra g * y_start on that block's last step.
    Writes into ``x`` (the callers pass arrays of their own).
    """
    B, n = x.shape
    W = _power_matrix(g, min(C, n))
    if n <= C:
        return _matmul(np.ascontiguousarray(x), W)
    nb = -(-n // C)
    if n == nb * C and x.flags.c_contiguous:
        d = x
    else:
        d = np.zeros((B, nb * C))
        d[:, :n] = x
    d = d.reshape(B * nb, C)
    # y at the first step of each block, counting that block alone
    first = _matmul(d, W[:, :1]).reshape(B, nb)
    # y_start(b) = first(b) + g^C y_start(b + 1)
    start = _suffix_sums(first, g**C, C)
    # y_(last of block b) gains g * y_start(b + 1), and every earlier step its discounted share
    d.reshape(B, nb, C)[:, :-1, C - 1] += g * start[:, 1:]
    y = _matmul(d, W)  # (B * nb, C)
    return y.reshape(B, nb * C)[:, :n]


def _gae_blocked(delta, mask, gl, C, holes):
    """The sum definition A_t = sum_l (gl)^l delta_{t+l}, evaluated block by block.

    ``delta``: 0 at padding and this call's own (written into), as from :func:`td_errors_kernel`;
    ``holes``: ``has_holes(mask)``.
    """
    squeeze = delta.ndim == 1
    if squeeze:
        delta, mask = delta[None], mask[None]
    # A row whose mask has holes is compacted first, so the sum skips padding.
    if holes:
        delta, rows, cols, pos = _compact(delta, mask)
    # why: with C = 1 the recursion over blocks would not shrink
    A = _suffix_sums(delta, gl, max(C, 2))
    if holes:
        out = np.zeros_like(A)
        out[rows, cols] = A[rows, pos[rows, cols]]
        A = out
    elif A.flags.c_contiguous:
        np.copyto(A, 0.0, where=~mask)
    else:  # a slice of the padded blocks: a compact copy, 0 at padding
        A = where_valid(mask, A)
    return A[0] if squeeze else A
