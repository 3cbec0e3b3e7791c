"""Framework presets: the core functions composed into each framework's PPO pipeline.

A preset takes one batch of rollout data (the :data:`INPUT_NAMES`) and returns
what that framework computes from it in one update on the whole batch (one
epoch, one minibatch): the per-token rewards, advantages and returns, the
policy and value losses, their gradients with respect to ``logp`` and
``values``, and the statistics the framework logs, under its own names::

    >>> from ppo_numpy.oracle.presets import get_preset
    >>> out = get_preset("verl")(case)                       # doctest: +SKIP
    >>> out["advantages"], out["stat/actor/pg_clipfrac"]      # doctest: +SKIP

Every choice a preset makes is a keyword of a core function; each preset's
docstring states the choices as facts with the repository and file they come
from (details and versions in ``docs/frameworks.md``; the settings side by
side in ``docs/conventions.md``). ``"seed"``, the default, is the
objective's own convention (docs/objective.md).

The case
--------
``case`` maps the :data:`INPUT_NAMES` to arrays: ``logp``, ``logp_old``,
``logp_ref`` (B, T) log-probs of the taken response tokens under the current,
rollout and reference policies; ``values`` (B, T) the value head being trained;
``old_values`` (B, T) the value head at rollout time (GAE input, value-clip
centre); ``scores`` (B,) the reward model's scores; ``mask`` (B, T), 1 for
response tokens. A case in the form of :mod:`ppo_numpy.oracle.cases`
(``{"inputs": {...}, "params": {...}}``) is accepted too; its ``params`` are
overrides, and keyword overrides given to the call win over them.

Conventions shared by every preset
----------------------------------
* The KL penalty in the rewards uses ``logp_old``: every framework computes its
  rewards at rollout time, before the update.
* Outputs are float64 and exactly 0 where the framework does not use them:
  ``rewards`` outside the positions its GAE reads, ``advantages`` outside the
  policy loss's mask, ``returns`` outside the value loss's mask. Frameworks
  leave other numbers there (masked later); compare the used positions only.
* ``value_loss`` is the value loss *before* any ``vf_coef`` (which is in
  ``defaults`` where the framework adds the value loss to the policy loss).
* ``dlogp`` = d policy_loss / d logp and ``dvalues`` = d value_loss / d values
  (:mod:`ppo_numpy.loss_grads`); the advantages and returns are constants.
* A case outside the framework's convention raises ValueError naming why (for
  example a mask that is not a prefix of ones for ``trl``, or padding in
  ``lm-human-preferences``, which has no mask).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .._validation import as_array, as_mask, where_valid
from ..aggregation import aggregate
from ..gae import gae
from ..kl import _score_bounds, kl_estimate, kl_shaped_rewards
from ..loss_grads import policy_loss_grad, value_loss_grad
from ..objective import ppo_policy_loss
from ..ratio import probability_ratio
from ..value_loss import value_loss
from ..whitening import masked_mean, whiten

__all__ = ["DEFAULT_PRESET", "INPUT_NAMES", "PRESETS", "Preset", "get_preset"]

INPUT_NAMES = ("logp", "logp_old", "logp_ref", "values", "old_values", "scores", "mask")

DEFAULT_PRESET = "seed"


@dataclass(frozen=True)
class Preset:
    """One framework's convention: defaults, sources, and the pipeline that applies them.

    Attributes
    ----------
    name : str
        ``"seed"``, ``"trl"``, ``"trl-0.11"``, ``"verl"``, ``"openrlhf"``,
        ``"deepspeed-chat"`` or ``"lm-human-preferences"``.
    description : str
        One sentence: which trainer, which version.
    defaults : dict
        The framework's default hyperparameters, under ppo_numpy's names
        (``gamma``, ``lam``, ``beta``, ``epsilon``, ``value_clip``, ...).
        Each may be overridden per call.
    sources : tuple of str
        ``"owner/repo: path (function)"`` for every file the pipeline follows.
    pipeline : callable
        ``pipeline(inputs, params) -> dict``; call the preset instead.
    """

    name: str
    description: str
    defaults: dict
    sources: tuple
    pipeline: Callable = field(repr=False, compare=False)

    def __call__(self, case: dict, **overrides) -> dict:
        """Run the pipeline on ``case`` with ``defaults`` updated by ``overrides``.

        Returns a dict with ``rewards``, ``advantages``, ``returns``, ``dlogp``,
        ``dvalues`` (B, T) arrays, ``policy_loss`` and ``value_loss`` floats and
        one ``"stat/<name>"`` float per statistic the framework logs.
        """
        if not isinstance(case, dict):
            raise TypeError(f"case: expected a dict of arrays, got {type(case).__name__}")
        if "inputs" in case:
            overrides = {**dict(case.get("params") or {}), **overrides}
            case = case["inputs"]
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}; "
                f"valid ones are {', '.join(self.defaults)}")
        params = {**self.defaults, **overrides}
        return self.pipeline(_read_case(case), params)


@dataclass(frozen=True)
class _Inputs:
    logp: np.ndarray
    logp_old: np.ndarray
    logp_ref: np.ndarray
    values: np.ndarray
    old_values: np.ndarray
    scores: np.ndarray
    mask: np.ndarray  # bool (B, T)


def _read_case(case: dict) -> _Inputs:
    missing = [n for n in INPUT_NAMES if n not in case]
    if missing:
        raise ValueError(f"case: missing input(s) {', '.join(missing)}; a case needs "
                         f"{', '.join(INPUT_NAMES)}")
    arrays = {n: as_array(case[n], n, exact=False) for n in INPUT_NAMES if n != "mask"}
    logp = arrays["logp"]
    if logp.ndim != 2:
        raise ValueError(f"logp: presets take a (B, T) batch, got shape {logp.shape}")
    for n in ("logp_old", "logp_ref", "values", "old_values"):
        if arrays[n].shape != logp.shape:
            raise ValueError(f"{n}: shape {arrays[n].shape} does not match logp shape "
                             f"{logp.shape}")
    if arrays["scores"].shape != logp.shape[:1]:
        raise ValueError(f"scores: expected shape {logp.shape[:1]} (one score per response), "
                         f"got shape {arrays['scores'].shape}")
    m = as_mask(case["mask"], logp, "logp")
    empty = ~m.any(axis=-1)
    if np.any(empty):
        raise ValueError(f"mask: row {int(np.argmax(empty))} has no response token")
    return _Inputs(mask=m, **arrays)


# ---------------------------------------------------------------------------------------
# Small compositions shared by several presets


def _mean_rows(x) -> float:
    return float(np.mean(x))


def _divide(a, b) -> float:
    """a / b in IEEE float64: inf or NaN for b = 0, as the frameworks' tensors give."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def _masked_var(x, m, ddof) -> float:
    """Variance over the masked entries, divisor n - ddof (TRL/verl ``masked_var``: ddof 1)."""
    n = int(m.sum())
    mu = masked_mean(x, m)
    return masked_mean((x - mu) ** 2, m) * n / (n - ddof)


def _require_prefix(name: str, m: np.ndarray, why: str) -> None:
    """Raise unless every row is ones from column 0, then zeros (right padding, no holes)."""
    n = m.sum(axis=-1)
    prefix = np.arange(m.shape[-1])[None, :] < n[:, None]
    bad = np.any(m != prefix, axis=-1)
    if np.any(bad):
        raise ValueError(f"{name}: mask row {int(np.argmax(bad))} is not a prefix of ones "
                         f"(response from column 0, then padding); {why}")


def _slot_after(m: np.ndarray) -> np.ndarray:
    """The mask extended by one column after each row's last token (none if the row is full)."""
    n = m.sum(axis=-1)
    return np.arange(m.shape[-1])[None, :] < np.minimum(n + 1, m.shape[-1])[:, None]


def _require_finite(name: str, arrays: dict, where: np.ndarray, why: str) -> None:
    for key, arr in arrays.items():
        bad = where & ~np.isfinite(arr)
        if np.any(bad):
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name}: {key} is {arr[idx]} at padding position {idx}, which "
                             f"{why}; it must be finite there")


def _check_estimator(name: str, estimator, allowed: tuple) -> None:
    if estimator not in allowed:
        raise ValueError(f"{name}: kl_estimator {estimator!r} is not one the framework offers; "
                         f"valid ones are {', '.join(allowed)}")


def _value_clipfrac(x: _Inputs, returns, m, clip) -> float:
    """Token mean of "the clipped value error is strictly larger" (TRL/verl ``vf_clipfrac``)."""
    if clip is None:
        return 0.0
    # 1/2 max(a, b) > 1/2 a exactly when the clipped error b is the larger one
    clipped = value_loss(x.values, x.old_values, returns, m, clip_range=clip)
    plain = value_loss(x.values, x.old_values, returns, m)
    return masked_mean((clipped > plain).astype(np.float64), m)


def _losses(x: _Inputs, advantages, returns, p: dict, *, policy_mask, value_mask,
            policy_agg="token-mean", value_agg="token-mean", epsilon_high=None,
            dual_clip=None, log_ratio_clamp=None):
    """Policy loss, its stats and gradient; value loss and its gradient."""
    clip_opts = dict(epsilon_high=epsilon_high, dual_clip=dual_clip,
                     log_ratio_clamp=log_ratio_clamp)
    policy_loss, stats = ppo_policy_loss(x.logp, x.logp_old, advantages, policy_mask,
                                         p["epsilon"], policy_agg, **clip_opts)
    dlogp = policy_loss_grad(x.logp, x.logp_old, advantages, policy_mask, p["epsilon"],
                             policy_agg, **clip_opts)
    per_token = value_loss(x.values, x.old_values, returns, value_mask,
                           clip_range=p["value_clip"])
    vloss = float(aggregate(per_token, value_mask, value_agg))
    dvalues = value_loss_grad(x.values, x.old_values, returns, value_mask, p["value_clip"],
                              value_agg)
    return policy_loss, stats, dlogp, vloss, dvalues


def _result(rewards, advantages, returns, policy_loss, value_loss_, dlogp, dvalues,
            stats: dict) -> dict:
    out = {"rewards": rewards, "advantages": advantages, "returns": returns,
           "policy_loss": float(policy_loss), "value_loss": float(value_loss_),
           "dlogp": dlogp, "dvalues": dvalues}
    out.update({f"stat/{k}": float(v) for k, v in stats.items()})
    return out


# ---------------------------------------------------------------------------------------
# The objective's own convention (preset "seed")


def _seed(x: _Inputs, p: dict) -> dict:
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
    """
    m = x.mask
    est = p["kl_estimator"]
    kl = kl_estimate(x.logp_old, x.logp_ref, est, m)
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m, est)
    advantages, returns = gae(rewards, x.old_values, p["gamma"], p["lam"], m)
    if p["whiten_advantages"]:
        advantages = whiten(advantages, m)
    policy_loss, st, dlogp, vloss, dvalues = _losses(
        x, advantages, returns, p, policy_mask=m, value_mask=m,
        policy_agg=p["policy_agg"], value_agg=p["value_agg"])
    stats = {
        "objective": -policy_loss,
        "clipfrac_active": st["clipfrac_active"],
        "clipfrac_outside": st["clipfrac_outside"],
        "approx_kl_k1": st["approx_kl_k1"],
        "approx_kl_k2": st["approx_kl_k2"],
        "approx_kl_k3": st["approx_kl_k3"],
        "ratio_mean": st["ratio_mean"],
        "kl_per_sequence": aggregate(kl, m, "seq-mean-token-sum"),
        "score_mean": _mean_rows(x.scores),
    }
    return _result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


# ---------------------------------------------------------------------------------------
# TRL, current PPOTrainer

# why: huggingface/trl trl/trainer/ppo_trainer.py (v0.20.0) fills the log-probs of every
# padding position with INVALID_LOGPROB = 1.0; its objective/entropy sums them.
TRL_INVALID_LOGPROB = 1.0


def _trl(x: _Inputs, p: dict) -> dict:
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
    * Value loss: 1/2 max(...) with ``cliprange_value`` 0.2, token mean over
      mask + slot after (``~padding_mask_p1``); ``dvalues`` is nonzero there.
    * Statistics (one minibatch): ``policy/approxkl_avg`` = 0.5 (logp - logp_old)^2
      summed over tokens / (B T); ``policy/clipfrac_avg``; ``loss/policy_avg``;
      ``loss/value_avg``; ``val/clipfrac_avg`` (over mask + slot after);
      ``val/ratio`` (mean over all B T positions, ratio 1 at padding);
      ``objective/kl``, ``objective/non_score_reward`` (mean over responses of
      the sums); ``objective/rlhf_reward``; ``objective/scores``;
      ``objective/entropy`` (mean over responses of the sum over all T columns of
      -logp_old, padding counting -1.0 each). Not produced: ``policy/entropy_avg``
      (needs logits), ``val/ratio_var`` (a variance across minibatches).
    """
    name = "trl"
    m = x.mask
    _require_prefix(name, m, "TRL's PPOTrainer derives the mask from the first pad token")
    m_p1 = _slot_after(m)
    _require_finite(name, {"old_values": x.old_values, "values": x.values}, m_p1 & ~m,
                    "TRL reads as the value of the slot after the last token")
    est = p["kl_estimator"]
    _check_estimator(name, est, ("k1", "k3"))
    kl = kl_estimate(x.logp_old, x.logp_ref, est, m)
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m, est,
                                score_offset=1)
    if p["whiten_rewards"]:
        rewards = whiten(rewards, m_p1, shift_mean=False)
    raw_advantages, returns = gae(rewards, x.old_values, p["gamma"], p["lam"], m_p1)
    advantages = whiten(raw_advantages, m)
    policy_loss, st, dlogp, vloss, dvalues = _losses(
        x, advantages, returns, p, policy_mask=m, value_mask=m_p1)
    B, T = m.shape
    rho = probability_ratio(x.logp, x.logp_old, m)
    kl_per_row = aggregate(kl, m, "seq-mean-token-sum")
    n_padding = T - m.sum(axis=-1)
    stats = {
        "objective/kl": kl_per_row,
        "objective/entropy": aggregate(-x.logp_old, m, "seq-mean-token-sum")
        - TRL_INVALID_LOGPROB * _mean_rows(n_padding),
        "objective/non_score_reward": -p["beta"] * kl_per_row,
        "objective/rlhf_reward": -p["beta"] * kl_per_row + _mean_rows(x.scores),
        "objective/scores": _mean_rows(x.scores),
        "policy/approxkl_avg": aggregate(kl_estimate(x.logp, x.logp_old, "k2", m), m,
                                         "seq-mean-token-sum-norm"),
        "policy/clipfrac_avg": st["clipfrac_active"],
        "loss/policy_avg": policy_loss,
        "loss/value_avg": vloss,
        "val/clipfrac_avg": _value_clipfrac(x, returns, m_p1, p["value_clip"]),
        "val/ratio": 1.0 + aggregate(rho - 1.0, m, "seq-mean-token-sum-norm"),
    }
    return _result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


# ---------------------------------------------------------------------------------------
# TRL 0.11, the legacy step() trainer

_TRL011_KL_PENALTY = {"k1": "kl", "k2": "mse", "abs": "abs"}


def _lmhp_stats(x, returns, m, p, st, policy_loss, vloss, kl, ddof):
    """The statistics lm-human-preferences logs (``train_policy.py``), kept under the same
    names by TRL 0.11 (``PPOTrainer.record_step_stats``); variances with ``ddof``."""
    returns_var = _masked_var(returns, m, ddof)
    error = masked_mean((x.values - returns) ** 2, m)
    return {
        "ppo/loss/policy": policy_loss,
        "ppo/loss/value": vloss,
        "ppo/loss/total": policy_loss + p["vf_coef"] * vloss,
        "ppo/policy/approxkl": st["approx_kl_k2"],
        "ppo/policy/clipfrac": st["clipfrac_active"],
        "ppo/returns/mean": masked_mean(returns, m),
        "ppo/returns/var": returns_var,
        "ppo/val/vpred": masked_mean(x.values, m),
        "ppo/val/error": error,
        "ppo/val/clipfrac": _value_clipfrac(x, returns, m, p["value_clip"]),
        "ppo/val/mean": masked_mean(x.old_values, m),
        "ppo/val/var": _masked_var(x.old_values, m, ddof),
        "ppo/val/var_explained": 1.0 - _divide(error, returns_var),
        "objective/kl": aggregate(kl, m, "seq-mean-token-sum"),
        "objective/kl_coef": p["beta"],
        "objective/entropy": aggregate(-x.logp_old, m, "seq-mean-token-sum"),
    }


def _trl_011(x: _Inputs, p: dict) -> dict:
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
      rollout values, no log-ratio clamp, no dual clip. When the token mean of
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
    """
    name = "trl-0.11"
    m = x.mask
    est = p["kl_estimator"]
    _check_estimator(name, est, tuple(_TRL011_KL_PENALTY))
    if p["whiten_rewards"]:
        raise ValueError(f"{name}: whiten_rewards=True is not reproduced (TRL 0.11 whitens "
                         "the rewards after masking and does not re-mask, so padding enters "
                         "GAE; see docs/frameworks.md)")
    kl = kl_estimate(x.logp_old, x.logp_ref, est, m)
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m, est,
                                score_clip=p["score_clip"])
    raw_advantages, returns = gae(rewards, where_valid(m, x.old_values), p["gamma"],
                                  p["lam"])
    returns = where_valid(m, returns)
    advantages = whiten(raw_advantages, m)
    policy_loss, st, dlogp, vloss, dvalues = _losses(
        x, advantages, returns, p, policy_mask=m, value_mask=m)
    if st["ratio_mean"] > p["ratio_threshold"]:
        # why: v0.11.4 PPOTrainer.loss multiplies both losses by 0 ("Skipping batch")
        policy_loss, vloss = 0.0, 0.0
        dlogp, dvalues = np.zeros_like(dlogp), np.zeros_like(dvalues)
    scores = x.scores
    if p["score_clip"] is not None:
        low, high = _score_bounds(p["score_clip"])
        scores = np.clip(scores, low, high)
    stats = _lmhp_stats(x, returns, m, p, st, policy_loss, vloss, kl, ddof=1)
    stats.update({
        "ppo/policy/policykl": st["approx_kl_k1"],
        "ppo/policy/advantages_mean": masked_mean(advantages, m),
        "ppo/mean_non_score_reward": masked_mean(-p["beta"] * kl, m),
        "ppo/mean_scores": _mean_rows(scores),
        "ppo/std_scores": float(np.std(scores, ddof=1)) if scores.size > 1 else float("nan"),
    })
    return _result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


# ---------------------------------------------------------------------------------------
# verl

# why: volcengine/verl verl/trainer/ppo/core_algos.py (0.9.1) kl_penalty_forward clamps
# only its low-variance (k3) estimate, to [-10, 10]
_VERL_KL_CLAMP = {"k1": None, "k2": None, "abs": None, "k3": 10.0}


def _verl(x: _Inputs, p: dict) -> dict:
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
      same ``loss_agg_mode``.
    * Statistics: ``actor/pg_loss``, ``actor/pg_clipfrac``, ``actor/ppo_kl`` (k1 of
      the clamped log-ratio), ``actor/pg_clipfrac_lower`` (dual clip active),
      ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``
      (verl/workers/utils/losses.py ``ppo_loss``, ``value_loss``);
      from verl/trainer/ppo/metric_utils.py ``compute_data_metrics``:
      ``critic/score/mean``, ``critic/rewards/mean``, ``critic/advantages/mean``,
      ``critic/returns/mean``, ``critic/values/mean`` (rollout values),
      ``critic/vf_explained_var`` (ddof 1, + 1e-5), and with the KL in the reward
      ``actor/reward_kl_penalty`` (mean over responses of the token-mean KL) and
      ``actor/reward_kl_penalty_coeff``. verl's ``masked_mean`` divides by
      n + 1e-8; this preset divides by n (relative difference about 1e-8 / n).
    """
    name = "verl"
    m = x.mask
    if not np.all(m[:, 0]):
        raise ValueError(f"{name}: mask row {int(np.argmin(m[:, 0]))} does not start at "
                         "column 0; verl's response part starts with the first generated "
                         "token and the score index is a count of response tokens")
    est = p["kl_estimator"]
    _check_estimator(name, est, tuple(_VERL_KL_CLAMP))
    beta = p["beta"] if p["use_kl_in_reward"] else 0.0
    kl = kl_estimate(x.logp_old, x.logp_ref, est, m, clamp=_VERL_KL_CLAMP[est])
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, beta, m, est,
                                kl_clamp=_VERL_KL_CLAMP[est])
    raw_advantages, returns = gae(rewards, x.old_values, p["gamma"], p["lam"], m)
    advantages = whiten(raw_advantages, m)
    agg = p["loss_agg_mode"]
    policy_loss, st, dlogp, vloss, dvalues = _losses(
        x, advantages, returns, p, policy_mask=m, value_mask=m, policy_agg=agg, value_agg=agg,
        epsilon_high=p["epsilon_high"], dual_clip=p["dual_clip"],
        log_ratio_clamp=p["log_ratio_clamp"])
    stats = {
        "actor/pg_loss": policy_loss,
        "actor/pg_clipfrac": st["clipfrac_active"],
        "actor/ppo_kl": st["approx_kl_k1"],
        "actor/pg_clipfrac_lower": st["dual_clipfrac"],
        "critic/vf_loss": vloss,
        "critic/vf_clipfrac": _value_clipfrac(x, returns, m, p["value_clip"]),
        "critic/vpred_mean": masked_mean(x.values, m),
        "critic/score/mean": _mean_rows(x.scores),
        "critic/rewards/mean": aggregate(rewards, m, "seq-mean-token-sum"),
        "critic/advantages/mean": masked_mean(advantages, m),
        "critic/returns/mean": masked_mean(returns, m),
        "critic/values/mean": masked_mean(x.old_values, m),
        "critic/vf_explained_var": 1.0 - _masked_var(returns - x.old_values, m, 1)
        / (_masked_var(returns, m, 1) + 1e-5),
    }
    if p["use_kl_in_reward"]:
        stats["actor/reward_kl_penalty"] = aggregate(kl, m, "seq-mean-token-mean")
        stats["actor/reward_kl_penalty_coeff"] = p["beta"]
    return _result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


# ---------------------------------------------------------------------------------------
# OpenRLHF

# why: OpenRLHF openrlhf/models/utils.py (0.11.2) compute_approx_kl clamps every
# estimator to [-10, 10]
_OPENRLHF_KL_CLAMP = 10.0


def _openrlhf(x: _Inputs, p: dict) -> dict:
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
    * Value loss (``ValueLoss``): 1/2 max(...), ``value_clip`` 0.5, token mean.
    * Statistics: ``policy_loss``, ``ppo_clip_ratio``, ``ppo_kl`` (token mean of
      logp_old - logp, unclamped), ``critic_loss``, ``values`` (token mean of the
      new values), ``kl`` (mean over responses of the token-mean KL; the KL
      controller's input), ``reward`` (mean raw score).
    """
    name = "openrlhf"
    m = x.mask
    est = p["kl_estimator"]
    _check_estimator(name, est, ("k1", "k2", "k3"))
    kl = kl_estimate(x.logp_old, x.logp_ref, est, m, clamp=_OPENRLHF_KL_CLAMP)
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m, est,
                                kl_clamp=_OPENRLHF_KL_CLAMP, score_clip=p["reward_clip_range"])
    raw_advantages, returns = gae(rewards, where_valid(m, x.old_values), p["gamma"],
                                  p["lam"])
    returns = where_valid(m, returns)
    if int(m.sum()) == 1:
        # why: OpenRLHF 0.11.2 experience_maker.py compute_advantages_and_returns: with one
        # token, A - mean = 0 and var = 0 is floored at 1e-8, so the advantage is 0 (whiten
        # itself refuses fewer than two tokens)
        advantages = np.zeros_like(raw_advantages)
    else:
        advantages = whiten(raw_advantages, m, ddof=0, eps=1e-8, eps_mode="floor")
    agg = p["loss_agg_mode"]
    if agg not in ("token-mean", "seq-mean-token-mean"):
        raise ValueError(f"{name}: loss_agg_mode must be 'token-mean' or "
                         f"'seq-mean-token-mean', got {agg!r}")
    policy_loss, st, dlogp, vloss, dvalues = _losses(
        x, advantages, returns, p, policy_mask=m, value_mask=m, policy_agg=agg,
        epsilon_high=p["epsilon_high"], dual_clip=p["dual_clip"],
        log_ratio_clamp=p["log_ratio_clamp"])
    stats = {
        "policy_loss": policy_loss,
        "ppo_clip_ratio": st["clipfrac_active"],
        "ppo_kl": masked_mean(kl_estimate(x.logp_old, x.logp, "k1", m), m),
        "critic_loss": vloss,
        "values": masked_mean(x.values, m),
        "kl": aggregate(kl, m, "seq-mean-token-mean"),
        "reward": _mean_rows(x.scores),
    }
    return _result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


# ---------------------------------------------------------------------------------------
# DeepSpeed-Chat


def _deepspeed_chat(x: _Inputs, p: dict) -> dict:
    """DeepSpeed-Chat's ``DeepSpeedPPOTrainer`` (microsoft/DeepSpeedExamples @ 3b458596,
    applications/DeepSpeed-Chat/dschat/rlhf/ppo_trainer.py).

    * Mask: a prefix of ones (``attention_mask[:, 1:]`` of a right-padded generation).
    * Rewards (``compute_rewards``): -0.1 (logp_old - logp_ref) on every column; the
      score, clipped to [-5, 5], one slot after the last token (the last column for
      a full row), and the KL of that slot (the first pad token) is kept:
      ``kl_shaped_rewards(..., mask=mask_p1, score_clip=5)``.
    * GAE (``train_rlhf``, ``get_advantages_and_returns``): rewards and rollout values
      zeroed after the slot after, so the value there is kept: ``gae(..., mask=mask_p1)``.
    * No advantage whitening.
    * Policy loss (``actor_loss_fn``): token mean over the response tokens (not the
      slot after), no log-ratio clamp, eps 0.2.
    * Value loss (``critic_loss_fn``): 1/2 max(...), clip 0.2 around the rollout
      values, token mean over the response tokens.
    * Statistics: the TensorBoard scalars of training/step3_rlhf_finetuning/main.py
      @ 2d1f3b38 (the version that imports dschat): ``actor_loss``, ``critic_loss``,
      ``reward`` (mean raw score, before the clip).
    """
    name = "deepspeed-chat"
    m = x.mask
    _require_prefix(name, m, "DeepSpeed-Chat counts response tokens to find the end")
    m_p1 = _slot_after(m)
    _require_finite(name, {"logp_old": x.logp_old, "logp_ref": x.logp_ref,
                           "old_values": x.old_values}, m_p1 & ~m,
                    "DeepSpeed-Chat reads at the slot after the last token")
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m_p1, "k1",
                                score_clip=p["score_clip"])
    raw_advantages, returns_p1 = gae(rewards, x.old_values, p["gamma"], p["lam"], m_p1)
    advantages = where_valid(m, raw_advantages)
    returns = where_valid(m, returns_p1)
    policy_loss, st, dlogp, vloss, dvalues = _losses(
        x, advantages, returns, p, policy_mask=m, value_mask=m)
    stats = {
        "actor_loss": policy_loss,
        "critic_loss": vloss,
        "reward": _mean_rows(x.scores),
    }
    return _result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


# ---------------------------------------------------------------------------------------
# lm-human-preferences


def _lm_human_preferences(x: _Inputs, p: dict) -> dict:
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
      rollout values; no log-ratio clamp, no dual clip.
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
    kl = kl_estimate(x.logp_old, x.logp_ref, "k1")
    rewards = kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"])
    if p["whiten_rewards"]:
        rewards = whiten(rewards, shift_mean=False, ddof=0)
    raw_advantages, returns = gae(rewards, x.old_values, p["gamma"], p["lam"])
    advantages = whiten(raw_advantages, ddof=0)
    m = x.mask
    policy_loss, st, dlogp, vloss, dvalues = _losses(
        x, advantages, returns, p, policy_mask=m, value_mask=m)
    stats = _lmhp_stats(x, returns, m, p, st, policy_loss, vloss, kl, ddof=0)
    stats["objective/score"] = _mean_rows(x.scores)
    stats["objective/score_total"] = _mean_rows(x.scores) - p["beta"] * stats["objective/kl"]
    return _result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)


# ---------------------------------------------------------------------------------------
# The registry

_DSCHAT = "microsoft/DeepSpeedExamples"
_DSCHAT_DIR = "applications/DeepSpeed-Chat"

PRESETS = {
    "seed": Preset(
        name="seed",
        description="The objective's own convention: k1 KL from the rollout policy, score at the "
                    "last token, V(s_{T+1}) = 0, no whitening, L_PPO summed over tokens.",
        defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.05, "epsilon": 0.2,
                  "value_clip": None, "kl_estimator": "k1", "whiten_advantages": False,
                  "policy_agg": "seq-mean-token-sum", "value_agg": "token-mean"},
        sources=("the objective of docs/objective.md (\"PPO Objective for Language Models\")",),
        pipeline=_seed,
    ),
    "trl": Preset(
        name="trl",
        description="TRL's current PPOTrainer (trl 0.20.0, trl/trainer/ppo_trainer.py): score "
                    "one slot after the last token, value of that slot kept, token means.",
        defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.05, "epsilon": 0.2, "value_clip": 0.2,
                  "kl_estimator": "k1", "whiten_rewards": False, "vf_coef": 0.1},
        sources=(
            "huggingface/trl: trl/trainer/ppo_trainer.py (PPOTrainer.train), v0.20.0",
            "huggingface/trl: trl/trainer/ppo_config.py (PPOConfig), v0.20.0",
            "huggingface/trl: trl/core.py (masked_mean, masked_var, masked_whiten), v0.20.0",
            "huggingface/trl: trl/trainer/utils.py (first_true_indices, truncate_response), "
            "v0.20.0",
        ),
        pipeline=_trl,
    ),
    "trl-0.11": Preset(
        name="trl-0.11",
        description="TRL's legacy step() PPOTrainer (trl 0.11.4): score at the last token, "
                    "GAE over every column with padding zeroed, ratio threshold 10.",
        defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.2, "epsilon": 0.2, "value_clip": 0.2,
                  "kl_estimator": "k1", "score_clip": None, "whiten_rewards": False,
                  "ratio_threshold": 10.0, "vf_coef": 0.1},
        sources=(
            "huggingface/trl: trl/trainer/ppo_trainer.py (PPOTrainer.step, compute_rewards, "
            "_kl_penalty, compute_advantages, loss, record_step_stats), v0.11.4",
            "huggingface/trl: trl/trainer/ppo_config.py (PPOConfig), v0.11.4",
            "huggingface/trl: trl/core.py (masked_mean, masked_var, masked_whiten), v0.11.4",
            "huggingface/trl: trl/trainer/utils.py (AdaptiveKLController), v0.11.4",
        ),
        pipeline=_trl_011,
    ),
    "verl": Preset(
        name="verl",
        description="verl's PPO with GAE (verl 0.9.1): KL in the reward off by default, "
                    "holes skipped, log-ratio clamp 20, dual clip 3, value clip 0.5.",
        defaults={"gamma": 1.0, "lam": 1.0, "beta": 0.001, "use_kl_in_reward": False,
                  "kl_estimator": "k1", "epsilon": 0.2, "epsilon_high": 0.2,
                  "dual_clip": 3.0, "log_ratio_clamp": 20.0, "value_clip": 0.5,
                  "loss_agg_mode": "token-mean"},
        sources=(
            "volcengine/verl: verl/trainer/ppo/core_algos.py (compute_gae_advantage_return, "
            "kl_penalty_forward, compute_policy_loss_vanilla, agg_loss, compute_value_loss), "
            "0.9.1",
            "volcengine/verl: verl/utils/torch_functional.py (masked_mean, masked_var, "
            "masked_whiten), 0.9.1",
            "volcengine/verl: verl/trainer/ppo/ray_trainer.py (apply_kl_penalty), 0.9.1",
            "volcengine/verl: verl/workers/reward_manager/naive.py (NaiveRewardManager), 0.9.1",
            "volcengine/verl: verl/workers/utils/losses.py (ppo_loss, value_loss), 0.9.1",
            "volcengine/verl: verl/trainer/ppo/metric_utils.py (compute_data_metrics), 0.9.1",
            "volcengine/verl: verl/trainer/config/_generated_ppo_trainer.yaml, 0.9.1",
        ),
        pipeline=_verl,
    ),
    "openrlhf": Preset(
        name="openrlhf",
        description="OpenRLHF's PPO with GAE (openrlhf 0.11.2): KL clamped to 10, score "
                    "clipped to 10, ddof-0 advantage normalisation, log-ratio clamp 20.",
        defaults={"gamma": 1.0, "lam": 1.0, "beta": 0.01, "kl_estimator": "k1",
                  "reward_clip_range": (-10.0, 10.0), "epsilon": 0.2, "epsilon_high": None,
                  "dual_clip": None, "log_ratio_clamp": 20.0, "value_clip": 0.5,
                  "loss_agg_mode": "token-mean"},
        sources=(
            "OpenRLHF/OpenRLHF: openrlhf/models/utils.py (compute_approx_kl, compute_reward), "
            "0.11.2",
            "OpenRLHF/OpenRLHF: openrlhf/models/loss.py (aggregate_loss, PolicyLoss, "
            "ValueLoss), 0.11.2",
            "OpenRLHF/OpenRLHF: openrlhf/trainer/ppo_utils/experience_maker.py "
            "(compute_advantages_and_returns, get_advantages_and_returns), 0.11.2",
            "OpenRLHF/OpenRLHF: openrlhf/trainer/ray/ppo_actor.py, ppo_critic.py (logged "
            "names), 0.11.2",
            "OpenRLHF/OpenRLHF: openrlhf/cli/train_ppo_ray.py (defaults), 0.11.2",
        ),
        pipeline=_openrlhf,
    ),
    "deepspeed-chat": Preset(
        name="deepspeed-chat",
        description="DeepSpeed-Chat's DeepSpeedPPOTrainer (dschat): score clipped to 5 one "
                    "slot after the last token, no whitening, beta 0.1.",
        defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.1, "score_clip": 5.0, "epsilon": 0.2,
                  "value_clip": 0.2},
        sources=(
            f"{_DSCHAT}: {_DSCHAT_DIR}/dschat/rlhf/ppo_trainer.py (DeepSpeedPPOTrainer."
            "compute_rewards, train_rlhf, actor_loss_fn, critic_loss_fn, "
            "get_advantages_and_returns) @ 3b458596",
            f"{_DSCHAT}: {_DSCHAT_DIR}/training/step3_rlhf_finetuning/main.py (main: "
            "TensorBoard scalars) @ 2d1f3b38",
        ),
        pipeline=_deepspeed_chat,
    ),
    "lm-human-preferences": Preset(
        name="lm-human-preferences",
        description="OpenAI's lm-human-preferences PPOTrainer: no mask, score at the last "
                    "column, rewards and advantages whitened with ddof 0.",
        defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.2, "epsilon": 0.2, "value_clip": 0.2,
                  "whiten_rewards": True, "vf_coef": 0.1},
        sources=(
            "openai/lm-human-preferences: lm_human_preferences/train_policy.py (PPOTrainer."
            "compute_rewards, loss, record_step_stats; PpoHParams, RewardHParams) @ 1ab856db",
            "openai/lm-human-preferences: lm_human_preferences/utils/core.py (whiten) "
            "@ f774e89b",
        ),
        pipeline=_lm_human_preferences,
    ),
}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; ValueError listing the valid names otherwise.

    >>> get_preset("verl").defaults["dual_clip"]
    3.0
    """
    if name not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; valid ones are {', '.join(PRESETS)}")
    return PRESETS[name]
