"""OpenRLHF's critic-free estimators (preset ``openrlhf-grpo``): ``--advantage_estimator``
group_norm, rloo, reinforce, reinforce_baseline, dr_grpo; ``--policy_loss_type`` ppo or gspo."""

from __future__ import annotations

import numpy as np

from ..._checks import check_bounds
from ...batch import Rollout
from ...family.advantages import grpo_advantages, returns_to_go, rloo_advantages
from ...policy_loss.options import PolicyLossOptions
from ...ppo.kl_gradient import OPENRLHF_IS_BOUND
from . import _third_policy as third_policy
from ._common import (
    FLOAT32_ROUNDING,
    FLOAT64_RTOL,
    GROUP_INPUT_NAMES,
    Preset,
    at_last_token,
    group_advantages,
    group_std,
    masked_kl,
    masked_whiten,
    mean_rows,
    policy_result,
    require_choice,
)
from ._openrlhf import openrlhf_correction_and_stats, openrlhf_kl_loss, openrlhf_step_stats
from ._step import normaliser_for, policy_step

ESTIMATORS = ("group_norm", "rloo", "reinforce", "reinforce_baseline", "dr_grpo")


def require_groups(name: str, groups, *, equal_sizes: bool, min_size: int, why: str) -> None:
    _, counts = np.unique(groups, return_counts=True)
    if np.any(counts < min_size):
        raise ValueError(f"{name}: a group has {int(counts.min())} response(s); {why}")
    if equal_sizes and np.any(counts != counts[0]):
        raise ValueError(f"{name}: groups of different sizes {sorted(set(counts.tolist()))}; "
                         f"{why}")


def _openrlhf_grpo(x: Rollout, p: dict, step=None) -> dict:
    """OpenRLHF's critic-free pipeline (OpenRLHF ``openrlhf/trainer/ppo_utils/
    experience_maker.py`` ``compute_advantages_and_returns``, ``openrlhf/models/utils.py``
    ``compute_reward``, ``compute_approx_kl``, ``openrlhf/models/loss.py`` ``PolicyLoss``).

    * The sequence value r' of each response: ``group_norm`` (r - mean) / (std + 1e-9),
      ddof 1; ``rloo`` r - the mean of the others; ``reinforce_baseline`` and ``dr_grpo``
      r - mean; ``reinforce`` r. Groups are blocks of ``n_samples_per_prompt``: every group
      the same size, and more than one response for group_norm, rloo, reinforce_baseline.
    * r' clipped to ``reward_clip_range`` (-10, 10) and put at the last response token;
      without ``use_kl_loss``, -``init_kl_coef`` times the KL estimate (logp_old vs
      logp_ref, clamped to [-10, 10]) at every token. Returns-to-go of these token rewards
      (gamma 1 but for ``reinforce``) are the advantages; ``reinforce`` and
      ``reinforce_baseline`` whiten them over the batch's tokens with the population
      variance floored at 1e-8.
    * ``policy_loss_type`` ``ppo``: the token ratio, its log clamped to [-20, 20]
      (``log_ratio_clamp``, openrlhf 0.11.2 ``PolicyLoss``), eps 0.2
      (``eps_clip_low_high`` for two values), ``dual_clip`` off, the token mean; ``gspo``:
      the sequence ratio (no cap), the sequence mean of token means. (Checked against the
      released openrlhf 0.11.2 by ``make conformance``, docs/conformance.md.)
    * ``use_kl_loss``: ``init_kl_coef`` times the token mean of ``kl_estimator`` of (logp,
      logp_ref), clamped to [-10, 10]; with ``kl_unbiased_gradient``
      (``--algo.kl.unbiased_gradient``) its gradient is min(pi_theta / pi_old, 10) (logp -
      logp_ref) per token, the weight a constant (``_openrlhf.openrlhf_kl_loss``; the bound
      is the convention ``kl_is_bound``, OpenRLHF's ``KL_IS_WEIGHT_CLIP``).
    * Statistics: ``policy_loss`` (without the KL term), ``ppo_clip_ratio``, ``ppo_kl``,
      ``kl`` (the KL loss's token mean with use_kl_loss, else the mean over responses of
      the token-mean rollout KL), ``reward`` (mean raw score), ``return`` (mean over
      responses of the summed token rewards, with -``init_kl_coef`` KL at the padding
      positions too, as OpenRLHF 0.11.2 sums them), ``group_reward_std``.
    * The rollout correction (``is_correction_*``, a case with ``logp_rollout``):
      ``_openrlhf.openrlhf_correction_and_stats``; with ``gspo`` the sequence ratio is taken
      against logp_rollout instead of weighting. The conventions no framework names take
      OpenRLHF's values (``conventions``; the others in ``_third_policy``): the sequence gate
      reads the geometric mean, a gated token's coefficient is 0 in the denominators, the
      KL loss unweighted, no bound on the log-ratio, GSPO's sequence ratio differentiated.
    * Tolerance: as the ``openrlhf`` preset (float32 KL, rewards and normalisation
      statistics in 0.11.2): float64 rtol 1e-9 + 16 2^-24, atol 16 2^-24.
    * A step over ranks and micro-batches (a case's layout): as the ``openrlhf`` preset's
      (``normaliser="openrlhf"``: the step's counts from ``iter_grad_accum_global_norm``),
      the policy term by its token mean (ppo) or its sequence mean of token means (gspo),
      the KL loss by its token mean (``aggregate_loss`` with its default
      ``token_level_loss``, ``ppo_actor.py`` ``training_step``).
    """
    name = "openrlhf-grpo"
    m = x.mask
    xm = x.on(m)
    require_choice(name, p, "advantage_estimator", ESTIMATORS)
    require_choice(name, p, "policy_loss_type", ("ppo", "gspo"))
    est = p["advantage_estimator"]
    require_groups(name, x.groups, equal_sizes=est != "reinforce",
                   min_size=2 if est in ("group_norm", "rloo", "reinforce_baseline") else 1,
                   why="OpenRLHF reshapes the rewards to (-1, n_samples_per_prompt) and "
                       "asserts n_samples_per_prompt > 1 for group_norm, rloo and "
                       "reinforce_baseline")
    if est == "group_norm":
        r = group_advantages(x.scores, x.groups, p, singleton="error")
    elif est == "rloo":
        r = rloo_advantages(x.scores, x.groups)
    elif est in ("reinforce_baseline", "dr_grpo"):
        r = grpo_advantages(x.scores, x.groups, scale="none", singleton="zero")
    else:
        r = x.scores
    r = np.clip(r, *check_bounds(p["reward_clip_range"], "reward_clip_range"))
    rollout_kl = masked_kl(x.logp_old, x.logp_ref, p["kl_estimator"], m, 10.0)
    rewards = at_last_token(r, m)
    padding_kl = np.zeros(m.shape[0])
    if not p["use_kl_loss"] and p["init_kl_coef"] > 0:
        rewards = rewards - p["init_kl_coef"] * rollout_kl
        everywhere = masked_kl(x.logp_old, x.logp_ref, p["kl_estimator"], np.ones_like(m), 10.0)
        padding_kl = p["init_kl_coef"] * np.where(m, 0.0, everywhere).sum(axis=-1)
    A = returns_to_go(rewards, m, p["gamma"] if est == "reinforce" else 1.0)
    if est in ("reinforce", "reinforce_baseline"):
        A = masked_whiten(A, m, ddof=0, eps=1e-8, eps_mode="floor")
    gspo = p["policy_loss_type"] == "gspo"
    kl = openrlhf_kl_loss(name, p, p["init_kl_coef"] if p["use_kl_loss"] else 0.0)
    opts = PolicyLossOptions(epsilon=p["epsilon"], epsilon_high=p["epsilon_high"],
                             dual_clip=p["dual_clip"],
                             importance_level="sequence" if gspo else "token",
                             # (the convention: OpenRLHF differentiates the sequence ratio)
                             sequence_gradient=p["sequence_gradient"],
                             # why: openrlhf/models/loss.py (0.11.2) PolicyLoss clamps the token
                             # log-ratio to [-20, 20] for "ppo" (the convention log_ratio_clamp);
                             # the gspo sequence ratio is not clamped
                             log_ratio_clamp=None if gspo else p["log_ratio_clamp"],
                             agg="seq-mean-token-mean" if gspo else "token-mean", **kl)
    is_w, old, rollout_stats = openrlhf_correction_and_stats(name, x, xm, m, p,
                                                             p["policy_loss_type"])
    # (the conventions: a gated token in the loss's mask or not, the weights on the KL term;
    # the KL's importance weight is against logp_old, the experience's action_log_probs, even
    # where GSPO's ratio is against logp_rollout)
    lm = third_policy.loss_mask(name, p, m, is_w)
    xl = (np.where(lm, xm.logp, 0.0), np.where(lm, old, 0.0), np.where(lm, A, 0.0))
    w_l = None if is_w is None else np.where(lm, is_w, 0.0)
    kl_old = np.where(lm, xm.logp_old, 0.0)
    pl, st, dlogp = third_policy.policy_loss(name, p, *xl, lm, opts,
                                             np.where(lm, xm.logp_ref, 0.0), is_weights=w_l,
                                             kl_logp_old=kl_old)
    n_i = m.sum(axis=-1)
    stats = {
        "policy_loss": pl.policy_loss,
        "ppo_clip_ratio": st["clipfrac_active"],
        # why: openrlhf 0.11.2 PolicyLoss logs ppo_kl from the raw log-ratio, before its clamp
        "ppo_kl": float(np.where(m, xm.logp_old - xm.logp, 0.0).sum() / max(int(m.sum()), 1)),
        "kl": pl.kl_loss if p["use_kl_loss"] else mean_rows(rollout_kl.sum(axis=-1) / n_i),
        "reward": mean_rows(x.scores),
        # why: OpenRLHF 0.11.2 logs info["return"] = reward.sum(-1) over every column: its
        # compute_reward leaves -beta KL at the padding positions (padding is in it)
        "return": mean_rows(rewards.sum(axis=-1) - padding_kl),
        "group_reward_std": mean_rows(group_std(x.scores, x.groups, ddof=p["std_ddof"])),
        **rollout_stats,
    }
    # A and rewards are 0 at padding (returns_to_go, whiten; at_last_token, kl_estimate)
    out = policy_result(A, pl, dlogp, stats, rewards=rewards)
    if step is not None:
        if opts.kl_coef > 0 and opts.kl_gradient == "importance" and not np.array_equal(
                xl[1], kl_old):
            raise ValueError(f"layout: {name}'s unbiased KL gradient with GSPO's ratio against "
                             "logp_rollout (its KL weight against logp_old) is not reproduced "
                             "over micro-batches; give no layout")
        B = m.shape[0]
        norm = normaliser_for(p["normaliser"], opts.agg, step=step, n_rows=B)
        kl_norm = normaliser_for(p["normaliser"], "token-mean", step=step, n_rows=B)
        # (the conventions' mask lm and weights, as the one-batch loss above)
        step_out, passes = policy_step(step, *xl, lm, opts, norm,
                                       np.where(lm, xm.logp_ref, 0.0), is_weights=w_l,
                                       kl_normaliser=kl_norm, stats=True,
                                       weighted_kl=third_policy.kl_weights_on(name, p))
        out.update(step_out)
        out.update(openrlhf_step_stats(step, passes, m, xm.logp, xm.logp_old,
                                       kl_loss=p["use_kl_loss"]))
    return out


PRESET = Preset(
    name="openrlhf-grpo",
    description="OpenRLHF's critic-free estimators (openrlhf 0.11.2; group_norm by default: "
                "std + 1e-9, the value clipped to 10 at the last token), the ppo or gspo "
                "policy loss.",
    defaults={"advantage_estimator": "group_norm", "gamma": 1.0, "init_kl_coef": 0.01,
              "kl_estimator": "k1", "use_kl_loss": False, "kl_unbiased_gradient": False,
              "reward_clip_range": (-10.0, 10.0),
              "epsilon": 0.2, "epsilon_high": None, "dual_clip": None,
              "policy_loss_type": "ppo",
              # --algo.advantage.is_correction_* (openrlhf 0.11.2 cli/train_ppo_ray.py)
              "is_correction_level": "off", "is_correction_mode": "mask",
              "is_correction_gating": "ratio", "is_correction_threshold": (0.5, 5.0)},
    # the conventions OpenRLHF does not expose as options (openrlhf 0.11.2
    # openrlhf/trainer/ppo_utils/experience_maker.py: rewards.std(-1) + 1e-9;
    # openrlhf/models/loss.py PolicyLoss: ppo's log-ratio clamp(min=-20.0, max=20.0))
    conventions={"std_ddof": 1, "std_eps": 1e-9, "std_eps_placement": "std",
                 "log_ratio_clamp": 20.0, "kl_is_bound": OPENRLHF_IS_BOUND, "kl_gradient": None,
                 "sequence_gradient": "sequence", "normaliser": "openrlhf",
                 **third_policy.OPENRLHF},
    sources=(
        "OpenRLHF/OpenRLHF: openrlhf/trainer/ppo_utils/experience_maker.py "
        "(compute_advantages_and_returns, get_cumulative_returns), 0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/models/utils.py (compute_approx_kl, KL_IS_WEIGHT_CLIP, "
        "compute_reward), 0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/models/loss.py (PolicyLoss, its is_correction_*), 0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/trainer/ray/ppo_actor.py (training_step: the KL loss), "
        "0.11.2",
        "OpenRLHF/OpenRLHF: openrlhf/cli/train_ppo_ray.py (defaults), 0.11.2",
    ),
    pipeline=_openrlhf_grpo,
    input_names=GROUP_INPUT_NAMES,
    takes_layout=True,
    output_notes={"stat/return": (
        "stat/return reads the padding: OpenRLHF 0.11.2 sums the token rewards over every "
        "column, -beta KL at padding included (compute_reward does not mask it), so a "
        "candidate that zeroes its padding differs here (docs/oracle.md, Padding)")},
    tolerances={"float64": (FLOAT64_RTOL + 16 * FLOAT32_ROUNDING, 16 * FLOAT32_ROUNDING)},
    tolerance_note="OpenRLHF 0.11.2 computes the KL and the rewards in float32 "
                   "(openrlhf/models/utils.py) and the normalisation statistics of .float() "
                   "advantages (experience_maker.py): rtol 1e-9 + 16 2^-24, atol 16 2^-24",
)
