"""The presets' defects found by running the releases (issue 34), each on its failing inputs,
against values derived apart from the preset (hand values, Fractions, the framework's
arithmetic transcribed)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

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
    # the failing cases: TRL logs 1.6417 and 1.457 there (the preset logged 1.7293
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
