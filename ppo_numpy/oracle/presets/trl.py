"""TRL: the current ``PPOTrainer`` (preset ``trl``) and the legacy ``step()`` trainer of
TRL 0.11 (preset ``trl-0.11``).
"""

from __future__ import annotations

import numpy as np

from ...batch import Rollout
from ._common import (
    Preset,
    check_estimator,
    clip_scores,
    float32_roundings,
    gae_over,
    losses,
    masked_aggregate,
    masked_gae,
    masked_kl,
    masked_ratio,
    masked_whiten,
    mean_over,
    mean_rows,
    require_finite,
    require_prefix,
    result,
    shaped_rewards,
    slot_after,
    step_losses,
    whiten_advantages,
)
from ._step import normaliser_for, own_token_means, rank_mean
from .lm_human_preferences import lmhp_stats

# why: huggingface/trl trl/trainer/ppo_trainer.py (v0.20.0) fills the log-probs of every
# padding position with INVALID_LOGPROB = 1.0; its objective/entropy sums them.
TRL_INVALID_LOGPROB = 1.0


def _trl(x: Rollout, p: dict, step=None) -> dict:
    """TRL's current ``PPOTrainer.train`` (huggingface/trl v0.20.0, trl/trainer/ppo_trainer.py).

    * Mask: a prefix of ones (TRL derives it from the first pad token after
      trl/trainer/utils.py ``truncate_response``, ``first_true_indices``); holes and
      left padding are rejected.
    * Log-probs at padding are the constant 1.0 in TRL (``INVALID_LOGPROB``), so the
      KL there is 0.
    * KL: ``kl_estimator`` k1 (default) or k3, from the rollout log-probs, no clamp.
    * Score one slot after the last token, at the last token for a full row:
      ``kl_shaped_rewards(..., score_offset=1)``.
    * ``whiten_rewards`` (default False): :func:`whiten` over mask + slot after,
      ``shift_mean=False`` (trl/core.py ``masked_whiten``).
    * The rollout value at the slot after is kept and GAE runs over mask + slot
      after: ``gae(..., mask=mask_p1)``; returns = A + V_old there too.
    * Advantages: :func:`whiten` over the response tokens, ddof 1, eps 1e-8
      inside the square root (trl/core.py ``masked_whiten``, ``masked_var``).
    * Policy loss: token mean over the response tokens, no log-ratio clamp,
      no dual clip.
    * Value loss: 1/2 max(...) with ``cliprange_value`` 0.2, V clamped to
      [V_old - c, V_old + c] (``torch.clamp``: ``value_clip_form="clamp"``), token
      mean over mask + slot after (``~padding_mask_p1``); ``dvalues`` is nonzero there.
    * Tolerance: trl/core.py ``masked_var`` divides two integer mask sums in torch
      (a float32 Bessel factor) and the clip fractions are means of ``.float()``
      booleans (float32 k / n): float64 rtol 1e-9 + 2^-24.
    * Statistics (one minibatch): ``policy/approxkl_avg`` = 0.5 (logp - logp_old)^2
      summed over tokens / (B T); ``policy/clipfrac_avg``; ``loss/policy_avg``;
      ``loss/value_avg``; ``val/clipfrac_avg`` (over mask + slot after);
      ``val/ratio`` (mean over all B T positions, ratio 1 at padding);
      ``objective/kl``, ``objective/non_score_reward`` (mean over responses of
      the sums); ``objective/rlhf_reward``; ``objective/scores``;
      ``objective/entropy`` (mean over responses of the sum over all T columns of
      -logp_old, padding counting -1.0 each). Not produced: ``policy/entropy_avg``
      (needs logits), ``val/ratio_var`` (a variance across minibatches).
    * A step over ranks and micro-batches (a case's layout; ``train``: each micro-batch of
      ``per_device_train_batch_size`` rows inside ``accelerator.accumulate``): each
      micro-batch's own token means, ``pg_loss + vf_coef * vf_loss``, which Accelerate's
      ``backward`` divides by ``gradient_accumulation_steps`` K (``normaliser=
      "micro-batch-mean"``; DDP averages the ranks); the policy and the value mask are the
      micro-batch's (``~padding_mask``, ``~padding_mask_p1``). TRL records one value per
      micro-batch of ``approxkl``, ``pg_clipfrac``, ``pg_loss``, ``vf_loss``,
      ``vf_clipfrac`` and ``ratio`` and logs each mean over the micro-batches of every rank
      (``gather_for_metrics(...).mean()``): ``step/stat/<name>``.
    """
    name = "trl"
    m = x.mask
    require_prefix(name, m, "TRL's PPOTrainer derives the mask from the first pad token")
    m_p1 = slot_after(m)
    require_finite(name, {"old_values": x.old_values, "values": x.values}, m_p1 & ~m,
                    "TRL reads as the value of the slot after the last token")
    est = p["kl_estimator"]
    check_estimator(name, est, ("k1", "k3"))
    kl = masked_kl(x.logp_old, x.logp_ref, est, m)
    in_loss = p["kl_in"] == "loss"
    rewards = shaped_rewards(x, 0.0 if in_loss else p["beta"], m, est, p["score_position"],
                             kl_clamp=p["kl_clamp"])
    if p["whiten_rewards"]:
        rewards = masked_whiten(rewards, m_p1, shift_mean=False)
    raw_advantages, returns = masked_gae(rewards, x.old_values, p["gamma"], p["lam"], m_p1)
    advantages = whiten_advantages(raw_advantages, m, p)
    policy_loss, st, dlogp, vloss, dvalues = losses(
        x, advantages, returns, p, mask=m, value_mask=m_p1,
        kl=dict(kl_coef=p["beta"], kl_estimator=est, kl_clamp=p["kl_clamp"]) if in_loss
        else None)
    rho = masked_ratio(x.logp, x.logp_old, m)
    kl_per_row = masked_aggregate(kl, m, "seq-mean-token-sum")
    stats = {
        "objective/kl": kl_per_row,
        "objective/entropy": masked_aggregate(-x.logp_old, m, "seq-mean-token-sum")
        - TRL_INVALID_LOGPROB * mean_rows(m.shape[-1] - m.sum(axis=-1)),  # (padding per row)
        "objective/non_score_reward": -p["beta"] * kl_per_row,
        "objective/rlhf_reward": -p["beta"] * kl_per_row + mean_rows(x.scores),
        "objective/scores": mean_rows(x.scores),
        "policy/approxkl_avg": masked_aggregate(masked_kl(x.logp, x.logp_old, "k2", m), m,
                                         "seq-mean-token-sum-norm"),
        "policy/clipfrac_avg": st["clipfrac_active"],
        "loss/policy_avg": policy_loss,
        "loss/value_avg": vloss,
        "val/clipfrac_avg": st["value_clipfrac"],
        "val/ratio": 1.0 + masked_aggregate(rho - 1.0, m, "seq-mean-token-sum-norm"),
    }
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    if step is not None:
        out.update(_trl_step(step, x, advantages, returns, p, m, m_p1,
                             kl=(p["beta"], est, p["kl_clamp"]) if in_loss else None))
    return out


def _trl_step(step, x: Rollout, advantages, returns, p, m, m_p1, kl) -> dict:
    """The step's outputs of ``trl`` (its docstring): the losses of each micro-batch, and the
    statistics TRL logs as means over the micro-batches of every rank."""
    B = m.shape[0]
    out, passes, value = step_losses(
        step, x, advantages, returns, p, mask=m, value_mask=m_p1, kl=kl, stats=True,
        normaliser=normaliser_for(p["normaliser"], "token-mean", step=step, n_rows=B),
        value_normaliser=normaliser_for(p["normaliser"], "token-mean", step=step, n_rows=B))
    T = m.shape[-1]
    log_rho = np.where(m, x.logp - x.logp_old, 0.0)
    rho = masked_ratio(x.logp, x.logp_old, m)
    # per micro-batch: its own means over every position of its rows (padding: ratio 1,
    # log-ratio 0), as TRL's .mean() of (b, T) tensors
    approxkl = [0.5 * np.square(log_rho[mb.rows]).sum() / (len(mb.rows) * T) for mb in passes]
    ratio = [1.0 + (rho[mb.rows] - m[mb.rows]).sum() / (len(mb.rows) * T) for mb in passes]
    stat = {"policy/approxkl_avg": approxkl,
            "policy/clipfrac_avg": [mb.stats["clipfrac_active"] for mb in passes],
            "loss/policy_avg": own_token_means(passes, m), "loss/value_avg": value["mean"],
            "val/clipfrac_avg": value["clipfrac"], "val/ratio": ratio}
    out.update({f"step/stat/{k}": rank_mean(step, v) for k, v in stat.items()})
    return out


# ---------------------------------------------------------------------------------------
# TRL 0.11, the legacy step() trainer

_TRL011_KL_PENALTY = {"k1": "kl", "k2": "mse", "abs": "abs"}


def _trl_011(x: Rollout, p: dict, step=None) -> dict:
    """TRL's legacy ``PPOTrainer`` (huggingface/trl v0.11.4, trl/trainer/ppo_trainer.py).

    * Scores clipped to ``[-score_clip, score_clip]`` when set (``step``; default off).
    * KL (``_kl_penalty``): ``kl_penalty="kl"`` = k1 (default), ``"mse"`` = k2,
      ``"abs"``; here ``kl_estimator`` k1, k2 or abs. From the rollout log-probs.
    * Score at the last 1 of the mask (``compute_rewards``).
    * GAE (``compute_advantages``): values and rewards multiplied by the mask, the
      recursion over every column: V = 0 after the last token, and a hole in the
      mask is a state of value 0 and reward 0 the recursion runs through
      (``gae`` with ``mask=None`` on the zero-filled arrays).
    * Advantages whitened over the mask, ddof 1, eps 1e-8 inside the square root
      (trl/core.py ``masked_whiten``).
    * ``whiten_rewards=True`` is refused: TRL 0.11 leaves its whitened padding
      nonzero and lets it into GAE, which this preset does not reproduce.
    * Losses (``loss``): token means over the mask, value clip 0.2 around the
      rollout values (``clip_by_value(vpreds, values - c, values + c)``:
      ``value_clip_form="clamp"``), no log-ratio clamp, no dual clip.
    * Tolerance: as ``trl`` (float32 Bessel factor in trl/core.py ``masked_var``,
      float32 clip fractions): float64 rtol 1e-9 + 2^-24. When the token mean of
      the ratio exceeds ``ratio_threshold`` (10) both losses (and gradients) are 0.
    * Statistics under ``step``'s names: ``ppo/policy/approxkl`` (= approx_kl_k2),
      ``ppo/policy/policykl`` (= approx_kl_k1), ``ppo/policy/clipfrac``,
      ``ppo/policy/advantages_mean``, ``ppo/loss/policy|value|total`` (value without
      and total with ``vf_coef``), ``ppo/returns/mean|var``, ``ppo/val/vpred|error|
      clipfrac|mean|var|var_explained`` (variances ddof 1; ``val/mean|var`` of the
      rollout values), ``objective/kl`` (mean over responses of the masked sums;
      the adaptive controller's input), ``objective/kl_coef``, ``objective/entropy``,
      ``ppo/mean_non_score_reward`` (a token mean), ``ppo/mean_scores``,
      ``ppo/std_scores`` (ddof 1; NaN for one response). ``ppo/policy/entropy``
      needs logits and is not produced.
    * A step over ranks and micro-batches (a case's layout; ``step``: micro-batches of
      ``mini_batch_size`` rows inside ``accelerator.accumulate``): each micro-batch's own
      token means, ``loss_p + loss_v``, divided by ``gradient_accumulation_steps`` K by
      Accelerate's ``backward`` (``normaliser="micro-batch-mean"``; DDP averages the
      ranks); ``ratio_threshold`` is tested on each micro-batch's own mean ratio and zeroes
      that micro-batch's losses. ``loss`` returns one statistic per micro-batch, and
      ``step`` logs each mean over the micro-batches (``stack_dicts``,
      ``record_step_stats``) and over the processes (``gather_stats``: all-reduce / P):
      ``step/stat/ppo/loss/policy|value|total``, ``ppo/policy/approxkl|policykl|clipfrac``,
      ``ppo/val/clipfrac``.
    """
    name = "trl-0.11"
    m = x.mask
    est = p["kl_estimator"]
    check_estimator(name, est, tuple(_TRL011_KL_PENALTY))
    if p["whiten_rewards"]:
        raise ValueError(f"{name}: whiten_rewards=True is not reproduced (TRL 0.11 whitens "
                         "the rewards after masking and does not re-mask, so padding enters "
                         "GAE; see docs/frameworks.md)")
    kl = masked_kl(x.logp_old, x.logp_ref, est, m)
    rewards = shaped_rewards(x, p["beta"], m, est, p["score_position"],
                             kl_clamp=p["kl_clamp"], score_clip=p["score_clip"])
    raw_advantages, returns = gae_over(rewards, x.old_values, m, p)
    advantages = whiten_advantages(raw_advantages, m, p)
    policy_loss, st, dlogp, vloss, dvalues = losses(x, advantages, returns, p, mask=m)
    if st["ratio_mean"] > p["ratio_threshold"]:
        # why: v0.11.4 PPOTrainer.loss multiplies both losses by 0 ("Skipping batch")
        policy_loss, vloss = 0.0, 0.0
        dlogp, dvalues = np.zeros_like(dlogp), np.zeros_like(dvalues)
    scores = clip_scores(x.scores, p["score_clip"])
    stats = lmhp_stats(x, returns, m, p, st, policy_loss, vloss, kl, ddof=1)
    stats.update({
        "ppo/policy/policykl": st["approx_kl_k1"],
        "ppo/policy/advantages_mean": mean_over(advantages, m),
        "ppo/mean_non_score_reward": mean_over(-p["beta"] * kl, m),
        "ppo/mean_scores": mean_rows(scores),
        "ppo/std_scores": float(np.std(scores, ddof=1)) if scores.size > 1 else float("nan"),
    })
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    if step is not None:
        out.update(_trl_011_step(step, x, advantages, returns, p, m))
    return out


def _trl_011_step(step, x: Rollout, advantages, returns, p, m) -> dict:
    """The step's outputs of ``trl-0.11`` (its docstring)."""
    B = m.shape[0]
    norm = normaliser_for(p["normaliser"], "token-mean", step=step, n_rows=B)
    out, passes, value = step_losses(step, x, advantages, returns, p, mask=m, stats=True,
                                     normaliser=norm, value_normaliser=norm)
    policy, vloss = own_token_means(passes, m), value["mean"]
    for j, mb in enumerate(passes):
        if mb.stats["ratio_mean"] > p["ratio_threshold"]:
            # why: v0.11.4 PPOTrainer.loss multiplies both losses by 0 for this micro-batch
            out["step/losses"][j] = out["step/value_losses"][j] = policy[j] = vloss[j] = 0.0
            out["step/dlogp"][mb.rows] = out["step/dvalues"][mb.rows] = 0.0
    stat = {
        "loss/policy": policy, "loss/value": vloss, "loss/total": policy + p["vf_coef"] * vloss,
        "policy/approxkl": [mb.stats["approx_kl_k2"] for mb in passes],
        "policy/policykl": [mb.stats["approx_kl_k1"] for mb in passes],
        "policy/clipfrac": [mb.stats["clipfrac_active"] for mb in passes],
        "val/clipfrac": value["clipfrac"],
    }
    out.update({f"step/stat/ppo/{k}": rank_mean(step, v) for k, v in stat.items()})
    return out


PRESET = Preset(
    name="trl",
    description="TRL's current PPOTrainer (trl 0.20.0, trl/trainer/ppo_trainer.py): score "
                "one slot after the last token, value of that slot kept, token means.",
    defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.05, "epsilon": 0.2, "value_clip": 0.2,
              "kl_estimator": "k1", "whiten_rewards": False, "vf_coef": 0.1},
    conventions={"score_position": "after-last", "whiten_ddof": 1, "whiten_eps": 1e-8,
                 "whiten_eps_mode": "add", "whiten_mask": "mask", "shift_mean": True,
                 "kl_clamp": None, "kl_in": "reward", "epsilon_high": None, "dual_clip": None,
                 "log_ratio_clamp": None, "value_clip_form": "clamp",
                 "normaliser": "micro-batch-mean"},
    tolerances=float32_roundings(1),
    tolerance_note="TRL rounds the Bessel factor n / (n - 1) (trl/core.py masked_var: "
                   "integer mask sums divided in torch) and each clip fraction (masked_mean "
                   "of .float() booleans) to float32: 2^-24 relative on top of the float64 "
                   "rtol",
    sources=(
        "huggingface/trl: trl/trainer/ppo_trainer.py (PPOTrainer.train), v0.20.0",
        "huggingface/trl: trl/trainer/ppo_config.py (PPOConfig), v0.20.0",
        "huggingface/trl: trl/core.py (masked_mean, masked_var, masked_whiten), v0.20.0",
        "huggingface/trl: trl/trainer/utils.py (first_true_indices, truncate_response), "
        "v0.20.0",
    ),
    pipeline=_trl,
    takes_layout=True,
)


PRESET_0_11 = Preset(
    name="trl-0.11",
    description="TRL's legacy step() PPOTrainer (trl 0.11.4): score at the last token, "
                "GAE over every column with padding zeroed, ratio threshold 10.",
    defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.2, "epsilon": 0.2, "value_clip": 0.2,
              "kl_estimator": "k1", "score_clip": None, "whiten_rewards": False,
              "ratio_threshold": 10.0, "vf_coef": 0.1},
    conventions={"score_position": "last-token", "gae_holes": "decay", "whiten_ddof": 1,
                 "whiten_eps": 1e-8, "whiten_eps_mode": "add", "whiten_mask": "mask",
                 "shift_mean": True,
                 "kl_clamp": None, "value_clip_form": "clamp",
                 "normaliser": "micro-batch-mean"},
    tolerances=float32_roundings(1),
    tolerance_note="TRL 0.11 rounds the Bessel factor n / (n - 1) (trl/core.py masked_var) "
                   "and each clip fraction (.float() booleans) to float32: 2^-24 relative "
                   "on top of the float64 rtol",
    sources=(
        "huggingface/trl: trl/trainer/ppo_trainer.py (PPOTrainer.step, compute_rewards, "
        "_kl_penalty, compute_advantages, loss, record_step_stats), v0.11.4",
        "huggingface/trl: trl/trainer/ppo_config.py (PPOConfig), v0.11.4",
        "huggingface/trl: trl/core.py (masked_mean, masked_var, masked_whiten), v0.11.4",
        "huggingface/trl: trl/trainer/utils.py (AdaptiveKLController), v0.11.4",
    ),
    pipeline=_trl_011,
    takes_layout=True,
)
