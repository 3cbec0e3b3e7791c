"""OpenRLHF's PPO with GAE (preset ``openrlhf``).
"""

from __future__ import annotations

import numpy as np

from ...batch import Rollout
from ...ppo.kl_gradient import OPENRLHF_IS_BOUND
from . import _third_policy as third_policy
from ._common import (
    FLOAT32_ROUNDING,
    FLOAT64_RTOL,
    Preset,
    check_estimator,
    gae_over,
    losses,
    masked_aggregate,
    masked_kl,
    mean_over,
    mean_rows,
    require_choice,
    result,
    shaped_rewards,
    step_losses,
    whiten_advantages,
)
from ._openrlhf import (
    OPENRLHF_KL_CLAMP,
    openrlhf_correction_and_stats,
    openrlhf_kl_loss,
    openrlhf_step_stats,
)
from ._step import normaliser_for


def _openrlhf(x: Rollout, p: dict, step=None) -> dict:
    """OpenRLHF's PPO with GAE (OpenRLHF 0.11.2).

    * KL (openrlhf/models/utils.py ``compute_approx_kl``): k1 (default), k2 or k3
      from the rollout log-probs, clamped to [-10, 10] whatever the estimator.
    * Score clipped to ``reward_clip_range`` (-10, 10) and added at the last 1 of
      the mask (``compute_reward``).
    * GAE (trainer/ppo_utils/experience_maker.py ``get_advantages_and_returns``):
      values and rewards multiplied by the mask, recursion over every column (a
      hole is a zero-value, zero-reward state); gamma 1, lambd 1.
    * Advantages (``compute_advantages_and_returns``): whole batch over the mask,
      ddof 0, divided by sqrt(max(var, 1e-8)): ``whiten(..., ddof=0, eps_mode="floor")``;
      a batch of one token gets advantage 0 (its A - mean is 0).
    * Policy loss (openrlhf/models/loss.py ``PolicyLoss``): log-ratio clamped to
      [-20, 20], eps 0.2 (``epsilon_high`` for ``eps_clip_low_high``), ``dual_clip``
      off, ``loss_agg_mode`` token-mean or seq-mean-token-mean (``aggregate_loss``,
      whose per-row divisor n_i + 1e-8 is n_i here).
    * Value loss (``ValueLoss``): 1/2 max(...), ``value_clip`` 0.5,
      V_old + clamp(V - V_old, -c, c) (``value_clip_form="offset"``), token mean.
    * The rollout correction (``--algo.advantage.is_correction_*``, a case with
      ``logp_rollout``): ``PolicyLoss``'s coefficient (``_openrlhf.openrlhf_correction``)
      multiplies each token's policy loss; logged ``vllm_kl`` and ``is_filter_ratio``
      (docs/conventions.md section 14).
    * Tolerance: OpenRLHF 0.11.2 computes in float32 where this preset does not:
      ``compute_approx_kl`` casts both log-probs to float32, ``compute_reward`` builds the
      rewards on the KL's float32 tensor (the score scattered into it), the advantage
      normalisation takes its mean and variance of ``.float()`` advantages, and the clip
      ratio is a float32 token mean. On float32-exact inputs that is a few roundings of
      rewards of size <= 10 (the reward clip) summed into the returns, and of whitened
      advantages of order 1: float64 rtol 1e-9 + 16 2^-24 and atol 16 2^-24 (~1e-6). Where
      the variance is near its floor 1e-8 (one valid token, a tiny variance) the float32
      mean's rounding is multiplied by up to 1e4: a lone token's advantage is
      (A - fl32(A)) * 1e4 in the release, not 0 (checked by ``make conformance``,
      docs/conformance.md).
    * ``use_kl_loss`` (``--algo.kl.use_loss``, default False): the KL leaves the rewards
      (the experience's KL is zeros) and enters the actor's loss: ``beta`` times the token
      mean (whatever ``loss_agg_mode``) of ``kl_estimator`` of (logp, logp_ref), clamped to
      [-10, 10] (``trainer/ray/ppo_actor.py`` ``training_step``); with
      ``kl_unbiased_gradient`` (``--algo.kl.unbiased_gradient``) its gradient is min(pi_theta /
      pi_old, 10) (logp - logp_ref) per token, the weight a constant
      (``_openrlhf.openrlhf_kl_loss``; the bound is the convention ``kl_is_bound``).
    * Statistics: ``policy_loss`` (without the KL loss), ``ppo_clip_ratio``, ``ppo_kl`` (token
      mean of logp_old - logp, unclamped), ``critic_loss``, ``values`` (token mean of the
      new values), ``kl`` (mean over responses of the token-mean KL; the KL
      controller's input; with ``use_kl_loss`` the KL loss), ``reward`` (mean raw score).
    * A step over ranks and micro-batches (a case's layout; ``ppo_train``: ``micro_train_
      batch_size`` rows a micro-batch, DeepSpeed's ``gas`` of them a step):
      ``iter_grad_accum_global_norm`` gives every micro-batch of the step the step's token
      count (and count of rows with a token) summed over its micro-batches and all-reduced,
      divided by gas, which DeepSpeed's 1 / gas per backward cancels; ``dp_size`` cancels the
      ranks' average (``normaliser="openrlhf"``, ``openrlhf/utils/loss_utils.py``); the
      critic's ``ValueLoss`` the same, by tokens; the KL loss by its token mean, as in
      ``openrlhf-grpo``. ``step/losses`` is each micro-batch's loss after DeepSpeed's
      1 / gas; the statistics as ``_openrlhf.openrlhf_step_stats`` merges them.
    """
    name = "openrlhf"
    m = x.mask
    est = p["kl_estimator"]
    check_estimator(name, est, ("k1", "k2", "k3"))
    kl = masked_kl(x.logp_old, x.logp_ref, est, m, clamp=p["kl_clamp"])
    # why: OpenRLHF 0.11.2 experience_maker.py make_experience: with --algo.kl.use_loss the
    # experience's KL is zeros, so compute_reward adds the score alone; the KL is in the loss
    in_loss = p["use_kl_loss"]
    rewards = shaped_rewards(x, 0.0 if in_loss else p["beta"], m, est, p["score_position"],
                             kl_clamp=p["kl_clamp"], score_clip=p["reward_clip_range"])
    raw_advantages, returns = gae_over(rewards, x.old_values, m, p)
    if int(m.sum()) == 1 and p["whiten_mask"] == "mask":
        # why: OpenRLHF 0.11.2 experience_maker.py compute_advantages_and_returns: with one
        # token, A - mean = 0 and var = 0 is floored at 1e-8, so the advantage is 0 (whiten
        # itself refuses fewer than two tokens)
        advantages = np.zeros_like(raw_advantages)
    else:
        advantages = whiten_advantages(raw_advantages, m, p)
    require_choice(name, p, "loss_agg_mode", ("token-mean", "seq-mean-token-mean"))
    agg = p["loss_agg_mode"]
    # the rollout correction (--algo.advantage.is_correction_*): PolicyLoss's coefficient
    w, _, rollout_stats = openrlhf_correction_and_stats(name, x, x.on(m), m, p)
    # why: OpenRLHF 0.11.2 ppo_actor.py training_step adds kl_ctl times the token mean of
    # compute_approx_kl(logp, logp_ref, log_probs_old=logp_old) to the actor's loss
    # (its options checked whether or not the KL is in the loss)
    kl_loss = openrlhf_kl_loss(name, p, p["beta"], p["kl_clamp"])
    kl_loss = kl_loss if in_loss else None
    # (the convention masked_weights: a gated token in the policy loss's mask or not)
    lm = third_policy.loss_mask(name, p, m, w)
    policy_loss, st, dlogp, vloss, dvalues = losses(
        x, advantages, returns, p, agg, mask=lm, value_mask=m, is_weights=w, kl=kl_loss)
    stats = {
        # (logged before the KL loss is added: ppo_actor.py metrics["policy_loss"])
        "policy_loss": st["loss_without_kl"],
        "ppo_clip_ratio": st["clipfrac_active"],
        "ppo_kl": mean_over(masked_kl(x.logp_old, x.logp, "k1", m), m),
        "critic_loss": vloss,
        "values": mean_over(x.values, m),
        # (with the KL loss, ppo_actor.py logs the KL loss as "kl": 0 for beta 0)
        "kl": st["kl_loss"] if in_loss else masked_aggregate(kl, m, "seq-mean-token-mean"),
        "reward": mean_rows(x.scores),
        **rollout_stats,
    }
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    if step is not None:
        B = m.shape[0]
        step_out, passes, value = step_losses(
            step, x, advantages, returns, p, agg, mask=lm, value_mask=m, is_weights=w,
            stats=True, kl=kl_loss,
            normaliser=normaliser_for(p["normaliser"], agg, step=step, n_rows=B),
            kl_normaliser=normaliser_for(p["normaliser"], "token-mean", step=step, n_rows=B),
            value_normaliser=normaliser_for(p["normaliser"], "token-mean", step=step,
                                            n_rows=B))
        out.update(step_out)
        out.update(openrlhf_step_stats(step, passes, m, x.logp, x.logp_old,
                                       step_out["step/value_losses"], x.values,
                                       kl_loss=in_loss))
    return out


PRESET = Preset(
    name="openrlhf",
    description="OpenRLHF's PPO with GAE (openrlhf 0.11.2): KL clamped to 10, score "
                "clipped to 10, ddof-0 advantage normalisation, log-ratio clamp 20.",
    defaults={"gamma": 1.0, "lam": 1.0, "beta": 0.01, "kl_estimator": "k1",
              "reward_clip_range": (-10.0, 10.0), "epsilon": 0.2, "epsilon_high": None,
              "dual_clip": None, "log_ratio_clamp": 20.0, "value_clip": 0.5,
              "loss_agg_mode": "token-mean", "use_kl_loss": False,
              "kl_unbiased_gradient": False,
              # --algo.advantage.is_correction_* (openrlhf 0.11.2 cli/train_ppo_ray.py)
              "is_correction_level": "off", "is_correction_mode": "mask",
              "is_correction_gating": "ratio", "is_correction_threshold": (0.5, 5.0)},
    conventions={"score_position": "last-token", "kl_clamp": OPENRLHF_KL_CLAMP,
                 "kl_is_bound": OPENRLHF_IS_BOUND, "kl_gradient": None,
                 "gae_holes": "decay", "whiten_ddof": 0, "whiten_eps": 1e-8,
                 "whiten_eps_mode": "floor", "whiten_mask": "mask", "shift_mean": True,
                 "value_clip_form": "offset", "normaliser": "openrlhf",
                 **third_policy.OPENRLHF},
    tolerances={"float64": (FLOAT64_RTOL + 16 * FLOAT32_ROUNDING, 16 * FLOAT32_ROUNDING)},
    tolerance_note="OpenRLHF 0.11.2 computes the KL and the rewards in float32 "
                   "(openrlhf/models/utils.py compute_approx_kl casts the log-probs, "
                   "compute_reward builds on the KL's tensor), the advantage normalisation's "
                   "mean and variance of .float() advantages (experience_maker.py) and its "
                   "clip ratio as a float32 mean: rtol 1e-9 + 16 2^-24 and atol 16 2^-24 for "
                   "rewards up to 10 and whitened advantages of order 1",
    sources=(
        "OpenRLHF/OpenRLHF: openrlhf/models/utils.py (compute_approx_kl, KL_IS_WEIGHT_CLIP, "
        "compute_reward), 0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/models/loss.py (aggregate_loss, PolicyLoss, "
        "ValueLoss), 0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/trainer/ppo_utils/experience_maker.py "
        "(compute_advantages_and_returns, get_advantages_and_returns), 0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/trainer/ray/ppo_actor.py (training_step: the KL loss; "
        "logged names), ppo_critic.py (logged names), 0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/cli/train_ppo_ray.py (defaults), 0.11.2",
    ),
    pipeline=_openrlhf,
    takes_layout=True,
)
