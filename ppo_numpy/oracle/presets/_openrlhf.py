"""OpenRLHF's helpers for its presets (``openrlhf``, ``openrlhf-grpo``): the rollout
correction of OpenRLHF 0.11.2 (``--algo.advantage.is_correction_*``) and its KL loss
(``--algo.kl.use_loss``, ``--algo.kl.unbiased_gradient``)."""

from __future__ import annotations

from numbers import Real

import numpy as np

from ..._checks import check_choice, check_scalar
from ...batch import Rollout
from ...mismatch.correction import (
    rollout_divergence_gate,
    rollout_importance_weights,
)
from ...ppo.kl_gradient import check_is_bound
from . import _third_policy as third_policy
from ._common import _flag, kl_form, mean_over, need_rollout

# -- OpenRLHF 0.11.2 (--algo.kl.use_loss): the KL term of the actor's loss

#: OpenRLHF 0.11.2 ``openrlhf/models/utils.py`` ``compute_approx_kl`` clamps every estimate
#: to [-10, 10] (line 113)
OPENRLHF_KL_CLAMP = 10.0


def openrlhf_kl_loss(name: str, p: dict, coef: float, clamp=OPENRLHF_KL_CLAMP) -> dict:
    """The KL fields of the policy-loss options for OpenRLHF 0.11.2's KL loss
    (``--algo.kl.use_loss``; ``trainer/ray/ppo_actor.py`` ``training_step``, lines
    318-331): ``coef``
    times the token mean (``aggregate_loss``'s default, whatever ``loss_agg_mode``) of
    ``compute_approx_kl(log_probs, base_action_log_probs, log_probs_old=old_action_log_probs)``
    of ``kl_estimator``, clamped to [-10, 10] (``clamp``: the preset's ``kl_clamp``, where it
    has one).

    ``kl_unbiased_gradient`` (``--algo.kl.unbiased_gradient``, default False): the
    estimate's value with the gradient of ``w k2``, ``w = sg(min(pi_theta / pi_old, 10))``
    (``compute_approx_kl``, lines 121-128: ``value.detach() + w k2 - (w k2).detach()``; the
    bound is the module's ``KL_IS_WEIGHT_CLIP = 10.0``, line 66, the convention
    ``kl_is_bound``), so every token
    gets w (logp - logp_ref), unclamped: ``kl_gradient="importance"``. pi_old is the
    experience's ``action_log_probs``, the actor's log-probs at experience time (logp_old),
    also where GSPO's ratio is taken against the rollout's (the caller passes logp_old as
    ``kl_logp_old``). Without the flag the estimate is differentiated as it is. (The clamp
    ``log_ratio.clamp(min=-10)`` inside k3, line 108, changes neither: at d = -10, k3 = e^10 -
    11 > 10, beyond the estimate's clamp.) The value OpenRLHF returns with the flag is
    ``(v + w k2) - w k2`` in float32, v up to a rounding at the ulp of v + w k2; the preset
    returns v."""
    unbiased = _flag(p, "kl_unbiased_gradient", name)
    bound = check_is_bound(p["kl_is_bound"], f"{name}: kl_is_bound")
    return dict(kl_coef=coef, kl_estimator=p["kl_estimator"], kl_clamp=clamp,
                kl_agg="token-mean",
                kl_gradient=kl_form(name, p, "importance" if unbiased else "plain"),
                kl_is_bound=bound)


# -- OpenRLHF 0.11.2 (--algo.advantage.is_correction_*)

OPENRLHF_IS_LEVELS = ("off", "token", "seq")
OPENRLHF_IS_MODES = ("mask", "clip")
OPENRLHF_GATINGS = ("ratio", "binary_kl", "tv")


def openrlhf_threshold(name: str, spec) -> tuple:
    """``is_correction_threshold``: [low, high], or one number (an upper bound: low 0)."""
    what = f"{name}: is_correction_threshold"
    values = [spec] if isinstance(spec, Real) else list(spec)
    if len(values) == 1:
        values = [0.0] + values
    if len(values) != 2:
        raise ValueError(f"{what}: expected HIGH or [LOW, HIGH], got {spec!r}")
    low, high = (check_scalar(v, what, allow_exact=False) for v in values)
    if low > high:
        raise ValueError(f"{what}: low must be <= high, got {spec!r}")
    return low, high


def openrlhf_correction(name: str, x: Rollout, m, p: dict, policy_loss_type: str = "ppo"):
    """OpenRLHF's ``PolicyLoss`` correction: the coefficient (B, T) that multiplies each
    token's loss, or None (``is_correction_level="off"``, or GSPO, whose ratio the caller
    takes against logp_rollout instead).

    A gate reads one statistic per unit: the ratio exp(logp_old - logp_rollout) per token or
    its geometric mean per response (``gating="ratio"``), or a divergence d_t of the sampled
    token's two probabilities (``binary_kl``, ``tv``) per token or its mean per response.
    ``mode="mask"``: a unit outside [low, high] gets 0, a kept one its unclamped token ratios;
    ``mode="clip"`` (token level, ratio only): the token ratio clamped to [low, high]."""
    level = check_choice(p["is_correction_level"], f"{name}: is_correction_level",
                         OPENRLHF_IS_LEVELS, "level")
    mode = check_choice(p["is_correction_mode"], f"{name}: is_correction_mode",
                        OPENRLHF_IS_MODES, "mode")
    gating = check_choice(p["is_correction_gating"], f"{name}: is_correction_gating",
                          OPENRLHF_GATINGS, "gating")
    if mode == "clip" and (level == "seq" or gating != "ratio"):
        # (PolicyLoss refuses it whatever the level, "off" included)
        raise ValueError(f"{name}: is_correction_mode='clip' needs is_correction_level="
                         f"'token' and is_correction_gating='ratio' (OpenRLHF 0.11.2)")
    if level == "off":
        return None
    need_rollout(name, x, f"is_correction_level={level!r}")
    low, high = openrlhf_threshold(name, p["is_correction_threshold"])
    if gating != "ratio":
        if low > 0:
            raise ValueError(f"{name}: is_correction_gating={gating!r} takes an upper bound "
                             f"only (a low <= 0), got is_correction_threshold="
                             f"{p['is_correction_threshold']!r}")
        if policy_loss_type != "ppo":
            return None
        # (low: 0 for one threshold, as OpenRLHF makes it; its rounding below 0 drops tokens)
        return rollout_divergence_gate(x.logp_old, x.logp_rollout, m, divergence=gating,
                                       high=high, low=low, level="sequence" if level == "seq"
                                       else "token")
    if low < 0:
        low = None  # (ratios are >= 0: no bound)
    if policy_loss_type != "ppo":
        return None
    bound = p["is_log_ratio_bound"]  # (the convention: OpenRLHF bounds no log-ratio)
    if level == "seq" and third_policy.check(name, p, "is_sequence_weight",
                                             third_policy.SEQUENCE_WEIGHTS) == "product":
        # (the convention is_sequence_weight: the gate reads the product, not OpenRLHF's
        # geometric mean)
        return third_policy.gate_by_product(x.logp_old, x.logp_rollout, m, low, high, bound)
    return rollout_importance_weights(
        x.logp_old, x.logp_rollout, m, clip_max=high, clip_min=low,
        level="geometric" if level == "seq" else "token",
        mode="truncate" if mode == "clip" else "mask", log_ratio_bound=bound)


def openrlhf_correction_and_stats(name, x: Rollout, xm: Rollout, m, p: dict,
                                  policy_loss_type: str = "ppo"):
    """OpenRLHF 0.11.2's ``PolicyLoss`` correction (``--algo.advantage.is_correction_*``):
    (is_weights or None, the log-probs the ratio is taken against, the statistics).

    * ``policy_loss_type="ppo"``: the coefficient of ``openrlhf_correction`` multiplies each
      token's loss, the ratio stays pi_theta / pi_old; logged: ``vllm_kl`` (token mean of
      logp_rollout - logp_old) and ``is_filter_ratio`` (the fraction of units, tokens or
      responses, outside the band).
    * ``"gspo"`` with a correction on: no coefficient; the sequence ratio is taken against
      logp_rollout, exp(mean_t (logp_t - logp_rollout_t)) (OpenRLHF 0.11.2 ``PolicyLoss``),
      the threshold and gating unused; nothing extra is logged.
    """
    gspo = policy_loss_type == "gspo"
    w = openrlhf_correction(name, x, m, p, policy_loss_type)
    if p["is_correction_level"] == "off":
        return None, xm.logp_old, {}
    if gspo:
        return None, np.where(m, x.logp_rollout, 0.0), {}
    low, high = openrlhf_threshold(name, p["is_correction_threshold"])
    xr = x.on(m)
    raw = np.exp(xr.logp_old - xr.logp_rollout)
    if p["is_correction_mode"] == "clip":
        filtered = m & ((raw < low) | (raw > high))
    else:
        filtered = m & (w == 0)
    if p["is_correction_level"] == "seq":
        ratio = float(np.mean(filtered.any(axis=-1)))
    else:
        ratio = float(filtered.sum() / m.sum())
    stats = {"vllm_kl": mean_over(xr.logp_rollout - xr.logp_old, m), "is_filter_ratio": ratio}
    return w, xm.logp_old, stats


def openrlhf_step_stats(step, passes, m, logp, logp_old, value=None, values=None, *,
                        kl_loss=False) -> dict:
    """The statistics OpenRLHF 0.11.2 logs for one step of several micro-batches (its
    ``gas`` the micro-batches per rank): the actor's (``openrlhf/trainer/ray/ppo_actor.py``
    ``ppo_train``) each micro-batch's value weighted by its tokens, summed over the ranks
    and the step's micro-batches and divided by the step's tokens: ``policy_loss`` (the
    loss ``aggregate_loss`` returns, gas times the backward's after DeepSpeed's 1 / gas),
    ``ppo_clip_ratio`` and ``ppo_kl`` (``PolicyLoss``'s token means of the micro-batch,
    the raw log-ratio's), with ``kl_loss`` (``--algo.kl.use_loss``) ``kl`` (``training_step``
    logs its KL loss as ``info["kl"]``, a token-weighted 0-d value: ``aggregate_loss`` with
    the step's counts, gas times the backward's before its coefficient); the critic's
    (``ppo_critic.py``: ``strategy.all_reduce``, a mean over the ranks, then the mean over
    the micro-batches) ``critic_loss`` (gas times the backward's) and ``values``. Empty when
    the ranks run different numbers of micro-batches (DeepSpeed's gas is one number)."""
    K = step.same_micro_batches()
    if K is None:
        return {}
    n = np.array([np.count_nonzero(m[mb.rows]) for mb in passes], dtype=np.float64)

    def token_weighted(v):
        return float((np.asarray(v) * n).sum() / n.sum())

    kl = np.where(m, logp_old - logp, 0.0)
    out = {"policy_loss": token_weighted([K * mb.forward.policy_loss for mb in passes]),
           "ppo_clip_ratio": token_weighted([mb.stats["clipfrac_active"] for mb in passes]),
           "ppo_kl": token_weighted([kl[mb.rows].sum() / max(c, 1)
                                     for mb, c in zip(passes, n)])}
    if kl_loss:
        out["kl"] = token_weighted([K * mb.forward.kl_loss for mb in passes])
    if value is not None:
        # a mean over the ranks of each micro-batch index, then over the micro-batches
        out["critic_loss"] = float(np.mean(K * np.asarray(value)))
        out["values"] = float(np.mean([values[mb.rows].sum() / max(c, 1)
                                       for mb, c in zip(passes, n)]))
    return {f"step/stat/{k}": v for k, v in out.items()}
