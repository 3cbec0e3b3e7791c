"""The clipped surrogate of the objective (docs/objective.md; notebook ``02_clipping``).

    min( rho_t A_t , clip(rho_t, 1 - eps, 1 + eps) A_t )

The per-token term that PPO *maximises*. Two variants used by RLHF
frameworks are keyword options:

* an asymmetric range ``[1 - eps, 1 + eps_high]`` ("clip-higher", DAPO; verl's
  ``clip_ratio_low``/``clip_ratio_high``);
* dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with
  Deep RL"; verl's ``clip_ratio_c``, OpenRLHF's ``dual_clip``): for A_t < 0 the
  term is additionally bounded below by ``c * A_t``, c > 1.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ._lazy import lazy
from ._validation import (
    check_finite,
    check_scalar,
    garbage_errstate,
    is_exact,
    prepare,
    row_blocks,
    scalar_for,
)


def clip_bounds(epsilon, epsilon_high=None, like=None):
    """Return ``(1 - eps, 1 + eps_high)`` after checking both epsilons.

    ``like``: an array whose arithmetic (float, or exact Fractions) the bounds take.
    """
    eps = check_scalar(epsilon, "epsilon", low=0)
    eps_high = eps if epsilon_high is None else check_scalar(epsilon_high, "epsilon_high", low=0)
    if like is None:
        return 1 - eps, 1 + eps_high
    if like.dtype == object:
        # why: the epsilons become Fractions before the subtraction, since
        # 1 - 0.7 in floating point is 0.30000000000000004, not 3/10
        eps, eps_high = scalar_for(eps, like), scalar_for(eps_high, like)
    return scalar_for(1 - eps, like), scalar_for(1 + eps_high, like)


def check_dual_clip(dual_clip):
    """``dual_clip`` checked: ``None`` (off) or a real number c > 1."""
    if dual_clip is None:
        return None
    return check_scalar(dual_clip, "dual_clip", low=1, low_open=True)


#: the branch of a token's term, :attr:`ClipCases.case`
UNCLIPPED, CLIPPED, DUAL_CLIPPED, DELTA_CLIPPED = 0, 1, 2, 3
CASE_NAMES = ("unclipped", "clipped", "dual clip", "delta")


class ClipCases:
    """The case analysis of the clipped surrogate, token by token: written once, used by the
    surrogate, the policy loss's statistics, its gradient and the explain tables.

    With lo = 1 - eps, hi = 1 + eps_high and the dual-clip bound c (or none):

        case          where                  term_t       d term_t / d rho_t
        clipped       A > 0 and rho > hi     hi A         0
                      A < 0 and rho < lo     lo A         0
        dual clip     A < 0 and rho > c      c A          0
        unclipped     otherwise              rho A        A

    (A = 0 is unclipped: its term is 0 whatever rho.) With TRL's two-sided bound
    ``delta`` (``GRPOConfig.delta``) the unclipped branch uses min(rho, delta):

        delta         A > 0 and delta < rho <= hi       delta A      0
                      A < 0 and rho > max(delta, hi)    max(delta, hi) A   0

    The term is computed as the frameworks compute it, ``min(rho A, clip(rho, lo, hi) A)``
    (``min(min(rho, delta) A, ...)`` with delta) and for A < 0 ``max(that, c A)``.
    At a bound (rho = hi with A > 0, rho = lo or rho = c with A < 0) the derivative
    jumps; the bound counts as inside, so the derivative is A (``ppo_numpy.loss_grads``:
    PyTorch's ``clamp`` passes the gradient at a bound).

    The statistics count as frameworks do, from the values (TRL's and verl's
    ``pg_losses2 > pg_losses``): a token is ``counted_clipped`` where the term is
    strictly below rho A, ``counted_dual`` where the dual bound strictly raised it.
    These equal the cases except where the two products are equal: A = 0, or
    rounding makes hi A equal rho A for a rho just past hi.

    Unchecked kernel: ``rho`` (>= 0) and ``A`` arrays of one shape (float64, or exact
    Fractions), the bounds in their arithmetic, ``c`` > 1 or None. Each attribute is
    computed on first use. ``out``: an array of rho's shape that :attr:`term_min` is
    written into (whatever it held is overwritten), else a new one.

    Examples
    --------
    >>> cases = ClipCases(np.array([1.1, 1.5, 0.9, 0.5]), np.array([2.0, 2.0, -1.0, -1.0]),
    ...                   0.8, 1.2)
    >>> [CASE_NAMES[k] for k in cases.case], [round(float(v), 12) for v in cases.term]
    (['unclipped', 'clipped', 'unclipped', 'clipped'], [2.2, 2.4, -0.9, -0.8])
    >>> cases.drho.tolist()
    [2.0, 0.0, -1.0, 0.0]
    """

    def __init__(self, rho, A, lo, hi, c=None, delta=None, out=None):
        self.rho, self.A, self.lo, self.hi, self.c, self.delta = rho, A, lo, hi, c, delta
        self.out = out

    @lazy
    def rho_capped(self):
        """min(rho_t, delta): the ratio of the unclipped branch (rho itself without delta)."""
        return self.rho if self.delta is None else np.minimum(self.rho, self.delta)

    @lazy
    def unclipped(self):
        # rho_t A_t  (min(rho_t, delta) A_t with TRL's delta)
        return self.rho_capped * self.A

    def _clipped(self, out=None):
        # clip(rho_t, 1 - eps, 1 + eps_high) A_t
        if self.rho.dtype != object and self.lo > 0:
            # one pass; equal to the max then min below (no zero whose sign could differ)
            clipped = np.clip(self.rho, self.lo, self.hi, out=out)
        else:
            clipped = np.minimum(np.maximum(self.rho, self.lo), self.hi, out=out)
        clipped *= self.A
        return clipped

    @lazy
    def clipped(self):
        return self._clipped()

    @lazy
    def term_min(self):
        # min( rho_t A_t , clip(rho_t, 1-eps, 1+eps) A_t )
        if "clipped" in self.__dict__:
            return np.minimum(self.unclipped, self.clipped, out=self.out)
        # the clipped product is not kept: the min is written over it (one array fewer)
        clipped = self._clipped(self.out)
        return np.minimum(self.unclipped, clipped, out=clipped)

    @lazy
    def term(self):
        if self.c is None:
            return self.term_min
        # for A_t < 0: max( min(...), c A_t )
        return np.where(self.A < 0, np.maximum(self.term_min, self.c * self.A), self.term_min)

    @lazy
    def above(self):
        """rho_t > 1 + eps_high."""
        return self.rho > self.hi

    @lazy
    def below(self):
        """rho_t < 1 - eps."""
        return self.rho < self.lo

    @lazy
    def is_clipped(self):
        """The clipped case: A_t > 0 and rho_t above the range, or A_t < 0 and rho_t below it."""
        A = self.A
        return np.where(A > 0, self.above, self.below & (A < 0))

    @lazy
    def case(self):
        rho, A = self.rho, self.A
        case = np.where(self.is_clipped, CLIPPED, UNCLIPPED)
        if self.delta is not None:
            d = self.delta
            capped = ((A > 0) & (rho > d) & (rho <= self.hi)) | (
                (A < 0) & (rho > d) & (rho > self.hi))
            case = np.where(capped, DELTA_CLIPPED, case)
        if self.c is not None:
            case = np.where((A < 0) & (rho > self.c) & (case != DELTA_CLIPPED), DUAL_CLIPPED,
                            case)
        return case

    @lazy
    def drho(self):
        """d term_t / d rho_t: A_t where unclipped, 0 where a constant is taken."""
        zero = Fraction(0) if self.A.dtype == object else 0.0
        if self.c is None and self.delta is None:
            return np.where(self.is_clipped, zero, self.A)  # (the only other case)
        return np.where(self.case == UNCLIPPED, self.A, zero)

    @lazy
    def at_kink(self):
        """rho_t exactly on the bound that binds, where the derivative jumps."""
        rho, A = self.rho, self.A
        kink = ((A > 0) & (rho == self.hi)) | ((A < 0) & (rho == self.lo))
        if self.c is not None:
            kink |= (A < 0) & (rho == self.c)
        if self.delta is not None:
            kink |= (A != 0) & (rho == self.delta)
        return kink

    @lazy
    def low_clipped(self):
        """A_t < 0 and the ratio of the unclipped branch below 1 - eps (TRL's
        ``clip_ratio/low_mean``)."""
        return (self.rho_capped < self.lo) & (self.A < 0)

    @lazy
    def high_clipped(self):
        """A_t > 0 and the ratio of the unclipped branch above 1 + eps_high (TRL's
        ``clip_ratio/high_mean``)."""
        return (self.rho_capped > self.hi) & (self.A > 0)

    @lazy
    def counted_clipped(self):
        return self.term < self.unclipped

    @lazy
    def counted_dual(self):
        if self.c is None:
            return np.zeros(self.rho.shape, dtype=bool)
        return self.term > self.term_min


def clipped_surrogate(rho, advantages, epsilon=0.2, *, epsilon_high=None, dual_clip=None,
                      mask=None):
    """Per-token clipped surrogate min(rho A, clip(rho, 1-eps, 1+eps) A).

    Parameters
    ----------
    rho : array (T,) or (B, T)
        Probability ratios (see :func:`probability_ratio`), >= 0.
    advantages : array, same shape
        A_hat_t.
    epsilon : float >= 0
        Lower clip width: the range starts at ``1 - epsilon``. Default 0.2.
    epsilon_high : float >= 0, optional
        Upper clip width; ``None`` means ``epsilon`` (symmetric, as in the objective).
    dual_clip : float > 1, optional
        For A_t < 0, the term becomes ``max(min(...), dual_clip * A_t)``.
        ``None`` (default): off, as in the objective.
    mask : array of 0/1, optional
        1 for response tokens; the output is exactly 0 at padding.

    Returns
    -------
    float64 array (or exact Fractions for Fraction input), same shape.
    The objective term to maximise; a loss is its negative.

    Examples
    --------
    The four cases with eps = 0.2: A > 0 inside and above the range,
    A < 0 inside and below it.

    >>> out = clipped_surrogate([1.1, 1.5, 0.9, 0.5], [2.0, 2.0, -1.0, -1.0])
    >>> [round(float(v), 12) for v in out]
    [2.2, 2.4, -0.9, -0.8]

    At rho = 1 the term is the advantage itself:

    >>> [float(v) for v in clipped_surrogate([1.0, 1.0], [0.3, -0.7])]
    [0.3, -0.7]
    """
    arrays = {"rho": rho, "advantages": advantages}
    # float values are checked block by block below, where the block's work then finds them
    # in the cache (on a million entries a check of the whole arrays costs three more passes)
    checked = any(map(is_exact, arrays.values()))
    (rho, adv), m = prepare(arrays, mask, zero_padding=False, nonnegative={"rho": "ratios"},
                            check_values=checked)
    lo, hi = clip_bounds(epsilon, epsilon_high, like=rho)
    c = check_dual_clip(dual_clip)
    c = None if c is None else scalar_for(c, rho)
    zero = 0.0 if rho.dtype != object else Fraction(0)

    def block(rows):
        nonlocal checked
        r, a = rho[rows], adv[rows]
        # the block's term written straight into its rows of the output (without a dual
        # clip; with one, term is a new array, copied there)
        cases = ClipCases(r, a, lo, hi, c, out=out[rows])
        term = cases.term
        with np.errstate(over="ignore", invalid="ignore"):
            # rho >= 0 (a NaN fails too), and rho A finite: a NaN or inf in rho or A makes
            # it NaN or inf (an overflow of finite values only costs the look below)
            fine = checked or not r.size or (r.min() >= 0 and np.isfinite(cases.unclipped.sum()))
        if not fine:
            # something to look at in this block, perhaps only at padding: the whole arrays
            # checked once, naming the first bad entry (rho >= 0 and finite, A finite)
            check_finite(rho, "rho", m, nonnegative="ratios")
            check_finite(adv, "advantages", m)
            checked = True
        if mask is not None:
            # exactly 0 at padding (the inputs may hold anything finite there)
            np.copyto(term, zero, where=~m[rows])
        if c is not None:
            out[rows] = term

    out = np.empty_like(rho)
    with garbage_errstate(rho):
        for rows in row_blocks(rho):
            block(rows)
    return out
