"""Clip-Cov and KL-Cov: the clipped surrogate with the tokens of large covariance between
advantage and log-probability treated apart (verl 0.9.1 ``compute_policy_loss_clip_cov``,
``compute_policy_loss_kl_cov``).

    cov_t = (A_t - mean A)(logp_t - mean logp)           (means over the response tokens)
    clip_cov:  term_t = min(rho_t A_t, clip(rho_t) A_t) (1 - z_t), z_t = 1 for up to
               ``cov_ratio`` n tokens drawn at random among the unclipped ones whose cov_t
               lies in ``cov_bounds``
    kl_cov:    term_t = rho_t A_t - kl_cov_coef abs(lr_t) z_t, z_t = 1 for the ``cov_ratio`` n
               tokens of largest cov_t

lr_t = logp_t - logp_old_t (clamped by ``log_ratio_clamp``). The gradient runs through rho (and
KL-Cov's abs(lr_t), d abs(x) / dx = sign(x), 0 at 0 as in torch). Defaults: ``cov_ratio`` 0.0002,
``cov_bounds`` (1, 5), ``kl_cov_coef`` 0.1 (verl's ``clip_cov_ratio``, ``clip_cov_lb``,
``clip_cov_ub``, ``kl_cov_ratio``, ``ppo_kl_coef``).
"""

from __future__ import annotations

import numpy as np

from ..._checks import check_bounds, check_int, check_scalar
from ...ppo.ratio import loss_ratio_backward
from .entry import Loss, no_clip_options

__all__ = ["CLIP_COV", "KL_COV", "clip_cov_selection", "covariance", "kl_cov_selection"]


def covariance(logp, A, m, *, eps=0.0):
    """cov_t = (A_t - mean A)(logp_t - mean logp), the means over the response tokens ``m``
    (divided by n + ``eps``: verl's ``masked_mean`` has eps 1e-8, Clip-Cov uses it, KL-Cov's
    plain mean does not); 0 at padding.

    >>> covariance(np.array([-1.0, -2.0, -3.0]), np.array([1.0, 0.0, -1.0]),
    ...            np.ones(3, bool)).tolist()
    [1.0, 0.0, 1.0]
    """
    n = np.count_nonzero(m)
    mean_A = np.where(m, A, 0.0).sum() / (n + eps)
    mean_logp = np.where(m, logp, 0.0).sum() / (n + eps)
    return np.where(m, (A - mean_A) * (logp - mean_logp), 0.0)


def clip_cov_selection(cov, m, clipped, ratio, bounds, seed=0):
    """Clip-Cov's tokens whose loss is dropped (bool, the shape of ``cov``), verl 0.9.1's rule:

    * the candidates: response tokens not clipped (``clipped`` False: the clipped branch of
      the surrogate is not active) with low < cov_t < high (strict), in row-major order
      (``torch.nonzero``'s);
    * k = max(int(ratio * n), 1), n the number of response tokens (Python's float product
      and truncation);
    * the first min(k, len) candidates of a uniform random permutation of them:
      ``np.random.default_rng(seed).permutation(len)`` here, ``torch.randperm`` in verl (the
      same rule, another generator: equal selections need equal permutations).

    >>> cov = np.array([[2.0, 0.5, 3.0, 4.0]])
    >>> clip_cov_selection(cov, np.ones((1, 4), bool), np.array([[0, 0, 0, 1]], bool), 0.5,
    ...                    (1.0, 5.0)).tolist()  # candidates 0 and 2, k = 2: both
    [[True, False, True, False]]
    """
    low, high = bounds
    candidates = np.flatnonzero(m & ~clipped & (cov > low) & (cov < high))
    k = max(int(ratio * int(np.count_nonzero(m))), 1)
    chosen = candidates[np.random.default_rng(seed).permutation(len(candidates))[:k]]
    out = np.zeros(cov.size, bool)
    out[chosen] = True
    return out.reshape(cov.shape)


def kl_cov_selection(cov, m, ratio):
    """KL-Cov's tokens that get the abs(log-ratio) penalty (bool): the k = max(1, int(n * ratio))
    response tokens of largest cov_t (``torch.topk``), ties broken by the lower row-major index
    (``torch.topk`` leaves the order of ties unspecified: docs/conventions.md section 15).

    >>> kl_cov_selection(np.array([[0.5, 2.0, 2.0, 9.0]]), np.array([[1, 1, 1, 0]], bool),
    ...                  0.5).tolist()  # n = 3, k = 1; the padded 9.0 is not a token
    [[False, True, False, False]]
    """
    valid = np.flatnonzero(m)
    k = max(1, int(len(valid) * ratio))
    order = np.argsort(-cov.reshape(-1)[valid], kind="stable")[:k]
    out = np.zeros(cov.size, bool)
    out[valid[order]] = True
    return out.reshape(cov.shape)


def clip_cov_forward(logp, logp_old, f, A, m, opts, is_weights):
    ppo = np.minimum(f.rho * A, np.clip(f.rho, f.lo, f.hi) * A)
    # the clipped branch active: verl's pg_losses2 > pg_losses1
    clipped = np.clip(f.rho, f.lo, f.hi) * A < f.rho * A
    cov = covariance(logp, A, m, eps=1e-8)
    selected = clip_cov_selection(cov, m, clipped, opts.cov_ratio, opts.cov_bounds,
                                  opts.cov_seed)
    surrogate = np.where(selected, 0.0, ppo)
    return np.where(m, surrogate, 0.0), is_weights, {"clipped": clipped, "selected": selected}


def clip_cov_backward(f, dterm, A, m, opts):
    # the clipped branch and the dropped tokens pass nothing
    drho = dterm * np.where(f.extra["clipped"] | f.extra["selected"], 0.0, A)
    dlogp = loss_ratio_backward(drho * f.rho, f, m, opts)
    return dlogp if f.is_weights is None else dlogp * f.is_weights


def clip_cov_clipped(f, A, m, opts):
    return f.extra["clipped"], None


def kl_cov_forward(logp, logp_old, f, A, m, opts, is_weights):
    selected = kl_cov_selection(covariance(logp, A, m), m, opts.cov_ratio)
    surrogate = f.rho * A - opts.kl_cov_coef * np.abs(f.log_rho) * selected
    return np.where(m, surrogate, 0.0), is_weights, {"selected": selected}


def kl_cov_backward(f, dterm, A, m, opts):
    # rho A - coef |log rho| z: through rho, and |log rho| directly
    drho = dterm * A
    dlog_rho = -dterm * opts.kl_cov_coef * np.sign(f.log_rho) * f.extra["selected"]
    dlogp = loss_ratio_backward(drho * f.rho + dlog_rho, f, m, opts)
    return dlogp if f.is_weights is None else dlogp * f.is_weights


def _selected_frac(f, m):
    return float(np.count_nonzero(f.extra["selected"] & m) / np.count_nonzero(m))


def clip_cov_stats(f, A, m, opts):
    return {"cov_selected_frac": _selected_frac(f, m)}


def kl_cov_stats(f, A, m, opts):
    n = np.count_nonzero(m)
    return {"cov_selected_frac": _selected_frac(f, m),
            "approx_kl_abs": float(np.where(m, np.abs(f.log_rho), 0.0).sum() / n)}


def check(opts, selected):
    set_ = object.__setattr__
    set_(opts, "cov_ratio", check_scalar(opts.cov_ratio, "cov_ratio", low=0, low_open=True,
                                         allow_exact=False))
    set_(opts, "cov_bounds", check_bounds(opts.cov_bounds, "cov_bounds", allow_exact=False))
    set_(opts, "cov_seed", check_int(opts.cov_seed, "cov_seed", low=0))
    set_(opts, "kl_cov_coef", check_scalar(opts.kl_cov_coef, "kl_cov_coef", low=0,
                                           allow_exact=False))
    if selected:
        no_clip_options(opts)


CLIP_COV = Loss(clip_cov_forward, clip_cov_backward, clip_cov_clipped, clip_cov_stats, check)
KL_COV = Loss(kl_cov_forward, kl_cov_backward, None, kl_cov_stats, check)
