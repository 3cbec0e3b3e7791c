"""The policy loss on checked arrays: what wraps every member of the family, written once
(notebook 09; the members: :mod:`ppo_numpy.family.losses`).

Three plain functions, makemore style (every intermediate has a name, its gradient is
``d<name>``), around the member that ``opts.loss_type`` names in the table:

* :func:`policy_loss_forward`: the ratio (log rho -> rho, ``ppo_numpy.ppo.ratio.loss_ratio``)
  -> the member's term -> the rollout weights -> the aggregation -> + the KL term;
* :func:`policy_loss_backward`: d loss / d logp back through the same names;
* :func:`policy_loss_stats`: the statistics frameworks log, computed apart.

::

    term_t = w_t surrogate_t          (w_t the rollout weights, is_weights=, constants)
    loss   = -aggregate(term) + beta aggregate(KL_t)

The KL term is not weighted (TRL multiplies the policy term and adds beta KL_t after; verl's KL
loss is apart); its four gradient forms (``kl_gradient``) are :func:`kl_term` and
:func:`dkl_term`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import where_valid
from ..family.losses import LOSSES
from ..ppo.aggregation import aggregate_kernel, aggregation_weights
from ..ppo.kl import kl_estimate_grad_kernel, kl_estimate_kernel
from ..ppo.kl_gradient import kl_term_kernel
from ..ppo.ratio import loss_ratio, sequence_log_ratio
from .options import PolicyLossOptions

__all__ = ["APPROX_KL", "PolicyLossForward", "dkl_term", "kl_agg", "kl_correction_ratio",
           "kl_divs", "kl_loss_and_grad", "kl_term", "policy_loss_backward", "policy_loss_forward",
           "policy_loss_kernel", "policy_loss_stats"]

#: the approx-KL statistics ``ppo_policy_loss`` reports by default (``approx_kl=True``)
APPROX_KL = ("k1", "k2", "k3")


@dataclass
class PolicyLossForward:
    """The named intermediates of :func:`policy_loss_forward` (each a float64 array of the
    batch's shape, 0 at padding, unless said otherwise)."""

    logp: np.ndarray
    log_ratio: np.ndarray     # logp_t - logp_old_t
    log_rho: np.ndarray       # log rho_t: log_ratio clamped to [-c, c] by log_ratio_clamp
    log_w: np.ndarray         # the log-ratio the loss exponentiates: log rho_t, or GSPO's
    #                           log s_i (B, 1); capped at log_ratio_max
    rho: np.ndarray           # exp(log_w) at every response token
    lo: float                 # 1 - eps
    hi: float                 # 1 + eps_high
    surrogate: np.ndarray | None = None   # the member's term, unweighted
    is_weights: np.ndarray | None = None  # the weights that multiply it (None: all 1)
    extra: dict | None = None             # the member's intermediates
    term: np.ndarray | None = None        # the per-token objective term: w_t surrogate_t
    kl: np.ndarray | None = None          # the KL term's KL_t (kl_coef > 0), else None
    kl_log_ratio: np.ndarray | None = None  # logp_t - the log-prob the KL's importance
    #                           weight is taken against, when not logp_old (kl_logp_old)
    policy_loss: float = 0.0              # -aggregate(term)
    kl_loss: float = 0.0                  # aggregate(KL_t), 0.0 without a KL term
    loss: float = 0.0                     # policy_loss + kl_coef kl_loss


def policy_loss_forward(logp, logp_old, A, m, opts: PolicyLossOptions, logp_ref=None, *,
                         is_weights=None, divs=None, divs_kl=None, kl_logp_old=None):
    """The policy loss on checked arrays (unchecked kernel), every intermediate named.

    ``logp``, ``logp_old``, ``A`` (and ``logp_ref`` when ``opts.kl_coef > 0``, and
    ``is_weights`` when given) float64 (B, T) or (T,) arrays, 0 at padding; ``m`` the bool
    mask; ``opts`` checked. ``divs``: the ``(d, D)`` of
    ``ppo_numpy.ppo.aggregation.divisors`` to aggregate with instead of those of
    ``opts.agg`` on these rows (a micro-batch's share of a step, ``ppo_numpy.step``); the
    KL term takes them too unless it has its own ``kl_agg``, whose share of a step is
    ``divs_kl`` (OpenRLHF's token mean beside GSPO's sequence mean). ``kl_logp_old``: the
    log-probs the KL term's importance weight (``kl_gradient="importance"``) is taken
    against where they are not ``logp_old`` (OpenRLHF 0.11.2's GSPO with a rollout
    correction takes its sequence ratio against the rollout's log-probs and its KL weight
    against pi_old's); ``None``: ``logp_old``. Returns a :class:`PolicyLossForward`.

    >>> f = policy_loss_forward(np.log([1.5, 0.5, 1.1]), np.zeros(3), np.array([2.0, -1, 1]),
    ...                         np.ones(3, bool), PolicyLossOptions())
    >>> f.term.round(12).tolist(), round(f.loss, 12)
    ([2.4, -0.8, 1.1], -0.9)
    """
    # rho_t = exp(logp_t - logp_old_t)   (clamped, at the sequence level, capped: loss_ratio)
    log_ratio, log_rho, log_w, rho = loss_ratio(logp, logp_old, m, opts)
    # the clip range [1 - eps, 1 + eps_high]
    f = PolicyLossForward(logp, log_ratio, log_rho, log_w, rho, 1 - opts.epsilon,
                          1 + opts.eps_high)
    if kl_logp_old is not None:
        f.kl_log_ratio = logp - kl_logp_old
    # the member's term (min(rho A, clip(rho) A) for the default, "clip")
    f.surrogate, f.is_weights, f.extra = LOSSES[opts.loss_type].forward(
        logp, logp_old, f, A, m, opts, is_weights)
    # term_t = w_t surrogate_t   (the rollout weights, constants)
    f.term = f.surrogate if f.is_weights is None else f.is_weights * f.surrogate
    # loss = -aggregate(term)   (0 at padding)
    f.policy_loss = f.loss = -float(aggregate_kernel(f.term, m, opts.agg, opts.norm, divs))
    if opts.kl_coef > 0:
        if logp_ref is None:
            raise ValueError("logp_ref: the KL term of the loss (kl_coef > 0) needs the "
                             "reference log-probabilities")
        # + beta aggregate(KL_t),  KL_t of pi_theta against pi_ref
        f.kl = kl_term(f, logp_ref, m, opts)
        f.kl_loss = float(aggregate_kernel(f.kl, m, *kl_agg(opts),
                                           kl_divs(opts, divs, divs_kl)))
        f.loss = f.policy_loss + opts.kl_coef * f.kl_loss
    return f


def policy_loss_backward(f: PolicyLossForward, A, m, opts: PolicyLossOptions, logp_ref=None,
                         divs=None, divs_kl=None):
    """d loss / d logp of :func:`policy_loss_forward`'s result ``f`` (unchecked kernel).

    Back through the forward's names, each gradient ``d<name>`` shaped like ``<name>``; 0 at
    padding. At the kinks of clip, min and the clamps the bound counts as inside
    (``ppo_numpy.grads.loss_grads``). ``divs``, ``divs_kl``: as the forward's.
    """
    # loss = -aggregate(term) = -sum w_t term_t
    dterm = -aggregation_weights(m, opts.agg, opts.norm, divs)
    # the member's gradient, back to logp (its weights included)
    dlogp = LOSSES[opts.loss_type].backward(f, dterm, A, m, opts)
    if opts.kl_coef > 0:
        # + beta aggregate(KL_t)
        dlogp = dlogp + opts.kl_coef * dkl_term(f, logp_ref, m, opts,
                                                kl_divs(opts, divs, divs_kl))
    return dlogp + 0.0  # (turns -0.0 into 0.0)


# --- the KL term of the loss, in its four gradient forms (ppo_numpy.ppo.kl_gradient) ----------


def kl_agg(opts: PolicyLossOptions):
    """The KL term's (mode, norm): ``kl_agg`` (its own mode's default norm), else the policy
    loss's mode and norm."""
    if opts.kl_agg is None or opts.kl_agg == opts.agg:
        return opts.agg, opts.norm
    return opts.kl_agg, None


def kl_divs(opts: PolicyLossOptions, divs, divs_kl=None):
    """The KL term's divisors: ``divs`` when it aggregates as the policy term does, else its
    own ``divs_kl`` (None: those of its ``kl_agg`` on the rows at hand)."""
    return divs if opts.kl_agg is None or opts.kl_agg == opts.agg else divs_kl


def _kl_ratio_level(opts: PolicyLossOptions) -> str:
    return opts.kl_ratio_level or opts.importance_level


def kl_correction_ratio(log_rho, m, level: str):
    """The ratio that multiplies KL_t under ``kl_gradient="ratio"``: rho_t = exp(log rho_t)
    (``"token"``) or s_i = exp((1/n_i) sum_t log rho_t) at every token of response i
    (``"sequence"``); 0 at padding."""
    if level == "sequence":
        log_rho = sequence_log_ratio(np.where(m, log_rho, 0.0), m)
    return np.where(m, np.exp(log_rho), 0.0)


def kl_term(f: PolicyLossForward, logp_ref, m, opts: PolicyLossOptions):
    """KL_t of the loss's KL term, 0 at padding: the estimate (``kl_gradient`` "plain"), times
    the ratio ("ratio": TRL's bias correction, the ratio before ``delta``), or the value of the
    form "straight_through" or "importance" (the same estimate, another gradient)."""
    if opts.kl_gradient not in ("plain", "ratio"):
        return _kl_form(f, logp_ref, m, opts)[0]
    kl = where_valid(m, kl_estimate_kernel(f.logp, logp_ref, opts.kl_estimator, opts.kl_clamp))
    if opts.kl_gradient == "ratio":
        # KL_t r_t, r_t = rho_t or s_i (before delta), differentiated
        kl = kl * kl_correction_ratio(f.log_rho, m, _kl_ratio_level(opts))
    return kl


def dkl_term(f: PolicyLossForward, logp_ref, m, opts: PolicyLossOptions, divs=None):
    """d aggregate(KL_t) / d logp of :func:`kl_term` (the aggregation weights included;
    ``divs`` the KL term's divisors, :func:`kl_divs`)."""
    w_kl = aggregation_weights(m, *kl_agg(opts), divs)
    if opts.kl_gradient == "plain":
        return kl_estimate_grad_kernel(f.logp, logp_ref, opts.kl_estimator, m, opts.kl_clamp,
                                       w_kl)
    if opts.kl_gradient != "ratio":
        # d (form's value) / d logp (ppo_numpy.ppo.kl_gradient), times the weights
        return w_kl * _kl_form(f, logp_ref, m, opts)[1]
    # d (KL_t r_t) = r_t dKL_t (the KL's own gradient, weighted by the ratio) + KL_t dr_t:
    # d rho_t / d logp_t = rho_t at the token level; d s_i / d logp_t = s_i / n_i at every
    # token of response i, so each token gets s_i / n_i sum_u w_u KL_u. Nonzero even where
    # the ratio is 1.
    r = kl_correction_ratio(f.log_rho, m, _kl_ratio_level(opts))
    kl = where_valid(m, kl_estimate_kernel(f.logp, logp_ref, opts.kl_estimator, opts.kl_clamp))
    # r_t d KL_t
    dkl = kl_estimate_grad_kernel(f.logp, logp_ref, opts.kl_estimator, m, opts.kl_clamp,
                                  w_kl * r)
    if _kl_ratio_level(opts) == "sequence":
        # d s_i / d logp_t = s_i / n_i: each token of the row gets the row's sum
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        dlog_rho = np.where(m, (w_kl * kl * r).sum(axis=-1, keepdims=True) / n, 0.0)
    else:
        # d rho_t / d logp_t = rho_t
        dlog_rho = w_kl * kl * r
    if opts.log_ratio_clamp is not None:
        # log rho = clip(logp - logp_old, -c, c): the bound passes the gradient
        dlog_rho = dlog_rho * (np.abs(f.log_ratio) <= opts.log_ratio_clamp)
    return dkl + where_valid(m, dlog_rho)


def _kl_form(f: PolicyLossForward, logp_ref, m, opts: PolicyLossOptions):
    """(value, d value / d logp) of the KL term's form ``opts.kl_gradient`` (not plain), its
    ratio rho_t = exp(logp_t - logp_old_t) the token ratio before any clamp (OpenRLHF's
    ``exp(log_probs - log_probs_old)``), against ``kl_logp_old`` where the forward had one."""
    log_ratio = f.log_ratio if f.kl_log_ratio is None else f.kl_log_ratio
    return kl_term_kernel(f.logp, logp_ref, log_ratio, m, opts.kl_estimator,
                          opts.kl_gradient, opts.kl_is_bound, opts.kl_clamp)


def kl_loss_and_grad(logp, logp_ref, m, opts: PolicyLossOptions, log_ratio=None, divs=None,
                     weights=None):
    """The KL term alone, beside a loss that is not this frame's (unchecked kernel): ``(KL_t,
    aggregate(w_t KL_t), d aggregate(w_t KL_t) / d logp)`` in the form ``opts.kl_gradient``,
    with the KL term's aggregation (:func:`kl_agg`); ``weights`` w_t held constant (``None``:
    1). ``log_ratio`` = logp - logp_old for the forms that read the ratio (``None``: rho = 1;
    ``"ratio"`` needs it). verl's bypass mode adds its KL loss so to its own policy loss
    (``presets._verl.verl_bypass_loss``)."""
    if log_ratio is None and opts.kl_gradient == "ratio":
        raise ValueError("log_ratio: kl_gradient='ratio' multiplies KL_t by the ratio "
                         "exp(logp - logp_old), which needs it")
    zero = np.zeros_like(logp) if log_ratio is None else log_ratio
    # (the ratio of "ratio" from the log-ratio clamped as the loss clamps it, as the frame's)
    c = opts.log_ratio_clamp
    log_rho = zero if c is None else np.clip(zero, -c, c)
    f = PolicyLossForward(logp, zero, log_rho, log_rho, None, 0.0, 0.0)
    kl = kl_term(f, logp_ref, m, opts)
    weighted = kl if weights is None else kl * weights
    kl_loss = float(aggregate_kernel(weighted, m, *kl_agg(opts), kl_divs(opts, divs)))
    dkl = dkl_term(f, logp_ref, m, opts, kl_divs(opts, divs))
    return kl, kl_loss, dkl if weights is None else weights * dkl


# --- the statistics --------------------------------------------------------------------------


def policy_loss_stats(f: PolicyLossForward, A, m, opts: PolicyLossOptions, *,
                      approx_kl=APPROX_KL) -> dict:
    """The statistics of :func:`ppo_numpy.ppo_policy_loss` from the forward's names (token
    means over the response tokens, computed apart from the loss); ``approx_kl`` the
    estimators of the ``approx_kl_*`` entries (a tuple in the order of :data:`APPROX_KL`)."""
    rho, log_rho = f.rho, f.log_rho
    n = np.count_nonzero(m)
    lo, hi = f.lo, f.hi
    loss = LOSSES[opts.loss_type]

    def frac(flags):  # a fraction of the response tokens; None: none
        return 0.0 if flags is None else float(np.count_nonzero(flags & m) / n)

    def mean(x):  # x is 0 at padding
        return float(x.sum() / n)

    # the member's clip rule: where its gradient is cut, where a dual clip bounds the term
    active, dual = loss.clipped(f, A, m, opts) if loss.clipped is not None else (None, None)
    stats = {
        "clipfrac_active": frac(active),
        "clipfrac_outside": frac((rho > hi) | (rho < lo)),
        "dual_clipfrac": frac(dual),
    }
    # KL(pi_old || pi_theta) estimates, token means: k1 = -log rho, k2 = (log rho)^2 / 2,
    # k3 = (rho - 1) - log rho (why: from log rho, not log(rho): rho underflows to 0 for
    # log rho < -745)
    if "k1" in approx_kl:
        # the inputs are 0 at padding, so is log rho: -log rho is -0.0 there, which changes
        # the sum of np.where(m, -log rho, 0.0) only when that sum is 0 (its sign)
        k1 = -log_rho.sum()
        if k1 == 0:
            k1 = np.where(m, -log_rho, 0.0).sum()
        stats["approx_kl_k1"] = float(k1 / n)
    if "k2" in approx_kl:
        stats["approx_kl_k2"] = mean(np.square(log_rho) / 2)
    if "k3" in approx_kl:
        stats["approx_kl_k3"] = mean(np.expm1(log_rho) - log_rho)
    stats.update(ratio_mean=mean(rho), ratio_min=float(rho[m].min()), ratio_max=float(rho.max()))
    if not opts.is_ppo:
        # min(rho_t, delta): the ratio of the unclipped branch
        rho_unclipped = rho if opts.delta is None else np.minimum(rho, opts.delta)
        stats["clipfrac_low"] = frac((rho_unclipped < lo) & (A < 0))
        stats["clipfrac_high"] = frac((rho_unclipped > hi) & (A > 0))
        stats["kl_ref"] = mean(f.kl) if f.kl is not None else 0.0
    if loss.stats is not None:
        stats.update(loss.stats(f, A, m, opts))
    return stats


def policy_loss_kernel(logp, logp_old, A, m, opts: PolicyLossOptions, logp_ref=None, *,
                        is_weights=None, approx_kl=APPROX_KL, divs=None, divs_kl=None,
                        kl_logp_old=None):
    """``(forward, stats, dlogp)`` of checked arrays: the forward's names, the statistics and
    d loss / d logp in one call (unchecked kernel: the presets, the toy policy's loss and
    :func:`ppo_numpy.policy_loss_and_grad` use it); ``divs``, ``divs_kl`` and ``kl_logp_old``
    as :func:`policy_loss_forward`'s."""
    f = policy_loss_forward(logp, logp_old, A, m, opts, logp_ref, is_weights=is_weights,
                            divs=divs, divs_kl=divs_kl, kl_logp_old=kl_logp_old)
    return (f, policy_loss_stats(f, A, m, opts, approx_kl=approx_kl),
            policy_loss_backward(f, A, m, opts, logp_ref, divs, divs_kl))
