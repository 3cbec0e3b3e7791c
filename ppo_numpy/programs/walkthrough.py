"""The running example of docs/objective.md, printed through every core function.

``python -m ppo_numpy walkthrough``. Every input is printed first (log-probabilities,
values, score, beta, gamma, lambda, eps, the value clip range), then every step from
the KL estimate to the value loss, so each number can be checked by hand from the
output alone; ``tests/test_walkthrough.py`` checks each one against a hand
calculation. ``python -m ppo_numpy explain ppo ... --exact`` prints the same chain as
exact fractions (the command is printed at the end).
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
from ..explain.tables import format_number as _num  # 10 significant digits, -0 as 0

# The running example: one response of T = 3 tokens.
LOGP_OLD = (-1.0, -2.0, -0.5)   # log pi_old of the sampled tokens (the rollout policy)
LOGP_REF = (-1.5, -1.8, -0.6)   # log pi_ref of the same tokens
VALUES = (0.5, 0.6, 0.7)        # V_old(s_t), recorded at rollout
SCORE, BETA, GAMMA, LAM, EPS, VALUE_CLIP = 1.0, 0.1, 1.0, 0.95, 0.2, 0.2
RHO = (1.1, 1.5, 0.7)           # the ratios after one update (chosen, not trained)
VALUE_STEP = 0.1                # the value head after one update: V = V_old + 0.1

EXPLAIN = ("python -m ppo_numpy explain ppo --score 1 --logp-old -1,-2,-0.5 "
           "--logp-ref -1.5,-1.8,-0.6 --values 0.5,0.6,0.7 --beta 0.1 --gamma 1 --lam 0.95 "
           "--rho 1.1,1.5,0.7 --epsilon 0.2 --exact")


def _fmt(x) -> str:
    return "[" + ", ".join(_num(v) for v in np.ravel(x)) + "]"


def _row(label: str, value: str) -> None:
    print(f"{label:<52} = {value}")


def main(argv=None) -> int:
    argparse.ArgumentParser(
        prog="python -m ppo_numpy walkthrough",
        description="Print the running example of docs/objective.md through every core "
                    "function: the inputs, then each step with its numbers.",
    ).parse_args(argv)
    logp_old, logp_ref, values = np.array(LOGP_OLD), np.array(LOGP_REF), np.array(VALUES)
    print("The running example of docs/objective.md: one response of T = 3 tokens, "
          "sampled by pi_old.")
    _row("   logp_old (log pi_old, the rollout policy)", _fmt(logp_old))
    _row("   logp_ref (log pi_ref, the frozen reference)", _fmt(logp_ref))
    _row("   V_old(s_t) (values at rollout)", _fmt(values))
    print(f"   score = {_num(SCORE)}, beta = {_num(BETA)}, gamma = {_num(GAMMA)}, "
          f"lambda = {_num(LAM)}, eps = {_num(EPS)}, c = {_num(VALUE_CLIP)} "
          "(value clip range)")
    kl = kl_estimate(logp_old, logp_ref, "k1")
    _row("1. KL_t (k1 = logp_old - logp_ref)", _fmt(kl))
    _row("   k3 = exp(-k1) - 1 + k1 (>= 0; not used below)",
         _fmt(kl_estimate(logp_old, logp_ref, "k3")))
    r = kl_shaped_rewards(SCORE, logp_old, logp_ref, BETA)
    _row("2. r~_t = -beta KL_t + score at t = T", _fmt(r))
    delta = td_errors(r, values, GAMMA)
    _row("3. delta_t = r~_t + gamma V(s_t+1) - V(s_t)", _fmt(delta))
    A, R = gae(r, values, GAMMA, LAM)
    _row("4. A_hat_t = delta_t + gamma lambda A_hat_t+1", _fmt(A))
    _row("   R_t = A_hat_t + V_old(s_t)", _fmt(R))
    _row("   mean(A_hat), var(A_hat) with ddof 1", _fmt([np.mean(A), np.var(A, ddof=1)]))
    _row("5. whiten(A_hat) = (A_hat - mean) / sqrt(var + 1e-8)", _fmt(whiten(A)))
    print("   (shown, not used below: steps 7-9 use A_hat of step 4, unwhitened, so that each\n"
          "   number stays checkable by hand; training whitens over the whole batch)")
    logp = logp_old + np.log(RHO)
    rho = probability_ratio(logp, logp_old)
    _row("6. after an update: rho_t = exp(logp - logp_old)", _fmt(rho))
    surr = clipped_surrogate(rho, A, EPS)
    _row("7. min(rho A, clip(rho, 1-eps, 1+eps) A), A: step 4", _fmt(surr))
    _row("8. L_PPO (sum over t, mean over the 1 response)",
         _num(aggregate(surr, None, "seq-mean-token-sum")))
    loss, stats = ppo_policy_loss(logp, logp_old, A, None, EPS)
    _row("9. policy loss -mean_t, clip fraction", _fmt([loss, stats["clipfrac_active"]]))
    _row("   approx KL(pi_old || pi_theta): k1, k3 of rho",
         _fmt([stats["approx_kl_k1"], stats["approx_kl_k3"]]))
    v_new = values + VALUE_STEP
    _row("   V(s_t) after an update (V_old + 0.1)", _fmt(v_new))
    vl = value_loss(v_new, values, R, clip_range=VALUE_CLIP)
    _row("10. value loss 1/2 max((V - R)^2, (V_clip - R)^2)", _fmt(vl))
    print("With beta = 0 the rewards are [0, 0, 1] and A_hat = [0.46575, 0.385, 0.3], the "
          "example of the docstrings.")
    print(f"The same chain in exact fractions:\n  {EXPLAIN}")
    return 0
