"""verl's helpers for its presets (``verl``, ``verl-grpo``): the rollout correction of
verl 0.9.1 (``algorithm.rollout_correction``: importance weights, rejection, bypass mode),
the trainer's aggregation (``verl_trainer_agg``) and the stages both presets' pipelines
share (the score's column, the KL loss's options, the actor's metrics)."""

from __future__ import annotations

import math
from dataclasses import replace
from numbers import Real
from types import SimpleNamespace

import numpy as np

from ..._checks import check_choice
from ...batch import Rollout
from ...mismatch.correction import (
    CRITERIA,
    rollout_importance_weights,
    rollout_rejection_mask,
)
from ...policy_loss.kernel import kl_loss_and_grad, policy_loss_kernel
from ...ppo.aggregation import aggregate_kernel, aggregation_weights
from . import _third_policy as third_policy
from ._common import _flag, kl_form, mean_over, need_rollout, require_choice
from ._step import verl_metric

# -- verl 0.9.1: the KL estimators by name (kl_penalty, kl_loss_type)

#: verl 0.9.1 ``core_algos.kl_penalty_forward``'s names -> (estimator, clamp of the estimate):
#: only the low-variance k3 is clamped, to [-10, 10]
VERL_KL_TYPES = {"kl": ("k1", None), "k1": ("k1", None), "abs": ("abs", None),
                 "mse": ("k2", None), "k2": ("k2", None), "low_var_kl": ("k3", 10.0),
                 "k3": ("k3", 10.0)}
#: every name verl 0.9.1 takes: each of :data:`VERL_KL_TYPES`, and each with the suffix "+"
VERL_KL_NAMES = (*VERL_KL_TYPES, *(f"{k}+" for k in VERL_KL_TYPES))


def verl_kl_type(name: str, p: dict, key: str) -> tuple:
    """``(estimator, clamp, gradient form)`` of the verl name ``p[key]`` (``kl_loss_type``,
    ``kl_penalty``): verl 0.9.1 ``verl/trainer/ppo/core_algos.py`` ``kl_penalty`` (lines
    2188-2213) strips a "+" suffix, computes the named estimate (``kl_penalty_forward``,
    lines 2216-2251) and, for a name ending in "+", returns
    ``k2 - sg(k2) + sg(k)``: the estimate's value with k2's gradient, d = logp - logp_ref,
    unclamped (``kl_gradient="straight_through"``; for ``"k2+"`` and ``"mse+"`` that is k2's
    own). Without the suffix the estimate is differentiated as it is (``"plain"``).

    The log-ratio clamp to [-20, 20] inside verl's k3 (line 2242; the estimate's clamp to
    [-10, 10] is line 2245) changes neither value nor gradient:
    at |d| = 20, k3 >= e^-20 + 19 > 10, so the clamp of the estimate to 10 (gradient 0) has
    already cut every token it would touch (``tests/test_kl_gradient_presets.py``).

    >>> verl_kl_type("verl", {"kl_loss_type": "k3+"}, "kl_loss_type")
    ('k3', 10.0, 'straight_through')
    """
    require_choice(name, p, key, VERL_KL_NAMES)
    value = p[key]
    estimator, clamp = VERL_KL_TYPES[value.removesuffix("+")]
    return estimator, clamp, "straight_through" if value.endswith("+") else "plain"


def verl_kl_loss_options(name: str, p: dict, coef, agg: str) -> dict:
    """The KL loss's options, {} without ``use_kl_loss``: ``coef`` (``kl_loss_coef``) times the
    ``kl_loss_type`` estimate of (logp, logp_ref), aggregated by ``loss_agg_mode`` (``agg``):
    verl 0.9.1 ``workers/utils/losses.py`` ``ppo_loss`` with ``core_algos.kl_penalty``."""
    # why: verl 0.9.1 core_algos.kl_penalty: a name ending in "+" keeps the estimate's
    # value and takes k2's gradient (k2 - sg(k2) + sg(k)), straight through (the form
    # checked whether or not the KL is in the loss)
    kl_est, kl_clamp, form = verl_kl_type(name, p, "kl_loss_type")
    form = kl_form(name, p, form)
    if not p["use_kl_loss"]:
        return {}
    return dict(kl_coef=coef, kl_estimator=kl_est, kl_clamp=kl_clamp, kl_agg=agg,
                kl_gradient=form)


# -- verl 0.9.1: the score's place, the actor's metrics


def verl_require_column_0(name: str, m, why: str) -> None:
    """ValueError unless every response starts at column 0 (``why``: the preset's reason):
    verl 0.9.1's reward manager puts the score at index (number of response tokens) - 1 of
    the response (``workers/reward_manager/naive.py``), its last token only then."""
    if not np.all(m[:, 0]):
        raise ValueError(f"{name}: mask row {int(np.argmin(m[:, 0]))} does not start at "
                         f"column 0; {why}")


def verl_loss_stats(mode: str, st: dict) -> dict:
    """The ``actor/`` metrics each loss_mode of verl 0.9.1 returns (core_algos.py: vanilla's
    ``pg_clipfrac``, ``ppo_kl``, ``pg_clipfrac_lower``; gpg none, kl_cov and dro only
    ``ppo_kl``, kl_cov's the mean |log rho|; sapo's clip fractions 0; the bypass mode's
    ``reinforce`` only ``ppo_kl``)."""
    if mode == "gpg":
        return {}
    if mode == "reinforce":
        # why: verl 0.9.1 compute_policy_loss_reinforce (bypass mode) logs actor/ppo_kl alone
        return {"actor/ppo_kl": st["approx_kl_k1"]}
    if mode in ("kl_cov", "dro"):
        return {"actor/ppo_kl": st["approx_kl_abs" if mode == "kl_cov" else "approx_kl_k1"]}
    clipfrac, lower = {"sapo": (0.0, 0.0),
                       "geo_mean": (st.get("clipfrac_high"), st.get("clipfrac_low")),
                       "clip_cov": (st.get("cov_selected_frac"), None),
                       "dppo_tv": (st.get("dppo_masked_frac"), st.get("dppo_truncated_frac")),
                       "dppo_kl": (st.get("dppo_masked_frac"), st.get("dppo_truncated_frac")),
                       }.get(mode) or (st["clipfrac_active"], st["dual_clipfrac"])
    out = {"actor/pg_clipfrac": clipfrac, "actor/ppo_kl": st["approx_kl_k1"]}
    if lower is not None:
        out["actor/pg_clipfrac_lower"] = lower
    return out


def verl_kl_loss_stats(use_kl_loss: bool, kl_loss, coef) -> dict:
    """The KL loss's metrics, {} without ``use_kl_loss``."""
    if not use_kl_loss:
        return {}
    # why: verl 0.9.1 ppo_loss logs the KL loss (before kl_loss_coef) and the coefficient,
    # "kl_loss" and "kl_coef", prefixed "actor/" by ray_trainer.py _update_actor
    return {"actor/kl_loss": kl_loss, "actor/kl_coef": coef}


# -- verl 0.9.1 (algorithm.rollout_correction)

VERL_IS_LEVELS = (None, "token", "sequence")
VERL_BYPASS_LOSSES = ("ppo_clip", "reinforce")


def _positive(text, what: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number or a 'lower_upper' string, got "
                         f"{text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what}: thresholds must be positive and finite, got {text!r}")
    return value


def verl_is_threshold(name: str, spec):
    """verl's ``rollout_is_threshold``: a number (upper bound, TIS: truncate) or a
    ``"lower_upper"`` string (IcePop: mask outside [lower, upper]) -> (mode, lower, upper)."""
    what = f"{name}: rollout_is_threshold"
    if isinstance(spec, (bool, np.bool_)) or not isinstance(spec, (str, Real)):
        raise TypeError(f"{what}: expected a number or a 'lower_upper' string, got {spec!r}")
    if isinstance(spec, str) and "_" in spec:
        lower, upper = (_positive(t, what) for t in spec.strip().split("_", 1))
        if lower > upper:
            raise ValueError(f"{what}: lower must be <= upper, got {spec!r}")
        return "mask", lower, upper
    return "truncate", None, _positive(spec, what)


def verl_rs_thresholds(name: str, criteria: list, spec) -> list:
    """verl's ``rollout_rs_threshold``: one entry (shared) or one per criterion, each a number
    or (k1 criteria) a ``"lower_upper"`` string -> [(low, high)]."""
    what = f"{name}: rollout_rs_threshold"
    if spec is None:
        raise ValueError(f"{what}: rollout_rs needs a threshold, got None")
    parts = ([str(spec)] if isinstance(spec, Real) and not isinstance(spec, bool)
             else [t.strip() for t in str(spec).split(",") if t.strip()])
    if len(parts) == 1:
        parts = parts * len(criteria)
    if len(parts) != len(criteria):
        raise ValueError(f"{what}: expected 1 or {len(criteria)} thresholds, got {spec!r}")
    out = []
    for criterion, part in zip(criteria, parts):
        if "_" in part:
            if not criterion.endswith("k1"):
                raise ValueError(f"{what}: {criterion} takes an upper bound only, got {part!r}")
            low, high = (_positive(t, what) for t in part.split("_", 1))
            if low > high:
                raise ValueError(f"{what}: lower must be <= upper, got {part!r}")
            out.append((low, high))
        else:
            high = _positive(part, what)
            out.append((1.0 / high if criterion.endswith("k1") else None, high))
    return out


def verl_rollout_correction(name: str, x: Rollout, m, p: dict, logp_old=None):
    """verl's ``compute_rollout_correction_and_rejection_mask`` on the preset's options:
    (IS weights (B, T) or None, the response mask after rejection).

    The log-ratio is ``logp_old - logp_rollout`` (``logp_old``: the bypass mode passes the
    current log-probs). IS (``rollout_is`` token / sequence): exp of the log-ratio (its sum
    for sequence) clamped to [-20, 20] (``is_log_ratio_bound``), truncated at the threshold or
    masked (a "lower_upper" threshold), then divided by the batch mean with
    ``rollout_is_batch_normalize``. Rejection (``rollout_rs``, comma-separated criteria, all
    must pass): :func:`ppo_numpy.rollout_rejection_mask`. Either needs logp_rollout."""
    old = x.logp_old if logp_old is None else logp_old
    level, rs = p["rollout_is"], p["rollout_rs"]
    if level not in VERL_IS_LEVELS:
        raise ValueError(f"{name}: rollout_is: expected None, 'token' or 'sequence', got "
                         f"{level!r}")
    batch_normalize = _flag(p, "rollout_is_batch_normalize", name)
    w = None
    if level is not None and p["rollout_is_threshold"] is not None:
        need_rollout(name, x, f"rollout_is={level!r}")
        mode, lower, upper = verl_is_threshold(name, p["rollout_is_threshold"])
        bounds = dict(mode=mode, clip_max=upper, clip_min=lower,
                      batch_normalize=batch_normalize, log_ratio_bound=p["is_log_ratio_bound"])
        if level == "sequence":
            # (the convention is_sequence_weight: verl's product, or the geometric mean)
            w = third_policy.sequence_weights(name, old, x.logp_rollout, m, p, **bounds)
        else:
            w = rollout_importance_weights(old, x.logp_rollout, m, level=level, **bounds)
        if not np.any(w[m] > 0):
            # why: verl 0.9.1 compute_is_metrics' effective sample size 1 / mean(w^2)
            # raises ZeroDivisionError when the mask mode drops every weight
            raise ValueError(f"{name}: rollout_is_threshold {p['rollout_is_threshold']!r} "
                             f"masks every weight of the batch (verl's metrics divide by 0)")
    keep = m
    if rs is not None:
        need_rollout(name, x, f"rollout_rs={rs!r}")
        if not isinstance(rs, str):
            raise TypeError(f"{name}: rollout_rs: expected a comma-separated string, got {rs!r}")
        criteria = list(dict.fromkeys(c.strip() for c in rs.split(",") if c.strip()))
        if not criteria:
            raise ValueError(f"{name}: rollout_rs: no criterion in {rs!r}")
        for c in criteria:
            check_choice(c, f"{name}: rollout_rs", CRITERIA, "criterion")
        for c, (low, high) in zip(criteria, verl_rs_thresholds(name, criteria,
                                                               p["rollout_rs_threshold"])):
            keep = keep & rollout_rejection_mask(old, x.logp_rollout, m, criterion=c,
                                                 low=low, high=high)
    return w, keep


def verl_bypass(name: str, x: Rollout, p: dict):
    """``bypass_mode``: (is it on, the loss type); the caller then uses logp_rollout as
    logp_old and computes the correction from the current log-probs inside the loss."""
    if not _flag(p, "bypass_mode", name):
        return False, None
    need_rollout(name, x, "bypass_mode=True")
    return True, check_choice(p["rollout_loss_type"], f"{name}: rollout_loss_type",
                              VERL_BYPASS_LOSSES, "loss type")


def verl_correction_before_advantages(name, x: Rollout, m, p: dict) -> dict:
    """verl 0.9.1's ``algorithm.rollout_correction`` before the advantages (decoupled mode,
    ``ray_trainer.py`` ``compute_rollout_correction_and_add_to_batch``, then
    ``compute_advantage``): {"mask": the response mask after rejection, "xm": the inputs on
    it (None: unchanged), "is_weights", "bypass", "stats"}.

    * Decoupled (``bypass_mode=False``, the default): the IS weights (``rollout_is``: None
      by default in verl's trainer YAML; the dataclass's default is "sequence") and the
      rejection (``rollout_rs``, default None) of logp_old against logp_rollout. The rejected
      tokens leave the response mask *before* the advantages: they get advantage 0, the
      estimators that read the mask (reinforce_plus_plus and its whitening) see holes, and
      the loss aggregates over the kept tokens only. verl skips the whole correction when
      the batch has no ``rollout_log_probs``; here an option switched on without
      ``logp_rollout`` is an error.
    * ``bypass_mode=True``: logp_old is replaced by logp_rollout (two policies), and the
      correction is computed inside the loss from the current log-probs (``verl_bypass_loss``).
    """
    bypass, _ = verl_bypass(name, x, p)
    out = {"mask": m, "xm": None, "is_weights": None, "bypass": bypass, "stats": {}}
    if bypass:
        out["xm"] = x.on(m).replace_trusted(logp_old=np.where(m, x.logp_rollout, 0.0))
        return out
    w, keep = verl_rollout_correction(name, x, m, p)
    out["is_weights"] = w
    if x.logp_rollout is not None:
        # verl's rollout_corr/kl: the token mean of logp_rollout - logp_old
        out["stats"]["rollout_corr/kl"] = mean_over(x.on(m).logp_rollout - x.on(m).logp_old, m)
    if keep is not m:
        if not np.any(keep):
            raise ValueError(f"{name}: rollout_rs rejects every token of the batch (verl's "
                             f"loss would divide by zero)")
        if third_policy.check(name, p, "rejection", third_policy.REJECTIONS) == "weight":
            # (the convention rejection="weight": a rejected token keeps its place in the
            # mask, with weight 0)
            out["is_weights"] = np.where(keep, 1.0 if w is None else w, 0.0)
        else:
            out["mask"], out["xm"] = keep, x.on(keep)
    return out


def verl_trainer_agg(mode: str, batch_mask) -> tuple:
    """verl 0.9.1's ``agg_loss`` as its trainer calls it, one optimizer step of one
    micro-batch on one rank: the ``(mode, norm)`` of :mod:`ppo_numpy.aggregation` that divide
    as it divides.

    The trainer gives the loss two counts of the mini-batch (``workers/utils/losses.py``
    ``ppo_loss`` and ``value_loss`` pass them to ``agg_loss``): ``batch_num_tokens``, the sum
    of the batch's response mask ``batch_mask`` (``workers/engine/fsdp/transformer_impl.py``
    ``forward_backward_batch``: after a decoupled rejection, which replaces the mask, and
    before a bypass-mode one, which the policy loss applies inside), and ``global_batch_size``
    = ``ppo_mini_batch_size * rollout.n`` (``trainer/ppo/ray_trainer.py`` ``_update_actor``):
    B, every row, a row whose tokens were all rejected included. With m the loss's own mask
    (after every rejection), n_i its row counts and N the sum of ``batch_mask``:

    ========================  ==============================  ==========================
    verl's ``loss_agg_mode``  what the trainer's agg_loss is   here
    ========================  ==============================  ==========================
    token-mean                sum m l / N                      ``("dapo", N)``
    seq-mean-token-sum        (1/B) sum_i sum_t m l            ``("luspo", None)``
    seq-mean-token-mean       (1/B) sum_i (1/n_i) sum_t m l    ``("grpo", None)``
    seq-mean-token-sum-norm   sum m l / (B T)                  ``("dr_grpo", None)``: T
    ========================  ==============================  ==========================

    (``loss_scale_factor`` unset: T, the padded length.) Without a rejection every row has a
    token, m is ``batch_mask`` and each is the mode of verl's name; ``agg_loss`` called
    without the counts divides by the kept tokens and the rows that kept one instead.

    >>> m = np.array([[True, True], [False, False]])   # row 1 rejected whole
    >>> verl_trainer_agg("token-mean", np.ones((2, 2), bool)), verl_trainer_agg(
    ...     "seq-mean-token-mean", m)
    (('dapo', 4), ('grpo', None))
    """
    if mode == "token-mean":
        return "dapo", int(np.count_nonzero(batch_mask))
    return {"seq-mean-token-sum": ("luspo", None), "seq-mean-token-mean": ("grpo", None),
            "seq-mean-token-sum-norm": ("dr_grpo", None)}[mode]


def verl_bypass_loss(name, x: Rollout, xm: Rollout, A, m, opts, p: dict, dual_clip):
    """verl 0.9.1 ``compute_policy_loss_bypass_mode``: ``(loss, statistics, dlogp, the
    statistics' loss_mode for verl_loss_stats)``; old = rollout; the IS weights and the
    rejection of logp (the current policy, no gradient) against logp_rollout, the loss over
    the kept tokens. ``rollout_loss_type`` (verl's ``rollout_correction.loss_type``)
    ``"ppo_clip"`` (default): the vanilla loss with ratio pi_theta / pi_rollout and no IS
    weights (the ratio is the correction); ``"reinforce"``: -A w logp with the IS weights w,
    aggregated by ``loss_agg_mode`` (gradient -A w times the aggregation weight).

    ``opts`` carries the trainer's aggregation (:func:`verl_trainer_agg` of the unrejected
    mask ``m``). A rejection of every token leaves the policy term 0 (verl's ``agg_loss``
    sums nothing over the trainer's counts) and its statistics 0 (``masked_mean`` over no
    token divides 0 by 1e-8); the KL loss over ``m`` stays. The statistics are the loss's:
    ``clipfrac_active``, ``dual_clipfrac`` and ``approx_kl_k1`` for ppo_clip,
    ``approx_kl_k1`` alone for reinforce (verl logs only ``actor/ppo_kl`` there)."""
    _, loss_type = verl_bypass(name, x, p)
    # (the loss is PPO-clip or REINFORCE: rollout_loss_type, not loss_mode)
    mode = "reinforce" if loss_type == "reinforce" else "vanilla"
    w, keep = verl_rollout_correction(name, x, m, p, logp_old=x.on(m).logp)
    if third_policy.check(name, p, "rejection", third_policy.REJECTIONS) == "weight":
        # (the convention rejection="weight": the rejected tokens stay, with weight 0)
        w = np.where(keep, 1.0 if w is None else w, 0.0)
        ppo_weights, keep = np.where(keep, 1.0, 0.0), m
    else:
        ppo_weights = None
    if loss_type == "reinforce":
        # (the convention masked_weights: a masked weight's token in the loss's mask, and in
        # the trainer's count, or not)
        kept = third_policy.loss_mask(name, p, keep, w, allow_empty=True)
        if kept is not keep:
            keep = kept
            agg, norm = verl_trainer_agg(p["loss_agg_mode"], keep)
            opts = replace(opts, agg=agg, norm=norm)
    xk = xm.on(keep)
    A = np.where(keep, A, 0.0)
    # why: verl 0.9.1 apply_bypass_mode sets loss_mode="bypass_mode" whatever the actor's, and
    # compute_policy_loss_bypass_mode calls compute_policy_loss_vanilla for ppo_clip
    opts = replace(opts, importance_level="token", loss_type="clip", log_ratio_max=None,
                   dual_clip=dual_clip, log_ratio_clamp=p["log_ratio_clamp"])
    if not np.any(keep):
        # verl: agg_loss over no token is 0 / N (token-mean) or 0 / B, masked_mean 0 / 1e-8
        pl = SimpleNamespace(loss=0.0, policy_loss=0.0, kl_loss=0.0)
        st = {"approx_kl_k1": 0.0}
        if loss_type == "ppo_clip":
            st.update(clipfrac_active=0.0, dual_clipfrac=0.0)
        dlogp = np.zeros(m.shape)
    elif loss_type == "ppo_clip":
        pl, st, dlogp = policy_loss_kernel(xk.logp, xk.logp_old, A, keep,
                                           replace(opts, kl_coef=0.0), xk.logp_ref,
                                           is_weights=ppo_weights)
    else:
        pl, st, dlogp = verl_reinforce_loss(xk, A, keep, opts, w)
        # (the convention is_weights_detach: the weight reads the current log-probs here)
        dlogp = dlogp + third_policy.reinforce_weight_gradient(
            name, p, xm.logp, xm.logp_old, A, m, keep, w,
            aggregation_weights(keep, opts.agg, opts.norm))
    if opts.kl_coef > 0:
        # why: verl 0.9.1 workers/utils/losses.py ppo_loss adds the KL loss over the batch's
        # response mask; the bypass loss's rejection is inside the policy loss only
        # (the convention is_weights_on_kl: the reinforce weights on it too)
        kl_w = None if w is None or loss_type == "ppo_clip" or \
            not third_policy.kl_weights_on(name, p) else np.where(m, w, 0.0)
        _, kl_loss, dkl = kl_loss_and_grad(xm.logp, xm.logp_ref, m, opts,
                                           log_ratio=xm.logp - xm.logp_old, weights=kl_w)
        dlogp = dlogp + opts.kl_coef * dkl
        pl = SimpleNamespace(loss=pl.policy_loss + opts.kl_coef * kl_loss,
                             policy_loss=pl.policy_loss, kl_loss=kl_loss)
    return pl, st, dlogp, mode


def verl_step_without_bypass(name: str, bypass: bool) -> None:
    """ValueError for a step over a layout in bypass mode (not reproduced)."""
    if bypass:
        raise ValueError(f"layout: {name}'s bypass mode over micro-batches is not "
                         "reproduced (its rejection inside the loss against the step's "
                         "counts); give no layout, or bypass_mode=False")


def verl_reinforce_loss(xk: Rollout, A, keep, opts, w):
    """verl's ``compute_policy_loss_reinforce``: loss = agg(-A w logp) (w = 1 without IS),
    d loss / d logp = -A w times the aggregation weight; its one statistic ``actor/ppo_kl``,
    the token mean of logp_rollout - logp (``approx_kl_k1``; no clip fractions: verl 0.9.1
    logs none on this path). (The KL loss is added by the caller, as verl's ppo_loss adds
    it.)"""
    weight = np.where(keep, 1.0 if w is None else w, 0.0)
    term = -A * weight * xk.logp
    policy_loss = float(aggregate_kernel(term, keep, opts.agg, opts.norm))
    dlogp = -aggregation_weights(keep, opts.agg, opts.norm) * A * weight + 0.0
    pl = SimpleNamespace(loss=policy_loss, policy_loss=policy_loss, kl_loss=0.0)
    st = {"approx_kl_k1": mean_over(xk.logp_old - xk.logp, keep)}
    return pl, st, dlogp


def verl_step_stats(step, passes, loss_stats, *, kl_loss=False, value=None, vpred=None) -> dict:
    """The metrics verl 0.9.1 logs for one step of several micro-batches
    (``verl/workers/utils/losses.py`` ``ppo_loss``, ``value_loss``; ``verl/utils/metric/
    utils.py`` ``Metric.aggregate_dp``, called by ``workers/engine_workers.py``): the losses
    normalised by the global counts (``actor/pg_loss``, ``actor/kl_loss``,
    ``critic/vf_loss``, aggregation SUM) the mean over the ranks summed over the
    micro-batches; the policy loss's own metrics (``loss_stats`` of each pass's statistics:
    ``actor/pg_clipfrac``, ``actor/ppo_kl``, ...; MEAN) and the critic's plain floats
    (``critic/vf_clipfrac``, ``critic/vpred_mean``) the mean over every micro-batch. ``value``:
    ``_step.value_step``'s per micro-batch and the value losses; ``vpred``: each micro-batch's
    token mean of the values. Empty when the ranks run different numbers of micro-batches
    (``aggregate_dp`` refuses them)."""
    if step.same_micro_batches() is None:
        return {}
    out = {"actor/pg_loss": verl_metric(step, [mb.forward.policy_loss for mb in passes], "sum")}
    per_pass = [loss_stats(mb.stats) for mb in passes]
    for key in per_pass[0]:
        out[key] = verl_metric(step, [st[key] for st in per_pass], "mean")
    if kl_loss:
        out["actor/kl_loss"] = verl_metric(step, [mb.forward.kl_loss for mb in passes], "sum")
    if value is not None:
        per_mb, losses = value
        out["critic/vf_loss"] = verl_metric(step, losses, "sum")
        out["critic/vf_clipfrac"] = verl_metric(step, per_mb["clipfrac"], "mean")
    if vpred is not None:
        out["critic/vpred_mean"] = verl_metric(step, vpred, "mean")
    return {f"step/stat/{k}": v for k, v in out.items()}
