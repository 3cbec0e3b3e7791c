"""Test cases for the critic-free presets: batches of groups of responses (``docs/oracle.md``).

A group case is a case dict (:mod:`ppo_numpy.oracle.cases`) whose ``inputs``
are the :data:`~ppo_numpy.oracle.presets.GROUP_INPUT_NAMES`: ``logp``,
``logp_old``, ``logp_ref``, ``mask`` (B, T); ``scores`` (B,) one score per
response, ``groups`` (B,) its prompt id (float64 holding integers, so that a
case is one kind of array), ``baseline_scores`` (B,) the score of a greedy
response to the same prompt (ReMax). There are no values: no value head.

======================  ======================================================
name                    what it exercises
======================  ======================================================
group-random-K          P prompts x G responses (G in 2..5), right padding,
                        0/1 scores (a verifiable reward) or normal ones
group-of-one            one prompt answered once (its std is undefined: verl
                        takes mean 0, std 1; TRL gives 0; OpenRLHF refuses)
equal-scores            a group whose scores are all equal (advantage 0)
interleaved-groups      the rows of the groups interleaved (ids 0 1 2 0 1 2 ...)
length-bias             one very long and one very short response per group:
                        per-sequence and per-token normalisation differ most
clip-bounds             log-ratios beyond the clip range and the dual-clip
                        bound (e^2, e^-2) and extreme ones (+-20), in most rows
tiny-score-spread       a group whose scores differ by 1e-5 (variance 1e-10,
                        below every eps): where eps goes changes them by O(1)
large-log-ratios        log-ratios of +-25 (beyond the clamp at 20) and a row
                        whose mean log-ratio is 12 (beyond GSPO's cap at 10)
rollout-close           ``logp_rollout`` (the inference engine's log-probs, the
                        rollout correction's input) within 1e-3 to 1e-1 of
                        logp_old, finite garbage at padding
rollout-far             ``logp_rollout`` 0.3 to 2 from logp_old: beyond every
                        threshold of the three frameworks' corrections
rollout-one-token       one-token responses with ``logp_rollout``
======================  ======================================================

The cases of :data:`PRESET_CASES` carry parameters of one preset (the names differ
between frameworks), so that the switches that change nothing at the defaults are
exercised by the default case set:

======================  ======================================================
kl-in-loss              the KL term in the loss, coefficient 0.04 (TRL
                        ``beta``; verl and OpenRLHF ``use_kl_loss``)
kl-gradient-form        the same in the framework's other gradient form (verl
                        ``kl_loss_type="low_var_kl+"``, OpenRLHF
                        ``kl_unbiased_gradient=True``), two tokens beyond the
                        KL's bounds (k3 > 10, rho > 10)
cispo-loss              the CISPO loss (TRL ``loss_type="cispo"`` with
                        ``epsilon_high=5``; verl ``loss_mode="cispo"``)
dr-grpo-loss            TRL's ``loss_type="dr_grpo"`` (its constant length)
rollout-beyond-bound    rollout log-ratios of +-25 with untruncated importance
                        weights (TRL token_mask without a bound; verl token IS
                        with threshold 1e12): the bound at 20 shows
gspo-large-log-ratios   the sequence ratio (GSPO) on ``large-log-ratios``'s
                        layout: mean log-ratios of +-12 (beyond verl's cap 10)
gdpo-components         two reward components of different scales (a 0/1
                        format reward, an accuracy reward in [0, 10]) in the
                        optional input ``reward_components`` (B, K): verl's
                        ``adv_estimator="gdpo"`` normalises each apart
vespo-loss              TRL's ``loss_type="vespo"`` (log-ratios of std 0.4:
                        sequence ratios far from 1, where phi decays)
luspo-loss              TRL's ``loss_type="luspo"`` at the sequence level
sapo-loss               SAPO's gate (TRL ``loss_type``, verl ``loss_mode``)
======================  ======================================================

The cases that switch each framework's sampler/trainer correction on (the third policy;
``logp_rollout`` 0.05 to 1.2 from logp_old by row, :data:`MIXED`: token ratios from about
e^-2 to e^2, responses' products beyond both bounds of [0.5, 2]):

========================  ====================================================
rollout-truncate          token weights truncated (TRL token_truncate [0.5, 2],
                          verl TIS at 2, OpenRLHF clip [0.5, 2])
rollout-mask              token weights masked outside [0.5, 2] (TRL token_mask,
                          verl IcePop "0.5_2.0", OpenRLHF mask)
rollout-sequence          one weight per response (TRL sequence_truncate, verl
                          sequence TIS, OpenRLHF's sequence gate)
rollout-batch-normalize   verl's token TIS divided by the batch mean
rollout-rejection         rejections that bind (verl rollout_rs seq_mean_k1 at
                          1.5 with TIS; TRL's off-policy mask at 0.2)
rollout-nan-padding       NaN, +-inf, +-1e30 at logp_rollout's padding under a
                          correction (TRL's default, verl TIS, OpenRLHF clip)
rollout-gate              OpenRLHF's binary-KL token gate [0, 0.05]
rollout-bypass            verl's bypass mode, PPO-clip, rejection token_k1 at 2
rollout-bypass-reinforce  verl's bypass mode with the reinforce loss and TIS
rollout-kl                token weights with the KL term in the loss
rollout-kl-gradient-form  the same in the framework's other gradient form (verl
                          low_var_kl+; OpenRLHF's unbiased gradient, weighted
                          against logp_old, with GSPO's ratio against
                          logp_rollout)
rollout-gspo              GSPO with token weights (OpenRLHF: the ratio against
                          logp_rollout)
rollout-gmpo              verl's GMPO with IcePop weights
========================  ====================================================

A case list may hold the words of :data:`SELECTIONS` besides case names: ``"rollout"``
picks every case that carries ``logp_rollout`` (the rule: a case does iff its name starts
with ``rollout-``).

A case may carry the optional input ``reward_components`` (B, K) (only
``gdpo-components`` does): the presets that do not read it ignore it.

Every case draws from its own generator, seeded by ``(seed, crc32(name))``.
"""

from __future__ import annotations

import numpy as np

from .cases import (
    GARBAGE,
    case_rng,
    check_names,
    kl_beyond_bounds,
    make_case,
    mask_from_lengths,
    rollout_log_probs,
    sample_log_probs,
)
from .presets import GROUP_INPUT_NAMES

N_RANDOM = 6


def group_inputs(rng, groups, lengths, T, *, binary=True, log_ratio_std=0.15):
    """The :data:`GROUP_INPUT_NAMES` for rows with prompt ids ``groups`` and ``lengths``."""
    groups = np.asarray(groups)
    mask = mask_from_lengths(lengths, T)
    out = sample_log_probs(rng, mask, log_ratio_std=log_ratio_std)
    B = mask.shape[0]
    scores = (rng.random(B) < 0.5).astype(np.float64) if binary else rng.normal(0.0, 1.5, B)
    baseline = (rng.random(B) < 0.5).astype(np.float64) if binary else rng.normal(0.0, 1.5, B)
    # ReMax: one greedy response per prompt, so one baseline score per group
    first = {g: i for i, g in reversed(list(enumerate(groups.tolist())))}
    baseline = np.array([baseline[first[g]] for g in groups.tolist()])
    out.update(scores=scores, groups=groups.astype(np.float64), baseline_scores=baseline,
               mask=mask)
    return out


def _random(k):
    def build(rng):
        P, G = int(rng.integers(2, 4)), int(rng.integers(2, 6))
        T = int(rng.integers(3, 13))
        groups = np.repeat(np.arange(P), G)
        lengths = rng.integers(1, T + 1, size=P * G)
        binary = k % 2 == 0
        return (f"{P} prompts x {G} responses, T={T}, "
                f"{'0/1' if binary else 'normal'} scores",
                group_inputs(rng, groups, lengths, T, binary=binary))
    return build


def _group_of_one(rng):
    return ("prompt 1 answered once; prompts 0 and 2 three and two times",
            group_inputs(rng, [0, 0, 0, 1, 2, 2], rng.integers(1, 6, 6), 5, binary=False))


def _equal_scores(rng):
    inputs = group_inputs(rng, [0, 0, 0, 1, 1, 1], rng.integers(1, 6, 6), 5)
    inputs["scores"] = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    return "prompt 0's three responses all score 1 (std 0: advantage 0)", inputs


def _interleaved(rng):
    return ("three groups of three with their rows interleaved",
            group_inputs(rng, [0, 1, 2, 0, 1, 2, 0, 1, 2], rng.integers(1, 7, 9), 6,
                         binary=False))


def _length_bias(rng):
    T = 16
    inputs = group_inputs(rng, [0, 0, 1, 1], [T, 1, 1, T], T)
    inputs["scores"] = np.array([1.0, 0.0, 1.0, 0.0])
    return ("in each group a 16-token and a 1-token response: per-sequence normalisation "
            "weighs the short one's token 16 times more than a long one's", inputs)


def _clip_bounds(rng):
    inputs = group_inputs(rng, [0, 0, 0, 1, 1, 1], [4, 3, 4, 2, 4, 4], 4, binary=False)
    shifts = np.array([[2.0, -2.0, 0.5, -0.5],
                       [-2.0, 2.0, 20.0, 0.0],
                       [2.0, 2.0, -2.0, -20.0],
                       [-2.0, 2.0, 0.0, 0.0],
                       [2.0, -0.5, 0.5, -2.0],
                       [-20.0, 2.0, 2.0, -2.0]])
    m = inputs["mask"] == 1
    inputs["logp"] = np.where(m, np.minimum(inputs["logp_old"] + shifts, -1e-4), 0.0)
    inputs["logp_old"] = np.where(m, inputs["logp"] - shifts, 0.0)
    return ("log-ratios of +-2 (rho = e^2 = 7.4 > the dual bound 3) in most rows, +-20 and "
            "+-0.5; mixed-sign advantages", inputs)


def _large_log_ratios(rng):
    inputs = group_inputs(rng, [0, 0, 0, 1, 1, 1], [5, 3, 5, 4, 5, 2], 5, binary=False)
    shifts = np.array([[25.0, -25.0, 0.3, -0.3, 25.0],
                       [-25.0, 0.2, 25.0, 0.0, 0.0],
                       [12.0, 12.0, 12.0, 12.0, 12.0],
                       [0.1, -25.0, -0.1, 25.0, 0.0],
                       [-12.0, -12.0, -12.0, -12.0, -12.0],
                       [25.0, -0.5, 0.0, 0.0, 0.0]])
    m = inputs["mask"] == 1
    inputs["logp"] = np.where(m, np.minimum(inputs["logp_old"] + shifts, -1e-4), 0.0)
    inputs["logp_old"] = np.where(m, inputs["logp"] - shifts, 0.0)
    inputs["logp_ref"] = np.where(m, np.minimum(inputs["logp_old"]
                                                + rng.normal(0.0, 0.3, m.shape), -1e-4), 0.0)
    return ("log-ratios of +-25 (beyond a clamp at 20) and rows whose mean log-ratio is +-12 "
            "(beyond GSPO's cap at 10)", inputs)


def _tiny_score_spread(rng):
    inputs = group_inputs(rng, [0, 0, 0, 1, 1, 1], rng.integers(1, 6, 6), 5, binary=False)
    inputs["scores"] = np.array([1e-5, -1e-5, 0.0, 1.0, -0.5, 0.25])
    return ("prompt 0's scores differ by 1e-5 (variance 1e-10, below every eps): eps added to "
            "the std and inside the square root differ by O(1)", inputs)


def _policy_case(description, log_ratio_std=0.4):
    def build(rng):
        groups = np.repeat(np.arange(3), 4)
        lengths = rng.integers(1, 9, size=12)
        return description, group_inputs(rng, groups, lengths, 8, binary=False,
                                         log_ratio_std=log_ratio_std)
    return build


def _gdpo_components(rng):
    groups = np.repeat(np.arange(3), 4)
    lengths = rng.integers(1, 9, size=12)
    inputs = group_inputs(rng, groups, lengths, 8, binary=False)
    fmt = (rng.random(12) < 0.6).astype(np.float64)
    accuracy = np.round(rng.uniform(0.0, 10.0, 12), 2)
    inputs["reward_components"] = np.stack([fmt, accuracy], axis=1)
    inputs["scores"] = fmt + accuracy
    return ("3 prompts x 4 responses, a 0/1 format reward and an accuracy reward in [0, 10] "
            "(reward_components; the score is their sum)", inputs)
FINITE_GARBAGE = (7.5, -3.0, -40.0, 0.0)


def _rollout_mismatch(scales, description, garbage=FINITE_GARBAGE):
    """The inference engine's log-probs ``logp_rollout`` near logp_old (each row's own scale
    of ``scales``, cycled), with finite garbage at padding in every log-prob input (what a
    framework's own tensors hold there) and ``garbage`` in logp_rollout's."""
    def build(rng):
        groups = np.repeat(np.arange(3), 4)
        lengths = rng.integers(1, 9, size=12)
        inputs = group_inputs(rng, groups, lengths, 8, binary=False, log_ratio_std=0.1)
        m = inputs["mask"] == 1
        row_scale = np.resize(np.asarray(scales, dtype=np.float64), 12)[:, None]
        noise = rng.normal(0.0, 1.0, m.shape) * row_scale
        inputs["logp_rollout"] = np.where(
            m, np.minimum(inputs["logp_old"] + noise, -1e-4), 0.0)
        for n in ("logp", "logp_old", "logp_ref", "logp_rollout"):
            junk = rng.choice(np.array(garbage if n == "logp_rollout" else FINITE_GARBAGE),
                              size=m.shape)
            inputs[n] = np.where(m, inputs[n], junk)
        return description, inputs
    return build


def _rollout_one_token(rng):
    # one-token responses: the sequence level equals the token level
    inputs = group_inputs(rng, np.repeat(np.arange(2), 3), np.ones(6, dtype=int), 3,
                          binary=False)
    m = inputs["mask"] == 1
    inputs["logp_rollout"] = rollout_log_probs(rng, inputs["logp_old"], m, 0.8)
    return ("one-token responses with rollout log-probs within 0.8 of logp_old: the sequence "
            "and the token corrections agree", inputs)


def _rollout_beyond_bound(rng):
    inputs = group_inputs(rng, np.repeat(np.arange(2), 3), [4, 3, 4, 2, 4, 1], 4,
                          binary=False)
    m = inputs["mask"] == 1
    shift = np.zeros(m.shape)
    shift[0, 1], shift[3, 0] = 25.0, -25.0  # log w = logp_old - logp_rollout = -25, +25
    inputs["logp_rollout"] = np.where(m, np.minimum(inputs["logp_old"] + shift, -1e-4), 0.0)
    inputs["logp_old"] = np.where(m, inputs["logp_rollout"] - shift, 0.0)
    return ("rollout log-ratios of +-25 on two tokens (beyond verl's bound 20 on them), the "
            "weights not truncated", inputs)


EDGE_CASES = {
    "group-of-one": _group_of_one,
    "equal-scores": _equal_scores,
    "interleaved-groups": _interleaved,
    "length-bias": _length_bias,
    "clip-bounds": _clip_bounds,
    "tiny-score-spread": _tiny_score_spread,
    "large-log-ratios": _large_log_ratios,
    # the rollout correction: a case with logp_rollout (vLLM's log-probs)
    "rollout-close": _rollout_mismatch(
        (1e-3, 1e-2, 3e-2, 1e-1), "logp_rollout within 1e-3 to 1e-1 of logp_old (a bf16 "
        "engine's mismatch), garbage at padding"),
    "rollout-far": _rollout_mismatch(
        (0.3, 1.0, 2.0, 0.05), "logp_rollout 0.3 to 2 from logp_old: token ratios and "
        "sequence sums beyond every threshold (2, 3, 5, 20 on the log), garbage at padding"),
    "rollout-one-token": _rollout_one_token,
}

def _kl_gradient_form(rng):
    _, inputs = _policy_case("")(rng)
    return ("3 prompts x 4 responses, log-ratios of std 0.4, the KL term in the loss "
            "(coefficient 0.04) in the framework's other gradient form, two tokens beyond its "
            "bounds (k3 > 10, rho = 20 and 12 > OpenRLHF's weight bound 10)",
            kl_beyond_bounds(inputs, ((0, 0), (5, 0))))


_KL_IN_LOSS = {"trl-grpo": {"beta": 0.04},
               "verl-grpo": {"use_kl_loss": True, "kl_loss_coef": 0.04},
               "openrlhf-grpo": {"use_kl_loss": True, "init_kl_coef": 0.04}}
#: row scales of the rollout noise of the cases that switch a correction on: token ratios
#: from about e^-2 to e^2 and responses' products beyond both bounds of [0.5, 2]
MIXED = (0.05, 0.3, 0.7, 1.2)


def _rollout_case(description):
    return _rollout_mismatch(MIXED, description)


_TRUNCATE = {"trl-grpo": {"vllm_importance_sampling_mode": "token_truncate",
                          "vllm_importance_sampling_clip_min": 0.5,
                          "vllm_importance_sampling_clip_max": 2.0},
             "verl-grpo": {"rollout_is": "token", "rollout_is_threshold": 2.0},
             "openrlhf-grpo": {"is_correction_level": "token", "is_correction_mode": "clip",
                               "is_correction_threshold": (0.5, 2.0)}}
PRESET_CASES = {
    "kl-in-loss": (_policy_case("3 prompts x 4 responses, log-ratios of std 0.4, the KL term "
                                "in the loss (coefficient 0.04)"), _KL_IN_LOSS),
    # verl's kl_loss_type with the suffix "+", OpenRLHF's unbiased gradient
    "kl-gradient-form": (_kl_gradient_form, {
        "verl-grpo": {**_KL_IN_LOSS["verl-grpo"], "kl_loss_type": "low_var_kl+"},
        "openrlhf-grpo": {**_KL_IN_LOSS["openrlhf-grpo"], "kl_unbiased_gradient": True}}),
    "cispo-loss": (_policy_case("3 prompts x 4 responses, log-ratios of std 1, the CISPO loss",
                                log_ratio_std=1.0),
                   {"trl-grpo": {"loss_type": "cispo", "epsilon_high": 5.0},
                    "verl-grpo": {"loss_mode": "cispo"}}),
    "dr-grpo-loss": (_policy_case("3 prompts x 4 responses, TRL's dr_grpo normalisation"),
                     {"trl-grpo": {"loss_type": "dr_grpo"}}),
    # the rollout correction's bound on its log-ratio (verl 20, TRL none): weights without
    # truncation, so that exp(25) and exp(20) differ in the loss
    "rollout-beyond-bound": (_rollout_beyond_bound,
                             {"trl-grpo": {"vllm_importance_sampling_mode": "token_mask",
                                           "vllm_importance_sampling_clip_max": None},
                              "verl-grpo": {"rollout_is": "token",
                                            "rollout_is_threshold": 1e12},
                              "openrlhf-grpo": {"is_correction_level": "token",
                                                "is_correction_threshold": (0.0, 1e12)}}),
    # the corrections switched on, each framework's way (cases named rollout-*: they carry
    # logp_rollout; --cases rollout selects them)
    "rollout-truncate": (_rollout_case(
        "token weights truncated: TRL token_truncate to [0.5, 2]; verl token TIS at 2; "
        "OpenRLHF token clip to [0.5, 2]; weights beyond both bounds"), _TRUNCATE),
    "rollout-mask": (_rollout_case(
        "token weights masked outside [0.5, 2]: TRL token_mask; verl IcePop '0.5_2.0'; "
        "OpenRLHF token mask"),
        {"trl-grpo": {"vllm_importance_sampling_mode": "token_mask",
                      "vllm_importance_sampling_clip_min": 0.5,
                      "vllm_importance_sampling_clip_max": 2.0},
         "verl-grpo": {"rollout_is": "token", "rollout_is_threshold": "0.5_2.0"},
         "openrlhf-grpo": {"is_correction_level": "token",
                           "is_correction_threshold": (0.5, 2.0)}}),
    "rollout-sequence": (_rollout_case(
        "one weight per response: TRL sequence_truncate to [0.5, 2]; verl sequence TIS at 2; "
        "OpenRLHF's sequence gate [0.5, 2]"),
        {"trl-grpo": {"vllm_importance_sampling_mode": "sequence_truncate",
                      "vllm_importance_sampling_clip_min": 0.5,
                      "vllm_importance_sampling_clip_max": 2.0},
         "verl-grpo": {"rollout_is": "sequence", "rollout_is_threshold": 2.0},
         "openrlhf-grpo": {"is_correction_level": "seq", "is_correction_threshold": (0.5, 2.0)}}),
    "rollout-batch-normalize": (_rollout_case(
        "verl's token TIS at 2 divided by the batch's mean weight (not 1 here)"),
        {"verl-grpo": {"rollout_is": "token", "rollout_is_threshold": 2.0,
                       "rollout_is_batch_normalize": True}}),
    "rollout-rejection": (_rollout_case(
        "rejections that bind: verl rollout_rs seq_mean_k1 at 1.5 with token TIS; TRL's "
        "off-policy mask at 0.2 with its default sequence_mask weights"),
        {"trl-grpo": {"off_policy_mask_threshold": 0.2},
         "verl-grpo": {"rollout_is": "token", "rollout_is_threshold": 2.0,
                       "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": 1.5}}),
    "rollout-nan-padding": (_rollout_mismatch(
        (1e-2, 0.3), "logp_rollout near logp_old, with NaN, +-inf and +-1e30 at its padding, "
        "under a correction (TRL's default; verl token TIS at 2; OpenRLHF's token clip)",
        garbage=GARBAGE),
        {"trl-grpo": {}, "verl-grpo": {"rollout_is": "token", "rollout_is_threshold": 2.0},
         "openrlhf-grpo": {"is_correction_level": "token", "is_correction_mode": "clip",
                           "is_correction_threshold": (0.5, 2.0)}}),
    "rollout-gate": (_rollout_case(
        "OpenRLHF's token gate by the binary KL of the token's two probabilities, [0, 0.05]"),
        {"openrlhf-grpo": {"is_correction_level": "token", "is_correction_gating": "binary_kl",
                           "is_correction_threshold": 0.05}}),
    "rollout-bypass": (_rollout_case(
        "verl's bypass mode (logp_old := logp_rollout), PPO-clip, the rejection token_k1 at 2 "
        "of the current log-probs"),
        {"verl-grpo": {"bypass_mode": True, "rollout_is": "token",
                       "rollout_rs": "token_k1", "rollout_rs_threshold": 2.0}}),
    "rollout-bypass-reinforce": (_rollout_case(
        "verl's bypass mode with the reinforce loss: -A w logp, w the token TIS weights at 2 "
        "of the current log-probs"),
        {"verl-grpo": {"bypass_mode": True, "rollout_loss_type": "reinforce",
                       "rollout_is": "token", "rollout_is_threshold": 2.0}}),
    "rollout-kl": (_rollout_case(
        "token weights and the KL term in the loss (coefficient 0.04)"),
        {"trl-grpo": {"beta": 0.04, **_TRUNCATE["trl-grpo"]},
         "verl-grpo": {"use_kl_loss": True, "kl_loss_coef": 0.04, "rollout_is": "token",
                       "rollout_is_threshold": 2.0},
         "openrlhf-grpo": {"use_kl_loss": True, "init_kl_coef": 0.04,
                           "is_correction_level": "token",
                           "is_correction_threshold": (0.5, 2.0)}}),
    # the KL term's gradient forms with token weights: OpenRLHF's importance weight is against
    # logp_old while GSPO's ratio is against logp_rollout
    "rollout-kl-gradient-form": (_rollout_case(
        "token weights and the KL term in the loss (coefficient 0.04) in the framework's "
        "other gradient form: verl low_var_kl+ with token TIS at 2; OpenRLHF's unbiased "
        "gradient with GSPO's ratio against logp_rollout"),
        {"verl-grpo": {"use_kl_loss": True, "kl_loss_coef": 0.04,
                       "kl_loss_type": "low_var_kl+", "rollout_is": "token",
                       "rollout_is_threshold": 2.0},
         "openrlhf-grpo": {"use_kl_loss": True, "init_kl_coef": 0.04,
                           "kl_unbiased_gradient": True, "policy_loss_type": "gspo",
                           "is_correction_level": "token"}}),
    "rollout-gspo": (_rollout_case(
        "GSPO's sequence ratio with token weights: TRL's row mean of token_truncate weights; "
        "verl's per-token TIS weights; OpenRLHF's ratio against logp_rollout"),
        {"trl-grpo": {"importance_sampling_level": "sequence", **_TRUNCATE["trl-grpo"]},
         "verl-grpo": {"loss_mode": "gspo", "rollout_is": "token",
                       "rollout_is_threshold": 2.0},
         "openrlhf-grpo": {"policy_loss_type": "gspo", "is_correction_level": "token"}}),
    "rollout-gmpo": (_rollout_case(
        "verl's GMPO (geo_mean) with IcePop token weights '0.5_2.0': masked weights in most "
        "responses"),
        {"verl-grpo": {"loss_mode": "geo_mean", "rollout_is": "token",
                       "rollout_is_threshold": "0.5_2.0"}}),
    "sapo-loss": (_policy_case("3 prompts x 4 responses, log-ratios of std 0.4, SAPO's gate"),
                  {"trl-grpo": {"loss_type": "sapo"}, "verl-grpo": {"loss_mode": "sapo"}}),
    "gspo-large-log-ratios": (_large_log_ratios,
                              {"trl-grpo": {"importance_sampling_level": "sequence"},
                               "verl-grpo": {"loss_mode": "gspo"},
                               "openrlhf-grpo": {"policy_loss_type": "gspo"}}),
    "gdpo-components": (_gdpo_components, {"verl-grpo": {"adv_estimator": "gdpo"}}),
    "vespo-loss": (_policy_case("3 prompts x 4 responses, log-ratios of std 0.4, TRL's VESPO "
                                "loss"), {"trl-grpo": {"loss_type": "vespo"}}),
    "luspo-loss": (_policy_case("3 prompts x 4 responses, TRL's LUSPO loss at the sequence "
                                "level"),
                   {"trl-grpo": {"loss_type": "luspo", "importance_sampling_level": "sequence"}}),
}
"""Each case name maps to its builder and the presets it is for, each with its params: cases
for the presets listed only."""


def group_case_names(n_random: int = N_RANDOM, preset: str | None = None) -> list:
    """The default group cases: random, edge, and those of :data:`PRESET_CASES` for
    ``preset``."""
    own = [n for n, (_, by_preset) in PRESET_CASES.items() if preset in by_preset]
    return [f"group-random-{k}" for k in range(n_random)] + list(EDGE_CASES) + own


SELECTIONS = {
    "random": "the random batches group-random-K",
    "edge": "the edge cases (no preset's parameters)",
    "rollout": "every case with logp_rollout (named rollout-*): the sampler/trainer "
               "correction, the third policy",
    "preset": "the cases that carry the preset's parameters (PRESET_CASES)",
}
"""The words a case list may hold besides case names (``--cases rollout``): each picks the
default cases that exercise it, in their order."""


def select(names, default) -> list:
    """``names`` with each word of :data:`SELECTIONS` replaced by the cases of ``default``
    it picks (a name twice: once)."""
    picks = {"random": lambda n: n.startswith("group-random-"),
             "edge": lambda n: n in EDGE_CASES,
             "rollout": lambda n: n.startswith("rollout-"),
             "preset": lambda n: n in PRESET_CASES}
    out = []
    for name in names:
        out += [n for n in default if picks[name](n)] if name in picks else [name]
    return list(dict.fromkeys(out))


def generate_group_cases(seed: int = 0, names=None, *, n_random: int = N_RANDOM,
                         preset: str | None = None) -> list:
    """The group cases ``group-random-0`` ... then the edge cases, then the cases of
    :data:`PRESET_CASES` for ``preset`` (module docstring); a case of :data:`PRESET_CASES`
    named in ``names`` carries ``preset``'s parameters (none for another preset).

    >>> cases = generate_group_cases(0, ["interleaved-groups"])
    >>> cases[0]["inputs"]["groups"].tolist()
    [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
    >>> [c["params"] for c in generate_group_cases(0, ["kl-in-loss"], preset="trl-grpo")]
    [{'beta': 0.04}]
    """
    default = group_case_names(n_random, preset)
    names = select(check_names(names, default), default)
    cases = []
    for name in names:
        params = {}
        if name.startswith("group-random-") and name[13:].isdigit():
            build = _random(int(name[13:]))
        elif name in EDGE_CASES:
            build = EDGE_CASES[name]
        elif name in PRESET_CASES:
            build, by_preset = PRESET_CASES[name]
            params = by_preset.get(preset, {})
        else:
            raise ValueError(f"names: unknown group case {name!r}; valid ones are "
                             f"{', '.join(map(repr, SELECTIONS))}, 'group-random-K', "
                             f"{', '.join(EDGE_CASES)} and {', '.join(PRESET_CASES)}")
        description, inputs = build(case_rng(seed, name))
        cases.append(make_case(name, description, inputs, params,
                               input_names=GROUP_INPUT_NAMES))
    return cases


def cases_for(preset, seed: int = 0, names=None) -> list:
    """The cases a preset takes: :func:`generate_group_cases` for a critic-free preset (one whose
    inputs have ``groups``), else :func:`ppo_numpy.oracle.cases.generate_cases`."""
    from .cases import generate_cases

    name = getattr(preset, "name", None)
    if "groups" in getattr(preset, "input_names", ()):
        return generate_group_cases(seed, names, preset=name)
    return generate_cases(seed, names, preset=name)


#: the layouts of :func:`step_cases`: label -> (ranks, micro-batches per rank, deal)
STEP_LAYOUTS = {"2x2": (2, 2, "contiguous"), "2x2-round-robin": (2, 2, "round-robin"),
                "1x3": (1, 3, "contiguous")}
#: lm-human-preferences trains one minibatch per rank and step (no accumulation)
ONE_PER_RANK_LAYOUTS = {"2x1": (2, 1, "contiguous"), "3x1": (3, 1, "round-robin")}


def step_cases(preset, seed: int = 0, n_base: int = 2) -> list:
    """Cases of one optimizer step over ranks and micro-batches (``ppo_numpy.step``): the
    first ``n_base`` cases of :func:`cases_for` that ``preset`` accepts, each with every
    layout of :data:`STEP_LAYOUTS` (:func:`ppo_numpy.step_layout`; uneven micro-batches in
    rows and tokens), named ``"<case>/<layout>"``; for ``trl-grpo`` also each 2x2 layout with
    ``steps_per_generation=1`` (TRL's generation batch of one micro-batch per rank). The
    diagnosis tries the ``normaliser`` switch on them (``docs/oracle.md``)."""
    from ..step.layout import step_layout

    name = getattr(preset, "name", None)
    layouts = ONE_PER_RANK_LAYOUTS if name == "lm-human-preferences" else STEP_LAYOUTS
    base = []
    for case in cases_for(preset, seed):
        try:
            preset(case)
        except ValueError:
            continue
        base.append(case)
        if len(base) == n_base:
            break
    out = []
    for case in base:
        B = case["inputs"]["mask"].shape[0]
        for label, (ranks, k, deal) in layouts.items():
            layout = step_layout(B, ranks, k, deal)
            step = {**case, "name": f"{case['name']}/{label}", "layout": layout,
                    "description": f"{case['description']} One step over {ranks} rank(s) of "
                                   f"{k} micro-batch(es), rows dealt {deal}."}
            out.append(step)
            if name == "trl-grpo" and label.startswith("2x2"):
                out.append({**step, "name": f"{step['name']}/S=1", "steps_per_generation": 1,
                            "description": step["description"] + " steps_per_generation 1."})
    return out
