"""verl's PPO with GAE (preset ``verl``).
"""

from __future__ import annotations

import numpy as np

from ...batch import Rollout
from . import _third_policy as third_policy
from ._common import (
    FLOAT32_ROUNDING,
    Preset,
    check_estimator,
    float32_roundings,
    gae_over,
    kl_form,
    losses,
    masked_aggregate,
    masked_kl,
    masked_var,
    mean_over,
    mean_rows,
    preset_loss_options,
    result,
    shaped_rewards,
    step_losses,
    whiten_advantages,
)
from ._step import normaliser_for
from ._verl import (
    verl_bypass_loss,
    verl_correction_before_advantages,
    verl_kl_type,
    verl_step_stats,
    verl_trainer_agg,
)

# why: volcengine/verl verl/trainer/ppo/core_algos.py (0.9.1) kl_penalty_forward clamps
# only its low-variance (k3) estimate, to [-10, 10]
_VERL_KL_CLAMP = {"k1": None, "k2": None, "abs": None, "k3": 10.0}


def _verl(x: Rollout, p: dict, step=None) -> dict:
    """verl's PPO with GAE (volcengine/verl 0.9.1).

    * Score at index (number of response tokens) - 1 of the response
      (verl/workers/reward_manager/naive.py): the last response token when the
      response starts at column 0, which is required; holes are taken to be
      attended observation tokens, so the score goes to the last 1 of the mask.
    * KL in the reward only with ``use_kl_in_reward=True`` (default False,
      verl/trainer/ppo/ray_trainer.py ``apply_kl_penalty``): beta (``kl_ctrl.kl_coef``
      0.001) times ``kl_penalty`` k1 ("kl", default), k2 ("mse"), abs, or k3
      ("low_var_kl", clamped to [-10, 10]) from the rollout log-probs.
    * GAE (core_algos.py ``compute_gae_advantage_return``): masked positions are
      skipped (ppo_numpy's default), V = 0 after the last token; gamma 1, lam 1.
    * Advantages whitened over the mask, ddof 1, eps 1e-8 inside the square root
      (verl/utils/torch_functional.py ``masked_whiten``).
    * Policy loss (``compute_policy_loss_vanilla``): log-ratio clamped to [-20, 20],
      ``clip_ratio_low``/``clip_ratio_high`` 0.2, dual clip c = 3 (``clip_ratio_c``),
      ``loss_agg_mode`` token-mean (also seq-mean-token-sum, seq-mean-token-mean,
      seq-mean-token-sum-norm).
    * Value loss (``compute_value_loss``): 1/2 max(...), ``cliprange_value`` 0.5,
      V clamped to [V_old - c, V_old + c] (``clip_by_value``: ``value_clip_form="clamp"``),
      same ``loss_agg_mode``.
    * ``use_kl_loss`` (default False, ``actor.use_kl_loss``): the KL as a loss term
      instead, beta times the ``loss_agg_mode`` aggregate of ``kl_loss_type`` of the current
      policy against the reference (``actor.kl_loss_type``, default ``low_var_kl``: k3
      clamped to [-10, 10]; ``kl``, ``abs``, ``mse``, ``k1``, ``k2``, ``k3``; a name with the
      suffix "+", ``"k3+"``, keeps the estimate's value and takes k2's gradient logp -
      logp_ref straight through, ``core_algos.kl_penalty``), added to the policy loss.
    * Statistics: ``actor/pg_loss`` (without the KL loss), ``actor/pg_clipfrac``,
      ``actor/ppo_kl`` (k1 of the clamped log-ratio), ``actor/pg_clipfrac_lower`` (dual
      clip active), ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``
      (verl/workers/utils/losses.py ``ppo_loss``, ``value_loss``);
      from verl/trainer/ppo/metric_utils.py ``compute_data_metrics``:
      ``critic/score/mean``, ``critic/rewards/mean``, ``critic/advantages/mean``,
      ``critic/returns/mean``, ``critic/values/mean`` (rollout values),
      ``critic/vf_explained_var`` (ddof 1, + 1e-5), and with the KL in the reward
      ``actor/reward_kl_penalty`` (mean over responses of the token-mean KL) and
      ``actor/reward_kl_penalty_coeff``. verl's ``masked_mean`` divides by
      n + 1e-8; this preset divides by n (in verl that sum is float32, where
      n + 1e-8 rounds to n).
    * The rollout correction (``algorithm.rollout_correction``, a case with
      ``logp_rollout``): ``rollout_is``, ``rollout_is_threshold``,
      ``rollout_is_batch_normalize``, ``rollout_rs``, ``rollout_rs_threshold``,
      ``bypass_mode``, ``rollout_loss_type`` (``_verl.verl_correction_before_advantages``
      and ``verl_bypass_loss``): the rejection replaces the response mask before GAE, the
      whitening and both losses; the KL penalty in the reward and its statistic were
      computed before it, on the full mask (docs/conventions.md section 14). In bypass mode
      the policy statistics are the bypass loss's: ``rollout_loss_type="reinforce"`` logs
      ``actor/ppo_kl`` alone (no clip fractions), as verl's ``compute_policy_loss_reinforce``.
    * The denominators are the trainer's, one optimizer step of one micro-batch on one rank
      (``_verl.verl_trainer_agg``; docs/conventions.md section 8): ``agg_loss`` gets the
      batch's response-mask sum (``batch_num_tokens``) and every row (``global_batch_size``),
      for both losses and the KL loss; they differ from ``agg_loss`` alone only after a
      rejection. With ``use_kl_loss`` also ``actor/kl_loss`` (before its coefficient) and
      ``actor/kl_coef``.
    * Tolerance (``tolerances``): verl computes the Bessel factor n / (n - 1) of
      ``masked_var`` as an integer mask sum divided in torch, which gives float32,
      and its clip fractions from ``.float()`` booleans, so k / n is rounded to
      float32: float64 code that does the same differs from this preset by up to
      2^-24 relative; the float64 rtol is 1e-9 + 2^-24. The whitened advantages are then
      off by up to 2^-25 relative, and so is the policy term of the policy loss and of
      ``dlogp``; where the KL loss (``use_kl_loss``) cancels part of that term, the error is
      not relative to the result but to the term, of size abs(A) rho w <= 8 (advantages of at
      most 4 standard deviations, rho <= 1.2 where the gradient passes, weights w <= 1/2):
      float64 atol 4 2^-24 (measured against verl 0.9.1 by ``make conformance``).
    * A step over ranks and micro-batches (a case's layout): ``agg_loss`` with the
      trainer's counts of the step (``normaliser="verl"``: ``batch_num_tokens`` the
      all-reduced mask sum of the mini-batch, ``global_batch_size`` its rows, ``dp_size``;
      ``ppo_mini_batch_size * rollout.n`` rows, cut into ``ppo_micro_batch_size_per_gpu``
      micro-batches by the FSDP engine, which starts each backward from the loss itself),
      for the policy loss, its KL loss and the value loss; the metrics as
      ``_verl.verl_step_stats`` aggregates them (``step/stat/actor/...``,
      ``step/stat/critic/...``). The bypass mode's step is not reproduced (a layout with
      ``bypass_mode=True`` is an error).
    """
    name = "verl"
    m = x.mask
    if not np.all(m[:, 0]):
        raise ValueError(f"{name}: mask row {int(np.argmin(m[:, 0]))} does not start at "
                         "column 0; verl's response part starts with the first generated "
                         "token and the score index is a count of response tokens")
    est = p["kl_estimator"]
    check_estimator(name, est, tuple(_VERL_KL_CLAMP))
    kl = masked_kl(x.logp_old, x.logp_ref, est, m, clamp=_VERL_KL_CLAMP[est])
    rewards = shaped_rewards(x, p["beta"] if p["use_kl_in_reward"] else 0.0, m, est,
                             p["score_position"], kl_clamp=_VERL_KL_CLAMP[est])
    # the rollout correction (algorithm.rollout_correction): the rejection replaces the
    # response mask before GAE, the whitening and both losses
    corr = verl_correction_before_advantages(name, x, m, p)
    m0, m = m, corr["mask"]  # (apply_kl_penalty ran before, on the response mask m0)
    raw_advantages, returns = gae_over(rewards, x.old_values, m, p)
    advantages = whiten_advantages(raw_advantages, m, p)
    # why: verl 0.9.1's trainer divides both losses by the mini-batch's token count and row
    # count (batch_num_tokens, global_batch_size), not by what agg_loss would count alone
    agg, trainer_norm = verl_trainer_agg(p["loss_agg_mode"], m)
    # why: with use_kl_loss, verl 0.9.1 core_algos.py kl_penalty of kl_loss_type ("low_var_kl":
    # k3 clamped to [-10, 10]; a "+" name k2's gradient straight through) of the current
    # policy against the reference, agg_loss'd, times kl_loss_coef
    kl_est, kl_clamp, form = verl_kl_type(name, p, "kl_loss_type")
    form = kl_form(name, p, form)  # (checked whether or not the KL is in the loss)
    kl_term = (dict(kl_coef=p["beta"], kl_estimator=kl_est, kl_clamp=kl_clamp,
                    kl_gradient=form) if p["use_kl_loss"] else None)
    # (the convention masked_weights: a masked weight's token in the policy loss's mask and
    # the trainer's count or not; the value loss keeps m)
    lm = third_policy.loss_mask(name, p, m, corr["is_weights"])
    policy_norm = trainer_norm if lm is m else verl_trainer_agg(p["loss_agg_mode"], lm)[1]
    policy_loss, st, dlogp, vloss, dvalues = losses(
        x, advantages, returns, p, agg, mask=lm, value_mask=m, value_agg=agg, kl=kl_term,
        is_weights=corr["is_weights"], norm=policy_norm, value_norm=trainer_norm)
    kl_loss = st["kl_loss"]
    if corr["bypass"]:
        # old = rollout, the correction inside the policy loss (the value loss unchanged)
        pl, bst, dlogp, _ = verl_bypass_loss(name, x, corr["xm"], advantages, m,
                                             preset_loss_options(p, agg, kl_term,
                                                                 trainer_norm), p,
                                             p["dual_clip"])
        policy_loss, kl_loss = pl.loss, pl.kl_loss
        # (the policy statistics are the bypass loss's: none of the decoupled loss's)
        st = {"value_clipfrac": st["value_clipfrac"], **bst, "loss_without_kl": pl.policy_loss}
    stats = {
        # why: verl 0.9.1 workers/utils/losses.py ppo_loss logs actor/pg_loss before it adds
        # the KL loss (use_kl_loss), and the policy loss's own metrics: pg_clipfrac and
        # pg_clipfrac_lower but for the bypass mode's reinforce loss, which logs ppo_kl alone
        "actor/pg_loss": st["loss_without_kl"],
        **({"actor/pg_clipfrac": st["clipfrac_active"]} if "clipfrac_active" in st else {}),
        "actor/ppo_kl": st["approx_kl_k1"],
        **({"actor/pg_clipfrac_lower": st["dual_clipfrac"]} if "dual_clipfrac" in st else {}),
        "critic/vf_loss": vloss,
        "critic/vf_clipfrac": st["value_clipfrac"],
        "critic/vpred_mean": mean_over(x.values, m),
        "critic/score/mean": mean_rows(x.scores),
        "critic/rewards/mean": masked_aggregate(rewards, m, "seq-mean-token-sum"),
        "critic/advantages/mean": mean_over(advantages, m),
        "critic/returns/mean": mean_over(returns, m),
        "critic/values/mean": mean_over(x.old_values, m),
        "critic/vf_explained_var": 1.0 - masked_var(returns - x.old_values, m, 1)
        / (masked_var(returns, m, 1) + 1e-5),
    }
    if p["use_kl_loss"]:
        # why: verl 0.9.1 ppo_loss logs the KL loss (before kl_loss_coef) and the coefficient,
        # "kl_loss" and "kl_coef", prefixed "actor/" by ray_trainer.py _update_actor
        stats["actor/kl_loss"] = kl_loss
        stats["actor/kl_coef"] = p["beta"]
    if p["use_kl_in_reward"]:
        stats["actor/reward_kl_penalty"] = masked_aggregate(kl, m0, "seq-mean-token-mean")
        stats["actor/reward_kl_penalty_coeff"] = p["beta"]
    stats.update(corr["stats"])
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    if step is not None:
        if corr["bypass"]:
            raise ValueError(f"layout: {name}'s bypass mode over micro-batches is not "
                             "reproduced (its rejection inside the loss against the step's "
                             "counts); give no layout, or bypass_mode=False")
        B = m.shape[0]
        norm = normaliser_for(p["normaliser"], p["loss_agg_mode"], step=step, n_rows=B)
        step_out, passes, value = step_losses(
            step, x, advantages, returns, p, agg, mask=lm, value_mask=m, kl=kl_term,
            is_weights=corr["is_weights"], norm=policy_norm, normaliser=norm,
            value_normaliser=norm, stats=True)
        out.update(step_out)
        out.update(verl_step_stats(
            step, passes, _vanilla_stats, kl_loss=p["use_kl_loss"],
            value=(value, step_out["step/value_losses"]),
            vpred=[mean_over(x.values[rows], m[rows]) for rank in step.layout
                   for rows in rank]))
    return out


def _vanilla_stats(st: dict) -> dict:
    """verl 0.9.1 ``compute_policy_loss_vanilla``'s metrics of one micro-batch."""
    return {"actor/pg_clipfrac": st["clipfrac_active"], "actor/ppo_kl": st["approx_kl_k1"],
            "actor/pg_clipfrac_lower": st["dual_clipfrac"]}


PRESET = Preset(
    name="verl",
    description="verl's PPO with GAE (verl 0.9.1): KL in the reward off by default, "
                "holes skipped, log-ratio clamp 20, dual clip 3, value clip 0.5.",
    defaults={"gamma": 1.0, "lam": 1.0, "beta": 0.001, "use_kl_in_reward": False,
              "kl_estimator": "k1", "epsilon": 0.2, "epsilon_high": 0.2,
              "dual_clip": 3.0, "log_ratio_clamp": 20.0, "value_clip": 0.5,
              "loss_agg_mode": "token-mean", "kl_loss_type": "low_var_kl",
              # algorithm.rollout_correction (verl 0.9.1 trainer YAML defaults;
              # rollout_loss_type is its loss_type)
              "rollout_is": None, "rollout_is_threshold": 2.0,
              "rollout_is_batch_normalize": False, "rollout_rs": None,
              "rollout_rs_threshold": None, "bypass_mode": False,
              "rollout_loss_type": "ppo_clip"},
    conventions={"score_position": "last-token", "gae_holes": "skip", "whiten_ddof": 1,
                 "whiten_eps": 1e-8, "whiten_eps_mode": "add", "whiten_mask": "mask",
                 "shift_mean": True,
                 "value_clip_form": "clamp", "use_kl_loss": False,
                  "is_log_ratio_bound": 20.0, "normaliser": "verl", "kl_gradient": None,
                  **third_policy.VERL},
    tolerances={"float64": (float32_roundings(1)["float64"][0], 4 * FLOAT32_ROUNDING)},
    tolerance_note="verl rounds the Bessel factor n / (n - 1) (verl/utils/torch_functional.py "
                   "masked_var: integer mask sums divided in torch) and each clip fraction "
                   "(core_algos.py: masked_mean of .float() booleans) to float32: one "
                   "float32 rounding, 2^-24 relative, on top of the float64 rtol; atol 4 "
                   "2^-24 where the KL loss cancels part of the policy term it scales",
    sources=(
        "volcengine/verl: verl/trainer/ppo/core_algos.py (compute_gae_advantage_return, "
        "kl_penalty, kl_penalty_forward, compute_policy_loss_vanilla, agg_loss, "
        "compute_value_loss), 0.9.1",
        "volcengine/verl: verl/utils/torch_functional.py (masked_mean, masked_var, "
        "masked_whiten), 0.9.1",
        "volcengine/verl: verl/trainer/ppo/ray_trainer.py (apply_kl_penalty), 0.9.1",
        "volcengine/verl: verl/workers/reward_manager/naive.py (NaiveRewardManager), 0.9.1",
        "volcengine/verl: verl/workers/utils/losses.py (ppo_loss, value_loss), 0.9.1",
        "volcengine/verl: verl/trainer/ppo/metric_utils.py (compute_data_metrics), 0.9.1",
        "volcengine/verl: verl/trainer/config/_generated_ppo_trainer.yaml, 0.9.1",
        "volcengine/verl: verl/trainer/ppo/rollout_corr_helper.py "
        "(compute_rollout_correction_and_rejection_mask, apply_bypass_mode), 0.9.1",
    ),
    pipeline=_verl,
    takes_layout=True,
)
