"""The third policy's conventions that no framework names as an option: what a preset
computes under the value the framework does *not* take, so that the diagnosis
(:mod:`ppo_numpy.oracle.diagnose`) can name a candidate that takes it.

Each preset lists its framework's value in its ``conventions``; the sentences the diagnosis
prints are in :mod:`ppo_numpy.oracle.switches`; ``docs/oracle.md`` has the table.

======================  ==============================  ====================================
convention              the frameworks' value           the other value
======================  ==============================  ====================================
``is_sequence_weight``  ``"product"``: exp(sum_t log     ``"geometric-mean"``: exp(mean_t
                        w_t) (TRL, verl);                log w_t) (and the reverse for
                        OpenRLHF's sequence gate reads   OpenRLHF's gate)
                        ``"geometric-mean"``
``rejection``           ``"mask"``: verl's rejected      ``"weight"`` (TRL's off-policy mask
                        tokens leave the response mask   multiplies the loss by 0 and keeps
                                                         the tokens in its denominators)
``masked_weights``      ``"zero"``: a weight masked      ``"drop"``: the token leaves the
                        outside its band is 0, its       loss's mask (the denominators
                        token stays (all three)          shrink)
``is_weights_on_kl``    False: the weight multiplies     True: the KL term too
                        the policy term only (all three)
``is_weights_detach``   True: no gradient through the    False: differentiated (where the
                        weight (all three)               weight reads the current log-probs:
                                                         verl's bypass mode with reinforce)
``gmpo_weight_mean``    ``"geometric"``: GMPO weighs a   ``"arithmetic"``: their mean
                        response by exp(mean_t log(w_t
                        + 1e-10)) (verl)
======================  ==============================  ====================================

(TRL's ``off_policy_mask_logps`` is read in ``_trl.trl_off_policy_mask``.)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...mismatch.correction import rollout_importance_weights
from ...policy_loss.kernel import policy_loss_kernel
from ...ppo.aggregation import aggregate_kernel

SEQUENCE_WEIGHTS = ("product", "geometric-mean")
REJECTIONS = ("mask", "weight")
MASKED_WEIGHTS = ("zero", "drop")
GMPO_WEIGHT_MEANS = ("geometric", "arithmetic")

#: the conventions of the verl presets (verl 0.9.1: rollout_corr_helper.py
#: compute_rollout_correction_weights, compute_rollout_rejection_mask;
#: ray_trainer.py compute_rollout_correction_and_add_to_batch; core_algos.py
#: compute_policy_loss_geo_mean, compute_policy_loss_bypass_mode)
VERL = {"is_sequence_weight": "product", "rejection": "mask", "masked_weights": "zero",
        "is_weights_on_kl": False, "is_weights_detach": True,
        "gmpo_weight_mean": "geometric"}
#: OpenRLHF 0.11.2 (openrlhf/models/loss.py PolicyLoss: the sequence gate reads the
#: geometric mean, a gated token's coefficient is 0, the KL loss is apart)
OPENRLHF = {"is_sequence_weight": "geometric-mean", "masked_weights": "zero",
            "is_weights_on_kl": False, "is_log_ratio_bound": None}
#: TRL 1.16.0 (trl/trainer/grpo_trainer.py _generate_and_score_completions, _compute_loss:
#: the off-policy mask multiplies the per-token loss, the KL term is added after the weight)
TRL = {"is_sequence_weight": "product", "rejection": "weight", "masked_weights": "zero",
       "is_weights_on_kl": False, "off_policy_mask_logps": "sampling-current"}


def check(name: str, p: dict, key: str, allowed) -> str:
    """``p[key]`` if it is one of ``allowed``, else a ValueError naming the preset and key."""
    value = p[key]
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name}: {key}: expected one of {', '.join(map(repr, allowed))}, "
                         f"got {value!r}")
    return value


def sequence_weights(name, logp_old, logp_rollout, m, p, **bounds):
    """``rollout_importance_weights(level="sequence", ...)`` under ``is_sequence_weight``:
    the product of the token ratios, or (``"geometric-mean"``) their geometric mean
    exp((1/n_i) sum_t log w_t), bounded as the product is (``bounds``: mode, clip_min,
    clip_max, batch_normalize, log_ratio_bound)."""
    how = check(name, p, "is_sequence_weight", SEQUENCE_WEIGHTS)
    if how == "geometric-mean":
        # exp(mean_t log w_t) = exp(sum_t (log w_t / n_i)): the sequence level of the
        # token log-ratios divided by the response's length
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        logp_old = np.where(m, (logp_old - logp_rollout) / n, 0.0)
        logp_rollout = np.zeros_like(logp_old)
    return rollout_importance_weights(logp_old, logp_rollout, m, level="sequence", **bounds)


def gate_by_product(logp_old, logp_rollout, m, low, high, log_ratio_bound=None):
    """OpenRLHF's sequence gate reading the product of the token ratios exp(sum_t log w_t)
    instead of their geometric mean: a response inside [low, high] keeps its token ratios
    (unclamped), one outside gets 0 (B, T)."""
    keep = rollout_importance_weights(logp_old, logp_rollout, m, level="sequence", mode="mask",
                                      clip_min=low, clip_max=high,
                                      log_ratio_bound=log_ratio_bound) > 0
    log_w = np.where(m, logp_old - logp_rollout, 0.0)
    if log_ratio_bound is not None:
        log_w = np.clip(log_w, -log_ratio_bound, log_ratio_bound)
    return np.where(keep & m, np.exp(log_w), 0.0)


def loss_mask(name, p, m, w, *, allow_empty=False):
    """The mask the loss aggregates over under ``masked_weights``: ``m`` (``"zero"``), or
    ``m`` without the tokens whose weight ``w`` is 0 (``"drop"``; ``w`` None: ``m``). A mask
    left without a token is a ValueError unless ``allow_empty``."""
    if check(name, p, "masked_weights", MASKED_WEIGHTS) == "zero" or w is None:
        return m
    kept = m & (w != 0)
    if not np.any(kept) and not allow_empty:
        raise ValueError(f"{name}: masked_weights='drop' drops every token of the batch")
    return kept


def on_loss_mask(xm, A, m, lm, w) -> tuple:
    """The loss's inputs on its mask ``lm`` (:func:`loss_mask`'s; ``xm`` the rollout on the
    response mask ``m``): ``(xm on lm, A 0 off lm, w 0 off lm or None)``."""
    xl = xm if lm is m else xm.on(lm)
    return xl, np.where(lm, A, 0.0), None if w is None else np.where(lm, w, 0.0)


def kl_weights_on(name, p) -> bool:
    """``is_weights_on_kl`` (False for a preset without a rollout correction)."""
    value = p.get("is_weights_on_kl", False)
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: is_weights_on_kl: expected True or False, got {value!r}")
    return bool(value)


def policy_loss(name, p, logp, logp_old, A, m, opts, logp_ref=None, *, is_weights=None,
                kl_logp_old=None):
    """``policy_loss_kernel`` with the rollout weights on the policy term, and on the KL term
    too under ``is_weights_on_kl=True``: loss = -agg(w term) + beta agg(w KL_t),
    d/dlogp of the KL part w_t times the unweighted one's at token t (exact when the KL
    term is token-local, or its weights are one per response: a weight constant along the
    response scales the response's KL terms and so their gradient). ``kl_logp_old``: as
    ``policy_loss_kernel``'s (the KL weight's pi_old where it is not ``logp_old``)."""
    pl, st, dlogp = policy_loss_kernel(logp, logp_old, A, m, opts, logp_ref,
                                       is_weights=is_weights, kl_logp_old=kl_logp_old)
    if not kl_weights_on(name, p) or is_weights is None or opts.kl_coef == 0:
        return pl, st, dlogp
    level = opts.kl_ratio_level or opts.importance_level
    varying = np.any(np.where(m, is_weights, 0.0) != np.where(
        m, np.max(np.where(m, is_weights, -np.inf), axis=-1, keepdims=True), 0.0))
    # (the forms "straight_through" and "importance" are token-local at either level)
    if opts.kl_gradient == "ratio" and level == "sequence" and varying:
        raise ValueError(f"{name}: is_weights_on_kl=True with token-varying weights and the "
                         f"sequence ratio's KL correction is not modelled")
    # the KL term's share of dlogp: the call without it subtracted
    _, _, d_policy = policy_loss_kernel(logp, logp_old, A, m, replace(opts, kl_coef=0.0),
                                        logp_ref, is_weights=is_weights,
                                        kl_logp_old=kl_logp_old)
    mode, norm = ((opts.agg, opts.norm) if opts.kl_agg in (None, opts.agg)
                  else (opts.kl_agg, None))
    kl_loss = float(aggregate_kernel(np.where(m, is_weights * pl.kl, 0.0), m, mode, norm))
    dlogp = d_policy + is_weights * (dlogp - d_policy)
    pl = replace(pl, kl_loss=kl_loss, loss=pl.policy_loss + opts.kl_coef * kl_loss)
    return pl, st, np.where(m, dlogp, 0.0)


def gmpo_row_weights(name, p, w, m):
    """The weights to pass to verl's GMPO loss (which weighs a response by the geometric mean
    of w_t + 1e-10) under ``gmpo_weight_mean``: ``w`` itself (``"geometric"``), or their
    arithmetic mean c_i as the row's constant c_i - 1e-10 (``"arithmetic"``: exp(mean_t
    log(c_i - 1e-10 + 1e-10)) is c_i)."""
    if w is None or check(name, p, "gmpo_weight_mean", GMPO_WEIGHT_MEANS) == "geometric":
        return w
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    c = np.where(m, w, 0.0).sum(axis=-1, keepdims=True) / n
    return np.where(m, c - 1e-10, 0.0)


def row_mean(w, m):
    """Each response's mean weight at its tokens (None for None): GSPO's gradient with the
    sequence ratio s_i differentiated (``sequence_gradient="sequence"``, TRL's (B, 1) loss
    times its weights) is the per-token form's with these weights, and its loss the same
    (every aggregation weighs a response's tokens equally)."""
    if w is None:
        return None
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    return np.where(m, np.where(m, w, 0.0).sum(axis=-1, keepdims=True) / n, 0.0)


def weight_detached(name, p) -> bool:
    value = p["is_weights_detach"]
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}: is_weights_detach: expected True or False, got {value!r}")
    return bool(value)


def reinforce_weight_gradient(name, p, logp, logp_rollout, A, m, keep, w, agg_weights):
    """d/dlogp of agg(-A w logp) through the weight w itself (``is_weights_detach=False``:
    the weight of verl's bypass mode, which reads the current log-probs, differentiated):
    token level, w_t = exp(log w_t) where it is neither truncated, masked nor clamped, so
    dw_t / dlogp_t = w_t there; sequence level (the product over the response mask ``m``),
    dw_i / dlogp_u = w_i at every token u of the response. ``keep``: the tokens the loss
    aggregates (after rejection). 0 for a detached weight."""
    if weight_detached(name, p) or w is None:
        return 0.0
    if p["rollout_is_batch_normalize"] or p["is_sequence_weight"] != "product":
        raise ValueError(f"{name}: is_weights_detach=False is modelled for unnormalised token "
                         f"and product sequence weights only")
    log_w = np.where(m, logp - logp_rollout, 0.0)
    bound = p["is_log_ratio_bound"]
    # where the weight is exp of the (summed) log-ratio itself: not truncated or masked
    # (a weight equal to its unbounded ratio) and inside the log-ratio's bound
    if p["rollout_is"] == "sequence":
        log_w = log_w.sum(axis=-1, keepdims=True)
    inside = np.ones_like(log_w, dtype=bool) if bound is None else np.abs(log_w) <= bound
    raw = np.exp(np.clip(log_w, -np.inf if bound is None else -bound,
                         np.inf if bound is None else bound))
    first = np.argmax(m, axis=-1)
    w_unit = w if p["rollout_is"] == "token" else w[np.arange(w.shape[0]), first][:, None]
    dw = np.where(inside & (w_unit == raw), w_unit, 0.0)
    # the loss's terms whose weight moves: agg_t (-A_t logp_t)
    term = np.where(keep, -agg_weights * A * logp, 0.0)
    if p["rollout_is"] == "sequence":
        return np.where(keep, term.sum(axis=-1, keepdims=True) * dw, 0.0)
    return np.where(keep, term * dw, 0.0)

