"""The fast form of GAE (``gae(..., method="blocked")``; the definition is :func:`ppo_numpy.gae`).

    A_hat_t = sum_{l >= 0} (gamma lambda)^l delta_{t+l}

evaluated in blocks of ``C`` time steps instead of one Python step per time
index. Inside a block, A = delta @ W with the triangular W[j, i] = (gamma
lambda)^(j - i) for j >= i. The advantage at each block's first step obeys the
same recursion with (gamma lambda)^C from block to block, so it comes from a
recursive call on T / C numbers, and enters the block before it as gamma lambda
A_next_block_start added to its last delta. Powers never exceed C (smaller ones
flush to 0, they weigh < 1e-308), and the work is one matrix product over the
whole batch: no Python loop over time.

Equal to the backward recursion of :mod:`ppo_numpy.gae` up to rounding (the
sums are added in another order): ``tests/test_td_gae.py`` checks both against
the sum definition in Fractions, bit for bit where the arithmetic is exact, and
within the rounding bound stated there otherwise. Speed: ``docs/benchmarks.md``.
Everything here writes into arrays of its own (buffer reuse, ``out=``): that is
where the speed comes from, and why it is kept apart from the definition.
"""

from __future__ import annotations

import functools

import numpy as np

from ._validation import where_valid, zero_like
from .td import has_holes, late_starts, next_valid_values

__all__ = ["gae_blocked_kernel"]


def gae_blocked_kernel(r, v, gamma, lam, m, block=32):
    """:func:`ppo_numpy.gae` with ``method="blocked"`` on checked float64 arrays (unchecked
    kernel): ``r``, ``v`` 0 at padding and this call's own (``r`` becomes the TD errors, ``v``
    the returns), ``m`` a bool mask. Returns ``(advantages, returns)``."""
    holes = has_holes(m)
    delta = _td_errors_in_place(r, v, float(gamma), m, holes)
    advantages = _gae_blocked(delta, m, float(gamma * lam), block, holes)
    # advantages and v are both exactly 0 at padding, so returns are too
    returns = np.add(advantages, v, out=v)
    return advantages, returns


def _td_errors_in_place(r, v, gamma, m, holes):
    """delta_t = r_t + gamma V(s_{t+1}) - V(s_t) computed in ``r`` (the same operations, in the
    same order, as :func:`ppo_numpy.td.td_errors_kernel`, so the same bits)."""
    # without holes V(s_{t+1}) is simply v[t + 1], as v is 0 at padding (a view: no copy)
    v_next = next_valid_values(v, m)[..., :-1] if holes else v[..., 1:]
    zero = v.flat[0] * 0 if v.size else 0.0  # V(s_{T+1}) = 0
    delta = r
    # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
    np.add(r[..., :-1], v_next if gamma == 1 else gamma * v_next, out=delta[..., :-1])
    np.add(r[..., -1], zero if gamma == 1 else gamma * zero, out=delta[..., -1])
    delta -= v
    # at padding r and v are 0, and so is the next value, except at padding just before a
    # response token (left padding, holes): only then is there anything to zero
    if holes or late_starts(m):
        np.copyto(delta, zero_like(v), where=~m)
    return delta


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

    ``delta``: 0 at padding and this call's own (written into); ``holes``: ``has_holes(mask)``.
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
    elif not A.flags.c_contiguous:  # a slice of the padded blocks: a compact copy, 0 at padding
        A = where_valid(mask, A)
    elif late_starts(mask):
        # why: padding before a response token sums the deltas after it; after a row's last
        # token every delta is 0, and so is the sum
        np.copyto(A, 0.0, where=~mask)
    return A[0] if squeeze else A
