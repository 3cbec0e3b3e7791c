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

from ._validation import check_scalar, prepare, scalar_for, where_valid


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
    (rho, adv), m = prepare({"rho": rho, "advantages": advantages}, mask)
    if np.any(rho < 0):
        idx = tuple(int(i) for i in np.argwhere(rho < 0)[0])
        raise ValueError(f"rho: ratios must be >= 0, got {rho[idx]} at index {idx}")
    lo, hi = clip_bounds(epsilon, epsilon_high, like=rho)
    # min( rho_t A_t , clip(rho_t, 1-eps, 1+eps) A_t )
    unclipped = rho * adv
    clipped = np.minimum(np.maximum(rho, lo), hi) * adv
    surrogate = np.minimum(unclipped, clipped)
    if dual_clip is not None:
        c = check_scalar(dual_clip, "dual_clip", low=1, low_open=True)
        # for A_t < 0: max( min(...), c A_t )
        c = scalar_for(c, rho)
        surrogate = np.where(adv < 0, np.maximum(surrogate, c * adv), surrogate)
    return where_valid(m, surrogate)
