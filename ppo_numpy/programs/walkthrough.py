"""The seed's running example, printed through every core function.

``python -m ppo_numpy walkthrough``. Every number printed here is one a reader
can check by hand (``tests/test_walkthrough.py`` checks them against hand values);
steps 1 to 4 are the doctests of the modules.
"""

from __future__ import annotations

import argparse

import numpy as np

from .. import (
    aggregate,
    clipped_surrogate,
    gae,
    kl_estimate,
    kl_shaped_rewards,
    ppo_policy_loss,
    probability_ratio,
    td_errors,
    value_loss,
    whiten,
)


def _fmt(x) -> str:
    return "[" + ", ".join(f"{float(v):.5g}" for v in np.ravel(x)) + "]"


def _row(label: str, value: str) -> None:
    print(f"{label:<49} = {value}")


def main(argv=None) -> int:
    argparse.ArgumentParser(
        prog="python -m ppo_numpy walkthrough",
        description="Print the seed's running example through every core function.",
    ).parse_args(argv)
    logp = np.array([-1.0, -2.0, -0.5])
    logp_ref = np.array([-1.0, -2.0, -0.5])
    values = np.array([0.5, 0.6, 0.7])
    score, beta, gamma, lam = 1.0, 0.1, 1.0, 0.95
    print("The seed's running example: one response of T = 3 tokens, score 1 at the last token.")
    print(f"  logp = {_fmt(logp)}   logp_ref = {_fmt(logp_ref)}   V(s_t) = {_fmt(values)}")
    kl = kl_estimate(logp, logp_ref, "k1")
    _row("1. KL_t (k1 = logp - logp_ref)", _fmt(kl))
    r = kl_shaped_rewards(score, logp, logp_ref, beta)
    _row("2. r~_t = -beta KL_t + score at t = T", _fmt(r))
    delta = td_errors(r, values, gamma)
    _row("3. delta_t = r~_t + gamma V(s_t+1) - V(s_t)", _fmt(delta))
    A, R = gae(r, values, gamma, lam)
    _row("4. A_hat_t = sum_l (gamma lam)^l delta_t+l", _fmt(A))
    _row("   R_t = A_hat_t + V(s_t)", _fmt(R))
    _row("5. whiten(A_hat)", _fmt(whiten(A)))
    logp_new = logp + np.log([1.1, 1.5, 0.7])
    rho = probability_ratio(logp_new, logp)
    _row("6. after an update, rho_t = exp(logp - logp_old)", _fmt(rho))
    surr = clipped_surrogate(rho, A, 0.2)
    _row("7. min(rho A, clip(rho, 0.8, 1.2) A)", _fmt(surr))
    _row("8. L_PPO (sum over t, mean over pairs)",
         f"{float(aggregate(surr, None, 'seq-mean-token-sum')):.6g}")
    loss, stats = ppo_policy_loss(logp_new, logp, A, None, 0.2)
    _row("9. policy loss (token-mean)", f"{loss:.6g}  clipfrac = {stats['clipfrac_active']:.4g}")
    vl = value_loss(values + 0.1, values, R, clip_range=0.2)
    _row("10. value loss 1/2 max((V-R)^2, (Vclip-R)^2)", _fmt(vl))
    return 0
