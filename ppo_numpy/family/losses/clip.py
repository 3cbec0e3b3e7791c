"""The clipped PPO surrogate as a loss: the family's default member (docs/objective.md;
notebooks 02 and 09).

    term_t = min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps_high) A_t)   (ppo_numpy.ppo.clipping)
    d term_t / d rho_t = A_t where unclipped, 0 where clipped            (clip_case)

with the clipped surrogate's own options: ``dual_clip`` (for A < 0 the term is at least c A)
and ``delta`` (TRL's two-sided bound: the unclipped branch uses min(rho, delta)). At the
sequence level (GSPO) rho is the sequence ratio s_i; the way back from rho to each token's
logp is ``ppo_numpy.ppo.ratio.loss_ratio_backward``.
"""

from __future__ import annotations

import numpy as np

from ...ppo.clipping import UNCLIPPED, clip_case, surrogate_term
from ...ppo.ratio import loss_ratio_backward
from .entry import Loss

__all__ = ["LOSS"]


def forward(logp, logp_old, f, A, m, opts, is_weights):
    # min( rho_t A_t , clip(rho_t, 1 - eps, 1 + eps_high) A_t )
    return surrogate_term(f.rho, A, f.lo, f.hi, opts.dual_clip, opts.delta), is_weights, None


def backward(f, dterm, A, m, opts):
    # d term / d rho = A where unclipped, 0 where clipped (clip_case)
    case = clip_case(f.rho, A, f.lo, f.hi, opts.dual_clip, opts.delta)
    drho = dterm * np.where(case == UNCLIPPED, A, 0.0)
    # rho = exp(log w): d log w = drho rho, then back to each token's logp
    dlogp = loss_ratio_backward(drho * f.rho, f, m, opts)
    # term = w_t surrogate_t: each token's gradient times its weight (at the sequence level
    # w_t times the derivative of the sequence term at token t: verl's per-token form)
    return dlogp if f.is_weights is None else dlogp * f.is_weights


def clipped(f, A, m, opts):
    # counted from the values, as TRL and verl count (pg_losses2 > pg_losses)
    rho_unclipped = f.rho if opts.delta is None else np.minimum(f.rho, opts.delta)
    dual = None
    if opts.dual_clip is not None:
        dual = f.surrogate > surrogate_term(f.rho, A, f.lo, f.hi, None, opts.delta)
    return f.surrogate < rho_unclipped * A, dual


LOSS = Loss(forward, backward, clipped)
