"""VESPO's sequence weight: a smooth Gamma-shaped weight of the sequence ratio in place of a clip.

VESPO (Variational sequence-level soft policy optimisation, arXiv 2602.10693; TRL 1.16.0
``loss_type="vespo"``, ``GRPOTrainer.get_gamma_weights`` and ``_compute_loss`` of
``trl/trainer/grpo_trainer.py``) weighs the REINFORCE term of each token by a function of
its response's whole importance ratio:

    log w_i   = clip( sum_t m_t clip(log rho_t, -20, 20)
                      [+ sum_t m_t clip(log is_t, log 1e-8, 20)],  log 1e-8, 20 )
    phi_i,t   = exp( lambda + k log w_i - lambda w_i ) = e^lambda w_i^k e^(-lambda w_i)
    term_t    = sg(phi_i,t) A_t logp_t

with (k, lambda) = (k_pos, lambda_pos) where A_t >= 0 and (k_neg, lambda_neg) where
A_t < 0, lambda floored at 1e-4, and ``is_t`` the rollout-correction weights
(``is_weights=``) when given: they enter the sequence ratio, not the term (TRL multiplies
no vLLM importance ratio into the VESPO loss). phi(1) = 1; phi rises as w^k below w = k /
lambda and decays as e^(-lambda w) above it. phi is a constant of the gradient:
d term_t / d logp_t = phi_i,t A_t.

The log-ratio is a *sum* over the response (GSPO's is a mean). The policy loss
(:func:`ppo_numpy.ppo_policy_loss` with ``loss_type="vespo"``) aggregates the terms by its
``agg`` (TRL: ``"dapo"``).
"""

from __future__ import annotations

import math

import numpy as np

from ..._checks import check_is_weights, check_scalar, prepare
from .entry import Loss

__all__ = ["LAMBDA_FLOOR", "LOG_W_MAX", "LOG_W_MIN", "LOSS", "VESPO_SHAPES",
           "check_vespo_params", "vespo_log_weight_kernel", "vespo_phi", "vespo_phi_kernel",
           "vespo_weights"]

#: VESPO's default (k_pos, lambda_pos, k_neg, lambda_neg) (TRL 1.16.0 GRPOConfig)
VESPO_SHAPES = (2.0, 3.0, 3.0, 2.0)

#: the bound on each token's log-ratio and on the sequence's log-weight (TRL: 20)
LOG_W_MAX = 20.0
#: the lower bound of the sequence's log-weight and of each log is_t (TRL: log 1e-8)
LOG_W_MIN = math.log(1e-8)
#: TRL's floor of lambda (``.clamp(min=1e-4)``)
LAMBDA_FLOOR = 1e-4


def check_vespo_params(k_pos, lambda_pos, k_neg, lambda_neg):
    """The four shape parameters, checked: finite, k >= 0, lambda >= 0."""
    return (check_scalar(k_pos, "vespo_k_pos", low=0, allow_exact=False),
            check_scalar(lambda_pos, "vespo_lambda_pos", low=0, allow_exact=False),
            check_scalar(k_neg, "vespo_k_neg", low=0, allow_exact=False),
            check_scalar(lambda_neg, "vespo_lambda_neg", low=0, allow_exact=False))


def vespo_log_weight_kernel(log_rho, m, is_weights=None):
    """log w_i (B, 1) of checked arrays (module docstring), ``log_rho`` 0 at padding."""
    # sum_t m_t clip(log rho_t, -20, 20)
    log_w = np.where(m, np.clip(log_rho, -LOG_W_MAX, LOG_W_MAX), 0.0).sum(axis=-1,
                                                                          keepdims=True)
    if is_weights is not None:
        # + sum_t m_t clip(log is_t, log 1e-8, 20)   (log 0 = -inf: clipped to log 1e-8)
        with np.errstate(divide="ignore"):
            log_is = np.clip(np.log(np.where(m, is_weights, 1.0)), LOG_W_MIN, LOG_W_MAX)
        log_w = log_w + np.where(m, log_is, 0.0).sum(axis=-1, keepdims=True)
    return np.clip(log_w, LOG_W_MIN, LOG_W_MAX)


def vespo_phi_kernel(log_rho, A, m, params, is_weights=None):
    """phi_{i,t} (B, T) of checked arrays, 0 at padding; ``params`` the checked
    (k_pos, lambda_pos, k_neg, lambda_neg)."""
    k_pos, lam_pos, k_neg, lam_neg = params
    log_w = vespo_log_weight_kernel(log_rho, m, is_weights)
    # (k, lambda) by the sign of A_t, lambda floored at 1e-4
    pos = A >= 0
    k = np.where(pos, k_pos, k_neg)
    lam = np.maximum(np.where(pos, lam_pos, lam_neg), LAMBDA_FLOOR)
    # log phi = lambda + k log w - lambda w
    return np.where(m, np.exp(lam + k * log_w - lam * np.exp(log_w)), 0.0)


def vespo_weights(logp, logp_old, advantages, mask=None, *, k_pos=2.0, lambda_pos=3.0,
                  k_neg=3.0, lambda_neg=2.0, is_weights=None):
    """VESPO's weight phi_{i,t} of every response token (module docstring).

    Parameters
    ----------
    logp, logp_old : array (T,) or (B, T)
        Log-probabilities of the taken tokens under pi_theta and pi_old.
    advantages : array, same shape
        A_t; its sign picks (k, lambda).
    mask : array of 0/1, optional
        1 for response tokens; the weights are 0 at padding.
    k_pos, lambda_pos, k_neg, lambda_neg : float >= 0
        The Gamma shapes for A >= 0 and A < 0. Defaults 2, 3, 3, 2 (TRL 1.16.0
        ``GRPOConfig.vespo_k_pos``, ``vespo_lambda_pos``, ``vespo_k_neg``,
        ``vespo_lambda_neg``).
    is_weights : array, same shape, >= 0, optional
        Rollout-correction weights; their clipped logs are added to log w_i.

    Returns
    -------
    float64 array, the shape of ``logp``.

    Examples
    --------
    Token log-ratios [0.1, -0.1] sum to 0: w = 1 and phi = e^(lambda - lambda) = 1. A
    sequence log-ratio of log 2 with A > 0: phi = e^3 2^2 e^(-6) = 4 e^-3 = 0.199148; with
    A < 0: e^2 2^3 e^(-4) = 8 e^-2 = 1.082682:

    >>> import numpy as np
    >>> vespo_weights([0.1, -0.1], [0.0, 0.0], [1.0, 1.0]).round(12).tolist()
    [1.0, 1.0]
    >>> phi = vespo_weights([[np.log(2), 0.0], [np.log(2), 0.0]], np.zeros((2, 2)),
    ...                     [[1.0, 1.0], [-1.0, -1.0]])
    >>> phi[:, 0].round(6).tolist()
    [0.199148, 1.082682]
    """
    params = check_vespo_params(k_pos, lambda_pos, k_neg, lambda_neg)
    (lp, lp_old, A), m = prepare({"logp": logp, "logp_old": logp_old,
                                  "advantages": advantages}, mask, exact=False)
    w = check_is_weights(is_weights, lp, "logp", m)
    squeeze = lp.ndim == 1
    if squeeze:
        lp, lp_old, A, m = lp[None], lp_old[None], A[None], m[None]
        w = None if w is None else w[None]
    phi = vespo_phi_kernel(lp - lp_old, A, m, params, w)
    return phi[0] if squeeze else phi


def vespo_phi(log_rho, A, m, opts, is_weights=None):
    """phi (B, T), or (T,) for 1-D arrays, with the options' shapes (unchecked kernel)."""
    two_d = log_rho.ndim == 2
    params = (opts.vespo_k_pos, opts.vespo_lambda_pos, opts.vespo_k_neg, opts.vespo_lambda_neg)
    phi = vespo_phi_kernel(*(x if two_d or x is None else x[None] for x in (log_rho, A, m)),
                           params,
                           is_weights if two_d or is_weights is None else is_weights[None])
    return phi if two_d else phi[0]


# --- the member of the policy-loss family (loss_type="vespo") ---------------------------


def forward(logp, logp_old, f, A, m, opts, is_weights):
    # sg(phi_i) A_t logp_t, phi of the summed log-ratio and the is_weights (which enter phi,
    # not the term)
    phi = vespo_phi(f.log_rho, A, m, opts, is_weights)
    return phi * A * logp, None, {"phi": phi}


def backward(f, dterm, A, m, opts):
    # d / d logp = phi A_t (phi a constant)
    return dterm * f.extra["phi"] * A


def stats(f, A, m, opts):
    # the token mean of phi
    return {"vespo_phi_mean": float(f.extra["phi"].sum() / np.count_nonzero(m))}


def check(opts, selected):
    shapes = (opts.vespo_k_pos, opts.vespo_lambda_pos, opts.vespo_k_neg, opts.vespo_lambda_neg)
    if selected or shapes != VESPO_SHAPES:
        check_vespo_params(*shapes)
    if selected and (opts.dual_clip is not None or opts.delta is not None
                     or opts.log_ratio_max is not None or opts.importance_level != "token"):
        raise ValueError("loss_type: 'vespo' takes no dual_clip, delta or log_ratio_max, "
                         "and importance_level='token' (it sums the token log-ratios "
                         "into its sequence weight itself)")


LOSS = Loss(forward, backward, stats=stats, check=check)
