"""TRL's ``GRPOTrainer`` (preset ``trl-grpo``): group-normalised scores, no value head, the
loss by ``loss_type``, KL (k3) in the loss."""

from __future__ import annotations

import numpy as np

from ...objective import PolicyLossOptions, policy_loss_kernel
from ...rollout import Rollout
from ._common import (
    GROUP_INPUT_NAMES,
    Preset,
    broadcast,
    float32_roundings,
    group_advantages,
    group_std,
    mean_rows,
    policy_result,
    require_choice,
)

#: loss_type -> (aggregation mode, per-token loss form)
LOSS_TYPES = {"grpo": ("grpo", "clip"), "bnpo": ("bnpo", "clip"), "dr_grpo": ("dr_grpo", "clip"),
              "dapo": ("dapo", "clip"), "cispo": ("dapo", "cispo"), "sapo": ("grpo", "sapo")}
SCALES = {"group": "group", "batch": "batch", "none": "none", True: "group", False: "none"}


def _trl_grpo(x: Rollout, p: dict) -> dict:
    """TRL's ``GRPOTrainer`` (huggingface/trl 1.16.0 ``trl/trainer/grpo_trainer.py``,
    ``_generate_and_score_completions`` and ``_compute_loss``; defaults of ``GRPOConfig``).

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
      per token, plus ``beta`` * k3 (no clamp) per token, then the normalisation:
      ``"grpo"`` sequence mean of token means over every row, ``"bnpo"`` local token
      mean, ``"dr_grpo"`` sum / (B * ``max_completion_length``; None: the batch's width
      T), ``"dapo"`` (default) sum /
      ``num_items_in_batch`` (default: this batch's token count, one process);
      ``"cispo"``: -min(rho, epsilon_high) A logp with the weight not differentiated,
      normalised as dapo; ``"sapo"``: -g(rho) A, g(rho) = (4 / tau) sigmoid(tau (rho - 1)),
      tau = ``sapo_temperature_pos`` for A > 0 else ``sapo_temperature_neg`` (rounded to
      float32: TRL's ``torch.where`` of two Python floats), the ratio of
      ``importance_sampling_level`` unclamped, normalised as grpo (no clip statistics; the
      same gate as verl's ``loss_mode="sapo"``: docs/conventions.md section 15 for what
      differs). ``epsilon_high`` None means ``epsilon``.
    * One process, one gradient-accumulation step (TRL divides grpo/bnpo/dr_grpo by the
      number of accumulation steps; the clip statistics' min/max are over processes,
      here the one value).
    * Statistics: ``kl`` (token mean of k3, with beta > 0), ``clip_ratio/low_mean`` (A < 0
      and min(rho, delta) < 1 - epsilon), ``clip_ratio/high_mean`` (A > 0 and above
      1 + epsilon_high), ``clip_ratio/region_mean`` (token means; means over sequences at
      the sequence level), ``low_min`` and ``high_max``, the smallest and the largest
      clipped fraction of one sequence (TRL 1.16.0), ``cispo_clip_ratio`` for cispo;
      ``reward``, ``reward_std`` (mean of the group stds), ``frac_reward_zero_std``.
      ``entropy`` needs logits and is not produced.
    * Tolerance: the clip statistics are float32 means of ``.float()`` flags: one float32
      rounding, float64 rtol 1e-9 + 2^-24.
    """
    name = "trl-grpo"
    m = x.mask
    xm = x.on(m)
    require_choice(name, p, "loss_type", LOSS_TYPES)
    require_choice(name, p, "scale_rewards", SCALES)
    agg, form = LOSS_TYPES[p["loss_type"]]
    level = p["importance_sampling_level"]
    A = broadcast(group_advantages(x.scores, x.groups, p, scale=SCALES[p["scale_rewards"]],
                                   singleton=p["singleton"], dtype=np.float32), m)
    eps_high = p["epsilon"] if p["epsilon_high"] is None else p["epsilon_high"]
    norm = {"dr_grpo": p["max_completion_length"], "dapo": p["num_items_in_batch"]}.get(agg)
    opts = PolicyLossOptions(
        # why: TRL applies delta in the clipped loss types only; cispo and sapo ignore it
        epsilon=p["epsilon"], epsilon_high=eps_high,
        delta=p["delta"] if form == "clip" else None, importance_level=level,
        # why: torch.where(advantages > 0, pos, neg) of two Python floats is a float32
        # tensor: TRL's temperatures are float32 numbers (1.05 -> 1.0499999523)
        sapo_tau_pos=float(np.float32(p["sapo_temperature_pos"])),
        sapo_tau_neg=float(np.float32(p["sapo_temperature_neg"])),
        loss_type=form, cispo_clip=p["cispo_clip"], agg=agg, norm=norm, kl_coef=p["beta"],
        kl_estimator=p["kl_estimator"], log_ratio_clamp=p["log_ratio_clamp"])
    pl, _, dlogp = policy_loss_kernel(xm.logp, xm.logp_old, A, m, opts, xm.logp_ref)
    n = max(int(m.sum()), 1)

    def per_sequence(flags):
        # TRL's masked_seq_mean: one value per sequence at the sequence level, else the
        # sequence's token mean
        if level == "sequence":
            return flags[np.arange(m.shape[0]), np.argmax(m, axis=-1)].astype(np.float64)
        return np.where(m, flags, False).sum(axis=-1) / m.sum(axis=-1)

    def batch_mean(flags):
        # TRL's global_masked_mean: a mean over sequences for (B, 1) sequence-level flags
        if level == "sequence":
            return float(np.mean(per_sequence(flags)))
        return float(np.where(m, flags, False).sum() / n)

    stats = {}
    if p["beta"] != 0:
        stats["kl"] = float(pl.kl.sum() / n)
    if form == "cispo":
        stats["cispo_clip_ratio"] = batch_mean((pl.rho > eps_high) & (A > 0))
    elif form == "clip":
        # min(rho, delta) below the range with A < 0, above it with A > 0 (the delta of
        # the loss: none for cispo)
        lo, hi = opts.bounds()
        rho = pl.rho if opts.delta is None else np.minimum(pl.rho, opts.delta)
        low, high = (rho < lo) & (A < 0), (rho > hi) & (A > 0)
        # why: TRL 1.16.0 _compute_loss logs nanmin / nanmax over the sequences (gathered
        # over processes) of each sequence's clipped fraction
        stats.update({"clip_ratio/low_mean": batch_mean(low),
                      "clip_ratio/low_min": float(np.min(per_sequence(low))),
                      "clip_ratio/high_mean": batch_mean(high),
                      "clip_ratio/high_max": float(np.max(per_sequence(high))),
                      "clip_ratio/region_mean": batch_mean(low | high)})
    std = group_std(x.scores, x.groups, dtype=np.float32, ddof=p["std_ddof"])
    stats.update({"reward": mean_rows(x.scores), "reward_std": mean_rows(std),
                  "frac_reward_zero_std": mean_rows(np.isclose(std, 0.0))})
    return policy_result(A, pl, dlogp, stats)  # A is 0 at padding (broadcast)


PRESET = Preset(
    name="trl-grpo",
    description="TRL's GRPOTrainer: group-normalised scores (std + 1e-4, float32), the loss "
                "by loss_type (dapo by default; grpo, bnpo, dr_grpo, cispo, sapo), k3 KL in the "
                "loss with beta.",
    defaults={"loss_type": "dapo", "scale_rewards": "group",
              "importance_sampling_level": "token", "epsilon": 0.2, "epsilon_high": None,
              "delta": None, "beta": 0.0, "max_completion_length": 512,
              "num_items_in_batch": None, "sapo_temperature_pos": 1.0,
              "sapo_temperature_neg": 1.05},
    # the conventions TRL does not expose as options (trl 1.16.0 trl/trainer/grpo_trainer.py
    # _generate_and_score_completions, _compute_loss; trl/trainer/utils.py nanstd)
    conventions={"std_ddof": 1, "std_eps": 1e-4, "std_eps_placement": "std",
                 "singleton": "zero", "kl_estimator": "k3", "log_ratio_clamp": None,
                 "cispo_clip": "max"},
    sources=(
        "huggingface/trl: trl/trainer/grpo_trainer.py (GRPOTrainer."
        "_generate_and_score_completions, _compute_loss), 1.16.0",
        "huggingface/trl: trl/trainer/grpo_config.py (GRPOConfig), 1.16.0",
    ),
    tolerances=float32_roundings(1),
    tolerance_note="TRL logs its clip statistics as float32 means of .float() flags "
                   "(trl/trainer/grpo_trainer.py _compute_loss): 2^-24 relative on top of the "
                   "float64 rtol",
    pipeline=_trl_grpo,
    input_names=GROUP_INPUT_NAMES,
)
