"""The presets' defects found by running the releases (issue 34), each on its failing inputs,
against values derived apart from the preset (hand values, Fractions, the framework's
arithmetic transcribed)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ppo_numpy.oracle.cases import generate_cases
from ppo_numpy.oracle.group_cases import generate_group_cases
from ppo_numpy.oracle.presets import get_preset

TRL = get_preset("trl-grpo")


def _two_groups(scores):
    m = np.ones((4, 2))
    lp = np.full((4, 2), -1.0)
    return {"logp": lp, "logp_old": lp, "logp_ref": lp, "scores": np.asarray(scores, float),
            "groups": np.array([0, 0, 1, 1]), "baseline_scores": np.zeros(4), "mask": m}


def test_trl_reward_std_is_the_batch_nanstd_not_the_mean_of_group_stds():
    # trl 1.16.0 grpo_trainer.py: reward_std = nanstd(rewards) over the batch (utils.py
    # nanstd: mean squared deviation times n / (n - 1), square-rooted). Scores [1, 0, 0, 0]:
    # mean 1/4, squared deviations 9/16 + 3 (1/16) = 3/4, / 4 = 3/16, * 4/3 = 1/4: std 1/2.
    # The mean of the group stds would be (sqrt(1/2) + 0) / 2 = 0.354.
    s = [Fraction(1), Fraction(0), Fraction(0), Fraction(0)]
    mean = sum(s) / 4
    var = sum((v - mean) ** 2 for v in s) / 4 * Fraction(4, 3)
    assert var == Fraction(1, 4)
    out = TRL(_two_groups([1.0, 0.0, 0.0, 0.0]))
    assert out["stat/reward_std"] == math.sqrt(var)  # (exact: every step is in float32)
    # the issue's failing cases: TRL logs 1.6417 and 1.457 there (the preset logged 1.7293
    # and 0.761, the mean of the group stds)
    for name, trl in (("rollout-close", 1.6417), ("group-random-5", 1.457)):
        case = generate_group_cases(0, [name], preset="trl-grpo")[0]
        scores = np.asarray(case["inputs"]["scores"], np.float64)
        n = scores.size
        by_hand = math.sqrt(float(np.sum((scores - scores.mean()) ** 2)) / (n - 1))
        got = TRL(case)["stat/reward_std"]
        assert got == pytest.approx(by_hand, rel=1e-6) and got == pytest.approx(trl, abs=1e-3)


def test_trl_reward_std_of_one_response_is_nan_as_nanstd_gives():
    case = {"logp": np.zeros((1, 2)) - 1, "logp_old": np.zeros((1, 2)) - 1,
            "logp_ref": np.zeros((1, 2)) - 1, "scores": np.array([2.0]),
            "groups": np.array([0]), "baseline_scores": np.zeros(1), "mask": np.ones((1, 2))}
    assert math.isnan(TRL(case)["stat/reward_std"])


def test_trl_grpoconfig_refuses_a_truncation_without_bounds_whatever_the_case():
    # trl 1.16.0 GRPOConfig.__post_init__ raises for a *_truncate mode with both bounds None
    # and for clip_min >= clip_max, vLLM or not: the preset refuses the same options, also on
    # a case without logp_rollout
    case = _two_groups([1.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="needs vllm_importance_sampling_clip_min or"):
        TRL(case, vllm_importance_sampling_mode="token_truncate",
            vllm_importance_sampling_clip_max=None)
    with pytest.raises(ValueError, match="clip_min must be < "):
        TRL(case, vllm_importance_sampling_clip_min=3.0)
    # the correction off: the mode is not checked, the bounds still are
    TRL(case, vllm_importance_sampling_correction=False, vllm_importance_sampling_clip_max=None,
        vllm_importance_sampling_mode="token_truncate")


def test_openrlhf_return_reads_the_padding_and_its_failure_line_says_so():
    # OpenRLHF 0.11.2 compute_reward: r_t = -beta KL_t at every column (padding included),
    # the score at the last token; stat/return is the mean over rows of the row sums. A row
    # [token, pad] with KL (k1 = logp_old - logp_ref) 0.5 at the pad and beta 0.1: the pad
    # adds -0.05 to the return. A candidate that zeroes its padding misses it.
    from ppo_numpy.oracle.compare import compare

    preset = get_preset("openrlhf-grpo")
    lp_old = np.array([[-1.0, -1.5], [-1.0, -1.5]])
    ref = np.array([[-1.0, -2.0], [-1.0, -2.0]])
    case = {"name": "pad-kl", "inputs": {
        "logp": lp_old.copy(), "logp_old": lp_old, "logp_ref": ref,
        "scores": np.array([1.0, 0.0]), "groups": np.array([0.0, 0.0]),
        "baseline_scores": np.zeros(2), "mask": np.array([[1.0, 0.0], [1.0, 0.0]])},
        "params": {"init_kl_coef": 0.1}}
    out = preset(case)
    # group_norm: the two scores become +a and -a (their sum 0); each row adds the pad's
    # -0.1 * 0.5 (k1 0 at the token): the mean return is -0.05, all of it from the padding
    assert out["stat/return"] == pytest.approx(-0.05, rel=1e-12)

    def zeroed_padding(c):
        x = {k: (np.where(c["inputs"]["mask"] == 1, v, 0.0)
                 if np.shape(v) == np.shape(c["inputs"]["mask"]) and k != "mask" else v)
             for k, v in c["inputs"].items()}
        return preset({**c, "inputs": x})

    report = compare(zeroed_padding, preset, [case], probes=0)
    (row,) = [r for r in report.failures if r.output == "stat/return"]
    assert "stat/return reads the padding" in row.describe()


# ---------------------------------------------------------------------------------------
# verl 0.9.1's trainer sets the loss denominators (issue 34, defect 2 and item 2)

VERL_GRPO = get_preset("verl-grpo")
VERL = get_preset("verl")


def _verl_pair(logp_rollout, **params):
    """One group of two responses of two tokens, scores [1, 0], logp = logp_old (every PPO
    ratio 1) and the given logp_rollout; no division by the std: A = [+1/2, -1/2] (exact)."""
    lp = np.full((2, 2), -1.0)
    case = {"logp": lp, "logp_old": lp.copy(), "logp_ref": lp.copy(),
            "scores": np.array([1.0, 0.0]), "groups": np.array([0, 0]),
            "baseline_scores": np.zeros(2), "mask": np.ones((2, 2)),
            "logp_rollout": np.asarray(logp_rollout, float)}
    return VERL_GRPO(case, norm_adv_by_std_in_grpo=False, **params)


def test_verl_bypass_token_mean_divides_by_the_unrejected_token_count():
    # bypass mode: old = rollout, the current ratio exp(logp - logp_rollout); token (0, 0)
    # has ratio e > 2, rejected by token_k1 at threshold 2 (kept: [1/2, 2]) inside the loss.
    # The trainer's batch_num_tokens is the response mask's sum, 4 (verl 0.9.1
    # transformer_impl.py forward_backward_batch): the three kept tokens, each -A * 1
    # (ratio 1, unclipped): -1/2 + 1/2 + 1/2 = 1/2, over 4, not over the 3 kept.
    out = _verl_pair([[-2.0, -1.0], [-1.0, -1.0]], bypass_mode=True, rollout_rs="token_k1",
                     rollout_rs_threshold=2.0)
    assert out["policy_loss"] == 0.125  # exact: 0.5 / 4 in binary floating point
    # d loss / d logp = -A * rho / 4 at the kept tokens, 0 at the rejected one
    np.testing.assert_array_equal(out["dlogp"], [[0.0, -0.125], [0.125, 0.125]])


def test_verl_sequence_rejection_seq_means_divide_by_every_row():
    # decoupled mode: row 0's log-ratio logp_old - logp_rollout sums to 2, seq_sum_k1 keeps
    # exp(2) > 2 out: row 0 leaves the response mask before the loss. The trainer's
    # global_batch_size is every row, 2 (ray_trainer.py _update_actor: ppo_mini_batch_size *
    # rollout.n), not the one row left. Row 1: A = -1/2, ratio 1, term +1/2 per token.
    rollout = [[-2.0, -2.0], [-1.0, -1.0]]
    by_mode = {"seq-mean-token-mean": Fraction(1, 2) / 2,       # row mean 1/2, over 2 rows
               "seq-mean-token-sum": Fraction(1, 1) / 2,        # row sum 1, over 2 rows
               "seq-mean-token-sum-norm": Fraction(1, 1) / (2 * 2),   # over B T
               "token-mean": Fraction(1, 1) / 2}                # the kept mask's 2 tokens
    for mode, expected in by_mode.items():
        out = _verl_pair(rollout, rollout_rs="seq_sum_k1", rollout_rs_threshold=2.0,
                         loss_agg_mode=mode)
        assert out["policy_loss"] == float(expected), mode  # exact (dyadic fractions)
        assert out["stat/actor/pg_loss"] == float(expected), mode


def test_verl_bypass_rejecting_every_token_trains_on_the_kl_loss_alone():
    # every ratio exp(1) > 2: verl's agg_loss sums nothing over the trainer's counts (0 / 4)
    # and masked_mean over no token is 0 / 1e-8: the policy term and its statistics are 0;
    # the KL loss over the unrejected mask stays (k3 of logp = logp_ref: 0 here)
    out = _verl_pair(np.full((2, 2), -2.0), bypass_mode=True, rollout_rs="token_k1",
                     rollout_rs_threshold=2.0, use_kl_loss=True, kl_loss_coef=0.1)
    assert out["policy_loss"] == 0.0 and out["stat/actor/pg_loss"] == 0.0
    assert out["stat/actor/kl_loss"] == 0.0
    np.testing.assert_array_equal(out["dlogp"], np.zeros((2, 2)))
    assert out["stat/actor/pg_clipfrac"] == 0.0 and out["stat/actor/ppo_kl"] == 0.0


def _vanilla_terms(logp, old, A, eps=0.2, c=3.0):
    """verl 0.9.1 compute_policy_loss_vanilla's per-token loss, transcribed (clamp 20, dual
    clip c for A < 0)."""
    ratio = np.exp(np.clip(logp - old, -20.0, 20.0))
    pg1, pg2 = -A * ratio, -A * np.clip(ratio, 1 - eps, 1 + eps)
    clip1 = np.maximum(pg1, pg2)
    return np.where(A < 0, np.minimum(-A * c, clip1), clip1)


def _grpo_float32(scores, groups):
    """verl 0.9.1 compute_grpo_outcome_advantage, transcribed: (s - mean) / (std + 1e-6), torch
    std (ddof 1), float32."""
    s = np.asarray(scores, np.float32)
    out = np.zeros_like(s)
    for g in np.unique(groups):
        i = groups == g
        out[i] = (s[i] - s[i].mean()) / (np.float32(s[i].std(ddof=1)) + np.float32(1e-6))
    return out.astype(np.float64)


def test_verl_trainer_denominators_on_rollout_far_the_issues_numbers():
    # the issue's case: bypass with token_k1 (threshold 2) -0.107526 (agg_loss over the kept
    # tokens) vs -0.082712 (the trainer: over every token of the mask); decoupled seq_mean_k1
    # ("0.5_1.8") with seq-mean-token-mean -0.037807 vs -0.034657 (over every row)
    case = generate_group_cases(0, ["rollout-far"])[0]
    x = case["inputs"]
    m = x["mask"] == 1
    A = _grpo_float32(x["scores"], x["groups"])[:, None] * m
    # bypass: old = rollout; keep exp(logp - logp_rollout) in [1/2, 2]
    keep = m & (np.abs(x["logp"] - x["logp_rollout"]) <= math.log(2.0))
    terms = _vanilla_terms(x["logp"], x["logp_rollout"], A)
    trainer = float(np.sum(np.where(keep, terms, 0.0)) / m.sum())
    alone = float(np.sum(np.where(keep, terms, 0.0)) / keep.sum())
    out = VERL_GRPO(case, bypass_mode=True, rollout_rs="token_k1", rollout_rs_threshold=2.0)
    assert out["policy_loss"] == pytest.approx(trainer, rel=1e-12, abs=1e-15)
    assert round(trainer, 6) == -0.082712 and round(alone, 6) == -0.107526
    # decoupled: rows whose exp(token mean of logp_old - logp_rollout) is outside [0.5, 1.8]
    # leave the mask; the loss is the sum of the kept rows' token means over all 12 rows
    seq = np.exp(np.where(m, x["logp_old"] - x["logp_rollout"], 0).sum(1) / m.sum(1))
    rows = (seq >= 0.5) & (seq <= 1.8)
    terms = _vanilla_terms(x["logp"], x["logp_old"], A)
    row_means = np.where(m, terms, 0.0).sum(1) / m.sum(1)
    trainer = float(row_means[rows].sum() / len(rows))
    alone = float(row_means[rows].sum() / rows.sum())
    out = VERL_GRPO(case, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.5_1.8",
                    loss_agg_mode="seq-mean-token-mean")
    assert out["policy_loss"] == pytest.approx(trainer, rel=1e-12, abs=1e-15)
    assert round(trainer, 6) == -0.034657 and round(alone, 6) == -0.037807


def test_verl_value_loss_after_a_sequence_rejection_divides_by_every_row():
    # preset verl, decoupled: row 0 rejected whole (seq_sum_k1, threshold 2), the critic's
    # seq-mean over the trainer's global_batch_size 2 (ray_trainer.py _update_critic). Row 1:
    # old values 0, gamma = lam = 1: returns = its score 1 at both tokens; values 0.5, inside
    # the clip (0.5 of 0): each (1/2)(0.5 - 1)^2 = 1/8, row mean 1/8, over 2 rows: 1/16
    m = np.ones((2, 2))
    lp = np.full((2, 2), -1.0)
    case = {"logp": lp, "logp_old": lp.copy(), "logp_ref": lp.copy(),
            "values": np.full((2, 2), 0.5), "old_values": np.zeros((2, 2)),
            "scores": np.array([0.0, 1.0]), "mask": m,
            "logp_rollout": np.array([[-2.0, -2.0], [-1.0, -1.0]])}
    out = VERL(case, rollout_rs="seq_sum_k1", rollout_rs_threshold=2.0,
               loss_agg_mode="seq-mean-token-mean")
    assert out["value_loss"] == 1 / 16 and out["stat/critic/vf_loss"] == 1 / 16  # exact
    # d / dv of (1/2)(v - R)^2 / (n_1 B) = (v - R) / 4 = -1/8 at row 1, 0 at the rejected row
    np.testing.assert_array_equal(out["dvalues"], [[0.0, 0.0], [-0.125, -0.125]])


# ---------------------------------------------------------------------------------------
# verl 0.9.1's bypass-mode REINFORCE logs actor/ppo_kl alone (defect 3)


@pytest.mark.parametrize("preset", ["verl", "verl-grpo"])
def test_verl_bypass_reinforce_logs_ppo_kl_alone(preset):
    # verl 0.9.1 core_algos.py compute_policy_loss_reinforce returns {"actor/ppo_kl": ...}
    # only; compute_policy_loss_vanilla (ppo_clip) the two clip fractions too. ppo_kl: the
    # token mean of logp_rollout - logp over the kept tokens.
    case = (generate_group_cases(0, ["rollout-far"]) if preset == "verl-grpo"
            else generate_cases(0, ["rollout-mismatch"]))[0]
    P = get_preset(preset)
    x = case["inputs"]
    m = x["mask"] == 1
    out = P(case, bypass_mode=True, rollout_loss_type="reinforce")
    stats = {k for k in out if k.startswith("stat/actor/")}
    assert stats == {"stat/actor/pg_loss", "stat/actor/ppo_kl"}
    by_hand = float(np.sum(np.where(m, x["logp_rollout"] - x["logp"], 0.0)) / m.sum())
    assert out["stat/actor/ppo_kl"] == pytest.approx(by_hand, rel=1e-12)
    clip = P(case, bypass_mode=True)
    assert {"stat/actor/pg_clipfrac", "stat/actor/pg_clipfrac_lower"} <= set(clip)


def test_a_candidate_logging_what_verl_logs_on_the_reinforce_path_passes():
    # a candidate that returns verl's metrics of that path (no clip fractions) is not told
    # it left an output out
    from ppo_numpy.oracle.compare import compare

    case = {**generate_group_cases(0, ["rollout-far"])[0],
            "params": {"bypass_mode": True, "rollout_loss_type": "reinforce"}}

    def verl_like(c):
        return {k: v for k, v in VERL_GRPO(c).items() if "clipfrac" not in k}

    report = compare(verl_like, "verl-grpo", [case], probes=0)
    assert report.passed and not report.unchecked


# ---------------------------------------------------------------------------------------
# verl-grpo's opo when a rejection leaves a group without tokens (defect 5)


def _opo_case():
    """Two groups of two; group 0's rows rejected whole (their log-ratio logp_old -
    logp_rollout sums to 2 > log 2: seq_sum_k1 at threshold 2), group 1 kept with lengths 2
    and 1, scores [1, 0]; logp = logp_old (every ratio 1)."""
    m = np.array([[1, 1], [1, 1], [1, 1], [1, 0]], float)
    lp = np.full((4, 2), -1.0)
    rollout = np.where(np.arange(4)[:, None] < 2, -2.0, lp)
    return {"logp": lp, "logp_old": lp.copy(), "logp_ref": lp.copy(),
            "scores": np.array([0.5, 0.25, 1.0, 0.0]), "groups": np.array([0, 0, 1, 1]),
            "baseline_scores": np.zeros(4), "mask": m, "logp_rollout": rollout}


OPO = dict(adv_estimator="opo", rollout_rs="seq_sum_k1", rollout_rs_threshold=2.0,
           loss_agg_mode="seq-mean-token-mean")


def test_verl_opo_group_without_tokens_is_trained_on_as_verl_computes_it():
    # verl 0.9.1 compute_opo_outcome_advantage: group 0's baseline (0 s + 0 s) / 0 = NaN, its
    # advantages (s - NaN) * mask = NaN at every position; group 1's b = (2 * 1 + 1 * 0) / 3
    # = 2/3, A = [1/3, -2/3]. The loss (seq-mean-token-mean, over the trainer's 4 rows) reads
    # the kept tokens only: row means -1/3 and +2/3, (1/3) / 4 = 1/12.
    out = VERL_GRPO(_opo_case(), **OPO)
    A = out["advantages"]
    assert np.isnan(A[:2]).all()
    np.testing.assert_allclose(A[2:], [[1 / 3, 1 / 3], [-2 / 3, 0.0]], rtol=1e-15)
    assert out["policy_loss"] == pytest.approx(1 / 12, rel=1e-15)
    assert out["stat/actor/pg_loss"] == pytest.approx(1 / 12, rel=1e-15)
    assert out["stat/actor/pg_clipfrac"] == 0.0 and out["stat/actor/ppo_kl"] == 0.0
    # the gradient: -A / (n_i B) at the kept tokens (-1/24, and +1/6 for row 3's token);
    # verl's autograd multiplies the zero the mask leaves by the NaN advantage (0 * NaN):
    # NaN at group 0's response tokens, after which verl's engine skips the update
    d = out["dlogp"]
    assert np.isnan(d[:2]).all()
    np.testing.assert_allclose(d[2:], [[-1 / 24, -1 / 24], [1 / 6, 0.0]], rtol=1e-15)


def test_verl_opo_group_without_tokens_geo_mean_loss_is_nan():
    # geo_mean takes torch.mean over every row, group 0's NaN advantage included
    out = VERL_GRPO(_opo_case(), **OPO, loss_mode="geo_mean")
    assert math.isnan(out["policy_loss"]) and math.isnan(out["stat/actor/pg_loss"])
    assert np.isnan(out["dlogp"][:2]).all() and np.isfinite(out["dlogp"][2:]).all()


def test_opo_advantages_empty_group_rule():
    from ppo_numpy import opo_advantages

    with pytest.raises(ValueError, match="0 / 0"):
        opo_advantages([1.0, 0.0], [0, 0], [0, 0])
    with pytest.raises(ValueError, match="empty"):
        opo_advantages([1.0, 0.0], [0, 0], [0, 0], empty="zero")
    # a group of one without tokens keeps its singleton rule (verl: baseline 0)
    A = opo_advantages([1.0, 0.0, 3.0], [0, 0, 1], [0, 0, 0], singleton="raw", empty="nan")
    assert np.isnan(A[:2]).all() and A[2] == 3.0


# ---------------------------------------------------------------------------------------
# TRL's token-level vLLM weights on a sequence-level loss with delta (defect 4)


def test_trl_sequence_level_token_truncate_weights_with_delta_by_trls_arithmetic():
    # trl 1.16.0 _compute_loss at importance_sampling_level="sequence": coef_1 = s_i (B, 1),
    # coef_2 = clamp(s_i, 0.8, 1.2), then coef_1 = clamp(s_i, max=delta); the (B, 1) loss
    # -min(coef_1 A, coef_2 A) times the (B, T) vLLM weights w = min(exp(logp_old -
    # logp_rollout), 3) (token_truncate), summed over the mask / N (dapo). Autograd of that:
    # token t of row i gets -(1/N) (sum_u w_iu) (1/n_i) A_i s_i where the unclipped branch
    # with s_i < delta is the min, else 0. Four rows (A = s scores, scale_rewards none):
    # A = +1, s = 1.1: unclipped; A = -1, s = 3.5: above delta 3, the clamped coef_1 is the
    # min (no gradient); A = -1, s = 2.5: unclipped below delta; A = +1, s = 1.5: clipped.
    s = np.array([1.1, 3.5, 2.5, 1.5])
    A = np.array([1.0, -1.0, -1.0, 1.0])
    lp_old = np.full((4, 2), -2.0)
    lp = lp_old + np.log(s)[:, None]           # each token's log-ratio log s_i
    ratio_old_rollout = np.array([[0.5, 4.0], [2.0, 1.0], [1.0, 0.25], [3.0, 5.0]])
    rollout = lp_old - np.log(ratio_old_rollout)
    w = np.minimum(ratio_old_rollout, 3.0)     # truncated at vllm_importance_sampling_clip_max
    case = {"logp": lp, "logp_old": lp_old, "logp_ref": lp_old.copy(), "scores": A,
            "groups": np.zeros(4), "baseline_scores": np.zeros(4), "mask": np.ones((4, 2)),
            "logp_rollout": rollout}
    out = TRL(case, loss_type="dapo", importance_sampling_level="sequence",
              vllm_importance_sampling_mode="token_truncate", delta=3.0,
              scale_rewards="none")
    N, n = 8, 2
    flows = np.array([True, False, True, False])
    expected = np.where(flows, -(w.sum(axis=1) / n) * A * s / N, 0.0)[:, None] * np.ones(2)
    np.testing.assert_allclose(out["dlogp"], expected, rtol=1e-14, atol=1e-17)
    # the loss: sum_i (sum_t w_it) (-min(coef_1 A, coef_2 A)) / N
    term = -np.minimum(np.minimum(s, 3.0) * A, np.clip(s, 0.8, 1.2) * A)
    assert out["policy_loss"] == pytest.approx(float((w.sum(axis=1) * term).sum() / N),
                                               rel=1e-14)
