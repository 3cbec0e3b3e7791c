"""OpenAI's lm-human-preferences ``PPOTrainer`` (preset ``lm-human-preferences``), and the
statistics it logs, which TRL 0.11 kept under the same names.
"""

from __future__ import annotations

import numpy as np

from ...batch import Rollout
from ._common import (
    Preset,
    losses,
    masked_aggregate,
    masked_gae,
    masked_kl,
    masked_shaped_rewards,
    masked_var,
    masked_whiten,
    mean_over,
    mean_rows,
    result,
)


def divide(a, b) -> float:
    """a / b in IEEE float64: inf or NaN for b = 0, as the frameworks' tensors give."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def lmhp_stats(x, returns, m, p, st, policy_loss, vloss, kl, ddof):
    """The statistics lm-human-preferences logs (``train_policy.py``), kept under the same
    names by TRL 0.11 (``PPOTrainer.record_step_stats``); variances with ``ddof``."""
    returns_var = masked_var(returns, m, ddof)
    error = mean_over((x.values - returns) ** 2, m)
    return {
        "ppo/loss/policy": policy_loss,
        "ppo/loss/value": vloss,
        "ppo/loss/total": policy_loss + p["vf_coef"] * vloss,
        "ppo/policy/approxkl": st["approx_kl_k2"],
        "ppo/policy/clipfrac": st["clipfrac_active"],
        "ppo/returns/mean": mean_over(returns, m),
        "ppo/returns/var": returns_var,
        "ppo/val/vpred": mean_over(x.values, m),
        "ppo/val/error": error,
        "ppo/val/clipfrac": st["value_clipfrac"],
        "ppo/val/mean": mean_over(x.old_values, m),
        "ppo/val/var": masked_var(x.old_values, m, ddof),
        "ppo/val/var_explained": 1.0 - divide(error, returns_var),
        "objective/kl": masked_aggregate(kl, m, "seq-mean-token-sum"),
        "objective/kl_coef": p["beta"],
        "objective/entropy": masked_aggregate(-x.logp_old, m, "seq-mean-token-sum"),
    }


def _lm_human_preferences(x: Rollout, p: dict) -> dict:
    """OpenAI's ``PPOTrainer`` (openai/lm-human-preferences @ 1ab856db,
    lm_human_preferences/train_policy.py).

    * No mask: every one of the T columns is a sampled token, so the mask must be
      all ones.
    * Rewards (``compute_rewards``): -beta k1 from the rollout log-probs, the score
      added at the last column.
    * ``whiten_rewards`` (default True, in ``loss``): over all B T rewards, ddof 0,
      eps 1e-8 inside the square root, the mean added back
      (lm_human_preferences/utils/core.py ``whiten``).
    * GAE with V = 0 after the last column; advantages whitened the same way with
      the mean removed.
    * Losses (``loss``): means over all B T entries; value clip 0.2 around the
      rollout values (``tf.clip_by_value(vpred, values - c, values + c)``:
      ``value_clip_form="clamp"``); no log-ratio clamp, no dual clip.
    * Statistics: ``ppo/loss/policy|value|total`` (total with ``vf_coef``),
      ``ppo/policy/approxkl`` (0.5 mean (logp - logp_old)^2), ``ppo/policy/clipfrac``,
      ``ppo/returns/mean|var``, ``ppo/val/vpred|error|clipfrac|mean|var|var_explained``
      (variances with ddof 0, as ``tf.nn.moments``), ``objective/kl``,
      ``objective/kl_coef``, ``objective/entropy``, ``objective/score``,
      ``objective/score_total``. ``ppo/policy/entropy`` needs logits.
    """
    name = "lm-human-preferences"
    if not np.all(x.mask):
        row = int(np.argmin(x.mask.all(axis=-1)))
        raise ValueError(f"{name}: mask row {row} has padding; lm-human-preferences has no "
                         "mask (every one of the T sampled tokens counts), so the mask must "
                         "be all ones")
    m = x.mask  # every column (checked above)
    kl = masked_kl(x.logp_old, x.logp_ref, "k1", m)
    rewards = masked_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m)
    if p["whiten_rewards"]:
        rewards = masked_whiten(rewards, m, shift_mean=False, ddof=0)
    raw_advantages, returns = masked_gae(rewards, x.old_values, p["gamma"], p["lam"], m)
    advantages = masked_whiten(raw_advantages, m, ddof=0)
    policy_loss, st, dlogp, vloss, dvalues = losses(x, advantages, returns, p, mask=m)
    stats = lmhp_stats(x, returns, m, p, st, policy_loss, vloss, kl, ddof=0)
    stats["objective/score"] = mean_rows(x.scores)
    stats["objective/score_total"] = mean_rows(x.scores) - p["beta"] * stats["objective/kl"]
    return result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


PRESET = Preset(
    name="lm-human-preferences",
    description="OpenAI's lm-human-preferences PPOTrainer: no mask, score at the last "
                "column, rewards and advantages whitened with ddof 0.",
    defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.2, "epsilon": 0.2, "value_clip": 0.2,
              "whiten_rewards": True, "vf_coef": 0.1},
    conventions={"value_clip_form": "clamp"},
    sources=(
        "openai/lm-human-preferences: lm_human_preferences/train_policy.py (PPOTrainer."
        "compute_rewards, loss, record_step_stats; PpoHParams, RewardHParams) @ 1ab856db",
        "openai/lm-human-preferences: lm_human_preferences/utils/core.py (whiten) "
        "@ f774e89b",
    ),
    pipeline=_lm_human_preferences,
)
