"""GPG: the plain policy gradient term (verl 0.9.1 ``compute_policy_loss_gpg``,
``loss_mode="gpg"``).

    term_t = A_t logp_t,        d term_t / d logp_t = A_t
"""

from __future__ import annotations

import numpy as np

from .entry import Loss, no_clip_options

__all__ = ["LOSS"]


def forward(logp, logp_old, f, A, m, opts, is_weights):
    # A_t logp_t
    return np.where(m, A * logp, 0.0), is_weights, None


def backward(f, dterm, A, m, opts):
    dterm = dterm if f.is_weights is None else dterm * f.is_weights
    return dterm * A


def check(opts, selected):
    if selected:
        no_clip_options(opts)


LOSS = Loss(forward, backward, check=check)
