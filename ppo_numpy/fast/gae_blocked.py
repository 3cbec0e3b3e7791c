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

Equal to the backward recursion of :mod:`ppo_numpy.ppo.gae` up to rounding (the
sums are added in another order): ``tests/test_td_gae.py`` checks both against
the sum definition in Fractions, bit for bit where the arithmetic is exact, and
within the rounding bound stated there otherwise. Speed: ``docs/benchmarks.md``.
Everything here writes into arrays of its own (buffer reuse, ``out=``, the two outputs
halves of one array, the TD errors added on flat views): that is where the speed comes
from, and why it is kept apart from the definition.
"""

from __future__ import annotations

import functools

import numpy as np

from .._checks import check_finite, check_shapes
from ..ppo.td import has_holes, late_starts, next_valid_values

__all__ = ["BLOCK", "BLOCKED_FROM", "gae_blocked", "gae_blocked_kernel", "gae_blocked_with_sums",
           "right_padded_lengths", "use_blocked"]

#: the default block length C: the product costs 2 C operations per entry, the recursion
#: over blocks a few passes over T / C numbers per level (C = 8 measured fastest at (256, 1024))
BLOCK = 8

#: the size rule of the callers that choose GAE's form by size (the presets, the training
#: loop): the blocked form from this many entries (B T) on; below it the recursion's T Python
#: steps cost less than the blocked form's fixed overhead would save
BLOCKED_FROM = 1 << 15


def use_blocked(v) -> bool:
    """The size rule: float ``v`` (the values) of at least :data:`BLOCKED_FROM` entries."""
    return v.dtype != object and v.size >= BLOCKED_FROM


def gae_blocked(rewards, values, gamma, lam, mask, block=BLOCK):
    """:func:`ppo_numpy.gae` by blocks (``gae(..., method="blocked")``, which checks
    ``gamma``, ``lam`` and ``block`` and calls this): the arrays' shapes and mask checked
    here, their values by one short read of the results.

    A NaN or inf in rewards or values at a response token makes delta_t there non-finite, and
    with it its block's sum (or R_t = A_t + V(s_t), when there are no sums); only then are the
    inputs read, to name the argument (finite inputs that overflow pass). Nothing at padding
    is read, so the arrays are used as given (no copy to zero their padding).
    """
    (r, v), m = check_shapes({"rewards": rewards, "values": values}, mask, exact=False)
    advantages, returns, sums = gae_blocked_with_sums(r, v, gamma, lam, m, block)
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite((returns if sums is None else sums).sum())
    if not finite:
        check_finite(r, "rewards", m)
        check_finite(v, "values", m)
    return advantages, returns


def gae_blocked_kernel(r, v, gamma, lam, m, block=BLOCK):
    """:func:`ppo_numpy.gae` with ``method="blocked"`` on checked float64 arrays (unchecked
    kernel): ``r``, ``v`` what they hold at padding is never used (non-finite values there
    are allowed), not written into; ``m`` a bool mask. Returns ``(advantages, returns)``.

    The two outputs are the two halves of one new (2, B, T) array, which holds the TD errors
    too (right padding; left padding and holes take one more array): the fewer fresh arrays,
    the fewer pages a fresh process maps on each call (glibc gives a freed block back to the
    system once the free space at the top of its heap passes twice the largest block it has
    mapped), and the less memory each pass streams through.
    """
    advantages, returns, _ = gae_blocked_with_sums(r, v, gamma, lam, m, block)
    return advantages, returns


def gae_blocked_with_sums(r, v, gamma, lam, m, block=BLOCK):
    """:func:`gae_blocked_kernel` and ``sums``: an array of T / C times fewer numbers that is
    finite exactly when the TD errors at the response tokens are (unless finite ones
    overflow), for :func:`gae_blocked` to check its inputs by one short read; ``None``
    when there are none (then it reads the returns instead).

    ``sums`` are the block sums sum_j (gamma lambda)^j delta_(kC + j) of a right-padded
    batch: a NaN or inf among a block's TD errors makes its sum NaN or inf, as every weight
    (gamma lambda)^j, j < C, is > 0 (else ``None``).
    """
    out = np.empty((2,) + v.shape)
    advantages, returns = out[0], out[1]
    padding = ~m
    lengths = right_padded_lengths(m)
    late = 0 if lengths is not None else late_starts(m)  # runs after padding: left, holes
    holes = lengths is None and has_holes(m, late)
    with np.errstate(over="ignore", invalid="ignore"):  # garbage at padding
        if late:
            # V(s_t), 0 at padding: the returns' buffer until the advantages are added to it
            _valid_copy(returns, v, padding)
            delta = _td_errors(r, returns, float(gamma), m, holes, padding)
        else:
            # the TD errors in the returns' buffer: read by the product, then overwritten
            delta = _td_errors_right_padded(r, v, float(gamma), lengths, padding, returns)
        sums = _gae_blocked(delta, m, float(gamma * lam), block, holes, late, advantages)
        # R_t = A_t + V(s_t); A is exactly 0 at padding
        np.add(advantages, returns if late else v, out=returns)
    if not late:
        np.copyto(returns, 0.0, where=padding)
    return advantages, returns, sums


def right_padded_lengths(m):
    """The number of response tokens of each row, shape ``m.shape[:-1]``, when every row of
    the bool mask ``m`` is one run from t = 0 (right padding, or no padding); else ``None``.

    A row's first padding step (argmin) counts the tokens before it; the rows are runs from
    t = 0 exactly when these counts add up to all the tokens of the mask.

    >>> right_padded_lengths(np.array([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=bool))
    array([2, 4, 0])
    >>> right_padded_lengths(np.array([[1, 0, 1, 0]], dtype=bool)) is None  # a hole
    True
    """
    T = m.shape[-1]
    m2 = m.reshape(-1, T)
    n = np.argmin(m2, axis=-1)
    # argmin is 0 for a row of tokens only (and for one that starts with padding); only
    # those rows are read again (a column of the mask would cost a cache miss per row)
    zero = np.flatnonzero(n == 0)
    n[zero] = m2[zero, 0] * T
    return n.reshape(m.shape[:-1]) if n.sum() == np.count_nonzero(m) else None


def _valid_copy(dst, x, padding):
    """dst = x at the response tokens, exactly 0 at ``padding`` (``where_valid`` into ``dst``)."""
    np.copyto(dst, x)
    np.copyto(dst, 0.0, where=padding)


def _td_errors(r, v, gamma, m, holes, padding):
    """delta_t = r_t + gamma V(s_{t+1}) - V(s_t), a new array (the same operations, in the same
    order, as :func:`ppo_numpy.ppo.td.td_errors_kernel`, so the same bits); ``v`` 0 at padding,
    ``r`` anything there, ``padding`` = ``~m``."""
    v_next = next_valid_values(v, m) if holes else _shifted(v)
    delta = r + (v_next if gamma == 1 else gamma * v_next)
    delta -= v
    np.copyto(delta, 0.0, where=padding)
    return delta


def _shifted(v):
    """v[..., t + 1], 0 after the last step."""
    out = np.zeros(v.shape)
    out[..., :-1] = v[..., 1:]
    return out


def _td_errors_right_padded(r, v, gamma, lengths, padding, delta):
    """:func:`_td_errors` for a mask whose rows are runs from t = 0 (right padding) of
    ``lengths`` tokens (:func:`right_padded_lengths`), with ``r`` and ``v`` anything at
    padding.

    V(s_{t+1}) is v[t + 1], except at a row's last response token (the value after it is
    0, whatever the padding holds), which is written again: the sum r_t + V(s_{t+1}) is
    taken on the flat arrays, in one contiguous pass (the 2-D slices [:, :-1] cost five
    times as much here). Written into ``delta`` (C-contiguous).
    """
    flat, v_flat = delta.reshape(-1), v.reshape(-1)
    np.add(r.reshape(-1)[:-1], v_flat[1:] if gamma == 1 else gamma * v_flat[1:],
           out=flat[:-1])
    # the step followed by no response token, each row's last one: r + gamma * 0 (after a
    # row's last step the sum read the next row; padding steps are zeroed below)
    T = delta.shape[-1]
    n = lengths.reshape(-1)
    rows = np.flatnonzero(n)
    last = rows * T + n[rows] - 1
    flat[last] = r.reshape(-1)[last] + 0.0
    delta -= v
    np.copyto(delta, 0.0, where=padding)
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


#: rows per product of :func:`_matmul` for C = 8; R C^2 = 65536 multiply-adds per product
ROWS_PER_PRODUCT = 1024


def rows_per_product(C: int) -> int:
    """Rows of each product of :func:`_matmul` for blocks of C: ROWS_PER_PRODUCT 64 / C^2,
    at least 128 (products small enough for BLAS to keep them on one thread)."""
    return max(128, ROWS_PER_PRODUCT * 64 // C**2)
INNER_BLOCK = 16


def _matmul(x, W, out=None):
    """x @ W for a C-contiguous 2-D x, as a stack of products of :func:`rows_per_product` rows,
    into ``out`` (a new array when None; C-contiguous, x's rows by W's columns).

    Why: BLAS runs a small product on one thread and a large one on every core;
    on a busy machine the large one waits for the other cores and takes many
    times longer than the stack (measured in ``docs/benchmarks.md``; here, with two
    threads on two busy cores, (32768, 8) @ (8, 8) in one product: 15.7 ms, in stacks of
    1024 rows: 0.27 ms).
    """
    M, R = x.shape[0], rows_per_product(W.shape[0])
    head = M - M % R
    if out is None:
        out = np.empty((M, W.shape[1]))
    if head:
        np.matmul(x[:head].reshape(-1, R, x.shape[1]), W,
                  out=out[:head].reshape(-1, R, W.shape[1]))
    if head < M:
        np.matmul(x[head:], W, out=out[head:])
    return out


def _suffix_sums(x, g, C, out=None):
    """y_t = sum_{l >= 0} g^l x_{t+l} along the last axis of a dense (B, n) array, into
    ``out`` (a C-contiguous (B, n) array; a new one when None). Returns ``(y, first)``:
    ``first`` the (B, n / C) block sums below (``None`` when n <= C).

    Blocks of C steps: inside a block y = x @ W (W from :func:`_power_matrix`).
    The value at the start of each block obeys the same recursion with g^C
    over blocks, so it is computed by a recursive call on (B, n / C) numbers;
    it enters the block before as an extra g * y_start on that block's last step.
    Writes into ``x`` (the callers pass arrays of their own).
    """
    B, n = x.shape
    W = _power_matrix(g, min(C, n))
    if n <= C:
        return _matmul(np.ascontiguousarray(x), W, out), None
    nb = -(-n // C)
    whole = n == nb * C and x.flags.c_contiguous
    if whole:
        d = x
    else:
        d = np.zeros((B, nb * C))
        d[:, :n] = x
    d = d.reshape(B * nb, C)
    # y at the first step of each block, counting that block alone
    first = _matmul(d, W[:, :1]).reshape(B, nb)
    # y_start(b) = first(b) + g^C y_start(b + 1)   (blocks of INNER_BLOCK at least: on these
    # T / C numbers a call costs more than its arithmetic)
    start = _suffix_sums(first, g**C, max(C, INNER_BLOCK))[0]
    # y_(last of block b) gains g * y_start(b + 1), and every earlier step its discounted share;
    # a row's last block gains 0 (why flat: one strided 1-D pass costs half the 2-D one)
    carry = np.empty(B * nb)
    np.multiply(start.reshape(-1)[1:], g, out=carry[:-1])
    carry[nb - 1::nb] = 0.0
    d.reshape(-1)[C - 1::C] += carry
    if out is None:
        out = np.empty((B, n))
    if whole:  # the product straight into out
        _matmul(d, W, out.reshape(B * nb, C))
    else:
        out[...] = _matmul(d, W).reshape(B, nb * C)[:, :n]
    return out, first


def _gae_blocked(delta, mask, gl, C, holes, late, out):
    """The sum definition A_t = sum_l (gl)^l delta_{t+l}, evaluated block by block, into
    ``out`` (C-contiguous, delta's shape).

    ``delta``: 0 at padding and this call's own (written into); ``holes``: ``has_holes(mask)``,
    ``late``: ``late_starts(mask)``. Returns the ``sums`` of :func:`gae_blocked_with_sums`.
    """
    if delta.ndim == 1:
        delta, mask, out = delta[None], mask[None], out[None]
    # A row whose mask has holes is compacted first, so the sum skips padding.
    # why max(C, 2): with C = 1 the recursion over blocks would not shrink
    if holes:
        compact, rows, cols, pos = _compact(delta, mask)
        A = _suffix_sums(compact, gl, max(C, 2))[0]
        out[...] = 0.0
        out[rows, cols] = A[rows, pos[rows, cols]]
        return None
    first = _suffix_sums(delta, gl, max(C, 2), out)[1]
    if late:
        # why: padding before a response token sums the deltas after it; after a row's last
        # token every delta is 0, and so is the sum
        np.copyto(out, 0.0, where=~mask)
        return None
    # the block sums weigh every delta by (gl)^j > 0, j < C (a subnormal weight is flushed to 0)
    return first if _power_matrix(gl, min(max(C, 2), delta.shape[-1]))[-1, 0] > 0 else None
