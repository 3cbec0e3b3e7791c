"""DPPO: a trust region on the change of probability itself (verl 0.9.1
``compute_policy_loss_dppo_tv``, ``compute_policy_loss_dppo_kl``).

    term_t = sg(min(rho_t, dppo_ratio_max)) v_t A_t logp_t,   d term_t / d logp_t = the weight A_t

v_t = 0 where the token leaves the region in its advantage's direction: ``dppo_tv`` the change
pi - pi_old beyond [-eps, eps_high]; ``dppo_kl`` the binary KL of (pi_old, pi) beyond eps_high
(A > 0, pi > pi_old) or eps (A <= 0, pi < pi_old). ``dppo_ratio_max`` default 20 (verl's
fallback; its ``ActorConfig`` passes ``clip_ratio_c`` = 3).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..._checks import check_scalar
from .entry import Loss, no_clip_options

__all__ = ["KL", "TV", "dppo_valid"]


def dppo_valid(logp, logp_old, A, eps_low, eps_high, divergence="tv"):
    """DPPO's trust region per token (bool, True: the token keeps its gradient).

    With p = exp(logp), p_old = exp(logp_old):

    * ``"tv"``: p - p_old <= eps_high where A > 0, p - p_old >= -eps_low where A <= 0;
    * ``"kl"``: the binary KL  D = p_old (logp_old - logp)
      + (1 - p_old) log((1 - p_old + 1e-8) / (1 - p + 1e-8)),  D <= eps_high or p <= p_old
      where A > 0, D <= eps_low or p >= p_old where A <= 0 (verl 0.9.1's 1e-8).

    The region is one-sided: a token moving against its advantage is always kept.
    ``logp`` and ``logp_old`` must be log-probabilities (<= 0) for ``"kl"``.

    >>> dppo_valid(np.log([0.5, 0.8, 0.5]), np.log([0.2, 0.7, 0.8]), np.array([1.0, 1.0, -1.0]),
    ...            0.2, 0.2).tolist()
    [False, True, False]
    """
    p, p_old = np.exp(logp), np.exp(logp_old)
    if divergence == "tv":
        return np.where(A > 0, p - p_old <= eps_high, p - p_old >= -eps_low)
    kl = p_old * (logp_old - logp) + (1.0 - p_old) * np.log((1.0 - p_old + 1e-8)
                                                              / (1.0 - p + 1e-8))
    return np.where(A > 0, (kl <= eps_high) | (p <= p_old), (kl <= eps_low) | (p >= p_old))


def forward(logp, logp_old, f, A, m, opts, is_weights, *, divergence):
    if divergence == "kl" and (np.any(logp[m] > 0) or np.any(logp_old[m] > 0)):
        raise ValueError("logp: loss_type 'dppo_kl' reads exp(logp) and exp(logp_old) as "
                         "probabilities; got a log-probability > 0 at a response token")
    # sg(min(rho_t, c)) v_t A_t logp_t
    valid = dppo_valid(logp, logp_old, A, opts.epsilon, opts.eps_high, divergence) & m
    weight = np.minimum(f.rho, opts.dppo_ratio_max) * valid
    return np.where(m, weight * A * logp, 0.0), is_weights, {"valid": valid, "weight": weight}


def backward(f, dterm, A, m, opts):
    dterm = dterm if f.is_weights is None else dterm * f.is_weights
    # the weight sg(min(rho, c)) v is a constant
    return dterm * f.extra["weight"] * A


def clipped(f, A, m, opts):
    return ~f.extra["valid"], None


def stats(f, A, m, opts):
    n = np.count_nonzero(m)
    valid = f.extra["valid"]
    return {"dppo_masked_frac": float(np.count_nonzero(~valid & m) / n),
            "dppo_truncated_frac": float(np.count_nonzero((f.rho > opts.dppo_ratio_max)
                                                          & valid & m) / n)}


def check(opts, selected):
    object.__setattr__(opts, "dppo_ratio_max", check_scalar(
        opts.dppo_ratio_max, "dppo_ratio_max", low=0, low_open=True, allow_exact=False))
    if selected:
        no_clip_options(opts)


TV = Loss(partial(forward, divergence="tv"), backward, clipped, stats, check)
KL = Loss(partial(forward, divergence="kl"), backward, clipped, stats, check)
