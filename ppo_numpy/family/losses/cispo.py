"""CISPO: the clipped importance weight as a constant of the gradient (verl 0.9.1
``compute_policy_loss_cispo``; TRL 1.16.0 ``loss_type="cispo"``).

    term_t = sg(w_t) A_t logp_t,        d term_t / d logp_t = w_t A_t

with w_t = clip(rho_t, 1 - eps, 1 + eps_high) (``cispo_clip="range"``, verl) or
min(rho_t, eps_high) (``"max"``, TRL: the bound is ``epsilon_high`` itself, no lower one).
"""

from __future__ import annotations

import numpy as np

from ..._checks import check_choice
from .entry import Loss

__all__ = ["CISPO_CLIPS", "LOSS", "cispo_weight"]

#: how CISPO bounds its importance weight
CISPO_CLIPS = ("range", "max")


def cispo_weight(rho, lo, hi, opts):
    """CISPO's importance weight w_t: clip(rho, lo, hi) = clip(rho, 1 - eps, 1 + eps_high)
    (``cispo_clip="range"``) or min(rho, eps_high) (``"max"``)."""
    if opts.cispo_clip == "max":
        # min(rho_t, eps_high): the bound is eps_high itself (hi - 1), no lower one
        return np.minimum(rho, float(opts.eps_high))
    return np.minimum(np.maximum(rho, lo), hi)


def forward(logp, logp_old, f, A, m, opts, is_weights):
    # sg(w_t) A_t logp_t, the weight w_t a constant of the gradient
    w = cispo_weight(f.rho, f.lo, f.hi, opts)
    return w * A * logp, is_weights, {"w": w}


def backward(f, dterm, A, m, opts):
    # d / d logp = w_t A_t (nothing flows through w_t)
    dlogp = dterm * f.extra["w"] * A
    return dlogp if f.is_weights is None else dlogp * f.is_weights


def clipped(f, A, m, opts):
    return f.extra["w"] != f.rho, None


def check(opts, selected):
    check_choice(opts.cispo_clip, "cispo_clip", CISPO_CLIPS, "CISPO clip")
    if selected and (opts.dual_clip is not None or opts.delta is not None):
        raise ValueError("loss_type: 'cispo' takes no dual_clip or delta (its weight is "
                         "bounded by cispo_clip)")


LOSS = Loss(forward, backward, clipped, check=check)
