"""verl's PPO with GAE (preset ``verl``).
"""

from __future__ import annotations

from ...batch import Rollout
from . import _third_policy as third_policy
from ._common import (
    FLOAT32_ROUNDING,
    Preset,
    check_estimator,
    float32_roundings,
    gae_over,
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
    verl_kl_loss_options,
    verl_kl_loss_stats,
    verl_loss_stats,
    verl_require_column_0,
    verl_step_stats,
    verl_step_without_bypass,
    verl_trainer_agg,
)

# why: volcengine/verl verl/trainer/ppo/core_algos.py (0.9.1) kl_penalty_forward clamps
# only its low-variance (k3) estimate, to [-10, 10]
_VERL_KL_CLAMP = {"k1": None, "k2": None, "abs": None, "k3": 10.0}


def _verl(x: Rollout, p: dict, step=None) -> dict:
    """verl's PPO with GAE (volcengine/verl 0.9.1).

    The stages, in the order of verl's trainer, one function each: the token rewards
    (``_token_rewards``), the rollout correction (``_verl.verl_correction_before_advantages``),
    the advantages and returns (``_advantages``), the losses' arguments (``_loss_arguments``:
    the trainer's denominators, ``_verl.verl_kl_loss_options``), the actor's and the critic's
    losses (``_common.losses``; in bypass mode the actor's by ``_verl.verl_bypass_loss``), the
    statistics (``_loss_stats``, ``_data_stats``, ``_verl.verl_kl_loss_stats``) and the step
    over a layout (``_verl_step``).

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
    # 1. the token rewards: the score at the last token, the KL in the reward (its metrics)
    rewards, kl_stats = _token_rewards(name, x, p)
    # 2. the rollout correction: the rejection replaces the response mask before GAE, the
    # whitening and both losses (the KL in the reward ran before, on the response mask)
    corr = verl_correction_before_advantages(name, x, x.mask, p)
    m = corr["mask"]
    # 3. the advantages and returns: GAE over m, the advantages whitened
    advantages, returns = _advantages(x, rewards, m, p)
    # 4. the losses' masks, aggregation and KL loss (the trainer's counts)
    args, trainer_norm = _loss_arguments(name, p, m, corr["is_weights"])
    # 5. the actor's and the critic's losses; in bypass mode the actor's is the bypass loss
    policy_loss, st, dlogp, vloss, dvalues = losses(x, advantages, returns, p, **args,
                                                    value_agg=args["agg"],
                                                    value_norm=trainer_norm)
    kl_loss, mode = st["kl_loss"], "vanilla"
    if corr["bypass"]:
        # old = rollout, the correction inside the policy loss (the value loss unchanged)
        pl, bst, dlogp, mode = verl_bypass_loss(
            name, x, corr["xm"], advantages, m,
            preset_loss_options(p, args["agg"], args["kl"], trainer_norm), p, p["dual_clip"])
        policy_loss, kl_loss = pl.loss, pl.kl_loss
        # (the policy statistics are the bypass loss's: none of the decoupled loss's)
        st = {"value_clipfrac": st["value_clipfrac"], **bst, "loss_without_kl": pl.policy_loss}
    # 6. the statistics: the losses', the batch's, the KL loss's and the reward KL's, the
    # rollout correction's
    stats = {**_loss_stats(x, m, st, mode, vloss),
             **_data_stats(x, m, rewards, advantages, returns),
             **verl_kl_loss_stats(p["use_kl_loss"], kl_loss, p["beta"]), **kl_stats,
             **corr["stats"]}
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    # 7. the step over the layout's micro-batches (the same masks, weights and KL loss)
    if step is not None:
        verl_step_without_bypass(name, corr["bypass"])
        out.update(_verl_step(step, x, advantages, returns, m, p, args))
    return out


def _token_rewards(name: str, x: Rollout, p: dict) -> tuple:
    """The token rewards (B, T) and the metrics of the KL in them ({} without
    ``use_kl_in_reward``): verl 0.9.1's reward manager puts the score at the last response
    token (``workers/reward_manager/naive.py``; ``score_position``), and with
    ``use_kl_in_reward`` ``ray_trainer.py`` ``apply_kl_penalty`` subtracts beta times the
    ``kl_estimator`` estimate of (logp_old, logp_ref) over the response mask and returns
    ``actor/reward_kl_penalty`` and ``actor/reward_kl_penalty_coeff``."""
    m = x.mask
    verl_require_column_0(name, m, "verl's response part starts with the first generated "
                                   "token and the score index is a count of response tokens")
    est = p["kl_estimator"]
    check_estimator(name, est, tuple(_VERL_KL_CLAMP))
    kl = masked_kl(x.logp_old, x.logp_ref, est, m, clamp=_VERL_KL_CLAMP[est])
    rewards = shaped_rewards(x, p["beta"] if p["use_kl_in_reward"] else 0.0, m, est,
                             p["score_position"], kl_clamp=_VERL_KL_CLAMP[est])
    if not p["use_kl_in_reward"]:
        return rewards, {}
    return rewards, {"actor/reward_kl_penalty": masked_aggregate(kl, m, "seq-mean-token-mean"),
                     "actor/reward_kl_penalty_coeff": p["beta"]}


def _advantages(x: Rollout, rewards, m, p: dict) -> tuple:
    """The advantages (whitened) and the returns (B, T) over the response mask m (after a
    rejection): verl 0.9.1 ``core_algos.py`` ``compute_gae_advantage_return`` (GAE with the
    critic's rollout values, then ``masked_whiten`` of the advantages)."""
    raw_advantages, returns = gae_over(rewards, x.old_values, m, p)
    return whiten_advantages(raw_advantages, m, p), returns


def _loss_arguments(name: str, p: dict, m, is_weights) -> tuple:
    """The arguments ``losses`` and ``step_losses`` both take (the aggregation, the policy
    loss's mask and denominators, the value loss's mask m, the KL loss, the third policy's
    weights), and the trainer's denominators over m (the value loss's and the bypass
    loss's): verl 0.9.1 ``workers/utils/losses.py`` ``ppo_loss`` and ``value_loss`` with the
    trainer's counts, and the actor's KL loss (``_verl.verl_kl_loss_options``, beta its
    ``kl_loss_coef``)."""
    # why: verl 0.9.1's trainer divides both losses by the mini-batch's token count and row
    # count (batch_num_tokens, global_batch_size), not by what agg_loss would count alone
    agg, trainer_norm = verl_trainer_agg(p["loss_agg_mode"], m)
    kl = verl_kl_loss_options(name, p, p["beta"], agg)
    # (the convention masked_weights: a masked weight's token in the policy loss's mask and
    # the trainer's count or not; the value loss keeps m)
    lm = third_policy.loss_mask(name, p, m, is_weights)
    policy_norm = trainer_norm if lm is m else verl_trainer_agg(p["loss_agg_mode"], lm)[1]
    return (dict(agg=agg, mask=lm, value_mask=m, kl=kl, is_weights=is_weights,
                 norm=policy_norm), trainer_norm)


def _loss_stats(x: Rollout, m, st: dict, mode: str, vloss) -> dict:
    """The losses' metrics: the actor's (``workers/utils/losses.py`` ``ppo_loss``:
    ``actor/pg_loss`` before the KL loss, the loss's own by ``_verl.verl_loss_stats``) and
    the critic's (``value_loss``: ``critic/vf_loss``, ``vf_clipfrac``, ``vpred_mean`` over
    m), verl 0.9.1."""
    # why: verl 0.9.1 workers/utils/losses.py ppo_loss logs actor/pg_loss before it adds
    # the KL loss (use_kl_loss), and the policy loss's own metrics: pg_clipfrac and
    # pg_clipfrac_lower but for the bypass mode's reinforce loss, which logs ppo_kl alone
    return {"actor/pg_loss": st["loss_without_kl"], **verl_loss_stats(mode, st),
            "critic/vf_loss": vloss,
            "critic/vf_clipfrac": st["value_clipfrac"],
            "critic/vpred_mean": mean_over(x.values, m)}


def _data_stats(x: Rollout, m, rewards, advantages, returns) -> dict:
    """The batch's metrics over m: verl 0.9.1 ``trainer/ppo/metric_utils.py``
    ``compute_data_metrics`` (the means of the scores, the sequence rewards, the advantages,
    the returns and the rollout values; the explained variance, ddof 1, + 1e-5)."""
    return {"critic/score/mean": mean_rows(x.scores),
            "critic/rewards/mean": masked_aggregate(rewards, m, "seq-mean-token-sum"),
            "critic/advantages/mean": mean_over(advantages, m),
            "critic/returns/mean": mean_over(returns, m),
            "critic/values/mean": mean_over(x.old_values, m),
            "critic/vf_explained_var": 1.0 - masked_var(returns - x.old_values, m, 1)
            / (masked_var(returns, m, 1) + 1e-5)}


def _verl_step(step, x: Rollout, advantages, returns, m, p: dict, args: dict) -> dict:
    """The step's outputs of ``verl``: ``agg_loss`` with the trainer's counts of the step
    (``normaliser="verl"``) for the policy loss, its KL loss and the value loss, on the
    one-batch losses' masks and weights (``args``); the metrics as
    ``_verl.verl_step_stats`` aggregates them (vanilla's, the critic's)."""
    norm = normaliser_for(p["normaliser"], p["loss_agg_mode"], step=step, n_rows=m.shape[0])
    out, passes, value = step_losses(step, x, advantages, returns, p, **args, normaliser=norm,
                                     value_normaliser=norm, stats=True)
    out.update(verl_step_stats(
        step, passes, lambda st: verl_loss_stats("vanilla", st), kl_loss=p["use_kl_loss"],
        value=(value, out["step/value_losses"]),
        vpred=[mean_over(x.values[rows], m[rows]) for rank in step.layout for rows in rank]))
    return out


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
