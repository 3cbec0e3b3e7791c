"""verl's critic-free estimators (preset ``verl-grpo``): ``algorithm.adv_estimator`` grpo,
rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax, opo, gpg, grpo_passk, gdpo,
and the policy losses of
``actor.policy_loss.loss_mode`` vanilla, gspo, cispo, sapo, geo_mean, gpg, clip_cov, kl_cov,
dppo_tv, dppo_kl, dro."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ...batch import Rollout
from ...family.advantages import (
    gdpo_advantages,
    gpg_advantages,
    grpo_passk_advantages,
    opo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    remax_advantages,
    rloo_advantages,
)
from ...policy_loss.options import PolicyLossOptions
from ...step.normalisers import Normaliser
from . import _third_policy as third_policy
from ._common import (
    FLOAT32_ROUNDING,
    GROUP_INPUT_NAMES,
    Preset,
    at_last_token,
    broadcast,
    group_advantages,
    masked_kl,
    masked_whiten,
    mean_over,
    mean_rows,
    policy_result,
    require_choice,
)
from ._step import normaliser_for, policy_step
from ._verl import (
    VERL_KL_NAMES,
    verl_bypass_loss,
    verl_correction_before_advantages,
    verl_kl_loss_options,
    verl_kl_loss_stats,
    verl_kl_type,
    verl_loss_stats,
    verl_require_column_0,
    verl_step_stats,
    verl_step_without_bypass,
    verl_trainer_agg,
)

ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax",
              "opo", "gpg", "grpo_passk", "gdpo")
LOSS_MODES = ("vanilla", "gspo", "cispo", "sapo", "geo_mean", "gpg", "clip_cov", "kl_cov",
              "dppo_tv", "dppo_kl", "dro")


def _verl_grpo(x: Rollout, p: dict, step=None) -> dict:
    """verl's critic-free pipeline (volcengine/verl 0.9.1, ``verl/trainer/ppo/core_algos.py``:
    ``compute_grpo_outcome_advantage``, ``compute_rloo_outcome_advantage``,
    ``compute_reinforce_plus_plus_outcome_advantage``,
    ``compute_reinforce_plus_plus_baseline_outcome_advantage``,
    ``compute_remax_outcome_advantage``, ``compute_policy_loss_vanilla``, ``_gspo``,
    ``_cispo``, ``agg_loss``, ``kl_penalty``; ``ray_trainer.py`` ``apply_kl_penalty``).

    The stages, in the order of verl's trainer, one function each: the token rewards
    (``_token_rewards``), the rollout correction (``_verl.verl_correction_before_advantages``),
    the advantages (``_advantages``), the loss's options (``_loss_options``: the trainer's
    denominators, ``_verl.verl_kl_loss_options``, ``_loss_mode_options``), the actor's loss
    (``_loss_inputs`` and ``_policy_loss``, or ``_verl.verl_bypass_loss``), the statistics
    (``_statistics``) and the step over a layout (``_verl_grpo_step``).

    * Token rewards: the score at the last response token (the response must start at
      column 0, as in the ``verl`` preset); with ``use_kl_in_reward`` minus ``kl_coef`` times
      the ``kl_penalty`` estimate of (logp_old, logp_ref) at every token. The sequence score
      is their sum over the response.
    * ``adv_estimator``: ``grpo`` (s - mean) / (std + 1e-6), ddof 1, in float32 (verl's
      reward tensor; float64 with ``use_kl_in_reward``, the KL's dtype); a group of
      one has mean 0 and std 1 (the conventions ``std_ddof``, ``std_eps``,
      ``std_eps_placement``, ``singleton``, ``log_ratio_clamp``, ``log_ratio_max`` (GSPO's
      cap) and ``cispo_clip`` are
      verl's fixed choices, overridable to name another code's);
      ``norm_adv_by_std_in_grpo=False`` drops the division.
      ``rloo``: s - the mean of the others (a group of one keeps its score).
      ``reinforce_plus_plus``: returns-to-go of the token rewards (``gamma``), whitened over
      the batch's tokens (ddof 1, eps 1e-8 inside the square root).
      ``reinforce_plus_plus_baseline``: s - group mean (mean 0 for a group of one) at every
      token, whitened. ``remax``: returns-to-go minus the greedy response's score.
      ``opo``: s - the group's length-weighted mean score (lengths: the mask's row sums;
      a group of one keeps its score; a group whose tokens were all rejected gets NaN,
      verl's 0 / 0, read by no loss term but geo_mean's, and NaN gradients at its tokens,
      as verl's autograd gives: ``_nan_advantage_rows``).
      ``gpg``: (B / #nonzero scores) (s - group mean), f_norm 1 (a group of one: mean 0).
      ``grpo_passk``: the best response of each group
      gets (s_max - s_second) / (std + 1e-6) (no division with
      ``norm_adv_by_std_in_grpo=False``), the others 0; a group of one is refused, as verl
      raises. ``gdpo``: GRPO on each column of the case's ``reward_components`` (verl's
      ``gdpo_reward_keys``, float32), weighted by ``gdpo_reward_weights`` (None: 1),
      summed and whitened over the tokens (ddof 1, eps 1e-8); verl 0.9.1 always divides
      by the std here (``compute_advantage`` does not pass ``norm_adv_by_std_in_grpo``),
      and the KL of ``use_kl_in_reward`` does not enter (the components are the reward
      function's); a case without ``reward_components`` has one component, its score
      (verl with ``gdpo_reward_keys=["score"]``). Then broadcast over the response tokens.
    * ``loss_mode``: ``vanilla`` (log-ratio clamped to [-20, 20], ``clip_ratio_low`` /
      ``clip_ratio_high``, dual clip ``clip_ratio_c`` = 3, ``loss_agg_mode``); ``gspo`` (the
      sequence log-ratio, capped at 10, no dual clip, ``loss_agg_mode``: in 0.9.1 the mode
      of the actor, token-mean by default, not the seq-mean-token-mean of earlier commits;
      the gradient of verl's sg[s_i] pi_t / sg[pi_t], ``sequence_gradient="token"``);
      ``cispo`` (log-ratio clamped to [-20, 20]; -clip(rho, 1 - low, 1 + high) A logp, the
      weight not differentiated; ``loss_agg_mode``). The losses of
      :mod:`ppo_numpy.family.losses`: ``sapo`` (``tau_pos``, ``tau_neg``, rounded to
      float32 as verl's float32 advantages make them, 4 / tau then rounded to float32 too,
      within the tolerance but for a loss that cancels to < 1e-2 of its terms; log-ratio
      clamped to [-20, 20]; always seq-mean-token-mean, whatever ``loss_agg_mode``);
      ``geo_mean`` (GMPO: ``clip_ratio_low``/``_high`` bound the token log-ratio, no clamp;
      the mean over responses, ``loss_agg_mode`` unused); ``gpg``; ``clip_cov``
      (``clip_cov_ratio``, ``clip_cov_lb``, ``clip_cov_ub``; the clipped surrogate without
      dual clip or clamp; the random draw seeded by ``clip_cov_seed``, verl's ``torch.randperm``
      being torch's global generator); ``kl_cov`` (``kl_cov_ratio``, ``ppo_kl_coef``; no
      clip, no clamp); ``dppo_tv``, ``dppo_kl`` (``clip_ratio_low``/``_high`` are the
      divergence thresholds, the weight truncated at ``clip_ratio_c``: verl's fallback 20 is
      never read, ``ActorConfig`` sets 3.0; log-ratio clamped to [-20, 20]); ``dro``
      (``dro_beta``, no default: required). Each aggregated by ``loss_agg_mode`` unless said.
    * ``use_kl_loss``: ``kl_loss_coef`` times ``kl_loss_type`` (``low_var_kl``: k3 clamped to
      [-10, 10]) of (logp, logp_ref), aggregated by ``loss_agg_mode``; a name with the suffix
      "+" (``"k3+"``, ``"low_var_kl+"``, ...: ``core_algos.kl_penalty``) keeps the
      estimate's value and takes k2's gradient logp - logp_ref, unclamped, by a
      straight-through form (``kl_gradient="straight_through"``,
      ``_verl.verl_kl_type``); in ``kl_penalty`` (the reward's KL) the suffix changes
      nothing: the rewards carry no gradient.
    * ``loss_agg_mode`` ``seq-mean-token-sum-norm`` divides the sum over every token by the
      number of sequences times T (``agg_loss`` in 0.9.1, ``loss_scale_factor`` unset: T);
      the commits of early 2026 divided by T only.
    * The rollout correction (``algorithm.rollout_correction``, a case with
      ``logp_rollout``): ``_verl.verl_correction_before_advantages`` (decoupled mode: the
      weights and the rejection, which replaces the response mask before the advantages) or
      ``verl_bypass_loss`` (``bypass_mode``); GSPO gives each token its own weight. The
      conventions no framework names take verl's values (``conventions``; the others in
      ``_third_policy``): the sequence weight a product, a rejected token out of the mask, a
      masked weight 0 in the denominators, the KL loss unweighted, the bypass weights
      detached, GMPO's geometric mean of the weights, GSPO's token gradient.
    * The denominators are the trainer's, one optimizer step of one micro-batch on one rank
      (``_verl.verl_trainer_agg``; docs/conventions.md section 8): every ``agg_loss`` gets
      the batch's response-mask sum (``batch_num_tokens``; in bypass mode the unrejected
      mask) and every row (``global_batch_size``, a row rejected whole included); sapo's
      fixed seq-mean-token-mean too. They differ from ``agg_loss`` alone only after a
      rejection.
    * Tolerance: verl computes the outcome estimators in float32 (its reward tensor) and its
      clip fractions as float32 means: float64 rtol and atol 32 u_32 (scores of order 1 to
      5, a few float32 roundings each; the group-normalised advantages are of order 1).
    * Statistics: ``actor/pg_loss`` (without the KL term), ``actor/pg_clipfrac``,
      ``actor/pg_clipfrac_lower`` (dual clip active), ``actor/ppo_kl`` (the bypass mode's
      ``reinforce``: ``actor/ppo_kl`` alone), with the KL loss
      ``actor/kl_loss`` and ``actor/kl_coef``; ``critic/score/mean``,
      ``critic/rewards/mean``, ``critic/advantages/mean``. verl's ``masked_mean`` divides
      by n + 1e-8 and its seq-mean-token-mean by n_i + 1e-8; this preset by n and n_i.
    """
    name = "verl-grpo"
    for key, allowed in (("adv_estimator", ESTIMATORS), ("loss_mode", LOSS_MODES),
                         ("kl_penalty", VERL_KL_NAMES), ("kl_loss_type", VERL_KL_NAMES)):
        require_choice(name, p, key, allowed)
    # 1. the token rewards: the score at the last token, the KL in the reward
    rewards, s = _token_rewards(name, x, p)
    # 2. the rollout correction: rejection replaces the response mask before the advantages
    corr = verl_correction_before_advantages(name, x, x.mask, p)
    m = corr["mask"]
    xm = x.on(x.mask) if corr["xm"] is None else corr["xm"]
    # 3. the advantages of adv_estimator (and opo's NaN rows: groups without a token)
    A, no_tokens = _advantages(x, rewards, s, m, p)
    # 4. the loss's mask and options (the trainer's counts, the KL loss, loss_mode's)
    # (the convention masked_weights: a masked weight's token in the loss's mask, and in the
    # trainer's count, or not; the bypass mode's loss decides it inside)
    lm = m if corr["bypass"] else third_policy.loss_mask(name, p, m, corr["is_weights"])
    opts = _loss_options(name, p, m, lm, corr["bypass"])
    # 5. the actor's loss: the bypass mode's, or loss_mode's with the third policy's weights
    if corr["bypass"]:
        pl, st, dlogp, mode = verl_bypass_loss(name, x, xm, A, m, opts, p, p["clip_ratio_c"])
    else:
        xl, A_l, w = _loss_inputs(name, p, xm, A, no_tokens, m, lm, corr["is_weights"])
        pl, st, dlogp = _policy_loss(name, p, xl, A_l, lm, opts, w)
        mode = p["loss_mode"]
    if np.any(no_tokens):
        pl, dlogp = _nan_advantage_rows(pl, dlogp, no_tokens, x.mask, mode)
    # 6. the statistics
    stats = _statistics(x, s, A, m, pl, st, mode, p, corr["stats"])
    out = policy_result(A, pl, dlogp, stats, rewards=rewards)
    # 7. the step over the layout's micro-batches (the same mask lm and weights w)
    if step is not None:
        verl_step_without_bypass(name, corr["bypass"])
        out.update(_verl_grpo_step(step, xl, A_l, lm, opts, p, w, no_tokens, x.mask))
    return out


def _token_rewards(name: str, x: Rollout, p: dict) -> tuple:
    """The token rewards (B, T) and the sequence scores s (B,), their sum over the response:
    verl 0.9.1's reward manager puts the score at the last response token
    (``workers/reward_manager/naive.py``), and with ``use_kl_in_reward``
    ``ray_trainer.py`` ``apply_kl_penalty`` subtracts ``kl_coef`` times the ``kl_penalty``
    estimate of (logp_old, logp_ref)."""
    m = x.mask
    verl_require_column_0(name, m, "verl places the score at (number of response tokens) - 1")
    rewards = at_last_token(x.scores, m)
    if p["use_kl_in_reward"]:
        # (a "+" name: the same value; the rewards carry no gradient)
        est, clamp, _ = verl_kl_type(name, p, "kl_penalty")
        rewards = rewards - p["kl_coef"] * masked_kl(x.logp_old, x.logp_ref, est, m, clamp)
    return rewards, rewards.sum(axis=-1)  # rewards are 0 at padding (at_last_token, kl_estimate)


def _advantages(x: Rollout, rewards, s, m, p: dict) -> tuple:
    """The advantages A (B, T) of ``adv_estimator`` over the response mask m (after a
    rejection), and the rows whose advantages are NaN (opo's groups without a token): verl
    0.9.1 ``ray_trainer.py`` ``compute_advantage``, which calls the estimator's
    ``core_algos.compute_*_outcome_advantage``."""
    est = p["adv_estimator"]
    if est == "grpo":
        scale = "group" if p["norm_adv_by_std_in_grpo"] else "none"
        # why: verl 0.9.1 computes in the dtype of token_level_rewards: float32 scores
        # (reward_manager/naive.py), promoted to the log-probs' float64 by the KL penalty
        dtype = np.float64 if p["use_kl_in_reward"] else np.float32
        A = broadcast(group_advantages(s, x.groups, p, scale=scale, singleton=p["singleton"],
                                       dtype=dtype), m)
    elif est == "rloo":
        A = broadcast(rloo_advantages(s, x.groups, singleton="raw"), m)
    elif est == "reinforce_plus_plus":
        A = reinforce_plus_plus_advantages(rewards, m, p["gamma"])
    elif est == "reinforce_plus_plus_baseline":
        A = reinforce_plus_plus_baseline_advantages(s, x.groups, m, singleton="raw")
    elif est == "remax":
        A = remax_advantages(rewards, x.baseline_scores, m)
    else:
        A = _verl_091_estimator(est, x, s, m, p)
    # why: verl 0.9.1's opo divides 0 by 0 for a group whose tokens were all rejected: those
    # rows' advantages are NaN, read by no loss term (they have no token in the mask)
    no_tokens = np.isnan(A).any(axis=-1) if est == "opo" else np.zeros(len(A), bool)
    return A, no_tokens


def _verl_091_estimator(est, x: Rollout, s, m, p):
    """The advantages (B, T) of ``opo``, ``gpg``, ``grpo_passk`` and ``gdpo``: verl 0.9.1
    ``compute_opo_outcome_advantage``, ``compute_gpg_outcome_advantage``,
    ``compute_grpo_passk_outcome_advantage``, ``compute_gdpo_outcome_advantage``."""
    if est == "opo":
        # (a group without tokens: NaN at every position, as verl's (s - 0 / 0) * mask)
        a = opo_advantages(s, x.groups, m.sum(axis=-1), singleton="raw", empty="nan")
        return np.where(np.isnan(a)[:, None], np.nan, broadcast(a, m))
    if est == "gpg":
        return broadcast(gpg_advantages(s, x.groups, singleton="raw"), m)
    if est == "grpo_passk":
        scale = "group" if p["norm_adv_by_std_in_grpo"] else "none"
        return broadcast(grpo_passk_advantages(s, x.groups, scale=scale, std_eps=p["std_eps"],
                                               ddof=p["std_ddof"]), m)
    # why: verl reads the components from the reward function's dict (not the KL-shaped
    # token_level_rewards), as float32 (compute_gdpo_outcome_advantage)
    components = x.scores[:, None] if x.reward_components is None else x.reward_components
    K = components.shape[1]
    weights = p["gdpo_reward_weights"]
    if weights is not None and len(weights) != K:
        raise ValueError(f"verl-grpo: gdpo_reward_weights has {len(weights)} weights for "
                         f"{K} reward components")
    if (p["std_ddof"], p["std_eps_placement"]) == (1, "std") and p["std_eps"] > 0:
        return gdpo_advantages(components, x.groups, m, weights=weights, std_eps=p["std_eps"],
                               singleton=p["singleton"], dtype=np.float32)
    # the diagnosis's other group conventions: each component's GRPO by group_advantages,
    # then gdpo_advantages' weighted sum and whitening (ddof 1, rsqrt(var + 1e-8))
    S = sum((1.0 if weights is None else weights[k])
            * group_advantages(components[:, k], x.groups, p, singleton=p["singleton"],
                               dtype=np.float32) for k in range(K))
    return masked_whiten(broadcast(S, m), m, ddof=1, eps=1e-8)


def _loss_options(name: str, p: dict, m, lm, bypass: bool) -> PolicyLossOptions:
    """The actor's loss options: the clip bounds, the trainer's denominators over the loss's
    mask lm, the KL loss (``_verl.verl_kl_loss_options``) and the options of ``loss_mode``
    (``_loss_mode_options``; vanilla's in bypass mode): verl 0.9.1
    ``workers/utils/losses.py`` ``ppo_loss`` with the actor's ``ActorConfig`` and
    ``PolicyLossConfig``."""
    # why: verl 0.9.1's trainer divides the losses by the mini-batch's token count and row
    # count (batch_num_tokens, global_batch_size), not by what agg_loss would count alone;
    # the batch's mask is the unrejected one in bypass mode (its rejection is in the loss)
    agg, norm = verl_trainer_agg(p["loss_agg_mode"], lm)
    kl = verl_kl_loss_options(name, p, p["kl_loss_coef"], agg)
    mode = _loss_mode_options(p, agg, norm, m)[
        # why: verl 0.9.1 apply_bypass_mode sets loss_mode="bypass_mode" whatever the actor's
        # (PPO-clip or REINFORCE over loss_agg_mode): the actor's loss_mode is not used
        "vanilla" if bypass else p["loss_mode"]]
    if p["loss_mode"] == "dro" and p["dro_beta"] is None and not bypass:
        raise ValueError(f"{name}: dro_beta: loss_mode 'dro' needs dro_beta > 0 (verl 0.9.1 "
                         "policy_loss.dro_beta=None raises)")
    return PolicyLossOptions(epsilon=p["clip_ratio_low"], epsilon_high=p["clip_ratio_high"],
                             **mode, **kl)


def _loss_mode_options(p: dict, agg: str, norm, m) -> dict:
    """loss_mode -> its options besides the clip bounds and the KL term, every entry built
    (m: the response mask, for sapo's fixed aggregation): verl 0.9.1 ``core_algos.py``
    ``get_policy_loss_fn`` and the ``compute_policy_loss_*`` it returns."""
    clamp = p["log_ratio_clamp"]
    # why: verl's advantages are float32 (the reward tensor's dtype) unless a float64 KL was
    # subtracted from the rewards, and sapo's temperatures take their dtype
    tau_dtype = np.float64 if p["use_kl_in_reward"] else np.float32
    return {"vanilla": dict(dual_clip=p["clip_ratio_c"], log_ratio_clamp=clamp, agg=agg,
                            norm=norm),
            # why: verl 0.9.1 compute_policy_loss_gspo aggregates by the loss_agg_mode it is
            # given (workers/utils/losses.py ppo_loss passes actor.loss_agg_mode)
            # and its ratio sg[s_i] pi_t / sg[pi_t] sends token t's gradient to token t alone
            # (the convention sequence_gradient: verl's "token")
            "gspo": dict(importance_level="sequence", sequence_gradient=p["sequence_gradient"],
                         log_ratio_max=p["log_ratio_max"], agg=agg, norm=norm),
            "cispo": dict(loss_type="cispo", log_ratio_clamp=clamp, agg=agg, norm=norm,
                          cispo_clip=p["cispo_clip"]),
            # why: verl 0.9.1 compute_policy_loss_sapo passes "seq-mean-token-mean" to agg_loss
            # whatever loss_agg_mode, and compute_policy_loss_geo_mean takes torch.mean over rows
            # (tau in the advantages' dtype: torch.as_tensor(tau_pos, dtype=advantages.dtype))
            "sapo": dict(loss_type="sapo", log_ratio_clamp=clamp,
                         agg=verl_trainer_agg("seq-mean-token-mean", m)[0],
                         sapo_tau_pos=float(tau_dtype(p["tau_pos"])),
                         sapo_tau_neg=float(tau_dtype(p["tau_neg"]))),
            "geo_mean": dict(loss_type="geo_mean", agg="grpo"),
            "gpg": dict(loss_type="gpg", agg=agg, norm=norm),
            "clip_cov": dict(loss_type="clip_cov", agg=agg, norm=norm,
                             cov_ratio=p["clip_cov_ratio"],
                             cov_bounds=(p["clip_cov_lb"], p["clip_cov_ub"]),
                             cov_seed=p["clip_cov_seed"]),
            "kl_cov": dict(loss_type="kl_cov", agg=agg, norm=norm,
                           cov_ratio=p["kl_cov_ratio"],
                           kl_cov_coef=p["ppo_kl_coef"]),
            "dppo_tv": dict(loss_type="dppo_tv", log_ratio_clamp=clamp, agg=agg, norm=norm,
                            dppo_ratio_max=p["clip_ratio_c"]),
            "dppo_kl": dict(loss_type="dppo_kl", log_ratio_clamp=clamp, agg=agg, norm=norm,
                            dppo_ratio_max=p["clip_ratio_c"]),
            "dro": dict(loss_type="dro", agg=agg, norm=norm, dro_beta=p["dro_beta"])}


def _loss_inputs(name: str, p: dict, xm: Rollout, A, no_tokens, m, lm, is_weights) -> tuple:
    """The loss's inputs on its mask lm (m: the response mask): the log-probs, the
    advantages (0 off lm and in opo's NaN rows) and the third policy's weights (None
    without a correction) after ``_third_policy``'s conventions (GMPO's mean of the weights,
    GSPO's gradient): what verl 0.9.1 ``workers/utils/losses.py`` ``ppo_loss`` passes as
    ``response_mask``, ``advantages`` and ``rollout_is_weights``."""
    xl, A_l, w = third_policy.on_loss_mask(xm, np.where(no_tokens[:, None], 0.0, A), m, lm,
                                           is_weights)
    if p["loss_mode"] == "geo_mean":
        w = third_policy.gmpo_row_weights(name, p, w, lm)
    elif p["loss_mode"] == "gspo" and p["sequence_gradient"] == "sequence":
        w = third_policy.row_mean(w, lm)
    return xl, A_l, w


def _policy_loss(name: str, p: dict, xl: Rollout, A, lm, opts, w) -> tuple:
    """(loss, statistics, dlogp) of ``loss_mode`` with the KL loss, the weights w on the
    KL term or not (the convention is_weights_on_kl): verl 0.9.1 ``workers/utils/losses.py``
    ``ppo_loss``, its ``policy_loss_fn`` and ``kl_penalty``."""
    with np.errstate(divide="ignore"):  # (GMPO's log(0 + 1e-10 - 1e-10): a weight 0)
        return third_policy.policy_loss(name, p, xl.logp, xl.logp_old, A, lm, opts,
                                        xl.logp_ref, is_weights=w)


def _nan_advantage_rows(pl, dlogp, rows, response, mode):
    """What verl 0.9.1 computes from rows whose advantages are NaN (opo's 0 / 0 for a group
    whose tokens were all rejected): ``agg_loss`` leaves them out (``masked_sum`` takes
    ``torch.where``; the seq-means mask their row sums), so the loss is the other rows'; but
    autograd multiplies the zero gradient the mask leaves by the NaN advantage, so the
    gradient is NaN at every response token of those rows (``response``; then the FSDP
    engine skips the update, ``optimizer_step``: grad_norm not finite). ``geo_mean`` takes
    torch.mean over rows, those included: its loss is NaN."""
    dlogp = np.where(rows[:, None] & response, np.nan, dlogp)
    if mode == "geo_mean":
        pl = SimpleNamespace(loss=np.nan, policy_loss=np.nan, kl_loss=pl.kl_loss)
    return pl, dlogp


def _statistics(x: Rollout, s, A, m, pl, st: dict, mode: str, p: dict, corr_stats: dict) -> dict:
    """The metrics: the actor's (``workers/utils/losses.py`` ``ppo_loss``: ``actor/pg_loss``,
    the loss_mode's own by ``_verl.verl_loss_stats``, the KL loss's), the batch's
    (``trainer/ppo/metric_utils.py`` ``compute_data_metrics``: the means of the scores, the
    sequence rewards s and the advantages over m) and the rollout correction's, verl 0.9.1."""
    return {"actor/pg_loss": pl.policy_loss, **verl_loss_stats(mode, st),
            "critic/score/mean": mean_rows(x.scores),
            "critic/rewards/mean": mean_rows(s),
            "critic/advantages/mean": mean_over(A, m),
            **verl_kl_loss_stats(p["use_kl_loss"], pl.kl_loss, p["kl_loss_coef"]),
            **corr_stats}


def _verl_grpo_step(step, xm: Rollout, A, m, opts, p, is_weights, no_tokens, response):
    """The step's outputs of ``verl-grpo``: ``agg_loss`` with the trainer's counts of the
    step (``normaliser="verl"``; sapo's "seq-mean-token-mean" whatever ``loss_agg_mode``;
    geo_mean's ``torch.mean`` over each micro-batch's rows alone, ``"local"``), the KL loss
    by ``loss_agg_mode``; the metrics as ``_verl.verl_step_stats`` aggregates them."""
    B, mode, name = m.shape[0], p["loss_mode"], p["normaliser"]
    agg_mode = {"sapo": "seq-mean-token-mean", "geo_mean": "grpo"}.get(mode, p["loss_agg_mode"])
    if mode == "geo_mean" and name == "verl":
        # why: verl 0.9.1 compute_policy_loss_geo_mean returns torch.mean(pg_losses) of the
        # micro-batch and reads no global count
        norm = Normaliser("local", "grpo")
    else:
        norm = normaliser_for(name, agg_mode, step=step, n_rows=B)
    kl_norm = normaliser_for(name, p["loss_agg_mode"], step=step, n_rows=B)
    out, passes = policy_step(step, xm.logp, xm.logp_old, A, m, opts, norm, xm.logp_ref,
                              is_weights=is_weights, kl_normaliser=kl_norm, stats=True,
                              weighted_kl=third_policy.kl_weights_on("verl-grpo", p))
    if np.any(no_tokens):
        # opo's NaN rows (_nan_advantage_rows): NaN gradients there, and geo_mean's
        # torch.mean over a micro-batch that holds one is NaN
        out["step/dlogp"] = np.where(no_tokens[:, None] & response, np.nan, out["step/dlogp"])
        if mode == "geo_mean":
            out["step/losses"] = np.array([np.nan if no_tokens[mb.rows].any()
                                           else mb.forward.loss for mb in passes])
    out.update(verl_step_stats(step, passes, lambda st: verl_loss_stats(mode, st),
                               kl_loss=p["use_kl_loss"]))
    return out


PRESET = Preset(
    name="verl-grpo",
    description="verl's critic-free estimators (verl 0.9.1; adv_estimator grpo by default: "
                "std + 1e-6, float32, a group of one mean 0 std 1) with the policy loss of "
                "loss_mode (vanilla by default; gspo, cispo, sapo, geo_mean, gpg, clip_cov, "
                "kl_cov, dppo_tv, dppo_kl, dro).",
    defaults={"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True, "gamma": 1.0,
              "loss_agg_mode": "token-mean", "loss_mode": "vanilla", "clip_ratio_low": 0.2,
              "clip_ratio_high": 0.2, "clip_ratio_c": 3.0, "use_kl_loss": False,
              "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "use_kl_in_reward": False,
              "kl_penalty": "kl", "kl_coef": 0.001, "gdpo_reward_weights": None,
              "tau_pos": 1.0, "tau_neg": 1.05,
              "clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0,
              "kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1, "dro_beta": None,
              # algorithm.rollout_correction (verl 0.9.1 trainer YAML defaults;
              # rollout_loss_type is its loss_type)
              "rollout_is": None, "rollout_is_threshold": 2.0,
              "rollout_is_batch_normalize": False, "rollout_rs": None,
              "rollout_rs_threshold": None, "bypass_mode": False,
              "rollout_loss_type": "ppo_clip"},
    # the conventions verl does not expose as options (verl 0.9.1
    # verl/trainer/ppo/core_algos.py compute_grpo_outcome_advantage, epsilon=1e-6;
    # compute_policy_loss_vanilla and _cispo: clamp(negative_approx_kl, -20, 20); _gspo:
    # clamp(log_seq_importance_ratio, max=10.0))
    conventions={"std_ddof": 1, "std_eps": 1e-6, "std_eps_placement": "std",
                 "singleton": "raw", "log_ratio_clamp": 20.0, "cispo_clip": "range",
                 "log_ratio_max": 10.0, "is_log_ratio_bound": 20.0, "clip_cov_seed": 0,
                  "sequence_gradient": "token", "normaliser": "verl", "kl_gradient": None,
                  **third_policy.VERL},
    sources=(
        "volcengine/verl: verl/trainer/ppo/core_algos.py (compute_grpo_outcome_advantage, "
        "compute_rloo_outcome_advantage, compute_reinforce_plus_plus_outcome_advantage, "
        "compute_reinforce_plus_plus_baseline_outcome_advantage, "
        "compute_remax_outcome_advantage, compute_opo_outcome_advantage, "
        "compute_gpg_outcome_advantage, compute_grpo_passk_outcome_advantage, "
        "compute_gdpo_outcome_advantage, compute_policy_loss_vanilla, "
        "compute_policy_loss_gspo, compute_policy_loss_cispo, compute_policy_loss_sapo, "
        "compute_policy_loss_geo_mean, compute_policy_loss_gpg, compute_policy_loss_clip_cov, "
        "compute_policy_loss_kl_cov, compute_policy_loss_dppo_tv, compute_policy_loss_dppo_kl, "
        "compute_policy_loss_dro, agg_loss, kl_penalty), 0.9.1",
        "volcengine/verl: verl/workers/config/actor.py (ActorConfig, PolicyLossConfig), 0.9.1",
        "volcengine/verl: verl/utils/torch_functional.py (masked_whiten), 0.9.1",
        "volcengine/verl: verl/trainer/ppo/ray_trainer.py (apply_kl_penalty, "
        "compute_advantage), 0.9.1",
        "volcengine/verl: verl/workers/utils/losses.py (ppo_loss), 0.9.1",
        "volcengine/verl: verl/trainer/config/algorithm.py (AlgoConfig.gdpo_reward_keys, "
        "gdpo_reward_weights), 0.9.1",
        "volcengine/verl: verl/workers/reward_manager/naive.py (float32 reward tensor), 0.9.1",
        "volcengine/verl: verl/trainer/config/actor/actor.yaml (policy_loss, kl_loss_*), 0.9.1",
        "volcengine/verl: verl/trainer/ppo/rollout_corr_helper.py "
        "(compute_rollout_correction_and_rejection_mask, apply_bypass_mode), 0.9.1",
        "volcengine/verl: verl/trainer/ppo/core_algos.py (compute_policy_loss_bypass_mode, "
        "compute_policy_loss_reinforce), 0.9.1",
        "volcengine/verl: verl/trainer/config/_generated_ppo_trainer.yaml "
        "(algorithm.rollout_correction), 0.9.1",
    ),
    tolerances={"float64": (32 * FLOAT32_ROUNDING, 32 * FLOAT32_ROUNDING)},
    tolerance_note="verl computes the outcome estimators in the dtype of its float32 reward "
                   "tensor (verl/workers/reward_manager/naive.py) and the clip fractions as "
                   "float32 means of .float() booleans: rtol and atol 32 2^-24 for outputs of "
                   "order 1 to 5 after a few float32 roundings",
    pipeline=_verl_grpo,
    input_names=GROUP_INPUT_NAMES,
    takes_layout=True,
)
