"""TRL's helpers for its presets (``trl``, ``trl-0.11``, ``trl-grpo``): the rollout
correction of TRL 1.16.0 (``GRPOConfig``'s ``vllm_importance_sampling_*``,
``off_policy_mask_threshold``)."""

from __future__ import annotations

import numpy as np

from ..._checks import check_choice, check_scalar, where_valid
from ...batch import Rollout
from ...mismatch.correction import (
    rollout_importance_weights,
)
from . import _third_policy as third_policy
from ._common import _flag, _optional_bound, need_rollout

# -- TRL 1.16.0 (GRPOConfig: vllm_importance_sampling_*, off_policy_mask_threshold)

TRL_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
#: the off-policy mask's log-ratio: the sampler's - the current (TRL), logp_old - the current,
#: the sampler's - logp_old
OFF_POLICY_MASK_LOGPS = ("sampling-current", "old-current", "sampling-old")


def trl_uses_vllm(name: str, x: Rollout, p: dict) -> bool:
    """``use_vllm``: None means "the case carries logp_rollout" (vLLM gave the log-probs)."""
    if p["use_vllm"] is None:
        return x.logp_rollout is not None
    if _flag(p, "use_vllm", name):
        need_rollout(name, x, "use_vllm=True")
    return bool(p["use_vllm"])


def trl_check_is_options(name: str, p: dict) -> None:
    """GRPOConfig's own checks of the vLLM correction's options, made whatever the case
    (trl 1.16.0 grpo_config.py ``__post_init__`` refuses the configuration itself, vLLM or
    not): clip_min < clip_max, and a ``*_truncate`` mode with a bound."""
    if not _flag(p, "vllm_importance_sampling_correction", name):
        lo = _optional_bound(p, "vllm_importance_sampling_clip_min", name, positive=False)
        hi = _optional_bound(p, "vllm_importance_sampling_clip_max", name, positive=True)
    else:
        lo = _optional_bound(p, "vllm_importance_sampling_clip_min", name, positive=False)
        hi = _optional_bound(p, "vllm_importance_sampling_clip_max", name, positive=True)
        mode = check_choice(p["vllm_importance_sampling_mode"],
                            f"{name}: vllm_importance_sampling_mode", TRL_IS_MODES, "mode")
        if mode.endswith("truncate") and lo is None and hi is None:
            raise ValueError(f"{name}: vllm_importance_sampling_mode={mode!r} needs "
                             f"vllm_importance_sampling_clip_min or _clip_max (TRL 1.16.0's "
                             f"GRPOConfig refuses two None bounds)")
    if lo is not None and hi is not None and lo >= hi:
        raise ValueError(f"{name}: vllm_importance_sampling_clip_min must be < "
                         f"vllm_importance_sampling_clip_max, got {lo} >= {hi} (TRL 1.16.0's "
                         f"GRPOConfig refuses it)")


def trl_is_weights(name: str, x: Rollout, m, p: dict):
    """TRL's vLLM importance-sampling ratio (B, T), or None when it is off.

    exp(logp_old - logp_rollout) per token, or exp of its sum over the response for the
    ``sequence_*`` modes, no bound on the log-ratio (the convention ``is_log_ratio_bound``:
    None); ``*_truncate`` clamps it to [clip_min, clip_max], ``*_mask`` sets it to 0
    outside (a bound None: none on that side). trl 1.16.0 grpo_trainer.py
    ``_generate_and_score_completions``."""
    if not (trl_uses_vllm(name, x, p) and _flag(p, "vllm_importance_sampling_correction",
                                                  name)):
        return None
    mode = check_choice(p["vllm_importance_sampling_mode"],
                        f"{name}: vllm_importance_sampling_mode", TRL_IS_MODES, "mode")
    lo = _optional_bound(p, "vllm_importance_sampling_clip_min", name, positive=False)
    hi = _optional_bound(p, "vllm_importance_sampling_clip_max", name, positive=True)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{name}: vllm_importance_sampling_clip_min must be <= "
                         f"vllm_importance_sampling_clip_max, got {lo} > {hi}")
    level, how = mode.split("_")
    if how == "truncate" and lo is None and hi is None:
        raise ValueError(f"{name}: vllm_importance_sampling_mode={mode!r} needs "
                         f"vllm_importance_sampling_clip_min or _clip_max (TRL 1.16.0's "
                         f"torch.clamp refuses two None bounds)")
    bounds = dict(mode=how, clip_max=hi, clip_min=lo, log_ratio_bound=p["is_log_ratio_bound"])
    if level == "sequence":
        # (the convention is_sequence_weight: TRL's product, or the geometric mean)
        return third_policy.sequence_weights(name, x.logp_old, x.logp_rollout, m, p, **bounds)
    return rollout_importance_weights(x.logp_old, x.logp_rollout, m, level=level, **bounds)


def trl_off_policy_mask(name: str, x: Rollout, m, A, p: dict, use_vllm: bool):
    """TRL's off-policy sequence mask (DeepSeek-V3.2), (B, 1) of 0/1, or None when off: keep a
    response with A >= 0 or with mean_t (logp_sampling_t - logp_t) <= threshold, the sampling
    log-probs being logp_rollout under vLLM and logp_old otherwise, logp the *current* ones
    (trl 1.16.0 grpo_trainer.py ``get_off_policy_mask``; the convention
    ``off_policy_mask_logps`` "sampling-current"; "old-current" reads logp_old - logp even
    under vLLM, "sampling-old" the sampling log-probs - logp_old)."""
    if p["off_policy_mask_threshold"] is None:
        return None
    delta = check_scalar(p["off_policy_mask_threshold"], f"{name}: off_policy_mask_threshold",
                         low=0, allow_exact=False)
    which = check_choice(p["off_policy_mask_logps"], f"{name}: off_policy_mask_logps",
                         OFF_POLICY_MASK_LOGPS, "log-probs")
    sampling = x.logp_rollout if use_vllm and which != "old-current" else x.logp_old
    current = x.logp_old if which == "sampling-old" else x.logp
    kl = where_valid(m, sampling) - where_valid(m, current)  # (0 at padding)
    mean_kl = kl.sum(axis=-1, keepdims=True) / np.maximum(m.sum(axis=-1, keepdims=True), 1)
    # A: one advantage per response, at its first token
    a = A[np.arange(A.shape[0]), np.argmax(m, axis=-1)][:, None]
    return ((a >= 0) | (mean_kl <= delta)).astype(np.float64)
