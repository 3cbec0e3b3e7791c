"""GMPO: the geometric mean of the token ratios (verl 0.9.1 ``compute_policy_loss_geo_mean``,
``loss_mode="geo_mean"``).

    lr'_t  = min(lr_t, eps_high) for A_t > 0,  max(lr_t, -eps) for A_t < 0,  0 for A_t = 0
    s_i    = exp(mean_t lr'_t),   Abar_i = mean_t A_t        (means over response i's tokens)
    term_t = s_i Abar_i at every token of response i

lr_t = logp_t - logp_old_t (clamped by ``log_ratio_clamp``). d term / d logp_u = Abar_i s_i
[lr'_u passes] / n_i, summed over the row's terms. With importance weights the row's weight is
the geometric mean of w_t + 1e-10 (verl's), at each of its tokens.
"""

from __future__ import annotations

import numpy as np

from .entry import Loss, no_clip_options

__all__ = ["LOSS", "gmpo_log_ratio"]


def gmpo_log_ratio(log_ratio, A, eps_low, eps_high):
    """GMPO's token log-ratio lr' = sgn(A) min(sgn(A) lr, sgn(A) clip(lr, -eps_low, eps_high)):
    min(lr, eps_high) for A > 0, max(lr, -eps_low) for A < 0, 0 for A = 0; and where its
    derivative d lr' / d lr is 1 (bool; at a bound the bound counts as inside, as
    ``torch.clamp`` passes the gradient there).

    >>> lr, passes = gmpo_log_ratio(np.array([0.5, 0.5, -0.5, -0.5]),
    ...                             np.array([1.0, -1.0, 1.0, -1.0]), 0.2, 0.3)
    >>> lr.tolist(), passes.tolist()
    ([0.3, 0.5, -0.5, -0.2], [False, True, True, False])
    """
    sgn = np.sign(A)
    clamped = np.clip(log_ratio, -eps_low, eps_high)
    out = sgn * np.minimum(sgn * log_ratio, sgn * clamped)
    passes = ((A > 0) & (log_ratio <= eps_high)) | ((A < 0) & (log_ratio >= -eps_low))
    return out + 0.0, passes


def forward(logp, logp_old, f, A, m, opts, is_weights):
    # s_i Abar_i,  log s_i = mean_t lr'_t over the response
    lr_gm, passes = gmpo_log_ratio(f.log_rho, A, opts.epsilon, opts.eps_high)
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    s = np.exp(np.where(m, lr_gm, 0.0).sum(axis=-1, keepdims=True) / n)
    A_bar = np.where(m, A, 0.0).sum(axis=-1, keepdims=True) / n
    weights = is_weights
    if is_weights is not None:
        # the row's weight: the geometric mean of w_t + 1e-10 (verl's), at each token
        row = np.exp(np.where(m, np.log(is_weights + 1e-10), 0.0).sum(axis=-1,
                                                                        keepdims=True) / n)
        weights = np.where(m, row, 0.0)
    extra = {"passes": passes, "s": s, "A_bar": A_bar, "n": n}
    return np.where(m, s * A_bar, 0.0), weights, extra


def backward(f, dterm, A, m, opts):
    dterm = dterm if f.is_weights is None else dterm * f.is_weights
    clamp_passes = 1.0
    if opts.log_ratio_clamp is not None:
        clamp_passes = np.abs(f.log_ratio) <= opts.log_ratio_clamp
    # d (s_i Abar_i) / d logp_u = Abar_i s_i [lr'_u passes] / n_i, summed over the row
    e = f.extra
    row = dterm.sum(axis=-1, keepdims=True)
    return np.where(m & e["passes"], row * e["A_bar"] * e["s"] / e["n"], 0.0) * clamp_passes


def clipped(f, A, m, opts):
    return ~f.extra["passes"] & (A != 0), None


def stats(f, A, m, opts):
    n = np.count_nonzero(m)
    outside = (f.log_rho < -opts.epsilon) | (f.log_rho > opts.eps_high)
    return {"clipfrac_high": float(np.count_nonzero(outside & (A > 0) & m) / n),
            "clipfrac_low": float(np.count_nonzero(outside & (A < 0) & m) / n)}


def check(opts, selected):
    if selected:
        no_clip_options(opts)


LOSS = Loss(forward, backward, clipped, stats, check)
