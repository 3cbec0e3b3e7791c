"""The PPO objective (docs/objective.md) and the policy loss frameworks minimise (notebook 09).

    L_PPO = E_{(x,y) ~ pi_old} [ sum_{t=1}^{T} min(rho_t A_t, clip(rho_t, 1-eps, 1+eps) A_t) ]

estimated by the mean over the batch's prompt-response pairs of the sum over
each response's tokens. :func:`ppo_objective` is that number exactly (to be
maximised). :func:`ppo_policy_loss` is its negative under a chosen
aggregation (frameworks usually average over tokens instead of summing) and
returns the statistics frameworks log.
"""

from __future__ import annotations

import numpy as np

from ._validation import prepare
from .aggregation import aggregate, check_mode
from .clipping import clip_bounds, clipped_surrogate
from .ratio import probability_ratio


def ppo_objective(logp, logp_old, advantages, mask=None, epsilon=0.2, **clip_options):
    """L_PPO (docs/objective.md): mean over sequences of the summed clipped surrogate.

    Parameters
    ----------
    logp, logp_old : array (T,) or (B, T)
        Log-probabilities of the taken tokens under pi_theta and pi_theta_old.
    advantages : array, same shape
        A_hat_t.
    mask : array of 0/1, optional
        1 for response tokens.
    epsilon : float >= 0
        Clip width. Default 0.2.
    **clip_options
        ``epsilon_high``, ``dual_clip``: see :func:`clipped_surrogate`.

    Returns
    -------
    float, to be maximised. The mean is over the rows with at least one
    response token (``aggregate``'s ``"seq-mean-token-sum"``).

    Examples
    --------
    Before any update rho = 1, so L_PPO is the mean over sequences of the summed
    advantages: ((0.46575 + 0.385 + 0.3) + 1.0) / 2 = 1.075375.

    >>> A = [[0.46575, 0.385, 0.3], [1.0, 0.0, 0.0]]
    >>> m = [[1, 1, 1], [1, 0, 0]]
    >>> logp = [[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0]]
    >>> round(ppo_objective(logp, logp, A, m), 12)
    1.075375
    """
    # checked here first, so that a bad shape is named against logp (not against rho); in
    # float64 even for Fractions (rho needs exp), as ppo_policy_loss, which it must equal
    (logp, logp_old, advantages), m = prepare(
        {"logp": logp, "logp_old": logp_old, "advantages": advantages}, mask, exact=False)
    rho = probability_ratio(logp, logp_old, m)
    term = clipped_surrogate(rho, advantages, epsilon, mask=m, **clip_options)
    return float(aggregate(term, m, "seq-mean-token-sum"))


def ppo_policy_loss(logp, logp_old, advantages, mask=None, epsilon=0.2, agg="token-mean", *,
                    epsilon_high=None, dual_clip=None, norm=None, log_ratio_clamp=None):
    """Policy loss -aggregate(min(rho A, clip(rho) A)) and the statistics frameworks log.

    Parameters
    ----------
    logp, logp_old, advantages : array (T,) or (B, T)
        As in :func:`ppo_objective`.
    mask : array of 0/1, optional
        1 for response tokens.
    epsilon : float >= 0
        Clip width (the lower one if ``epsilon_high`` is given). Default 0.2.
    agg : str
        Aggregation mode of :func:`aggregate`. Default ``"token-mean"``;
        ``"seq-mean-token-sum"`` gives exactly ``-ppo_objective``.
    epsilon_high, dual_clip : optional
        See :func:`clipped_surrogate`.
    norm : float, optional
        Divisor for ``agg="seq-mean-token-sum-norm"`` (only that mode takes it).
    log_ratio_clamp : float, optional
        See :func:`probability_ratio`.

    Returns
    -------
    loss : float
        To be minimised.
    stats : dict of float
        Token means over the response tokens:

        * ``clipfrac_active``: fraction where the clipped branch is active, i.e.
          the min picks clip(rho) A, strictly below rho A (TRL's and verl's
          ``clipfrac``: ``pg_losses2 > pg_losses``; the dual clip only raises a
          term, and is counted in ``dual_clipfrac``);
        * ``clipfrac_outside``: fraction with rho outside [1 - eps, 1 + eps_high],
          whatever the sign of A (some trainers log this);
        * ``dual_clipfrac``: fraction where the dual clip bound is active;
        * ``approx_kl_k1``, ``approx_kl_k2``, ``approx_kl_k3``: estimates of
          KL(pi_old || pi_theta) from the old samples, with r = rho:
          -log rho, (log rho)^2 / 2 and (rho - 1) - log rho;
        * ``ratio_mean``, ``ratio_min``, ``ratio_max``.

    Examples
    --------
    rho = [1.5, 0.5, 1.1] with A = [2, -1, 1]: the first two are clipped
    (2.4 < 3.0, -0.8 < -0.5), so the token-mean loss is -(2.4 - 0.8 + 1.1)/3 = -0.9.

    >>> import numpy as np
    >>> loss, stats = ppo_policy_loss(np.log([1.5, 0.5, 1.1]), [0.0, 0.0, 0.0], [2.0, -1.0, 1.0])
    >>> round(loss, 12), round(stats["clipfrac_active"], 6)
    (-0.9, 0.666667)
    """
    check_mode(agg, "agg")
    # checked here first, so that a bad shape is named against logp (not against rho); in
    # float64 even for Fractions (rho needs exp), so that term and rho * A below round alike
    (lp, lp_old, A), m = prepare({"logp": logp, "logp_old": logp_old, "advantages": advantages},
                                 mask, exact=False)
    rho = probability_ratio(lp, lp_old, m, log_ratio_clamp=log_ratio_clamp)
    term = clipped_surrogate(rho, A, epsilon, epsilon_high=epsilon_high, dual_clip=dual_clip,
                             mask=m)
    loss = -float(aggregate(term, m, agg, norm=norm))

    n = int(m.sum())
    lo, hi = clip_bounds(epsilon, epsilon_high)
    # why: log rho from the log-probs, not log(rho): rho underflows to 0 for log rho < -745
    log_rho = lp - lp_old
    if log_ratio_clamp is not None:
        log_rho = np.clip(log_rho, -log_ratio_clamp, log_ratio_clamp)
    unclipped = rho * A
    before_dual = np.minimum(unclipped, np.minimum(np.maximum(rho, lo), hi) * A)

    def mean(x):
        return float(np.where(m, x, 0.0).sum() / n)

    stats = {
        "clipfrac_active": mean(term < unclipped),
        "clipfrac_outside": mean((rho < lo) | (rho > hi)),
        "dual_clipfrac": mean(term > before_dual) if dual_clip is not None else 0.0,
        "approx_kl_k1": mean(-log_rho),
        "approx_kl_k2": mean(log_rho**2 / 2),
        "approx_kl_k3": mean(np.expm1(log_rho) - log_rho),
        "ratio_mean": mean(rho),
        "ratio_min": float(np.min(rho[m])),
        "ratio_max": float(np.max(rho[m])),
    }
    return loss, stats
