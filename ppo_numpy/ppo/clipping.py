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

import numpy as np

from .._checks import check_scalar, prepare, scalar_for, where_valid

__all__ = ["CASE_NAMES", "at_kink", "clip_bounds", "clip_case", "clipped_surrogate",
           "surrogate_term"]


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


#: the branch of a token's term, :func:`clip_case`
UNCLIPPED, CLIPPED, DUAL_CLIPPED, DELTA_CLIPPED = 0, 1, 2, 3
CASE_NAMES = ("unclipped", "clipped", "dual clip", "delta")


def surrogate_term(rho, A, lo, hi, c=None, delta=None):
    """The per-token term min(rho A, clip(rho, lo, hi) A) on checked arrays (unchecked kernel).

    ``rho`` (>= 0) and ``A`` arrays of one shape (float64, or exact Fractions), ``lo`` and
    ``hi`` in their arithmetic, ``c`` > 1 or None (dual clip), ``delta`` > 0 or None (TRL's
    two-sided bound, which caps the ratio of the unclipped branch). Written as the
    frameworks write it, so that it rounds as theirs does.

    >>> surrogate_term(np.array([1.1, 1.5, 0.9, 0.5]), np.array([2.0, 2.0, -1.0, -1.0]),
    ...                0.8, 1.2).round(12).tolist()
    [2.2, 2.4, -0.9, -0.8]
    """
    # min(rho_t, delta): the ratio of the unclipped branch (rho_t itself without delta)
    rho_unclipped = rho if delta is None else np.minimum(rho, delta)
    # min( rho_t A_t , clip(rho_t, 1 - eps, 1 + eps_high) A_t )
    term = np.minimum(rho_unclipped * A, np.clip(rho, lo, hi) * A)
    if c is not None:
        # dual clip, for A_t < 0: max( min(...), c A_t )
        term = np.where(A < 0, np.maximum(term, c * A), term)
    return term


def clip_case(rho, A, lo, hi, c=None, delta=None):
    """The case analysis of the clipped surrogate, token by token (unchecked kernel).

    Written once, used by the gradient, the statistics and the explain tables. With
    lo = 1 - eps, hi = 1 + eps_high and the dual-clip bound c (or none):

        case          where                  term_t       d term_t / d rho_t
        clipped       A > 0 and rho > hi     hi A         0
                      A < 0 and rho < lo     lo A         0
        dual clip     A < 0 and rho > c      c A          0
        unclipped     otherwise              rho A        A

    (A = 0 is unclipped: its term is 0 whatever rho.) With TRL's two-sided bound
    ``delta`` the unclipped branch uses min(rho, delta):

        delta         A > 0 and delta < rho <= hi       delta A            0
                      A < 0 and rho > max(delta, hi)    max(delta, hi) A   0

    At a bound (rho = hi with A > 0, rho = lo or rho = c with A < 0) the derivative
    jumps; the bound counts as inside, so the derivative is A (PyTorch's ``clamp``
    passes the gradient at a bound). Returns an int array of :data:`CASE_NAMES` indices.

    >>> rho, A = np.array([1.1, 1.5, 0.9, 0.5]), np.array([2.0, 2.0, -1.0, -1.0])
    >>> [CASE_NAMES[k] for k in clip_case(rho, A, 0.8, 1.2)]
    ['unclipped', 'clipped', 'unclipped', 'clipped']
    """
    # clipped: A_t > 0 above the range, A_t < 0 below it
    clipped = ((A > 0) & (rho > hi)) | ((A < 0) & (rho < lo))
    case = np.where(clipped, CLIPPED, UNCLIPPED)
    if delta is not None:
        capped = ((A > 0) & (rho > delta) & (rho <= hi)) | ((A < 0) & (rho > delta) & (rho > hi))
        case = np.where(capped, DELTA_CLIPPED, case)
    if c is not None:
        case = np.where((A < 0) & (rho > c) & (case != DELTA_CLIPPED), DUAL_CLIPPED, case)
    return case


def at_kink(rho, A, lo, hi, c=None, delta=None):
    """rho_t exactly on the bound that binds, where d term_t / d rho_t jumps (bool array)."""
    kink = ((A > 0) & (rho == hi)) | ((A < 0) & (rho == lo))
    if c is not None:
        kink |= (A < 0) & (rho == c)
    if delta is not None:
        kink |= (A != 0) & (rho == delta)
    return kink


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
    (rho, A), m = prepare({"rho": rho, "advantages": advantages}, mask,
                          nonnegative={"rho": "ratios"})
    lo, hi = clip_bounds(epsilon, epsilon_high, like=rho)
    c = check_dual_clip(dual_clip)
    c = None if c is None else scalar_for(c, rho)
    # min( rho_t A_t , clip(rho_t, 1 - eps, 1 + eps) A_t ), exactly 0 at padding
    return where_valid(m, surrogate_term(rho, A, lo, hi, c))
