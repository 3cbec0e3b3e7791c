"""The objective's own convention (preset ``seed``): k1 KL from the rollout policy, the score at
the last token, V(s_{T+1}) = 0, no whitening, L_PPO summed over tokens.
"""

from __future__ import annotations

from ...rollout import Rollout
from ._common import (
    Preset,
    aggregate,
    gae,
    kl_estimate,
    kl_shaped_rewards,
    loss_options,
    losses,
    mean_rows,
    result,
    whiten,
)


def _seed(x: Rollout, p: dict) -> dict:
    """The objective's own convention (docs/objective.md; "PPO Objective for Language Models").

    * r~_t = -beta KL_t + [t = T] score with KL_t the k1 estimate from the rollout
      log-probs; the score at the last response token.
    * delta_t = r~_t + gamma V(s_{t+1}) - V(s_t), V(s_{T+1}) = 0; GAE over the
      response tokens (holes skipped).
    * No whitening (the objective uses A_hat as GAE gives it; ``whiten_advantages=True``
      applies ppo_numpy's :func:`whiten`).
    * Policy loss = -L_PPO: sum over each response's tokens, mean over responses
      (``policy_agg="seq-mean-token-sum"``); no log-ratio clamp, no dual clip.
    * The objective has no value loss; ppo_numpy's default is used: 1/2 (V - R)^2
      without clipping, token mean.
    """
    m = x.mask
    est = p["kl_estimator"]
    kl = kl_estimate(x.logp_old, x.logp_ref, est, m)
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m, est)
    advantages, returns = gae(rewards, x.old_values, p["gamma"], p["lam"], m)
    if p["whiten_advantages"]:
        advantages = whiten(advantages, m)
    policy_loss, st, dlogp, vloss, dvalues = losses(
        x, advantages, returns, loss_options(p, p["policy_agg"]), p["value_clip"],
        policy_mask=m, value_mask=m, value_agg=p["value_agg"])
    stats = {
        "objective": -policy_loss,
        "clipfrac_active": st["clipfrac_active"],
        "clipfrac_outside": st["clipfrac_outside"],
        "approx_kl_k1": st["approx_kl_k1"],
        "approx_kl_k2": st["approx_kl_k2"],
        "approx_kl_k3": st["approx_kl_k3"],
        "ratio_mean": st["ratio_mean"],
        "kl_per_sequence": aggregate(kl, m, "seq-mean-token-sum"),
        "score_mean": mean_rows(x.scores),
    }
    return result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


PRESET = Preset(
    name="seed",
    description="The objective's own convention: k1 KL from the rollout policy, score at the "
                "last token, V(s_{T+1}) = 0, no whitening, L_PPO summed over tokens.",
    defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.05, "epsilon": 0.2,
              "value_clip": None, "kl_estimator": "k1", "whiten_advantages": False,
              "policy_agg": "seq-mean-token-sum", "value_agg": "token-mean"},
    sources=("the objective of docs/objective.md (\"PPO Objective for Language Models\")",),
    pipeline=_seed,
)
