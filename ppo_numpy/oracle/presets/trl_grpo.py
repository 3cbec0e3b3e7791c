"""TRL's ``GRPOTrainer`` (preset ``trl-grpo``): group-normalised scores, no value head, the
loss by ``loss_type``, KL (k3) in the loss."""

from __future__ import annotations

import numpy as np

from ...batch import Rollout
from ...family.losses.vespo import vespo_phi
from ...policy_loss.kernel import policy_loss_kernel
from ...policy_loss.options import PolicyLossOptions
from . import _third_policy as third_policy
from ._common import (
    GROUP_INPUT_NAMES,
    Preset,
    _flag,
    broadcast,
    float32_roundings,
    group_advantages,
    group_std,
    kl_form,
    mean_rows,
    policy_result,
    require_choice,
)
from ._step import micro_batch_groups, normaliser_for, policy_step
from ._trl import trl_check_is_options, trl_is_weights, trl_off_policy_mask, trl_uses_vllm

#: loss_type -> (aggregation mode, per-token loss form)
LOSS_TYPES = {"grpo": ("grpo", "clip"), "bnpo": ("bnpo", "clip"), "dr_grpo": ("dr_grpo", "clip"),
              "dapo": ("dapo", "clip"), "cispo": ("dapo", "cispo"), "luspo": ("luspo", "clip"),
              "vespo": ("dapo", "vespo"), "sapo": ("grpo", "sapo")}
#: VESPO's shapes, GRPOConfig's names
VESPO_OPTIONS = ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg")
SCALES = {"group": "group", "batch": "batch", "none": "none", True: "group", False: "none"}


def _trl_grpo(x: Rollout, p: dict, step=None) -> dict:
    """TRL's ``GRPOTrainer`` (huggingface/trl 1.16.0 ``trl/trainer/grpo_trainer.py``,
    ``_generate_and_score_completions`` and ``_compute_loss``; defaults of ``GRPOConfig``).

    The stages, in the order of TRL's trainer, one function each: the advantages
    (``_advantages``), the loss's options (``_loss_options``), the rollout correction
    (``_rollout_correction``: the vLLM ratio, the off-policy mask), the loss on its mask
    (``_third_policy.on_loss_mask`` and ``_third_policy.policy_loss``), the statistics
    (``_loss_stats``, ``_reward_stats``) and the step over a layout (``_trl_grpo_step``).

    * Advantages: A_i = (s_i - mean_g) / (std_g + 1e-4), torch.std (ddof 1) in float32
      (the conventions ``std_ddof``, ``std_eps``, ``std_eps_placement`` "std" or "var":
      sqrt(var + eps); ``singleton``, ``kl_estimator``, ``log_ratio_clamp`` and
      ``cispo_clip`` are TRL's fixed choices, overridable to name another code's)
      (``scale_rewards="group"``, the default; ``"batch"``: the std of every score of the
      batch, the mean still per group; ``"none"``: no division, Dr. GRPO; the bools of
      older versions: True = "group", False = "none"). A group of one gets 0 (its std is
      taken as 0). The same A_i at every token of response i.
    * The ratio: no clamp of the log-ratio; ``importance_sampling_level`` "token" or
      "sequence" (GSPO: exp of the token mean of the log-ratio, no cap). ``delta``
      (default None): the unclipped branch uses min(rho, delta).
    * The loss (``loss_type``): -min(rho A, clip(rho, 1 - epsilon, 1 + epsilon_high) A)
      per token, plus ``beta`` * k3 (no clamp) per token, the k3 multiplied by the ratio
      (rho_t, or s_i at the sequence level; before ``delta``) and differentiated through it
      with ``use_bias_correction_kl=True`` (TRL 1.16.0's default; docs/conventions.md
      section 16), then the normalisation:
      ``"grpo"`` sequence mean of token means over every row, ``"bnpo"`` local token
      mean, ``"dr_grpo"`` sum / (B * ``max_completion_length``; None: the batch's width
      T), ``"dapo"`` (default) sum /
      ``num_items_in_batch`` (default: this batch's token count, one process);
      ``"cispo"``: -min(rho, epsilon_high) A logp with the weight not differentiated,
      normalised as dapo; ``"luspo"``: the clipped loss (and ``delta``) summed over each
      response's tokens and averaged over every row, (1/B) sum_i sum_t (TRL recommends it
      with ``importance_sampling_level="sequence"``: each sequence's loss times its
      length; the token level is allowed, as TRL only warns); ``"vespo"``: -sg(phi_i) A
      logp with phi the Gamma weight (``vespo_k_pos`` 2, ``vespo_lambda_pos`` 3,
      ``vespo_k_neg`` 3, ``vespo_lambda_neg`` 2) of the sequence's summed token
      log-ratios (each clamped to [-20, 20], the sum to [log 1e-8, 20]), normalised as
      dapo; it ignores ``importance_sampling_level`` and ``delta``, as TRL does (TRL warns
      for the sequence level); ``"sapo"``: -g(rho) A, g(rho) = (4 / tau) sigmoid(tau (rho -
      1)), tau = ``sapo_temperature_pos`` for A > 0 else ``sapo_temperature_neg`` (rounded
      to float32: TRL's ``torch.where`` of two Python floats), the ratio of
      ``importance_sampling_level`` unclamped, normalised as grpo (no clip statistics; the
      same gate as verl's ``loss_mode="sapo"``: docs/conventions.md section 15 for what
      differs). ``epsilon_high`` None means ``epsilon``.
    * Without a layout: one process, one gradient-accumulation step (the clip statistics'
      min/max are over processes, here the one value). A step over ranks and micro-batches
      (a case's ``layout`` and ``steps_per_generation`` S, default K): TRL's two rules
      (``normaliser="trl"``, ``ppo_numpy.step.normalisers``): ``grpo``, ``bnpo``,
      ``dr_grpo``, ``luspo`` and ``sapo`` take each micro-batch's own mean and divide by
      ``current_gradient_accumulation_steps`` K; ``dapo``, ``cispo`` and ``vespo`` divide
      the micro-batch's token sum by ``num_items_in_batch`` (the tokens of its generation
      batch, gathered over the processes) / ``num_processes`` * K / S; DDP averages the
      ranks. The KL term is in each micro-batch's per-token loss, normalised with it.
      ``step/stat/<name>``: the mean over the micro-batch indices of each statistic
      reduced over the processes (TRL appends one value per ``_compute_loss`` and logs
      the list's mean). With S > K the generation batch spans several steps: its token
      count is ``num_items_in_batch``.
    * Statistics: ``kl`` (token mean of k3, times the ratio with the bias correction, with
      beta > 0), ``clip_ratio/low_mean`` (A < 0
      and min(rho, delta) < 1 - epsilon), ``clip_ratio/high_mean`` (A > 0 and above
      1 + epsilon_high), ``clip_ratio/region_mean`` (token means; means over sequences at
      the sequence level), ``low_min`` and ``high_max``, the smallest and the largest
      clipped fraction of one sequence (TRL 1.16.0), ``cispo_clip_ratio`` for cispo;
      ``vespo/phi_seq_mean`` for vespo (the mean over sequences of phi);
      ``reward``, ``reward_std`` (TRL's ``nanstd`` of every reward of the batch, float32:
      ``batch_reward_std``), ``frac_reward_zero_std``.
      ``entropy`` needs logits and is not produced.
    * The rollout correction (``use_vllm``, ``vllm_importance_sampling_*``,
      ``off_policy_mask_threshold``, a case with ``logp_rollout``): ``_rollout_correction``.
    * Tolerance: the clip statistics are float32 means of ``.float()`` flags: one float32
      rounding, float64 rtol 1e-9 + 2^-24.
    """
    name = "trl-grpo"
    trl_check_is_options(name, p)
    m = x.mask
    xm = x.on(m)
    require_choice(name, p, "loss_type", LOSS_TYPES)
    require_choice(name, p, "scale_rewards", SCALES)
    agg, form = LOSS_TYPES[p["loss_type"]]
    level = p["importance_sampling_level"]
    # 1. the advantages: the group-normalised scores at every response token
    A = _advantages(x, m, p)
    # 2. the loss's options: loss_type's term and normalisation, the KL term
    opts = _loss_options(name, p, agg, form, level)
    # 3. the rollout correction: the vLLM ratio, the off-policy mask, the loss's mask lm
    # (CISPO's loss is (B, T) at either level: -c A logp_t; the row-mean form is the clip's)
    # (VESPO's weights enter phi per token, whatever the level, which it ignores)
    is_w, rollout_stats, lm, row_keep = _rollout_correction(
        name, x, m, A, p, "token" if form in ("cispo", "vespo") else level)
    A_loss = A if row_keep is None else A * row_keep
    # 4. the loss on lm (m, or m without the tokens the conventions masked_weights="drop"
    # and rejection="mask" take out; the weights on the KL term too under is_weights_on_kl)
    xl, A_l, w_l = third_policy.on_loss_mask(xm, A_loss, m, lm, is_w)
    pl, _, dlogp = third_policy.policy_loss(name, p, xl.logp, xl.logp_old, A_l, lm, opts,
                                            xl.logp_ref, is_weights=w_l)
    # 5. the statistics: the loss's (of every response token, as TRL logs them), the
    # rewards', the sampling's
    f = pl if lm is m else policy_loss_kernel(xm.logp, xm.logp_old, A, m, opts, xm.logp_ref)[0]
    loss_stats = _loss_stats(f, A, m, p, opts, form, level, is_w, xm, opts.eps_high)
    stats = {**loss_stats(slice(None)), **_reward_stats(x, p), **rollout_stats}
    out = policy_result(A, pl, dlogp, stats)  # A is 0 at padding (broadcast)
    # 6. the step over the layout's micro-batches (the same mask lm and weights w_l)
    if step is not None:
        out.update(_trl_grpo_step(step, p, agg, xl, A_l, lm, opts, w_l, loss_stats))
    return out


def _advantages(x: Rollout, m, p: dict):
    """The advantages (B, T): each response's group-normalised score (``scale_rewards``) at
    its tokens, computed in float32: trl 1.16.0 ``_generate_and_score_completions``."""
    return broadcast(group_advantages(x.scores, x.groups, p, scale=SCALES[p["scale_rewards"]],
                                      singleton=p["singleton"], dtype=np.float32), m)


def _loss_options(name: str, p: dict, agg: str, form: str, level: str) -> PolicyLossOptions:
    """The loss's options: the clip range, ``delta``, the ratio's level, loss_type's per-token
    form and normalisation (``agg``, ``form``: :data:`LOSS_TYPES`), SAPO's temperatures,
    VESPO's shapes and the KL term (``beta`` times k3 with ``use_bias_correction_kl``'s
    gradient): what trl 1.16.0 ``_compute_loss`` reads of ``GRPOConfig``."""
    eps_high = p["epsilon"] if p["epsilon_high"] is None else p["epsilon_high"]
    norm = {"dr_grpo": p["max_completion_length"], "dapo": p["num_items_in_batch"]}.get(agg)
    vespo = {k: p[k] for k in VESPO_OPTIONS}
    return PolicyLossOptions(
        # why: TRL applies delta in the clipped loss types only; cispo, sapo and vespo ignore
        # it, and vespo the level (it sums the token log-ratios itself)
        epsilon=p["epsilon"], epsilon_high=eps_high,
        delta=p["delta"] if form == "clip" else None,
        importance_level="token" if form == "vespo" else level,
        # why: torch.where(advantages > 0, pos, neg) of two Python floats is a float32
        # tensor: TRL's temperatures are float32 numbers (1.05 -> 1.0499999523)
        sapo_tau_pos=float(np.float32(p["sapo_temperature_pos"])),
        sapo_tau_neg=float(np.float32(p["sapo_temperature_neg"])),
        loss_type=form, cispo_clip=p["cispo_clip"], agg=agg, norm=norm, kl_coef=p["beta"],
        kl_estimator=p["kl_estimator"], log_ratio_clamp=p["log_ratio_clamp"],
        # why: TRL 1.16.0 multiplies the per-token k3 by coef_1, the ratio of
        # importance_sampling_level (vespo's too), before delta clamps it
        kl_gradient=kl_form(name, p, "ratio" if _flag(p, "use_bias_correction_kl", name)
                            else "plain"),
        kl_ratio_level=level, **vespo)


def _reward_stats(x: Rollout, p: dict) -> dict:
    """The rewards' metrics: ``reward`` (the mean score), ``reward_std``
    (:func:`batch_reward_std`) and ``frac_reward_zero_std`` (the fraction of responses whose
    group's std, float32, is 0): trl 1.16.0 ``_generate_and_score_completions``."""
    std = group_std(x.scores, x.groups, dtype=np.float32, ddof=p["std_ddof"])
    return {"reward": mean_rows(x.scores), "reward_std": batch_reward_std(x.scores),
            "frac_reward_zero_std": mean_rows(np.isclose(std, 0.0))}


def _trl_grpo_step(step, p: dict, agg: str, xl: Rollout, A, lm, opts, w, loss_stats) -> dict:
    """The step's outputs of ``trl-grpo``: each micro-batch's loss on the one-batch loss's
    mask lm and weights w, normalised by TRL's rules (``normaliser="trl"``); ``step/stat/``
    the mean over the micro-batch indices of ``loss_stats`` of each index's rows."""
    norm = normaliser_for(p["normaliser"], agg,
                          p["max_completion_length"] if agg == "dr_grpo" else None,
                          step=step, n_rows=lm.shape[0], trl_loss_type=p["loss_type"],
                          num_items_in_batch=p["num_items_in_batch"])
    out, _ = policy_step(step, xl.logp, xl.logp_old, A, lm, opts, norm, xl.logp_ref,
                         is_weights=w, weighted_kl=third_policy.kl_weights_on("trl-grpo", p))
    groups = micro_batch_groups(step)
    if groups is not None:
        # why: TRL 1.16.0 _compute_loss appends one value per micro-batch, reduced over
        # the processes (global_masked_mean: sums and counts all-reduced; nanmin / nanmax
        # of the gathered sequences), and logs the mean of the list
        per_k = [loss_stats(rows) for rows in groups]
        out.update({f"step/stat/{k}": float(np.mean([st[k] for st in per_k]))
                    for k in per_k[0]})
    return out


def _loss_stats(pl, A, m, p, opts, form, level, is_w, xm, eps_high):
    """The statistics ``_compute_loss`` logs, as a function of the rows they are reduced
    over (``slice(None)``: the batch; a micro-batch index's rows on every rank: its value in
    a step): ``kl``, the clip ratios, ``cispo_clip_ratio`` or ``vespo/phi_seq_mean``. Every
    flag is a token's or a row's, so the batch's forward gives each micro-batch's."""
    if form == "vespo":
        phi = vespo_phi(xm.logp - xm.logp_old, A, m, opts, is_w)
        phi_seq = phi[np.arange(m.shape[0]), np.argmax(m, axis=-1)]
    if form == "clip":
        lo, hi = opts.bounds()
        rho = pl.rho if opts.delta is None else np.minimum(pl.rho, opts.delta)
        clip_low, clip_high = (rho < lo) & (A < 0), (rho > hi) & (A > 0)

    def stats(rows) -> dict:
        mr, Ar = m[rows], A[rows]
        n = max(int(mr.sum()), 1)

        def per_sequence(flags):
            # TRL's masked_seq_mean: one value per sequence at the sequence level, else the
            # sequence's token mean
            if level == "sequence":
                return flags[np.arange(mr.shape[0]), np.argmax(mr, axis=-1)].astype(np.float64)
            return np.where(mr, flags, False).sum(axis=-1) / mr.sum(axis=-1)

        def batch_mean(flags):
            # TRL's global_masked_mean: a mean over sequences for (B, 1) sequence-level flags
            if level == "sequence":
                return float(np.mean(per_sequence(flags)))
            return float(np.where(mr, flags, False).sum() / n)

        out = {}
        if p["beta"] != 0:
            out["kl"] = float(pl.kl[rows].sum() / n)
        if form == "cispo":
            out["cispo_clip_ratio"] = batch_mean((pl.rho[rows] > eps_high) & (Ar > 0))
        elif form == "vespo":
            # TRL's global_masked_mean of phi_seq (B, 1): a mean over the sequences
            out["vespo/phi_seq_mean"] = float(np.mean(phi_seq[rows]))
        elif form == "clip":
            # min(rho, delta) below the range with A < 0, above it with A > 0 (the delta of
            # the loss: none for cispo)
            low, high = clip_low[rows], clip_high[rows]
            # why: TRL 1.16.0 _compute_loss logs nanmin / nanmax over the sequences
            # (gathered over processes) of each sequence's clipped fraction
            out.update({"clip_ratio/low_mean": batch_mean(low),
                        "clip_ratio/low_min": float(np.min(per_sequence(low))),
                        "clip_ratio/high_mean": batch_mean(high),
                        "clip_ratio/high_max": float(np.max(per_sequence(high))),
                        "clip_ratio/region_mean": batch_mean(low | high)})
        return out

    return stats


def batch_reward_std(scores) -> float:
    """TRL's logged ``reward_std``: ``nanstd(rewards)`` over the whole batch (trl 1.16.0
    grpo_trainer.py ``_generate_and_score_completions``; ``trl/trainer/utils.py`` ``nanstd``:
    the mean squared deviation times n / (n - 1), square-rooted), in float32 as TRL's rewards
    are: NaN for one response (0 times n / 0). Not the mean of the group stds.

    >>> round(batch_reward_std([1.0, 0.0, 0.0, 0.0]), 6)   # sqrt(0.1875 * 4 / 3) = 0.5
    0.5
    """
    s = np.asarray(scores, dtype=np.float32)
    n = np.float32(s.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.float32(s.sum(dtype=np.float32) / n)
        var = np.float32(((s - mean) ** 2).sum(dtype=np.float32) / n)
        return float(np.sqrt(var * (n / np.float32(n - 1))))


def _rollout_correction(name, x: Rollout, m, A, p: dict, level: str):
    """(is_weights (B, T) or None, the sampling statistics, the loss's mask, the responses
    VESPO's loss keeps (B, 1) or None): TRL's vLLM correction and its off-policy mask, both
    multiplying the policy term (the KL term is added after); the conventions
    ``masked_weights``, ``rejection``, ``is_sequence_weight`` and ``off_policy_mask_logps``
    (:mod:`._third_policy`) in the mask and the weights.

    * ``use_vllm`` None (the preset's default): vLLM generated the batch iff the case carries
      ``logp_rollout``; TRL's own default is False, and its
      ``vllm_importance_sampling_correction=True`` applies only with vLLM (without it TRL has
      no sampling log-probs). True without ``logp_rollout`` is an error.
    * The ratio: ``trl_is_weights`` (mode ``vllm_importance_sampling_mode``, default
      sequence_mask, bounds ``_clip_min`` None and ``_clip_max`` 3).
    * ``off_policy_mask_threshold`` (default None: off): ``trl_off_policy_mask``, against
      logp_rollout under vLLM, logp_old otherwise. TRL multiplies the loss by the mask and
      then by the ratio (trl 1.16.0 ``_compute_loss``): for finite factors the order changes
      no number. With ``loss_type="vespo"`` (whose weights enter phi) a dropped response's
      advantage is set to 0 in the loss: -phi A logp is then TRL's term times 0.
    * GSPO (``importance_sampling_level="sequence"``): TRL's loss is (B, 1), times the (B, T)
      token ratios; its gradient carries the row mean of the weights (ppo_numpy's is_weights
      is verl's per-token form), so the row means are passed (the same loss value: every TRL
      normalisation weighs a response's tokens equally). CISPO's loss is (B, T) already
      (-c A logp_t): its weights stay per token.
    """
    use_vllm = trl_uses_vllm(name, x, p)
    if (p["loss_type"] == "vespo" and use_vllm and p["vllm_importance_sampling_correction"]
            and p["vllm_importance_sampling_mode"] not in ("token_truncate", "token_mask")):
        # why: trl 1.16.0 GRPOTrainer.__init__ refuses it (VESPO's phi takes token ratios)
        raise ValueError(f"{name}: loss_type 'vespo' with the vLLM correction needs "
                         "vllm_importance_sampling_mode 'token_truncate' or 'token_mask', got "
                         f"{p['vllm_importance_sampling_mode']!r} (as TRL 1.16.0 refuses it)")
    w = trl_is_weights(name, x, m, p)
    keep = trl_off_policy_mask(name, x, m, A, p, use_vllm)
    stats = {}
    if w is not None:
        # the sampling statistics TRL logs (_generate_and_score_completions)
        delta = np.abs(x.logp_old[m] - x.logp_rollout[m])
        sequence = p["vllm_importance_sampling_mode"].startswith("sequence")
        flat = w[np.arange(m.shape[0]), np.argmax(m, axis=-1)] if sequence else w[m]
        stats = {"sampling/sampling_logp_difference/mean": float(np.mean(delta)),
                 "sampling/sampling_logp_difference/max": float(np.max(delta)),
                 "sampling/importance_sampling_ratio/min": float(np.min(flat)),
                 "sampling/importance_sampling_ratio/mean": float(np.mean(flat)),
                 "sampling/importance_sampling_ratio/max": float(np.max(flat))}
    # the loss's mask: m, without the tokens of masked weights under masked_weights="drop"
    # and without the dropped responses under rejection="mask" (TRL: "weight", a factor 0)
    lm = third_policy.loss_mask(name, p, m, w)
    if keep is not None and third_policy.check(name, p, "rejection",
                                               third_policy.REJECTIONS) == "mask":
        lm, keep = lm & (keep > 0), None
        if not np.any(lm):
            raise ValueError(f"{name}: rejection='mask': the off-policy mask drops every "
                             f"response of the batch")
    row_keep = None
    if keep is not None and p["loss_type"] == "vespo":
        # why: TRL 1.16.0 multiplies the VESPO loss by its off-policy mask while the vLLM
        # ratio enters phi, where the policy loss takes one weight per token: a response the
        # mask drops has A < 0, and -phi A logp with A = 0 is TRL's loss times 0 (phi reads
        # only A's sign, and no statistic reads these A)
        row_keep, keep = keep, None
    if w is None and keep is None:
        return w, stats, lm, row_keep
    is_w = m.astype(np.float64) if w is None else w
    if keep is not None:
        is_w = is_w * keep
    if level == "sequence":
        is_w = third_policy.row_mean(is_w, m)
    return is_w, stats, lm, row_keep


PRESET = Preset(
    name="trl-grpo",
    description="TRL's GRPOTrainer: group-normalised scores (std + 1e-4, float32), the loss "
                "by loss_type (dapo by default; grpo, bnpo, dr_grpo, cispo, sapo), k3 KL in the "
                "loss with beta.",
    defaults={"loss_type": "dapo", "scale_rewards": "group",
              "importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": None,
              "delta": None, "beta": 0.0, "use_bias_correction_kl": True,
              "max_completion_length": 512,
              "num_items_in_batch": None, "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
              "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0, "sapo_temperature_pos": 1.0,
              "sapo_temperature_neg": 1.05,
              # the rollout correction (GRPOConfig; use_vllm None: the case says, see
              # _rollout_correction)
              "use_vllm": None, "vllm_importance_sampling_correction": True,
              "vllm_importance_sampling_mode": "sequence_mask",
              "vllm_importance_sampling_clip_min": None,
              "vllm_importance_sampling_clip_max": 3.0, "off_policy_mask_threshold": None},
    # the conventions TRL does not expose as options (trl 1.16.0 trl/trainer/grpo_trainer.py
    # _generate_and_score_completions, _compute_loss; trl/trainer/utils.py nanstd)
    conventions={"std_ddof": 1, "std_eps": 1e-4, "std_eps_placement": "std",
                 "singleton": "zero", "kl_estimator": "k3", "log_ratio_clamp": None,
                  "cispo_clip": "max", "is_log_ratio_bound": None, "normaliser": "trl",
                  "kl_gradient": None,
                 **third_policy.TRL},
    sources=(
        "huggingface/trl: trl/trainer/grpo_trainer.py (GRPOTrainer."
        "_generate_and_score_completions, _compute_loss), 1.16.0",
        "huggingface/trl: trl/trainer/grpo_config.py (GRPOConfig), 1.16.0",
        "huggingface/trl: trl/trainer/grpo_trainer.py (the vLLM importance sampling of "
        "_generate_and_score_completions, get_off_policy_mask), 1.16.0",
    ),
    tolerances=float32_roundings(4),
    tolerance_note="TRL logs its clip statistics as float32 means of .float() flags and its "
                   "reward statistics as float32 nanmean / nanstd of the float32 rewards "
                   "(trl/trainer/grpo_trainer.py _compute_loss, "
                   "_generate_and_score_completions): up to 4 float32 roundings, 4 2^-24 "
                   "relative on top of the float64 rtol",
    pipeline=_trl_grpo,
    input_names=GROUP_INPUT_NAMES,
    takes_layout=True,
)
