"""SAPO: a smooth gate in place of the clip (verl 0.9.1 ``compute_policy_loss_sapo``; TRL 1.16.0
``loss_type="sapo"``).

    term_t = g(rho_t) A_t,   g(rho) = (4 / tau) sigmoid(tau (rho - 1)),
    tau = tau_pos where A_t > 0 else tau_neg,   d term_t / d rho_t = 4 s (1 - s) A_t

s = sigmoid(tau (rho - 1)). At rho = 1 the slope is 1, as the unclipped PPO term's; far from 1
it decays like exp(-tau abs(rho - 1)) instead of dropping to 0 at a clip bound. Token or sequence
level (rho the sequence ratio s_i at every token of response i). Defaults: ``sapo_tau_pos``
1.0, ``sapo_tau_neg`` 1.05 (verl's ``tau_pos``, ``tau_neg``; TRL's ``sapo_temperature_pos``,
``sapo_temperature_neg``).
"""

from __future__ import annotations

import numpy as np

from ..._checks import check_scalar
from ...ppo.ratio import loss_ratio_backward
from .entry import Loss, no_clip_options

__all__ = ["LOSS", "sapo_gate"]


def sapo_gate(rho, A, tau_pos=1.0, tau_neg=1.05):
    """SAPO's gate g(rho) = (4 / tau) sigmoid(tau (rho - 1)) and its derivative 4 s (1 - s),
    s = sigmoid(tau (rho - 1)), with tau = ``tau_pos`` where A > 0, else ``tau_neg``.

    ``rho`` >= 0 and ``A`` float arrays of one shape (unchecked kernel). At rho = 1 the gate is
    2 / tau and its slope 1, the slope of the unclipped PPO term; far from 1 the slope decays
    like exp(-tau abs(rho - 1)) instead of dropping to 0 at a clip bound.

    >>> g, dg = sapo_gate(np.array([1.0, 1.0]), np.array([1.0, -1.0]), 1.0, 2.0)
    >>> g.tolist(), dg.tolist()
    ([2.0, 1.0], [1.0, 1.0])
    """
    tau = np.where(A > 0, tau_pos, tau_neg)
    s = 1.0 / (1.0 + np.exp(-tau * (rho - 1.0)))
    return s * (4.0 / tau), 4.0 * s * (1.0 - s)


def forward(logp, logp_old, f, A, m, opts, is_weights):
    # g(rho_t) A_t, g the smooth gate
    gate, dgate = sapo_gate(f.rho, A, opts.sapo_tau_pos, opts.sapo_tau_neg)
    return np.where(m, gate * A, 0.0), is_weights, {"dgate": dgate}


def backward(f, dterm, A, m, opts):
    # d term / d rho = g'(rho) A; rho = exp(log w), back to each token's logp
    dlogp = loss_ratio_backward(dterm * f.extra["dgate"] * A * f.rho, f, m, opts)
    return dlogp if f.is_weights is None else dlogp * f.is_weights


def check(opts, selected):
    set_ = object.__setattr__
    for name in ("sapo_tau_pos", "sapo_tau_neg"):
        set_(opts, name, check_scalar(getattr(opts, name), name, low=0, low_open=True,
                                      allow_exact=False))
    if selected:
        no_clip_options(opts, sequence=True)


LOSS = Loss(forward, backward, check=check)
