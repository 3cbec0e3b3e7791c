"""The objective's own convention (preset ``seed``): k1 KL from the rollout policy, the score at
the last token, V(s_{T+1}) = 0, no whitening, L_PPO summed over tokens.
"""

from __future__ import annotations

from ..._checks import where_valid
from ...batch import Rollout
from ._common import (
    Preset,
    gae_over,
    losses,
    masked_aggregate,
    masked_kl,
    mean_rows,
    result,
    shaped_rewards,
    step_losses,
    whiten_advantages,
)
from ._step import normaliser_for


def _seed(x: Rollout, p: dict, step=None) -> dict:
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
    * A step over ranks and micro-batches (a case's layout): the objective is one
      expectation over the step's batch, so each micro-batch takes its share of the
      whole step's aggregation (``normaliser="global"``: the step's gradient is the
      full batch's).
    """
    m = x.mask
    est = p["kl_estimator"]
    kl = masked_kl(x.logp_old, x.logp_ref, est, m)
    in_loss = p["kl_in"] == "loss"
    rewards = shaped_rewards(x, 0.0 if in_loss else p["beta"], m, est, p["score_position"],
                             kl_clamp=p["kl_clamp"])
    advantages, returns = gae_over(rewards, x.old_values, m, p)
    advantages = where_valid(m, advantages)
    if p["whiten_advantages"]:
        advantages = whiten_advantages(advantages, m, p)
    policy_loss, st, dlogp, vloss, dvalues = losses(
        x, advantages, returns, p, p["policy_agg"], mask=m, value_agg=p["value_agg"],
        kl=dict(kl_coef=p["beta"], kl_estimator=est, kl_clamp=p["kl_clamp"]) if in_loss
        else None)
    stats = {
        "objective": -policy_loss,
        **{k: st[k] for k in ("clipfrac_active", "clipfrac_outside", "approx_kl_k1",
                              "approx_kl_k2", "approx_kl_k3", "ratio_mean")},
        "kl_per_sequence": masked_aggregate(kl, m, "seq-mean-token-sum"),
        "score_mean": mean_rows(x.scores),
    }
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    if step is not None:
        B = m.shape[0]
        out.update(step_losses(
            step, x, advantages, returns, p, p["policy_agg"], mask=m,
            kl=(p["beta"], est, p["kl_clamp"]) if in_loss else None,
            normaliser=normaliser_for(p["normaliser"], p["policy_agg"], step=step, n_rows=B),
            value_normaliser=normaliser_for(p["normaliser"], p["value_agg"], step=step,
                                            n_rows=B))[0])
    return out


PRESET = Preset(
    name="seed",
    description="The objective's own convention: k1 KL from the rollout policy, score at the "
                "last token, V(s_{T+1}) = 0, no whitening, L_PPO summed over tokens.",
    defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.05, "epsilon": 0.2,
              "value_clip": None, "kl_estimator": "k1", "whiten_advantages": False,
              "policy_agg": "seq-mean-token-sum", "value_agg": "token-mean"},
    conventions={"score_position": "last-token", "gae_holes": "skip", "kl_clamp": None,
                 "kl_in": "reward", "epsilon_high": None, "dual_clip": None,
                 "log_ratio_clamp": None, "value_clip_form": "offset", "whiten_ddof": 1,
                 "whiten_eps": 1e-8, "whiten_eps_mode": "add", "whiten_mask": "mask",
                 "shift_mean": True, "normaliser": "global"},
    sources=("the objective of docs/objective.md (\"PPO Objective for Language Models\")",),
    pipeline=_seed,
    takes_layout=True,
)
