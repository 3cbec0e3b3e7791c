"""The PPO objective (docs/objective.md) and the policy loss frameworks minimise (notebook 09).

    L_PPO = E_{(x,y) ~ pi_old} [ sum_{t=1}^{T} min(rho_t A_t, clip(rho_t, 1-eps, 1+eps) A_t) ]

estimated by the mean over the batch's prompt-response pairs of the sum over
each response's tokens. :func:`ppo_objective` is that number exactly (to be
maximised). :func:`ppo_policy_loss` is its negative under a chosen
aggregation (frameworks usually average over tokens instead of summing) and
returns the statistics frameworks log.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ._validation import prepare, where_valid
from .aggregation import aggregate_kernel, aggregation_weights
from .clipping import ClipCases
from .loss_options import PolicyLossOptions, resolve
from .ratio import log_ratio


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
    # in float64 even for Fractions (rho needs exp), as ppo_policy_loss, which it must equal
    (logp, logp_old, advantages), m = prepare(
        {"logp": logp, "logp_old": logp_old, "advantages": advantages}, mask, exact=False)
    opts = PolicyLossOptions(epsilon=epsilon, agg="seq-mean-token-sum", **clip_options)
    return -policy_loss_kernel(logp, logp_old, advantages, m, opts).loss


def ppo_policy_loss(logp, logp_old, advantages, mask=None, epsilon=0.2, agg="token-mean", *,
                    epsilon_high=None, dual_clip=None, norm=None, log_ratio_clamp=None,
                    options=None):
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
    options : PolicyLossOptions, optional
        All of ``epsilon``, ``agg``, ``epsilon_high``, ``dual_clip``, ``norm`` and
        ``log_ratio_clamp`` in one object (then give none of those keywords).

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
    opts = resolve(options, epsilon=epsilon, agg=agg, epsilon_high=epsilon_high,
                   dual_clip=dual_clip, norm=norm, log_ratio_clamp=log_ratio_clamp)
    # in float64 even for Fractions (rho needs exp), so that term and rho * A round alike
    (lp, lp_old, A), m = prepare({"logp": logp, "logp_old": logp_old, "advantages": advantages},
                                 mask, exact=False)
    out = policy_loss_kernel(lp, lp_old, A, m, opts)
    return out.loss, out.stats()


class PolicyLoss:
    """The policy loss of one batch and everything derived from it, each computed on first use.

    Unchecked kernel behind :func:`ppo_policy_loss`, :func:`ppo_numpy.policy_loss_grad`
    and the presets: ``logp``, ``logp_old``, ``A`` float64 (B, T) or (T,) arrays, 0 at
    padding; ``m`` the bool mask; ``opts`` a :class:`PolicyLossOptions`. Attributes:
    ``log_rho`` and ``passes`` (:func:`ppo_numpy.ratio.log_ratio`), ``rho`` (0 at padding),
    ``cases`` (:class:`ppo_numpy.clipping.ClipCases`), ``loss``, ``dlogp``; :meth:`stats`.
    """

    def __init__(self, logp, logp_old, A, m, opts: PolicyLossOptions):
        self.m, self.A, self.opts = m, A, opts
        self.log_rho, self.passes = log_ratio(logp, logp_old, opts.log_ratio_clamp)
        # rho_t = exp(logp_t - logp_old_t)
        self.rho = where_valid(m, np.exp(self.log_rho))
        lo, hi = opts.bounds()
        self.cases = ClipCases(self.rho, A, lo, hi, opts.dual_clip)
        self.norm = opts.norm_for(m.shape[-1])

    @cached_property
    def loss(self) -> float:
        # loss = -aggregate( min(rho A, clip(rho) A) )
        term = where_valid(self.m, self.cases.term)
        return -float(aggregate_kernel(term, self.m, self.opts.agg, self.norm))

    @cached_property
    def dlogp(self) -> np.ndarray:
        """d loss / d logp = -w (d term / d rho) rho (d log_rho / d logp), 0 at padding."""
        w = aggregation_weights(self.m, self.opts.agg, self.norm)
        dlogp = -w * self.cases.drho * self.rho
        if self.passes is not None:
            dlogp = dlogp * self.passes
        return where_valid(self.m, dlogp + 0.0)  # (+ 0.0 turns -0.0 into 0.0)

    def stats(self) -> dict:
        m, log_rho, rho, cases = self.m, self.log_rho, self.rho, self.cases
        n = int(m.sum())

        def mean(x):
            if x.dtype == bool and n:  # a count: the number the float sum of 0s and 1s gives
                return float(np.count_nonzero(x & m) / n)
            return float(np.where(m, x, 0.0).sum() / n)

        return {
            "clipfrac_active": mean(cases.counted_clipped),
            "clipfrac_outside": mean(cases.outside),
            "dual_clipfrac": mean(cases.counted_dual) if self.opts.dual_clip is not None
            else 0.0,
            # why: log rho from the log-probs, not log(rho): rho underflows to 0 for
            # log rho < -745
            "approx_kl_k1": mean(-log_rho),
            "approx_kl_k2": mean(log_rho**2 / 2),
            "approx_kl_k3": mean(np.expm1(log_rho) - log_rho),
            "ratio_mean": mean(rho),
            "ratio_min": float(np.min(rho[m])),
            "ratio_max": float(np.max(rho[m])),
        }


def policy_loss_kernel(logp, logp_old, A, m, opts: PolicyLossOptions) -> PolicyLoss:
    """:class:`PolicyLoss` of checked arrays (unchecked kernel)."""
    return PolicyLoss(logp, logp_old, A, m, opts)
