"""The convention switches the diagnosis tries: one table of what each one means, and per
preset which alternatives to try and where the framework's own choice comes from.

A *switch* is a preset parameter that names one convention (``whiten_ddof``,
``score_position``, ``dual_clip``, ...). :data:`SWITCHES` says, for each, what code with
each value does, in words: the diagnosis (:mod:`ppo_numpy.oracle.diagnose`) and
``docs/oracle.md`` both print these sentences. :data:`PRESET_SWITCHES` lists, per
preset, the alternatives worth trying and the framework's source file and function.

A new preset registers its switches with :func:`register_switches` (a switch that is not
yet in :data:`SWITCHES` is added with :func:`add_switch`)::

    register_switches("verl-grpo", {
        "clip_ratio_c": ((10.0,), "verl 0.9.1 verl/trainer/ppo/core_algos.py "
                                  "compute_policy_loss_vanilla, clip_ratio_c=3"),
    })
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = ["KINDS", "PRESET_SWITCHES", "SWITCHES", "Switch", "add_switch", "explain_switch",
           "register_switches", "switches_for"]


KINDS = ("objective", "loss family", "third policy")
"""What a switch is about: the PPO objective and the group advantages, a member of the
policy-loss family, or the third policy (the correction of the sampler/trainer mismatch,
``ppo_numpy.mismatch.correction``)."""


@dataclass(frozen=True)
class Switch:
    """One convention: the preset parameter, what it is about, what each value does.

    ``means`` maps a value to a phrase completing "yours ..." / "the framework's ...";
    ``default`` phrases a value that is not in ``means`` (``{v}`` is the value), or
    ``describe(value)`` where given. ``kind``: one of :data:`KINDS`. ``needs``: the input a
    setting applies to, if any (``"logp_rollout"``: a correction of the sampler's log-probs,
    which every framework skips or cannot run on a batch without them); the diagnosis
    leaves the setting out on a case without that input. ``needs_layout``: a convention of
    the optimizer step over ranks and micro-batches, which changes outputs only on a case
    with a ``"layout"``; :func:`switches_for` lists it only for cases among which one has a
    layout.
    """

    param: str
    topic: str
    means: dict
    default: str = "is {v!r}"
    kind: str = "objective"
    describe: Callable | None = None
    needs: str | None = None
    needs_layout: bool = False

    def phrase(self, value) -> str:
        for k, text in self.means.items():
            if k == value and type(k) is type(value):
                return text
        if isinstance(value, float) and value.is_integer() and int(value) in self.means:
            return self.means[int(value)]
        if self.describe is not None:
            return self.describe(value)
        return self.default.format(v=value)


SWITCHES = {}
"""param -> :class:`Switch`: the one table of conventions (``docs/oracle.md`` prints it)."""

_VERL_KL_ESTIMATES = {"kl": "k1 = logp - logp_ref", "k1": "k1 = logp - logp_ref",
                      "abs": "|logp - logp_ref|", "mse": "k2 = (logp - logp_ref)^2 / 2",
                      "k2": "k2 = (logp - logp_ref)^2 / 2",
                      "low_var_kl": "k3 clamped to [-10, 10] (low_var_kl)",
                      "k3": "k3 clamped to [-10, 10] (as low_var_kl)"}
#: verl 0.9.1's kl_loss_type: each estimate differentiated as it is, and with the suffix "+"
#: its value with k2's gradient (core_algos.kl_penalty: k2 - sg(k2) + sg(k))
_VERL_KL_LOSS_TYPES = {
    **{k: f"is {v}" for k, v in _VERL_KL_ESTIMATES.items()},
    **{f"{k}+": f"is {v} in value, with k2's gradient logp - logp_ref (verl's '+': "
                f"straight through)" for k, v in _VERL_KL_ESTIMATES.items()}}


def add_switch(switch: Switch) -> Switch:
    """Add ``switch`` to :data:`SWITCHES` (ValueError if its parameter is there already)."""
    if switch.param in SWITCHES:
        raise ValueError(f"switch: {switch.param!r} is already in the table")
    SWITCHES[switch.param] = switch
    return switch


for _s in (
    Switch("score_position", "where the score goes",
           {"last-token": "adds it at the last response token (the last 1 of the mask)",
            "after-last": "adds it one slot after the last response token",
            "last-column": "adds it at the last column, whatever the mask"}),
    Switch("gae_holes", "GAE over holes in the mask",
           {"skip": "skips them: the next state of a token is the next response token",
            "decay": "runs through them as states of value 0 and reward 0"}),
    Switch("whiten_advantages", "advantage whitening",
           {True: "whitens the advantages", False: "does not whiten the advantages"}),
    Switch("whiten_ddof", "the whitening's variance",
           {0: "is the population variance (divides by n, ddof 0)",
            1: "has Bessel's correction (divides by n - 1, ddof 1)"}),
    Switch("whiten_eps", "the whitening's eps", {}, default="is {v:g}"),
    Switch("whiten_eps_mode", "where the whitening's eps goes",
           {"add": "adds it to the variance: sqrt(var + eps)",
            "floor": "floors the variance with it: sqrt(max(var, eps))"}),
    Switch("whiten_mask", "the whitening's mean and variance",
           {"mask": "run over the response tokens only",
            "all": "run over every position, padding included"}),
    Switch("shift_mean", "the whitened advantages",
           {True: "have the mean subtracted (mean 0)",
            False: "keep their mean (divided by the std only)"}),
    Switch("whiten_rewards", "reward whitening",
           {True: "whitens the rewards (the mean kept)", False: "does not whiten the rewards"}),
    Switch("kl_estimator", "the per-token KL estimator", {}, default="is {v}"),
    Switch("kl_clamp", "the KL estimate", {None: "is not clamped"},
           default="is clamped to [-{v:g}, {v:g}]"),
    Switch("kl_in", "the KL penalty",
           {"reward": "is -beta KL_t in the rewards",
            "loss": "is beta mean(KL) added to the policy loss, not in the rewards"}),
    Switch("use_kl_in_reward", "the KL penalty in the reward",
           {True: "is applied (-beta KL_t in the rewards)",
            False: "is off (the rewards are the score alone)"}),
    Switch("use_kl_loss", "the KL loss term",
           {True: "is added to the policy loss (beta k3 against the reference)",
            False: "is off"}),
    Switch("log_ratio_clamp", "the log-ratio", {None: "is not clamped before exp"},
           default="is clamped to [-{v:g}, {v:g}] before exp"),
    Switch("dual_clip", "the dual clip", {None: "is off"},
           default="is on: the A < 0 term is bounded below by {v:g} A"),
    Switch("epsilon_high", "the upper clip bound", {None: "is 1 + epsilon (symmetric)"},
           default="is 1 + {v:g}"),
    Switch("loss_agg_mode", "the loss aggregation", {}),
    Switch("policy_agg", "the policy loss aggregation", {}),
    Switch("value_agg", "the value loss aggregation", {}),
    # the critic-free presets, under their frameworks' own option names
    Switch("scale_rewards", "the group advantage's scale",
           {"group": "divides by each group's std", "batch": "divides by the batch's std",
            "none": "divides by no std (Dr. GRPO)"}),
    Switch("norm_adv_by_std_in_grpo", "the group advantage's scale",
           {True: "divides by the group's std", False: "divides by no std (Dr. GRPO)"}),
    Switch("adv_estimator", "the baseline", {"grpo": "is the group mean (GRPO)",
                                             "rloo": "is the mean of the others (RLOO)",
                                             "opo": "is the length-weighted group mean (OPO)",
                                             "gpg": "is the group mean, scaled by B over "
                                                    "the nonzero scores (GPG)",
                                             "grpo_passk": "is the second best score, for "
                                                           "the best response only (Pass@k)",
                                             "gdpo": "is each reward component's group "
                                                     "mean, then whitened (GDPO)"}),
    Switch("advantage_estimator", "the baseline",
           {"group_norm": "is the group mean, divided by its std (GRPO)",
            "rloo": "is the mean of the others (RLOO)",
            "dr_grpo": "is the group mean, no std (Dr. GRPO)"}),
    Switch("importance_sampling_level", "the ratio",
           {"token": "is per token", "sequence": "is the sequence's (GSPO)"}),
    Switch("loss_mode", "the policy loss", {
        "vanilla": "has a ratio per token", "gspo": "has the sequence's ratio (GSPO)",
        "cispo": "is CISPO's (the weight clip(rho) not differentiated)",
        "sapo": "is SAPO's (a sigmoid gate of rho in place of the clip)",
        "geo_mean": "is GMPO's (the geometric mean of the token ratios, log-ratio clipped)",
        "gpg": "is GPG's (-A logp)",
        "clip_cov": "drops a random few unclipped tokens of large covariance (Clip-Cov)",
        "kl_cov": "penalises |log rho| at the tokens of largest covariance (KL-Cov)",
        "dppo_tv": "masks the tokens outside a total-variation region (DPPO)",
        "dppo_kl": "masks the tokens outside a binary-KL region (DPPO)",
        "dro": "is DRO's (-A logp + beta/2 (log rho)^2)"}),
    Switch("policy_loss_type", "the policy loss", {"ppo": "has a ratio per token",
                                                   "gspo": "has the sequence's ratio (GSPO)"}),
    Switch("loss_type", "the loss normalisation",
           {"grpo": "is the mean over responses of each response's token mean",
            "bnpo": "is the token mean over the batch",
            "dr_grpo": "is the token sum over B times a constant length (Dr. GRPO)",
            "dapo": "is the token sum over the batch's token count (DAPO)",
            "cispo": "is CISPO's (the weight min(rho, epsilon_high) not differentiated)",
            "luspo": "is the mean over responses of each response's token sum (LUSPO)",
            "vespo": "is VESPO's (a Gamma weight of the sequence ratio, not differentiated, "
                     "normalised as dapo)",
            "sapo": "is SAPO's (a sigmoid gate of rho, the sequence mean of token means)"}),
    # the conventions of the critic-free presets that no framework exposes as an option
    Switch("std_ddof", "the group std",
           {0: "is the population std (divides by n, ddof 0)",
            1: "has Bessel's correction (divides by n - 1, ddof 1, torch.std)"}),
    Switch("std_eps", "the group advantage's eps", {0.0: "is absent (0 / 0 for equal scores)"},
           default="is {v:g}"),
    Switch("std_eps_placement", "where the group advantage's eps goes",
           {"std": "adds it to the std: (s - mean) / (std + eps)",
            "var": "puts it inside the square root: (s - mean) / sqrt(var + eps)"}),
    Switch("singleton", "a group of one response",
           {"zero": "gets advantage 0 (its own mean is its baseline)",
            "raw": "keeps its score (mean 0, std 1)"}),
    Switch("clip_ratio_high", "the upper clip bound", {}, default="is 1 + {v:g}"),
    Switch("delta", "the unclipped ratio", {None: "is not bounded"},
           default="is bounded above by delta = {v:g} (two-sided clipping)"),
    Switch("beta", "the KL coefficient in the loss", {0.0: "is 0 (no KL term)"},
           default="is {v:g}"),
    Switch("kl_loss_coef", "the KL loss coefficient", {0.0: "is 0 (no KL term)"},
           default="is {v:g}"),
    Switch("init_kl_coef", "the KL coefficient", {0.0: "is 0 (no KL term)"},
           default="is {v:g}"),
    Switch("kl_loss_type", "the KL loss's estimator and gradient", _VERL_KL_LOSS_TYPES),
    # the KL term's gradient forms (ppo_numpy.ppo.kl_gradient)
    Switch("kl_unbiased_gradient", "the KL loss's gradient",
           {True: "is min(pi_theta / pi_old, bound) (logp - logp_ref) per token, the "
                  "estimate's value kept (OpenRLHF's unbiased_gradient: importance-weighted "
                  "k2, the weight a constant)",
            False: "is the estimate's own derivative"}),
    Switch("kl_gradient", "the KL term's gradient",
           {None: "is the form the framework's own option gives",
            "plain": "is the estimate's own derivative",
            "ratio": "is that of KL_t times the ratio pi_theta / pi_old, both differentiated "
                     "(TRL's use_bias_correction_kl)",
            "straight_through": "is k2's, logp - logp_ref, the estimate's value kept (verl's "
                                "'+')",
            "importance": "is min(pi_theta / pi_old, 10) (logp - logp_ref), the estimate's "
                          "value kept (OpenRLHF's unbiased_gradient)"}),
    Switch("kl_is_bound", "the KL gradient's importance weight",
           {None: "is pi_theta / pi_old, unbounded"},
           default="is min(pi_theta / pi_old, {v:g}) (OpenRLHF's KL_IS_WEIGHT_CLIP is 10)"),
    Switch("log_ratio_max", "GSPO's sequence log-ratio", {None: "is not capped"},
           default="is capped at {v:g} before exp"),
    Switch("max_completion_length", "Dr. GRPO's constant length",
           {None: "is the batch's padded width T"}, default="is {v!r}"),
    Switch("cispo_clip", "CISPO's weight",
           {"max": "is min(rho, epsilon_high): epsilon_high is the bound itself",
            "range": "is clip(rho, 1 - epsilon, 1 + epsilon_high)"}),
    # the rollout correction (a case with logp_rollout)
    Switch("is_log_ratio_bound", "the rollout correction's log-ratio",
           {None: "is not bounded before exp (TRL, OpenRLHF)"},
           default="is clamped to [-{v:g}, {v:g}] before exp (verl's SAFETY_BOUND is 20)"),
    Switch("value_clip_form", "the clipped value",
           {"offset": "is V_old + clip(V - V_old, -c, c)",
            "clamp": "is clamp(V, V_old - c, V_old + c)"}),
    # the optimizer step over ranks and micro-batches (a case with a layout; ppo_numpy.step)
    Switch("normaliser", "each micro-batch's loss in a step of several",
           {"global": "divides by the whole step's count (every micro-batch of every rank): "
                      "the step's gradient is the full batch's",
            "micro-batch-mean": "is the micro-batch's own mean divided by its rank's number "
                                "of micro-batches (the transformers Trainer before 4.46, "
                                "the 2024 gradient-accumulation bug)",
            "local": "is the micro-batch's own mean, not divided by the micro-batches "
                     "(their gradients add)",
            "trl": "follows TRL 1.16's two rules (grpo, bnpo, dr_grpo: the micro-batch's own "
                   "mean / K; dapo, cispo, vespo: divided by the generation batch's tokens "
                   "/ processes * K / steps_per_generation)",
            "verl": "divides by the step's all-reduced token count or its rows (verl 0.9.1 "
                    "agg_loss with batch_num_tokens, global_batch_size, dp_size)",
            "openrlhf": "divides by the step's tokens (or rows with a token) summed over its "
                        "micro-batches and ranks (OpenRLHF 0.11.2 "
                        "iter_grad_accum_global_norm)"},
           needs_layout=True),
):
    add_switch(_s)

# the members of the policy-loss family and their options
for _p in ("importance_sampling_level", "loss_mode", "policy_loss_type", "loss_type",
           "cispo_clip", "log_ratio_max", "delta"):
    SWITCHES[_p] = replace(SWITCHES[_p], kind="loss family")
SWITCHES["is_log_ratio_bound"] = replace(SWITCHES["is_log_ratio_bound"], kind="third policy")


def _threshold(v) -> str:
    """verl's rollout_is_threshold: a number truncates, "a_b" masks outside [a, b]."""
    if isinstance(v, str) and "_" in v:
        low, high = v.split("_", 1)
        return f"masks the weights outside [{low}, {high}] (IcePop)"
    return f"truncates the weights at {float(v):g} (TIS)"


_STATISTICS = {"token": "each token's", "seq_sum": "the response's summed",
               "seq_mean": "the response's mean", "seq_max": "the response's largest"}
_ESTIMATORS = {"k1": "k1 = log(pi_rollout / pi_old) inside the threshold's band",
               "k2": "k2 = (log w)^2 / 2 at most the threshold",
               "k3": "k3 = w - 1 - log w at most the threshold"}


def _criteria(v) -> str:
    """verl's rollout_rs: comma-separated criteria, all required."""
    if not isinstance(v, str):
        return f"is {v!r}"
    parts = []
    for c in (c.strip() for c in v.split(",") if c.strip()):
        where, _, est = c.rpartition("_")
        parts.append(f"{_STATISTICS.get(where, where)} {_ESTIMATORS.get(est, est)}")
    return f"keeps a token when {' and '.join(parts)} ({v})"


def _band(v) -> str:
    """OpenRLHF's is_correction_threshold: [low, high], or one number h: [0, h]."""
    values = list(v) if isinstance(v, (tuple, list)) else [0.0, v]
    return f"is [{float(values[0]):g}, {float(values[-1]):g}]"


for _s in (
    # TRL 1.16.0: the vLLM importance sampling and the off-policy mask
    Switch("vllm_importance_sampling_correction", "TRL's vLLM importance sampling",
           {True: "is applied (vLLM generated the batch)", False: "is not applied"},
           kind="third policy"),
    Switch("vllm_importance_sampling_mode", "the vLLM importance weight",
           {"token_truncate": "is each token's ratio, truncated to [clip_min, clip_max]",
            "token_mask": "is each token's ratio, 0 outside [clip_min, clip_max]",
            "sequence_truncate": "is the response's ratio (the product of its token ratios), "
                                 "truncated to [clip_min, clip_max]",
            "sequence_mask": "is the response's ratio (the product of its token ratios), 0 "
                             "outside [clip_min, clip_max]"}, kind="third policy"),
    Switch("vllm_importance_sampling_clip_min", "the vLLM weight's lower bound",
           {None: "is absent"}, default="is {v:g}", kind="third policy"),
    Switch("vllm_importance_sampling_clip_max", "the vLLM weight's upper bound",
           {None: "is absent"}, default="is {v:g}", kind="third policy"),
    Switch("off_policy_mask_threshold", "the off-policy sequence mask", {None: "is off"},
           default="drops a response with A < 0 whose mean log-ratio of the sampler over the "
                   "current policy exceeds {v:g}", kind="third policy"),
    Switch("off_policy_mask_logps", "the off-policy mask's log-ratio",
           {"sampling-current": "is the sampler's log-probs (logp_rollout under vLLM, else "
                                "logp_old) minus the current ones",
            "old-current": "is logp_old minus the current log-probs, logp_rollout unread",
            "sampling-old": "is the sampler's log-probs minus logp_old, the current ones "
                            "unread"}, kind="third policy"),
    Switch("use_bias_correction_kl", "the KL term",
           {True: "is KL_t times the ratio, differentiated (TRL's importance-sampling bias "
                  "correction)", False: "is the plain estimate KL_t"}, kind="third policy"),
    # verl 0.9.1: algorithm.rollout_correction
    Switch("rollout_is", "verl's rollout importance weight",
           {None: "is off", "token": "is per token",
            "sequence": "is one per response (the product of its token ratios)"},
           kind="third policy"),
    Switch("rollout_is_threshold", "the rollout weights' threshold", {},
           default="is v: a number truncates the weights at it (TIS), 'a_b' zeroes those "
                   "outside [a, b] (IcePop)", kind="third policy", describe=_threshold),
    Switch("rollout_is_batch_normalize", "the rollout weights",
           {True: "are divided by their batch mean (of the tokens, or of the responses at the "
                  "sequence level)", False: "are not normalised"}, kind="third policy"),
    Switch("rollout_rs", "verl's rejection sampling", {None: "is off"},
           default="keeps a token by the criteria v", kind="third policy", describe=_criteria),
    Switch("rollout_rs_threshold", "the rejection threshold", {None: "is absent"},
           kind="third policy"),
    Switch("bypass_mode", "verl's bypass mode",
           {True: "is on: logp_old is the rollout's, and the weights and the rejection read "
                  "the current log-probs", False: "is off: the weights read logp_old against "
                                                  "logp_rollout"}, kind="third policy"),
    Switch("rollout_loss_type", "the bypass mode's loss",
           {"ppo_clip": "is PPO-clip with the ratio pi_theta / pi_rollout, no weights",
            "reinforce": "is -A w logp with the rollout weights"}, kind="third policy"),
    # OpenRLHF 0.11.2: --algo.advantage.is_correction_*
    Switch("is_correction_level", "OpenRLHF's rollout correction",
           {"off": "is off", "token": "gates each token", "seq": "gates each response"},
           kind="third policy"),
    Switch("is_correction_mode", "the correction's bounds",
           {"mask": "zero a unit outside them (a kept token keeps its unclamped ratio)",
            "clip": "clamp the token ratio to them"}, kind="third policy"),
    Switch("is_correction_gating", "the correction's gate",
           {"ratio": "reads the ratio (of a response: the geometric mean)",
            "binary_kl": "reads the binary KL of the sampled token's two probabilities",
            "tv": "reads their total variation"}, kind="third policy"),
    Switch("is_correction_threshold", "the correction's band", {}, default="is [low, high]",
           kind="third policy", describe=_band),
    # the conventions no framework names (ppo_numpy/oracle/presets/_third_policy.py)
    Switch("is_sequence_weight", "a response's ratio (the sequence weight, or the gate)",
           {"product": "is the product of its token ratios, exp(sum_t log w_t)",
            "geometric-mean": "is the geometric mean of its token ratios, "
                              "exp(mean_t log w_t)"}, kind="third policy"),
    Switch("rejection", "a rejected token",
           {"mask": "leaves the response mask: the loss's denominators drop it",
            "weight": "stays in the mask with weight 0: the loss's denominators count it"},
           kind="third policy"),
    Switch("masked_weights", "a weight masked outside its bounds",
           {"zero": "is 0, its token kept in the loss's denominators",
            "drop": "takes its token out of the loss's mask (the denominators shrink)"},
           kind="third policy"),
    Switch("is_weights_on_kl", "the rollout weight",
           {False: "multiplies the policy term only, not the KL term",
            True: "multiplies the KL term too"}, kind="third policy"),
    Switch("is_weights_detach", "the rollout weight's gradient",
           {True: "is none: the weight is detached",
            False: "flows: the weight is differentiated through the current log-probs it "
                   "reads"}, kind="third policy"),
    Switch("gmpo_weight_mean", "GMPO's weight of a response",
           {"geometric": "is the geometric mean of its token weights, exp(mean_t log(w_t + "
                         "1e-10))", "arithmetic": "is the arithmetic mean of its token weights"},
           kind="third policy"),
    Switch("sequence_gradient", "GSPO's gradient",
           {"sequence": "differentiates the sequence ratio s_i: each token gets the "
                        "response's mean term (TRL, OpenRLHF, the paper)",
            "token": "sends token t's gradient through its own log-prob only, sg(s_i) pi_t / "
                     "sg(pi_t) (verl)"}, kind="loss family"),
    # the members' options
    Switch("sapo_temperature_neg", "SAPO's temperature for A <= 0", {}, default="is {v:g}",
           kind="loss family"),
    Switch("tau_neg", "SAPO's temperature for A <= 0", {}, default="is {v:g}",
           kind="loss family"),
    Switch("vespo_k_pos", "VESPO's shape k for A >= 0", {}, default="is {v:g}",
           kind="loss family"),
    Switch("vespo_lambda_pos", "VESPO's rate lambda for A >= 0", {}, default="is {v:g}",
           kind="loss family"),
):
    add_switch(_s)

# the settings that apply to a case with the sampler's log-probs only: verl 0.9.1 skips its
# correction on a batch without rollout_log_probs, TRL 1.16.0 corrects only a batch vLLM
# generated, OpenRLHF 0.11.2's PolicyLoss reads rollout_log_probs (TRL's off-policy mask, its
# KL correction and the weights it makes apply without: not listed)
for _p in ("is_log_ratio_bound", "vllm_importance_sampling_correction",
           "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
           "vllm_importance_sampling_clip_max", "rollout_is", "rollout_is_threshold",
           "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold", "bypass_mode",
           "rollout_loss_type", "is_correction_level", "is_correction_mode",
           "is_correction_gating", "is_correction_threshold", "is_sequence_weight",
           "masked_weights", "is_weights_detach", "gmpo_weight_mean"):
    SWITCHES[_p] = replace(SWITCHES[_p], needs="logp_rollout")


PRESET_SWITCHES = {}
"""preset name -> {param: (alternatives, the framework's source for its own value)}."""


def register_switches(preset: str, switches: dict) -> None:
    """Register, for ``preset``, ``{param: (alternatives, source)}``; merged with earlier ones.

    Every param must be in :data:`SWITCHES` (ValueError otherwise, naming it).
    """
    for param, entry in switches.items():
        if param not in SWITCHES:
            raise ValueError(f"switch: {param!r} is not in the table; add it with add_switch")
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], tuple)):
            raise ValueError(f"switch {param!r}: expected (alternatives tuple, source), got "
                             f"{entry!r}")
    PRESET_SWITCHES.setdefault(preset, {}).update(switches)


def switches_for(preset, cases=()) -> dict:
    """``{param: (alternatives, source)}`` registered for ``preset`` (a Preset or a name), the
    alternatives restricted to values other than the preset's own, but for a value that
    differs from what one of ``cases`` sets in its params (``beta=0.0`` is TRL's default,
    and still an alternative on a case that sets ``beta=0.04``); a switch of the step
    (``Switch.needs_layout``) only when one of ``cases`` carries a layout."""
    name = preset if isinstance(preset, str) else preset.name
    own = {} if isinstance(preset, str) else preset.parameters
    layout = any(c.get("layout") is not None for c in cases)
    out = {}
    for param, (alternatives, source) in PRESET_SWITCHES.get(name, {}).items():
        if SWITCHES[param].needs_layout and not layout:
            continue  # (a convention of the step: no case here has one)
        set_by_cases = {_key(c.get("params", {})[param]) for c in cases
                        if param in c.get("params", {})}
        alts = tuple(a for a in alternatives if param not in own or a != own[param]
                     or any(v != _key(a) for v in set_by_cases))
        if alts:
            out[param] = (alts, source)
    return out


def _key(value):
    """A hashable stand-in for a parameter value (a list of bounds becomes a tuple)."""
    return tuple(value) if isinstance(value, list) else value


def explain_switch(preset, param: str, value, cases=()) -> str:
    """The sentence: what code with ``param=value`` does and what ``preset`` does, with its
    source, e.g. "the whitening's variance: yours is the population variance (divides by n,
    ddof 0); verl's has Bessel's correction (divides by n - 1, ddof 1)
    (verl/utils/torch_functional.py masked_var)"; ``cases`` that set ``param`` add what
    they set."""
    switch = SWITCHES[param]
    own = preset.parameters[param]
    source = PRESET_SWITCHES.get(preset.name, {}).get(param, ((), ""))[1]
    where = f" ({source})" if source else ""
    set_by = {_key(c["params"][param]) for c in cases if param in c.get("params", {})}
    also = "".join(f", and {switch.phrase(v)} on the cases that set it" for v in
                   sorted(set_by, key=repr) if v != own)
    return (f"{switch.topic}: yours {switch.phrase(value)}; {preset.name}'s "
            f"{switch.phrase(own)}{also}{where}")


def markdown_table(kinds=("objective", "loss family")) -> str:
    """The switches of :data:`SWITCHES` of ``kinds`` (:data:`KINDS`) as the markdown table of
    ``docs/oracle.md`` (a test keeps them equal)."""
    lines = ["| switch | about | values |", "|---|---|---|"]
    for s in SWITCHES.values():
        if s.kind in kinds:
            lines.append(f"| `{s.param}` | {s.topic} | {_values(s)} |")
    return "\n".join(lines)


def _values(s: Switch) -> str:
    values = "; ".join(f"`{k!r}`: {v}" for k, v in s.means.items())
    if not s.means or s.default != "is {v!r}":
        other = s.default
        for field_ in ("{v!r}", "{v:g}", "{v}"):
            other = other.replace(field_, "v")
        values = (values + "; otherwise " if values else "`v`: ") + other
    return values


THIRD_POLICY_PRESETS = ("trl-grpo", "verl-grpo", "openrlhf-grpo")


def third_policy_table(presets=THIRD_POLICY_PRESETS) -> str:
    """The third policy's switches (and the loss family's GSPO gradient) per preset: the
    framework's own value and the alternatives the diagnosis tries, "-" where the framework
    has no such option (the table of ``docs/oracle.md``, "The third policy's switches")."""
    from .presets import get_preset

    objs = [get_preset(n) for n in presets]
    lines = ["| switch | about | " + " | ".join(f"`{n}`" for n in presets) + " |",
             "|---|---|" + "---|" * len(presets)]
    for s in SWITCHES.values():
        if s.kind != "third policy" and s.param != "sequence_gradient":
            continue
        cells = []
        for preset in objs:
            entry = PRESET_SWITCHES.get(preset.name, {}).get(s.param)
            if entry is None:
                cells.append("-")
                continue
            own = preset.parameters[s.param]
            tried = ", ".join(f"`{a!r}`" for a in entry[0] if a != own)
            also = (f" (and `{own!r}` on the cases that set another)" if own in entry[0]
                    else "")
            cells.append(f"`{own!r}`; tried {tried}{also}")
        lines.append(f"| `{s.param}` | {s.topic} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Per preset: the alternatives worth trying and the framework's source for its own value

_EPS = (0.0, 1e-6, 1e-5)
_AGG = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _masked_whiten(module: str, mask: str) -> dict:
    """The whitening switches of a framework whose ``module`` has TRL's ``masked_var`` and
    ``masked_whiten`` (TRL, TRL 0.11 and verl), called on the advantages and ``mask``."""
    return {
        "whiten_ddof": ((0,), f"{module} masked_var, unbiased=True"),
        "whiten_eps": (_EPS, f"{module} masked_whiten: rsqrt(var + 1e-8)"),
        "whiten_eps_mode": (("floor",), f"{module} masked_whiten"),
        "whiten_mask": (("all",), f"{module} masked_whiten(advantages, {mask})"),
        "shift_mean": ((False,), f"{module} masked_whiten, shift_mean=True"),
    }


register_switches("seed", {
    "score_position": (("after-last", "last-column"), "docs/objective.md: r~_T = -beta KL_T "
                       "+ score at the last token"),
    "gae_holes": (("decay",), "docs/conventions.md section 12"),
    "whiten_advantages": ((True,), "docs/objective.md: A_hat as GAE gives it"),
    "kl_estimator": (("k2", "k3", "abs"), "docs/objective.md: KL_t = logp - logp_ref"),
    "kl_clamp": ((10.0,), "docs/objective.md"),
    "kl_in": (("loss",), "docs/objective.md: r~_t = -beta KL_t + ..."),
    "log_ratio_clamp": ((20.0,), "docs/objective.md: rho = exp(logp - logp_old)"),
    "dual_clip": ((3.0,), "docs/objective.md"),
    "epsilon_high": ((0.28,), "docs/objective.md: clip(rho, 1 - eps, 1 + eps)"),
    "policy_agg": (_AGG, "docs/objective.md: L_PPO sums over tokens, means over responses"),
    "value_agg": (_AGG, "ppo_numpy.aggregate default"),
})
register_switches("trl", {
    "score_position": (("last-token", "last-column"), "trl/trainer/ppo_trainer.py "
                       "PPOTrainer.train: scores at sequence_lengths_p1"),
    **_masked_whiten("trl/core.py", "~padding_mask"),
    "whiten_rewards": ((True,), "trl/trainer/ppo_config.py whiten_rewards=False"),
    "kl_estimator": (("k3",), "trl/trainer/ppo_config.py kl_estimator='k1'"),
    "kl_clamp": ((10.0,), "trl/trainer/ppo_trainer.py PPOTrainer.train"),
    "kl_in": (("loss",), "trl/trainer/ppo_trainer.py PPOTrainer.train: non_score_reward"),
    "log_ratio_clamp": ((20.0,), "trl/trainer/ppo_trainer.py: ratio = exp(logprobs_diff)"),
    "dual_clip": ((3.0,), "trl/trainer/ppo_trainer.py PPOTrainer.train"),
    "epsilon_high": ((0.28,), "trl/trainer/ppo_trainer.py: clamp(ratio, 1 - cliprange, "
                     "1 + cliprange)"),
    "value_clip_form": (("offset",), "trl/trainer/ppo_trainer.py: torch.clamp(vpred, "
                        "mb_values - cliprange_value, mb_values + cliprange_value)"),
})
register_switches("trl-0.11", {
    "score_position": (("after-last", "last-column"), "trl/trainer/ppo_trainer.py "
                       "compute_rewards: mask.nonzero()[-1]"),
    "gae_holes": (("skip",), "trl/trainer/ppo_trainer.py compute_advantages"),
    **_masked_whiten("trl/core.py", "mask"),
    "kl_estimator": (("k2", "abs"), "trl/trainer/ppo_config.py kl_penalty='kl'"),
    "kl_clamp": ((10.0,), "trl/trainer/ppo_trainer.py _kl_penalty"),
    "value_clip_form": (("offset",), "trl/trainer/ppo_trainer.py loss: clip_by_value(vpreds, "
                        "values - cliprange_value, values + cliprange_value)"),
})
_VERL_ALGOS = "verl/trainer/ppo/core_algos.py"
_VERL_VANILLA = f"{_VERL_ALGOS} compute_policy_loss_vanilla"
_VERL_AGG = (_AGG, f"{_VERL_ALGOS} agg_loss, loss_agg_mode='token-mean'")
register_switches("verl", {
    "score_position": (("after-last", "last-column"), "verl/workers/reward_manager/naive.py: "
                       "reward_tensor[i, valid_response_length - 1]"),
    "gae_holes": (("decay",), f"{_VERL_ALGOS} compute_gae_advantage_return"),
    **_masked_whiten("verl/utils/torch_functional.py", "response_mask"),
    "use_kl_in_reward": ((True,), "verl/trainer/ppo/ray_trainer.py apply_kl_penalty, "
                         "algorithm.use_kl_in_reward=False"),
    "use_kl_loss": ((True,), "verl/trainer/config/_generated_ppo_trainer.yaml "
                    "actor.use_kl_loss=False"),
    "kl_loss_type": (("low_var_kl+", "low_var_kl"), f"{_VERL_ALGOS} kl_penalty (lines "
                     "2188-2213), actor.kl_loss_type='low_var_kl'"),
    # (another framework's KL gradient form: named where a verl candidate takes it)
    "kl_gradient": (("ratio", "importance"), f"{_VERL_ALGOS} kl_penalty (lines 2188-2213): "
                    "the form of actor.kl_loss_type"),
    "log_ratio_clamp": ((None,), f"{_VERL_VANILLA}: clamp(log_prob - old_log_prob, -20, 20)"),
    "dual_clip": ((None,), f"{_VERL_VANILLA}, clip_ratio_c=3"),
    "epsilon_high": ((0.28,), f"{_VERL_VANILLA}, clip_ratio_high=0.2"),
    "loss_agg_mode": _VERL_AGG,
    "value_clip_form": (("offset",), f"{_VERL_ALGOS} compute_value_loss: clip_by_value(vpreds, "
                        "values - cliprange_value, values + cliprange_value)"),
})
_OPENRLHF_ADV = "experience_maker.py compute_advantages_and_returns"
_OPENRLHF_KL = "openrlhf 0.11.2 openrlhf/models/utils.py compute_approx_kl (lines 121-128)"
#: OpenRLHF's KL loss's gradient: unbiased_gradient, and the bound of its weight
_OPENRLHF_KL_GRADIENT = {
    "kl_unbiased_gradient": ((True, False), f"{_OPENRLHF_KL}, --algo.kl.unbiased_gradient "
                             "False"),
    "kl_gradient": (("ratio", "straight_through"), f"{_OPENRLHF_KL}: the form of "
                    "--algo.kl.unbiased_gradient"),
    "kl_is_bound": ((None,), f"{_OPENRLHF_KL}: w = exp(log_probs - log_probs_old)"
                    ".clamp(max=KL_IS_WEIGHT_CLIP), KL_IS_WEIGHT_CLIP = 10.0 (line 66)"),
}
_OPENRLHF_PL = "openrlhf/models/loss.py PolicyLoss"
register_switches("openrlhf", {
    "score_position": (("after-last", "last-column"), "openrlhf/models/utils.py "
                       "compute_reward: eos_indices"),
    "gae_holes": (("skip",), "openrlhf/trainer/ppo_utils/experience_maker.py "
                  "get_advantages_and_returns"),
    "whiten_ddof": ((1,), f"openrlhf/trainer/ppo_utils/{_OPENRLHF_ADV}: var = masked mean of "
                    "(A - mean)^2"),
    "whiten_eps": (_EPS, f"{_OPENRLHF_ADV}: var.clamp(min=1e-8).rsqrt()"),
    "whiten_eps_mode": (("add",), f"{_OPENRLHF_ADV}: var.clamp(min=1e-8).rsqrt()"),
    "whiten_mask": (("all",), f"{_OPENRLHF_ADV}: over action_mask"),
    "shift_mean": ((False,), f"{_OPENRLHF_ADV}: (A - mean) * rstd"),
    "kl_estimator": (("k2", "k3"), "openrlhf/models/utils.py compute_approx_kl, "
                     "--kl_estimator k1"),
    "kl_clamp": ((None,), "openrlhf/models/utils.py compute_approx_kl: "
                 "log_ratio.clamp(min=-10, max=10)"),
    "log_ratio_clamp": ((None,), f"{_OPENRLHF_PL}: (log_probs - old_log_probs).clamp(-20, 20)"),
    "dual_clip": ((3.0,), f"{_OPENRLHF_PL}, --dual_clip None"),
    "epsilon_high": ((0.28,), f"{_OPENRLHF_PL}, eps_clip 0.2"),
    "loss_agg_mode": (("seq-mean-token-mean",), "openrlhf/models/loss.py aggregate_loss, "
                      "token-mean"),
    "use_kl_loss": ((True,), "openrlhf/trainer/ppo_utils/experience_maker.py make_experience: "
                    "the KL in the rewards unless --algo.kl.use_loss"),
    **_OPENRLHF_KL_GRADIENT,
})
# why: OpenRLHF and DeepSpeed-Chat log no value clip fraction, and the two forms of the
# value clip change their value loss and gradient by an ulp at most: value_clip_form is
# set to their form (exactness) but no output can show a wrong one, so it is not tried
register_switches("lm-human-preferences", {
    "whiten_rewards": ((False,), "lm_human_preferences/train_policy.py RewardHParams "
                       "whiten=True"),
    "value_clip_form": (("offset",), "lm_human_preferences/train_policy.py loss: "
                        "tf.clip_by_value(vpred, values - c, values + c)"),
})
# The critic-free presets: facts from the released wheels (trl 1.16.0, verl 0.9.1, openrlhf
# 0.11.2), file and function named in each source line
_TRL_GRPO = "trl 1.16.0 trl/trainer/grpo_trainer.py"
_TRL_ADV = f"{_TRL_GRPO} _generate_and_score_completions"
_TRL_LOSS = f"{_TRL_GRPO} _compute_loss"
_STD_EPS = (1e-4, 1e-6, 1e-8, 0.0)
register_switches("trl-grpo", {
    "scale_rewards": (("batch", "none"), f"{_TRL_ADV}, GRPOConfig.scale_rewards='group'"),
    "std_ddof": ((0,), "trl 1.16.0 trl/trainer/utils.py nanstd: Bessel's correction "
                 "count / (count - 1)"),
    "std_eps": (_STD_EPS, f"{_TRL_ADV}: advantages / (std_rewards + 1e-4)"),
    "std_eps_placement": (("var",), f"{_TRL_ADV}: advantages / (std_rewards + 1e-4)"),
    "singleton": (("raw",), f"{_TRL_ADV}: a group of one is its own mean (advantage 0)"),
    "epsilon_high": ((0.28,), f"{_TRL_LOSS}: clamp(coef_1, 1 - epsilon_low, 1 + "
                     "epsilon_high), GRPOConfig.epsilon_high=None (= epsilon)"),
    "delta": ((1.5,), f"{_TRL_LOSS}: GRPOConfig.delta=None (no two-sided clipping)"),
    "importance_sampling_level": (("sequence",), f"{_TRL_LOSS}, "
                                  "GRPOConfig.importance_sampling_level='token'"),
    # why: bnpo is dapo for one batch on one process (both divide by the batch's tokens)
    "loss_type": (("grpo", "dr_grpo"), f"{_TRL_LOSS}, GRPOConfig.loss_type='dapo'"),
    "max_completion_length": ((None, 16), f"{_TRL_LOSS}: dr_grpo divides by size(0) * "
                              "max_completion_length, GRPOConfig.max_completion_length=512"),
    "beta": ((0.0, 0.1), f"{_TRL_LOSS}: per_token_loss + beta * per_token_kl, "
             "GRPOConfig.beta=0.0"),
    "kl_estimator": (("k1", "k2"), f"{_TRL_LOSS}: per_token_kl = exp(ref - logp) - (ref - "
                     "logp) - 1 (k3)"),
    "log_ratio_clamp": ((20.0,), f"{_TRL_LOSS}: coef_1 = exp(log_ratio), no clamp"),
    "cispo_clip": (("range",), f"{_TRL_LOSS}: clamp(coef_1, max=epsilon_high).detach()"),
    "is_log_ratio_bound": ((20.0,), f"{_TRL_ADV}: exp(old_per_token_logps - "
                           "sampling_per_token_logps), no bound"),
})
_VERL = "verl 0.9.1 verl/trainer/ppo/core_algos.py"
_VERL_GRPO_ADV = f"{_VERL} compute_grpo_outcome_advantage"
register_switches("verl-grpo", {
    "norm_adv_by_std_in_grpo": ((False,), f"{_VERL_GRPO_ADV}, norm_adv_by_std_in_grpo=True"),
    "std_ddof": ((0,), f"{_VERL_GRPO_ADV}: torch.std (unbiased)"),
    "std_eps": (_STD_EPS, f"{_VERL_GRPO_ADV}: / (id2std + epsilon), epsilon=1e-6"),
    "std_eps_placement": (("var",), f"{_VERL_GRPO_ADV}: / (id2std + epsilon)"),
    "singleton": (("zero",), f"{_VERL_GRPO_ADV}: a group of one has id2mean 0, id2std 1"),
    "adv_estimator": (("rloo",), f"{_VERL}, algorithm.adv_estimator='grpo'"),
    "clip_ratio_high": ((0.28,), f"{_VERL} compute_policy_loss_vanilla, "
                        "actor.clip_ratio_high=0.2"),
    "loss_mode": (("gspo",), f"{_VERL} compute_policy_loss_vanilla, "
                  "actor.policy_loss.loss_mode='vanilla'"),
    "loss_agg_mode": (_AGG, f"{_VERL} agg_loss, actor.loss_agg_mode='token-mean'"),
    "use_kl_loss": ((True,), "verl 0.9.1 actor.use_kl_loss=False"),
    "kl_loss_coef": ((0.0, 0.1), "verl 0.9.1 actor.kl_loss_coef=0.001"),
    "kl_loss_type": (("k1", "k2", "abs", "low_var_kl+", "low_var_kl"),
                     f"{_VERL} kl_penalty (lines 2188-2213), "
                     "actor.kl_loss_type='low_var_kl'"),
    "kl_gradient": (("ratio", "importance"), f"{_VERL} kl_penalty (lines 2188-2213): the "
                    "form of actor.kl_loss_type"),
    "use_kl_in_reward": ((True,), "verl 0.9.1 verl/trainer/ppo/ray_trainer.py "
                         "apply_kl_penalty, algorithm.use_kl_in_reward=False"),
    "log_ratio_clamp": ((None,), f"{_VERL} compute_policy_loss_vanilla: "
                        "clamp(negative_approx_kl, min=-20.0, max=20.0)"),
    "cispo_clip": (("max",), f"{_VERL} compute_policy_loss_cispo: clamp(ratio, 1 - "
                   "clip_ratio_low, 1 + clip_ratio_high)"),
    "log_ratio_max": ((None,), f"{_VERL} compute_policy_loss_gspo: "
                      "clamp(log_seq_importance_ratio, max=10.0)"),
    "is_log_ratio_bound": ((None,), "verl 0.9.1 verl/trainer/ppo/rollout_corr_helper.py "
                           "compute_rollout_correction_weights: clamp(log_ratio, "
                           "-SAFETY_BOUND, SAFETY_BOUND), SAFETY_BOUND = 20"),
})
_ORLHF = "openrlhf 0.11.2 openrlhf"
_ORLHF_ADV = f"{_ORLHF}/trainer/ppo_utils/experience_maker.py compute_advantages_and_returns"
_ORLHF_PL = f"{_ORLHF}/models/loss.py PolicyLoss"
register_switches("openrlhf-grpo", {
    "advantage_estimator": (("rloo", "dr_grpo"), f"{_ORLHF_ADV}, "
                            "--advantage_estimator group_norm"),
    "std_ddof": ((0,), f"{_ORLHF_ADV}: rewards.std(-1) (unbiased)"),
    # why: no 0.0 (absent) here: OpenRLHF's returns-to-go of the NaN that 0 / 0 gives a
    # group of equal scores is refused by the preset, so no case could show it matches
    "std_eps": (_STD_EPS[:3], f"{_ORLHF_ADV}: / (rewards.std(-1) + 1e-9)"),
    "std_eps_placement": (("var",), f"{_ORLHF_ADV}: / (rewards.std(-1) + 1e-9)"),
    "epsilon_high": ((0.28,), f"{_ORLHF_PL}: clamp(1 - clip_eps_low, 1 + clip_eps_high), "
                     "--eps_clip 0.2"),
    "policy_loss_type": (("gspo",), f"{_ORLHF_PL}, --policy_loss_type ppo"),
    "dual_clip": ((3.0,), f"{_ORLHF_PL}, --dual_clip None"),
    "use_kl_loss": ((True,), f"{_ORLHF_ADV}: the KL in the rewards (compute_reward) "
                    "unless --use_kl_loss"),
    "init_kl_coef": ((0.0, 0.1), f"{_ORLHF_ADV}: kl_ctl.value, --init_kl_coef 0.01"),
    "kl_estimator": (("k2", "k3"), f"{_ORLHF}/models/utils.py compute_approx_kl, "
                     "--kl_estimator k1"),
    "log_ratio_clamp": ((None,), f"{_ORLHF_PL}: ppo's log-ratio clamp(min=-20.0, max=20.0)"),
    **_OPENRLHF_KL_GRADIENT,
})

# The third policy and the loss family of the critic-free presets (issue 36): each option of
# the frameworks' corrections and losses, and the conventions no framework names
# (ppo_numpy/oracle/presets/_third_policy.py); the default cases that exercise them are the
# rollout-* and *-loss cases of ppo_numpy/oracle/group_cases.py
_TRL_CFG = "trl 1.16.0 trl/trainer/grpo_config.py GRPOConfig"
_TRL_IS = f"{_TRL_ADV}: the vLLM importance_sampling_ratio"
register_switches("trl-grpo", {
    "vllm_importance_sampling_correction": ((False,), f"{_TRL_IS}, "
                                            f"{_TRL_CFG}.vllm_importance_sampling_correction"
                                            "=True"),
    "vllm_importance_sampling_mode": (("token_truncate", "token_mask", "sequence_truncate",
                                       "sequence_mask"),
                                      f"{_TRL_IS}, {_TRL_CFG}.vllm_importance_sampling_mode="
                                      "'sequence_mask'"),
    "vllm_importance_sampling_clip_min": ((0.5, None), f"{_TRL_IS}, "
                                          f"{_TRL_CFG}.vllm_importance_sampling_clip_min=None"),
    "vllm_importance_sampling_clip_max": ((2.0, 5.0, 3.0), f"{_TRL_IS}, "
                                          f"{_TRL_CFG}.vllm_importance_sampling_clip_max=3.0"),
    "off_policy_mask_threshold": ((None, 0.05), f"{_TRL_GRPO} get_off_policy_mask, "
                                  f"{_TRL_CFG}.off_policy_mask_threshold=None"),
    "off_policy_mask_logps": (("old-current", "sampling-old"),
                              f"{_TRL_LOSS}: get_off_policy_mask(sampling_per_token_logps, "
                              "per_token_logps.detach())"),
    "use_bias_correction_kl": ((False,), f"{_TRL_LOSS}: per_token_kl * coef_1, "
                               f"{_TRL_CFG}.use_bias_correction_kl=True"),
    "kl_gradient": (("straight_through", "importance"), f"{_TRL_LOSS}: per_token_kl * coef_1 "
                    "(lines 3104-3105), the form of use_bias_correction_kl"),
    "is_sequence_weight": (("geometric-mean",), f"{_TRL_ADV}: exp(per_token_logps_diff"
                           ".sum(dim=-1))"),
    "rejection": (("mask",), f"{_TRL_LOSS}: per_token_loss * off_policy_mask, the mask of "
                  "the normalisation unchanged"),
    "masked_weights": (("drop",), f"{_TRL_ADV}: masked_fill(invalid_mis_mask, value=0.0), the "
                       "completion mask unchanged"),
    "is_weights_on_kl": ((True,), f"{_TRL_LOSS}: per_token_loss * importance_sampling_ratio, "
                         "then + beta * per_token_kl"),
    "loss_type": (("grpo", "dr_grpo", "cispo", "luspo", "sapo", "vespo", "dapo"),
                  f"{_TRL_LOSS}, {_TRL_CFG}.loss_type='dapo'"),
    "sapo_temperature_neg": ((1.0,), f"{_TRL_LOSS}: torch.where(advantages > 0, "
                             f"sapo_temperature_pos, sapo_temperature_neg), "
                             f"{_TRL_CFG}.sapo_temperature_neg=1.05"),
    "vespo_k_pos": ((3.0,), f"{_TRL_GRPO} get_gamma_weights, {_TRL_CFG}.vespo_k_pos=2.0"),
    "vespo_lambda_pos": ((2.0,), f"{_TRL_GRPO} get_gamma_weights, "
                         f"{_TRL_CFG}.vespo_lambda_pos=3.0"),
})
_VERL_RC = "verl 0.9.1 verl/trainer/ppo/rollout_corr_helper.py"
_VERL_YAML = "verl/trainer/config/_generated_ppo_trainer.yaml algorithm.rollout_correction"
register_switches("verl-grpo", {
    "rollout_is": (("token", "sequence", None), f"{_VERL_RC} "
                   f"compute_rollout_correction_weights, {_VERL_YAML}.rollout_is=null"),
    "rollout_is_threshold": ((2.0, 5.0, "0.5_2.0"), f"{_VERL_RC} "
                             "compute_rollout_correction_weights, "
                             f"{_VERL_YAML}.rollout_is_threshold=2.0"),
    "rollout_is_batch_normalize": ((True, False), f"{_VERL_RC} "
                                   "compute_rollout_correction_weights, "
                                   f"{_VERL_YAML}.rollout_is_batch_normalize=false"),
    "rollout_rs": ((None, "token_k1", "seq_sum_k1", "seq_mean_k2", "seq_max_k2",
                    "seq_mean_k3", "seq_mean_k1"),
                   f"{_VERL_RC} compute_rollout_rejection_mask, {_VERL_YAML}.rollout_rs=null"),
    "rollout_rs_threshold": ((1.2, 3.0, "0.8_1.5"), f"{_VERL_RC} "
                             "compute_rollout_rejection_mask, "
                             f"{_VERL_YAML}.rollout_rs_threshold=null"),
    "bypass_mode": ((True, False), f"{_VERL_RC} apply_bypass_mode, "
                    f"{_VERL_YAML}.bypass_mode=false"),
    "rollout_loss_type": (("reinforce", "ppo_clip"), f"{_VERL} "
                          "compute_policy_loss_bypass_mode, "
                          f"{_VERL_YAML}.loss_type=ppo_clip"),
    "is_sequence_weight": (("geometric-mean",), f"{_VERL_RC} "
                           "compute_rollout_correction_weights: exp(masked_sum(log_ratio))"),
    "rejection": (("weight",), "verl 0.9.1 verl/trainer/ppo/ray_trainer.py "
                  "compute_rollout_correction_and_add_to_batch: response_mask replaced"),
    "masked_weights": (("drop",), f"{_VERL_RC} compute_rollout_correction_weights: "
                       "torch.where(token_kept_mask, w, 0), the response mask unchanged"),
    "is_weights_on_kl": ((True,), "verl 0.9.1 verl/workers/utils/losses.py ppo_loss: the KL "
                         "loss added unweighted"),
    "is_weights_detach": ((False,), f"{_VERL} compute_policy_loss_bypass_mode: the weights "
                          "under torch.no_grad()"),
    "gmpo_weight_mean": (("arithmetic",), f"{_VERL} compute_policy_loss_geo_mean: "
                         "exp(mean(log(rollout_is_weights + 1e-10)))"),
    "sequence_gradient": (("sequence",), f"{_VERL} compute_policy_loss_gspo: "
                          "seq_importance_ratio = exp(log_seq - sg(log_seq) + log_prob - "
                          "sg(log_prob))"),
    "loss_mode": (("gspo", "cispo", "sapo", "geo_mean", "gpg", "vanilla"),
                  f"{_VERL} compute_policy_loss_vanilla, "
                  "actor.policy_loss.loss_mode='vanilla'"),
    "tau_neg": ((1.0,), f"{_VERL} compute_policy_loss_sapo, actor.policy_loss.tau_neg=1.05"),
})
register_switches("openrlhf-grpo", {
    "is_correction_level": (("token", "seq", "off"), f"{_ORLHF_PL}, "
                            "--algo.advantage.is_correction_level off"),
    "is_correction_mode": (("clip", "mask"), f"{_ORLHF_PL}, "
                           "--algo.advantage.is_correction_mode mask"),
    "is_correction_gating": (("ratio", "tv"), f"{_ORLHF_PL}, "
                             "--algo.advantage.is_correction_gating ratio"),
    "is_correction_threshold": (((0.8, 1.25), (0.5, 5.0), 0.2), f"{_ORLHF_PL}, "
                                "--algo.advantage.is_correction_threshold 0.5 5.0"),
    "is_log_ratio_bound": ((20.0,), f"{_ORLHF_PL}: exp(old_log_probs - rollout_log_probs), "
                           "no bound"),
    "is_sequence_weight": (("product",), f"{_ORLHF_PL}: the sequence gate reads "
                           "exp(mean(log ratio))"),
    "masked_weights": (("drop",), f"{_ORLHF_PL}: the gated token's coefficient 0, the "
                       "action mask unchanged"),
    "is_weights_on_kl": ((True,), f"{_ORLHF}/models/loss.py: the KL loss apart from "
                         "PolicyLoss's coefficient"),
    "sequence_gradient": (("token",), f"{_ORLHF_PL}: gspo's exp(mean(log_ratio)) "
                          "differentiated"),
})

# The optimizer step over ranks and micro-batches: each preset's normaliser and its source
# (ppo_numpy.step.normalisers; docs/conventions.md section 17)
_STEP_SOURCES = {
    "seed": (("micro-batch-mean", "local"), "docs/objective.md: the objective is one "
             "expectation over the step's batch"),
    "trl": (("global", "local"), "trl v0.20.0 trl/trainer/ppo_trainer.py PPOTrainer.train: "
            "masked_mean over each micro-batch in accelerator.accumulate (backward / "
            "gradient_accumulation_steps)"),
    "trl-0.11": (("global", "local"), "trl v0.11.4 trl/trainer/ppo_trainer.py loss: "
                 "masked_mean over each mini_batch_size micro-batch in "
                 "accelerator.accumulate"),
    "deepspeed-chat": (("global", "local"), "dschat/rlhf/ppo_trainer.py actor_loss_fn, "
                       "critic_loss_fn: sum(loss * mask) / mask.sum() per micro-batch; "
                       "DeepSpeed's backward scales by 1 / gradient_accumulation_steps"),
    "lm-human-preferences": (("global",), "lm_human_preferences/train_policy.py loss: "
                             "reduce_mean over each rank's minibatch, mpi_allreduce mean"),
    "verl": (("micro-batch-mean", "local"), f"{_VERL_ALGOS} agg_loss(dp_size, "
             "batch_num_tokens, global_batch_size), verl/workers/utils/losses.py ppo_loss, "
             "value_loss"),
    "openrlhf": (("micro-batch-mean", "local"), "openrlhf 0.11.2 openrlhf/utils/"
                 "loss_utils.py iter_grad_accum_global_norm, openrlhf/models/loss.py "
                 "aggregate_loss"),
    "trl-grpo": (("global", "micro-batch-mean"), f"{_TRL_LOSS}: per micro-batch / "
                 "current_gradient_accumulation_steps, or / (num_items_in_batch / "
                 "num_processes * K / steps_per_generation)"),
    "verl-grpo": (("micro-batch-mean", "local"), f"{_VERL} agg_loss(dp_size, "
                  "batch_num_tokens, global_batch_size), verl 0.9.1 verl/workers/utils/"
                  "losses.py ppo_loss"),
    "openrlhf-grpo": (("micro-batch-mean", "local"), f"{_ORLHF}/utils/loss_utils.py "
                      "iter_grad_accum_global_norm, openrlhf/models/loss.py aggregate_loss"),
}
for _name, _entry in _STEP_SOURCES.items():
    register_switches(_name, {"normaliser": _entry})


def normaliser_table() -> str:
    """Each preset's ``normaliser`` (the convention of its step over ranks and
    micro-batches), the alternatives the diagnosis tries on cases with a layout, and the
    framework's file for it: the table of ``docs/conventions.md`` section 17 (a test keeps
    them equal)."""
    from .presets import PRESETS

    lines = ["| preset | its normaliser | the diagnosis tries | source |", "|---|---|---|---|"]
    for name, preset in PRESETS.items():
        entry = PRESET_SWITCHES.get(name, {}).get("normaliser")
        if entry is None:
            continue
        alternatives, source = entry
        tried = ", ".join(f"`{a!r}`" for a in alternatives)
        lines.append(f"| `{name}` | `{preset.parameters['normaliser']!r}` | {tried} | "
                     f"{source} |")
    return "\n".join(lines)
