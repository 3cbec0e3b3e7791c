"""DRO: the policy gradient with a quadratic penalty on the log-ratio (verl 0.9.1
``compute_policy_loss_dro``, ``loss_mode="dro"``).

    term_t = A_t logp_t - (dro_beta / 2) lr_t^2,    d term_t / d logp_t = A_t - dro_beta lr_t

lr_t = logp_t - logp_old_t (clamped by ``log_ratio_clamp``: the bound passes the gradient).
``dro_beta`` has no default (verl's ``policy_loss.dro_beta``).
"""

from __future__ import annotations

import numpy as np

from ..._checks import check_scalar
from .entry import Loss, no_clip_options

__all__ = ["LOSS"]


def forward(logp, logp_old, f, A, m, opts, is_weights):
    # A_t logp_t - (beta / 2) lr_t^2
    return np.where(m, A * logp - 0.5 * opts.dro_beta * np.square(f.log_rho), 0.0), \
        is_weights, None


def backward(f, dterm, A, m, opts):
    dterm = dterm if f.is_weights is None else dterm * f.is_weights
    clamp_passes = 1.0
    if opts.log_ratio_clamp is not None:
        clamp_passes = np.abs(f.log_ratio) <= opts.log_ratio_clamp
    return dterm * (A - opts.dro_beta * f.log_rho * clamp_passes)


def check(opts, selected):
    if opts.dro_beta is not None:
        object.__setattr__(opts, "dro_beta", check_scalar(opts.dro_beta, "dro_beta", low=0,
                                                          low_open=True, allow_exact=False))
    if selected:
        if opts.dro_beta is None:
            raise ValueError("dro_beta: loss_type 'dro' needs dro_beta > 0 (verl 0.9.1 "
                             "policy_loss.dro_beta has no default)")
        no_clip_options(opts)


LOSS = Loss(forward, backward, check=check)
