"""The presets follow the frameworks' releases where running the released code
(``make conformance``, docs/conformance.md) showed them differ: each test is one of those
differences, on the inputs that showed it, with the expected numbers written out by hand
from the release's formula (no framework, no torch)."""

import math

import numpy as np
import pytest

from ppo_numpy.oracle.presets import get_preset


def group_case(mask, scores, groups, *, logp=None, logp_old=None, logp_ref=None):
    m = np.asarray(mask, dtype=float)
    zeros = np.where(m == 1, -1.0, 0.0)
    return {"logp": zeros if logp is None else np.asarray(logp, float),
            "logp_old": zeros if logp_old is None else np.asarray(logp_old, float),
            "logp_ref": zeros if logp_ref is None else np.asarray(logp_ref, float),
            "scores": np.asarray(scores, float), "groups": np.asarray(groups, float),
            "baseline_scores": np.zeros(len(scores)), "mask": m}


# the group [1, 0]: mean 1/2, sample std sqrt(1/2)
def normalised(eps):
    return 0.5 / (math.sqrt(0.5) + eps)


def test_openrlhf_grpo_ppo_clamps_the_log_ratio_at_20_as_openrlhf_0_11_2():
    # OpenRLHF 0.11.2 openrlhf/models/loss.py PolicyLoss ("ppo"): log-ratio clamped to
    # [-20, 20] before exp. Row 1 has A < 0 and logp - logp_old = 25: its term is -rho A
    # with rho = e^20, and the clamp passes no gradient there.
    case = group_case([[1], [1]], [1.0, 0.0], [0, 0], logp=[[-1.0], [-5.0]],
                      logp_old=[[-1.0], [-30.0]], logp_ref=[[-1.0], [-30.0]])
    a = normalised(1e-9)  # group_norm: (r - mean) / (std + 1e-9)
    out = get_preset("openrlhf-grpo")(case)
    # token mean of -A_0 * 1 and -A_1 * e^20 = +a e^20
    assert out["policy_loss"] == pytest.approx((math.exp(20) * a - a) / 2, rel=1e-12)
    assert out["dlogp"][1, 0] == 0.0
    assert out["dlogp"][0, 0] == pytest.approx(-a / 2, rel=1e-12)
    # gspo: the release does not clamp the sequence ratio (one token: the token's, e^25)
    gspo = get_preset("openrlhf-grpo")(case, policy_loss_type="gspo")
    assert gspo["policy_loss"] == pytest.approx((math.exp(25) * a - a) / 2, rel=1e-12)


def test_verl_grpo_seq_mean_token_sum_norm_divides_by_sequences_times_T_as_verl_0_9_1():
    # verl 0.9.1 core_algos.agg_loss: sum over sequences of the token sums / B' / T
    # (loss_scale_factor unset: T = 3). On-policy (rho = 1) every token's loss is -A.
    case = group_case([[1, 1, 1], [1, 0, 0]], [1.0, 0.0], [0, 0])
    a = normalised(1e-6)  # grpo: (s - mean) / (std + 1e-6), in float32
    out = get_preset("verl-grpo")(case, loss_agg_mode="seq-mean-token-sum-norm")
    expected = (-3 * a + a) / (2 * 3)  # = -a / 3; the early-2026 rule, / T only, gave -2a / 3
    assert out["policy_loss"] == pytest.approx(expected, rel=1e-6)
    assert out["dlogp"][0, 0] == pytest.approx(-a / 6, rel=1e-6)


def test_verl_grpo_gspo_aggregates_by_loss_agg_mode_as_verl_0_9_1():
    # verl 0.9.1 compute_policy_loss_gspo passes the loss_agg_mode it is given to agg_loss
    # (ppo_loss gives it the actor's, token-mean by default). On-policy s_i = 1.
    case = group_case([[1, 1, 1], [1, 0, 0]], [1.0, 0.0], [0, 0])
    a = normalised(1e-6)
    token_mean = get_preset("verl-grpo")(case, loss_mode="gspo")
    assert token_mean["policy_loss"] == pytest.approx((-3 * a + a) / 4, rel=1e-6)
    seq_mean = get_preset("verl-grpo")(case, loss_mode="gspo",
                                       loss_agg_mode="seq-mean-token-mean")
    assert seq_mean["policy_loss"] == pytest.approx(0.0, abs=1e-7)  # (-a + a) / 2


def test_verl_grpo_with_the_kl_in_the_reward_normalises_in_float64_as_verl_0_9_1():
    # verl 0.9.1: token_level_rewards = float32 scores - kl_coef * float64 KL: float64, and
    # compute_grpo_outcome_advantage computes in that dtype. Equal scores: only the KL
    # separates the two responses, so float32 would lose most digits.
    logp_old = np.array([[-1.0, -1.0], [-1.0, -1.0]])
    logp_ref = np.array([[-1.3, -1.0], [-1.0, -1.0]])  # k1 of row 0 sums to 0.3, row 1 to 0
    case = group_case([[1, 1], [1, 1]], [1.0, 1.0], [0, 0], logp=logp_old,
                      logp_old=logp_old, logp_ref=logp_ref)
    out = get_preset("verl-grpo")(case, use_kl_in_reward=True, kl_coef=0.001)
    s = np.array([1.0 - 0.001 * 0.3, 1.0])
    std = math.sqrt(((s - s.mean()) ** 2).sum())  # ddof 1 of two values
    A = (s - s.mean()) / (std + 1e-6)
    assert out["advantages"][:, 0] == pytest.approx(A, rel=1e-12)


def test_trl_grpo_low_min_and_high_max_are_over_sequences_as_trl_1_16_0():
    # TRL 1.16.0 _compute_loss: nanmin / nanmax over sequences of each sequence's clipped
    # fraction. Row 0 (A > 0): rho = [1.5, 1], half of it high-clipped; row 1 (A < 0):
    # rho = [0.5, 0.5], all low-clipped.
    lp = np.log([[1.5, 1.0], [0.5, 0.5]]) - 1.0
    case = group_case([[1, 1], [1, 1]], [1.0, 0.0], [0, 0], logp=lp)
    out = get_preset("trl-grpo")(case)
    assert out["stat/clip_ratio/low_mean"] == 2 / 4
    assert out["stat/clip_ratio/low_min"] == 0.0  # min(0, 1)
    assert out["stat/clip_ratio/high_mean"] == 1 / 4
    assert out["stat/clip_ratio/high_max"] == 0.5  # max(1/2, 0)
    assert out["stat/clip_ratio/region_mean"] == 3 / 4


def test_openrlhf_grpo_return_sums_the_kl_at_padding_as_openrlhf_0_11_2():
    # OpenRLHF 0.11.2: info["return"] = reward.sum(-1) over every column, and compute_reward
    # leaves -kl_coef * KL at padding. k1 = logp_old - logp_ref: 0 on the response tokens,
    # 0.5 at each padding position (one in row 0, two in row 1).
    m = np.array([[1, 1, 0], [1, 0, 0]], dtype=float)
    logp_old = np.where(m == 1, -1.0, -0.5)
    logp_ref = np.where(m == 1, -1.0, -1.0)
    case = group_case(m, [1.0, 0.0], [0, 0], logp=logp_old, logp_old=logp_old,
                      logp_ref=logp_ref)
    a = normalised(1e-9)
    out = get_preset("openrlhf-grpo")(case, init_kl_coef=0.01)
    assert out["stat/return"] == pytest.approx(((a - 0.01 * 0.5) + (-a - 0.01 * 1.0)) / 2,
                                               rel=1e-12)


def test_verl_actor_pg_loss_is_logged_before_the_kl_loss_as_verl_0_9_1():
    # verl 0.9.1 workers/utils/losses.py ppo_loss: actor/pg_loss is the policy loss before
    # kl_loss * kl_loss_coef is added; the KL loss is the token mean of low_var_kl,
    # exp(ref - logp) - (ref - logp) - 1 (k3), here unclamped (|ref - logp| < 1)
    m = np.array([[1, 1, 1], [1, 1, 0]], dtype=float)
    rng = np.random.default_rng(0)
    logp = np.where(m == 1, -1.0 + 0.1 * rng.standard_normal(m.shape), 0.0)
    ref = np.where(m == 1, -1.0 + 0.3 * rng.standard_normal(m.shape), 0.0)
    case = {"logp": logp, "logp_old": np.where(m == 1, -1.0, 0.0), "logp_ref": ref,
            "values": np.zeros(m.shape), "old_values": np.zeros(m.shape),
            "scores": np.array([1.0, -1.0]), "mask": m}
    without = get_preset("verl")(case)
    with_kl = get_preset("verl")(case, use_kl_loss=True, beta=0.1)
    x = (ref - logp)[m == 1]
    k3 = float(np.mean(np.exp(x) - x - 1))
    assert with_kl["stat/actor/pg_loss"] == pytest.approx(without["policy_loss"], rel=1e-12)
    assert with_kl["policy_loss"] == pytest.approx(without["policy_loss"] + 0.1 * k3,
                                                   rel=1e-12)


def test_gspo_token_gradient_is_verl_0_9_1s_sg_form():
    # verl 0.9.1 compute_policy_loss_gspo: token t's ratio is sg[s_i] pi_t / sg[pi_t]. One row,
    # log-ratios [0.125, -0.125] (log s = 0, s = 1, unclipped), A = [1, 3], token-mean (c = 1/2):
    # loss = -(1/2)(1 + 3) = -2; token form d/dlogp_t = -c A_t s = [-0.5, -1.5]; the sequence
    # ratio differentiated (TRL, the paper) gives each token (1/2)(-0.5 - 1.5) = -1.
    # Exact on every CPU kind: -1 + 0.125, -2 - 0.125 and their differences are exact in
    # binary, so log s = (0.125 - 0.125) / 2 = 0 exactly and exp(0) = 1 exactly; the rest is
    # products and sums of small dyadic numbers. (With log-ratios 0.1 and -0.1 the two
    # differences round, log s = -5.6e-17, and exp of it rounds to 1 - 2**-53 with NumPy's
    # AVX-512 loop but to 1 with its AVX2 one: the loss read -1.9999999999999998 there.)
    from ppo_numpy import policy_loss_grad, ppo_policy_loss

    logp_old = np.array([[-1.0, -2.0]])
    logp = logp_old + np.array([[0.125, -0.125]])
    A, m = np.array([[1.0, 3.0]]), np.ones((1, 2))
    kw = dict(importance_level="sequence")
    for form in ("token", "sequence"):
        assert ppo_policy_loss(logp, logp_old, A, m, sequence_gradient=form, **kw)[0] == -2.0
    token = policy_loss_grad(logp, logp_old, A, m, sequence_gradient="token", **kw)
    seq = policy_loss_grad(logp, logp_old, A, m, **kw)
    np.testing.assert_array_equal(token, [[-0.5, -1.5]])
    np.testing.assert_array_equal(seq, [[-1.0, -1.0]])
    # with one advantage per response the two forms agree
    A1 = np.array([[2.0, 2.0]])
    np.testing.assert_array_equal(
        policy_loss_grad(logp, logp_old, A1, m, sequence_gradient="token", **kw),
        policy_loss_grad(logp, logp_old, A1, m, **kw))
    with pytest.raises(ValueError, match="sequence_gradient"):
        policy_loss_grad(logp, logp_old, A, m, sequence_gradient="row", **kw)
