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

from ._lazy import lazy
from ._validation import prepare, where_valid
from .aggregation import aggregate_kernel, aggregation_weights, divisors, mode_norm
from .clipping import ClipCases
from .kl import kl_estimate_grad_kernel, kl_estimate_kernel
from .loss_options import PolicyLossOptions, resolve
from .ratio import log_ratio, sequence_log_ratio, sequence_mean_grad


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
    # the loss of ppo_policy_loss, which it must equal, with agg="seq-mean-token-sum"
    return -checked_policy_loss(logp, logp_old, advantages, mask, None, None, epsilon=epsilon,
                                agg="seq-mean-token-sum", **clip_options).loss


def ppo_policy_loss(logp, logp_old, advantages, mask=None, epsilon=0.2, agg="token-mean", *,
                    epsilon_high=None, dual_clip=None, norm=None, log_ratio_clamp=None,
                    options=None, logp_ref=None, **more_options):
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
    logp_ref : array, same shape, optional
        log pi_ref of the tokens, for a KL term in the loss (``kl_coef > 0``).
    **more_options
        Any other field of :class:`PolicyLossOptions`: the critic-free family's
        ``importance_level`` (GSPO), ``log_ratio_max``, ``delta``, ``loss_type``
        (CISPO), ``cispo_clip``, ``kl_coef``, ``kl_estimator``, ``kl_clamp``, ``kl_agg``.

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
        * ``ratio_mean``, ``ratio_min``, ``ratio_max``;
        * with any option of the critic-free family also ``clipfrac_low`` and
          ``clipfrac_high`` (TRL's ``clip_ratio/low_mean``, ``high_mean``: A < 0 with
          min(rho, delta) < 1 - eps, A > 0 with it > 1 + eps_high) and ``kl_ref``
          (the token mean of the KL term's KL_t, 0 without one). Under
          ``importance_level="sequence"`` the ratio statistics are of the sequence
          ratio (at every token of its response), the ``approx_kl`` ones of the token
          log-ratios.

    Examples
    --------
    rho = [1.5, 0.5, 1.1] with A = [2, -1, 1]: the first two are clipped
    (2.4 < 3.0, -0.8 < -0.5), so the token-mean loss is -(2.4 - 0.8 + 1.1)/3 = -0.9.

    >>> import numpy as np
    >>> loss, stats = ppo_policy_loss(np.log([1.5, 0.5, 1.1]), [0.0, 0.0, 0.0], [2.0, -1.0, 1.0])
    >>> round(loss, 12), round(stats["clipfrac_active"], 6)
    (-0.9, 0.666667)

    GSPO: one response with token log-ratios [0.3, 0.1] and A = 1 has the sequence ratio
    exp(0.2) = 1.2214 > 1.2, clipped at both tokens: the loss is -1.2.

    >>> loss, stats = ppo_policy_loss([0.3, 0.1], [0.0, 0.0], [1.0, 1.0],
    ...                               importance_level="sequence")
    >>> round(loss, 12), stats["clipfrac_active"]
    (-1.2, 1.0)
    """
    out = checked_policy_loss(logp, logp_old, advantages, mask, logp_ref, options,
                              epsilon=epsilon, agg=agg, epsilon_high=epsilon_high,
                              dual_clip=dual_clip, norm=norm, log_ratio_clamp=log_ratio_clamp,
                              **more_options)
    return out.loss, out.stats()


def checked_policy_loss(logp, logp_old, advantages, mask, logp_ref, options, **keywords):
    """The :class:`PolicyLoss` of a public call: the options resolved (:func:`resolve`), then
    the arrays checked once (float64, 0 at padding)."""
    opts = resolve(options, **keywords)
    arrays = {"logp": logp, "logp_old": logp_old, "advantages": advantages}
    if logp_ref is not None:
        arrays["logp_ref"] = logp_ref
    # in float64 even for Fractions (rho needs exp), so that term and rho * A round alike
    out, m = prepare(arrays, mask, exact=False)
    return policy_loss_kernel(*out[:3], m, opts, out[3] if logp_ref is not None else None)


class PolicyLoss:
    """The policy loss of one batch and everything derived from it, each computed on first use.

    Unchecked kernel behind :func:`ppo_policy_loss`, :func:`ppo_numpy.policy_loss_grad`,
    the toy policy's loss and the presets: ``logp``, ``logp_old``, ``A`` (and ``logp_ref``
    when ``opts.kl_coef > 0``) float64 (B, T) or (T,) arrays, 0 at padding; ``m`` the bool
    mask; ``opts`` a :class:`PolicyLossOptions`. Attributes: ``log_rho`` (the token
    log-ratio, clamped) and ``passes`` (:func:`ppo_numpy.ratio.log_ratio`), ``log_w`` (the
    log-ratio the loss uses: token or sequence, capped by ``log_ratio_max``), ``rho``
    (exp(log_w), 0 at padding), ``cases`` (:class:`ppo_numpy.clipping.ClipCases`),
    ``loss``, ``dlogp``; :meth:`stats`.
    """

    def __init__(self, logp, logp_old, A, m, opts: PolicyLossOptions, logp_ref=None):
        self.logp, self.logp_ref, self.m, self.A, self.opts = logp, logp_ref, m, A, opts
        self.log_rho, self.passes = log_ratio(logp, logp_old, opts.log_ratio_clamp)
        log_w = self.log_rho
        if opts.importance_level == "sequence":
            # log s_i = (1/n_i) sum_t (logp_t - logp_old_t), at every token of response i
            log_w = sequence_log_ratio(log_w, m)
        self.below_max = None
        if opts.log_ratio_max is not None:
            # the bound passes the gradient, as torch.clamp(max=...) does
            self.below_max = log_w <= opts.log_ratio_max
            log_w = np.minimum(log_w, opts.log_ratio_max)
        self.log_w = log_w
        # rho_t = exp(logp_t - logp_old_t)
        self.rho = np.exp(log_w)
        if opts.importance_level == "token":
            self.rho *= m  # (log_w is 0, or a finite cap, at padding: exp of it times 0 is 0)
        else:  # the sequence's log-ratio is at padding too, where its exp may overflow
            self.rho = where_valid(m, self.rho)
        lo, hi = opts.bounds()
        self.cases = ClipCases(self.rho, A, lo, hi, opts.dual_clip, opts.delta)
        self.norm = opts.norm_for(m.shape[-1])
        if opts.kl_coef > 0 and logp_ref is None:
            raise ValueError("logp_ref: the KL term of the loss (kl_coef > 0) needs the "
                             "reference log-probabilities")

    @lazy
    def cispo_weight(self):
        """CISPO's importance weight w_t (a constant of the gradient): clip(rho, lo, hi) or
        min(rho, epsilon_high)."""
        opts = self.opts
        if opts.cispo_clip == "max":
            eps_high = opts.epsilon if opts.epsilon_high is None else opts.epsilon_high
            return np.minimum(self.rho, float(eps_high))
        lo, hi = opts.bounds()
        return np.minimum(np.maximum(self.rho, lo), hi)

    @lazy
    def kl(self):
        """The per-token KL_t of the KL term, 0 at padding (``kl_coef > 0``)."""
        opts = self.opts
        kl = kl_estimate_kernel(self.logp, self.logp_ref, opts.kl_estimator, opts.kl_clamp)
        return where_valid(self.m, kl)

    @property
    def kl_agg(self):
        agg = self.opts.kl_agg or self.opts.agg
        # the policy loss's own mode takes its norm; another mode its default
        return agg, self.norm if agg == self.opts.agg else mode_norm(agg, None, self.m.shape[-1])

    @lazy
    def divs(self):
        """The :func:`~ppo_numpy.aggregation.divisors` of the policy loss's mode, once for the
        loss and its gradient."""
        return divisors(self.m[None] if self.m.ndim == 1 else self.m, self.opts.agg, self.norm)

    @lazy
    def policy_loss(self) -> float:
        # (0 at padding: rho, A and logp are 0 there, and so is every product with them)
        if self.opts.loss_type == "cispo":
            # -sg(w_t) A_t logp_t
            term = self.cispo_weight * self.A * self.logp
        else:
            # min( rho A, clip(rho) A )
            term = self.cases.term
        return -float(aggregate_kernel(term, self.m, self.opts.agg, self.norm, self.divs))

    @lazy
    def kl_loss(self) -> float:
        """aggregate(KL_t), before its coefficient (0.0 without a KL term)."""
        if self.opts.kl_coef == 0:
            return 0.0
        agg, norm = self.kl_agg
        return float(aggregate_kernel(self.kl, self.m, agg, norm))

    @lazy
    def loss(self) -> float:
        # loss = -aggregate( min(rho A, clip(rho) A) )  (+ beta aggregate(KL_t))
        if self.opts.kl_coef == 0:
            return self.policy_loss
        return self.policy_loss + self.opts.kl_coef * self.kl_loss

    @lazy
    def dlogp(self) -> np.ndarray:
        """d loss / d logp, 0 at padding: -w (d term / d rho) rho (d log rho / d logp) for the
        clipped surrogate, -w sg(w_t) A_t for CISPO, plus beta w dKL_t/dlogp."""
        opts, m = self.opts, self.m
        w = aggregation_weights(m, opts.agg, self.norm, self.divs)
        if opts.kl_coef > 0:
            agg, norm = self.kl_agg
            w_kl = w.copy() if agg == opts.agg else aggregation_weights(m, agg, norm)
        # g = -dlogp, built in w's array: negation is exact, so the sign comes once, at the end
        g = w
        if opts.loss_type == "cispo":
            g *= self.cispo_weight
            g *= self.A
        else:
            # d loss / d log_w = -w (d term / d rho) rho
            g *= self.cases.drho
            g *= self.rho
            if self.below_max is not None:
                g *= self.below_max
            if opts.importance_level == "sequence":
                # d log s_i / d logp_t = m_t / n_i: each token gets its row's mean
                g = sequence_mean_grad(g, m)
            if self.passes is not None:
                g *= self.passes
        # (g is 0 at padding: w is, and every factor is finite there)
        if opts.kl_coef == 0:
            return np.subtract(0.0, g, out=g)  # -g, with -0.0 made 0.0
        dlogp = np.negative(g, out=g)
        dlogp += opts.kl_coef * kl_estimate_grad_kernel(
            self.logp, self.logp_ref, opts.kl_estimator, m, opts.kl_clamp, w_kl)
        dlogp += 0.0  # (turns -0.0 into 0.0)
        return dlogp

    def stats(self) -> dict:
        m, log_rho, rho, cases = self.m, self.log_rho, self.rho, self.cases
        n = np.count_nonzero(m)

        def count(x):  # a fraction of tokens: the number the float sum of its 0s and 1s gives
            return float(np.count_nonzero(x & m) / n)

        def mean(x):  # x +0.0 at padding: the sum of np.where(m, x, 0.0)
            return float(x.sum() / n)

        # the inputs are 0 at padding, so is log rho: -log rho is -0.0 there, which changes
        # the sum of np.where(m, -log rho, 0.0) only when that sum is 0 (its sign)
        k1 = -log_rho.sum()
        if k1 == 0:
            k1 = np.where(m, -log_rho, 0.0).sum()
        k = np.square(log_rho)
        k /= 2  # (log rho)^2 / 2
        k2 = mean(k)
        k = np.expm1(log_rho, out=k)
        k -= log_rho  # (rho - 1) - log rho
        k3 = mean(k)
        # at padding rho = A = 0: the term equals rho A there, and rho is below any lo > 0
        clipped = count(self.cispo_weight != rho) if self.opts.loss_type == "cispo" \
            else float(np.count_nonzero(cases.counted_clipped) / n)
        outside = np.count_nonzero(cases.above) + np.count_nonzero(cases.below)
        if cases.lo > 0:
            outside -= m.size - n
        stats = {
            "clipfrac_active": clipped,
            "clipfrac_outside": float(outside / n),
            "dual_clipfrac": count(cases.counted_dual) if self.opts.dual_clip is not None
            else 0.0,
            # why: log rho from the log-probs, not log(rho): rho underflows to 0 for
            # log rho < -745
            "approx_kl_k1": float(k1 / n),
            "approx_kl_k2": k2,
            "approx_kl_k3": k3,
            "ratio_mean": mean(rho),
            # rho >= 0, and 0 at padding: the max over all positions is the max over tokens
            "ratio_min": float((rho if n == m.size else np.where(m, rho, np.inf)).min()),
            "ratio_max": float(rho.max()),
        }
        if not self.opts.is_ppo:
            stats["clipfrac_low"] = count(cases.low_clipped)
            stats["clipfrac_high"] = count(cases.high_clipped)
            stats["kl_ref"] = mean(self.kl) if self.opts.kl_coef > 0 else 0.0
        return stats


def policy_loss_kernel(logp, logp_old, A, m, opts: PolicyLossOptions,
                       logp_ref=None) -> PolicyLoss:
    """:class:`PolicyLoss` of checked arrays (unchecked kernel)."""
    return PolicyLoss(logp, logp_old, A, m, opts, logp_ref)
