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
    step_losses,
)
from ._step import normaliser_for


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


def _lm_human_preferences(x: Rollout, p: dict, step=None) -> dict:
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
    * A step over ranks and micro-batches (a case's layout): each MPI rank trains on its
      minibatch, one per optimizer step (no gradient accumulation: one micro-batch per
      rank), and ``loss`` whitens the minibatch's own rewards and advantages before its
      means; the ranks' gradients are averaged (``mpi_allreduce``, a mean). So each
      micro-batch's advantages and returns are its own rows' (``step/advantages``,
      ``step/returns``), its losses their means (``normaliser="micro-batch-mean"``).
    """
    name = "lm-human-preferences"
    if not np.all(x.mask):
        row = int(np.argmin(x.mask.all(axis=-1)))
        raise ValueError(f"{name}: mask row {row} has padding; lm-human-preferences has no "
                         "mask (every one of the T sampled tokens counts), so the mask must "
                         "be all ones")
    m = x.mask  # every column (checked above)
    kl = masked_kl(x.logp_old, x.logp_ref, "k1", m)
    rewards, advantages, returns = _lmhp_advantages(x, p)
    policy_loss, st, dlogp, vloss, dvalues = losses(x, advantages, returns, p, mask=m)
    stats = lmhp_stats(x, returns, m, p, st, policy_loss, vloss, kl, ddof=0)
    stats["objective/score"] = mean_rows(x.scores)
    stats["objective/score_total"] = mean_rows(x.scores) - p["beta"] * stats["objective/kl"]
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    if step is not None:
        out.update(_lmhp_step(step, x, p))
    return out


def _lmhp_advantages(x: Rollout, p: dict) -> tuple:
    """(rewards, advantages, returns) of ``loss`` on the rows of ``x`` (its minibatch)."""
    m = x.mask
    rewards = masked_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m)
    if p["whiten_rewards"]:
        rewards = masked_whiten(rewards, m, shift_mean=False, ddof=0)
    raw_advantages, returns = masked_gae(rewards, x.old_values, p["gamma"], p["lam"], m)
    return rewards, masked_whiten(raw_advantages, m, ddof=0), returns


def _lmhp_step(step, x: Rollout, p: dict) -> dict:
    """The step's outputs of ``lm-human-preferences`` (its docstring): each micro-batch's
    advantages and returns from its own rows, then its losses."""
    for r, rank in enumerate(step.layout):
        if len(rank) != 1:
            raise ValueError(f"layout[{r}]: lm-human-preferences has no gradient accumulation "
                             f"(each minibatch is an optimizer step): one micro-batch per "
                             f"rank, got {len(rank)}")
    advantages, returns = np.zeros(x.mask.shape), np.zeros(x.mask.shape)
    for rank in step.layout:
        rows = rank[0]
        _, advantages[rows], returns[rows] = _lmhp_advantages(x.rows(rows), p)
    norm = normaliser_for(p["normaliser"], "token-mean", step=step, n_rows=x.mask.shape[0])
    out = step_losses(step, x, advantages, returns, p, mask=x.mask, normaliser=norm,
                      value_normaliser=norm)[0]
    return {**out, "step/advantages": advantages, "step/returns": returns}


PRESET = Preset(
    name="lm-human-preferences",
    description="OpenAI's lm-human-preferences PPOTrainer: no mask, score at the last "
                "column, rewards and advantages whitened with ddof 0.",
    defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.2, "epsilon": 0.2, "value_clip": 0.2,
              "whiten_rewards": True, "vf_coef": 0.1},
    conventions={"value_clip_form": "clamp", "normaliser": "micro-batch-mean"},
    sources=(
        "openai/lm-human-preferences: lm_human_preferences/train_policy.py (PPOTrainer."
        "compute_rewards, loss, record_step_stats; PpoHParams, RewardHParams) @ 1ab856db",
        "openai/lm-human-preferences: lm_human_preferences/utils/core.py (whiten) "
        "@ f774e89b",
    ),
    pipeline=_lm_human_preferences,
    takes_layout=True,
)
