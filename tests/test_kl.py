"""KL estimators k1, k2, k3, abs by hand; unbiasedness by exact expectation over a small
categorical; KL-shaped rewards r~_t = -beta KL_t + [t = T] score."""

import math
from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy import KL_ESTIMATORS, kl_estimate, kl_shaped_rewards
from tests._helpers import assert_close, assert_exact, assert_same, assert_zero_at_padding


def test_estimators_are_the_four_named():
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "abs"}


def test_estimators_by_hand_from_probabilities():
    # pi_theta(y) = 0.6, pi_ref(y) = 0.3 -> r = pi_ref / pi_theta = 0.5
    # pi_theta(y) = 0.2, pi_ref(y) = 0.5 -> r = 2.5
    p_theta, p_ref = [0.6, 0.2], [0.3, 0.5]
    r = [0.3 / 0.6, 0.5 / 0.2]
    expected = {
        "k1": [-math.log(x) for x in r],
        "k2": [math.log(x) ** 2 / 2 for x in r],
        "k3": [x - 1 - math.log(x) for x in r],
        "abs": [abs(math.log(x)) for x in r],
    }
    logp, logp_ref = np.log(p_theta), np.log(p_ref)
    for est, want in expected.items():
        got = kl_estimate(logp, logp_ref, est)
        assert got.dtype == np.float64
        assert_close(got, want, rtol=1e-13, atol=1e-15, estimator=est, logp=logp,
                     logp_ref=logp_ref)


def test_k3_for_small_log_ratio_keeps_precision():
    # k3 = e^x - 1 - x ~ x^2 / 2 + x^3 / 6 for x = log r = 1e-6; naive exp loses digits.
    x = 1e-6
    got = kl_estimate([0.0], [x], "k3")[0]
    want = x**2 / 2 + x**3 / 6 + x**4 / 24
    assert math.isclose(got, want, rel_tol=1e-9), (want, got)


def test_identical_policies_give_zero_for_every_estimator():
    logp = np.array([[-0.1, -7.0, -1e-12], [-3.3, -0.5, -20.0]])
    for est in KL_ESTIMATORS:
        assert_same(kl_estimate(logp, logp.copy(), est), np.zeros_like(logp), estimator=est)


def _categorical():
    # p = pi_theta, q = pi_ref, small categoricals written out by hand
    p = [0.5, 0.3, 0.2]
    q = [0.2, 0.5, 0.3]
    kl_pq = sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))
    return p, q, kl_pq


def test_k1_and_k3_are_unbiased_by_exact_expectation():
    p, q, kl_pq = _categorical()
    # each y is a possible sampled token: the estimate for y, weighted by p(y)
    logp, logp_ref = np.log(p), np.log(q)
    for est in ("k1", "k3"):
        k = kl_estimate(logp, logp_ref, est)
        expectation = sum(pi * ki for pi, ki in zip(p, k))
        assert math.isclose(expectation, kl_pq, rel_tol=1e-12), (
            f"{est}: E_p[k] = {expectation!r}, KL(p||q) = {kl_pq!r}, k = {k}")


def test_k2_is_biased_and_its_expectation_is_half_the_second_moment():
    p, q, kl_pq = _categorical()
    k = kl_estimate(np.log(p), np.log(q), "k2")
    expectation = sum(pi * ki for pi, ki in zip(p, k))
    want = sum(pi * math.log(pi / qi) ** 2 / 2 for pi, qi in zip(p, q))
    assert math.isclose(expectation, want, rel_tol=1e-12), (expectation, want)
    assert not math.isclose(expectation, kl_pq, rel_tol=1e-3)


def test_k3_nonnegative_on_a_grid():
    x = np.linspace(-30.0, 30.0, 1201)
    k3 = kl_estimate(np.zeros_like(x), x, "k3")
    assert np.all(k3 >= 0), x[k3 < 0]


def test_exact_fractions_for_k1_k2_abs():
    logp, logp_ref = [F(-1, 2), F(-3, 4)], [F(-1), F(-1, 4)]
    # logp - logp_ref = [1/2, -1/2]
    assert_exact(kl_estimate(logp, logp_ref, "k1"), [F(1, 2), F(-1, 2)])
    assert_exact(kl_estimate(logp, logp_ref, "k2"), [F(1, 8), F(1, 8)])
    assert_exact(kl_estimate(logp, logp_ref, "abs"), [F(1, 2), F(1, 2)])


def test_k3_with_fractions_is_float():
    got = kl_estimate([F(0)], [F(-1, 2)], "k3")
    assert got.dtype == np.float64
    assert math.isclose(got[0], math.exp(-0.5) - 1 + 0.5, rel_tol=1e-14), got


def test_clamp_bounds_both_sides():
    got = kl_estimate([15.0, -15.0, 0.3], [0.0, 0.0, 0.0], "k1", clamp=10.0)
    assert_close(got, [10.0, -10.0, 0.3], rtol=0, atol=0)


def test_kl_estimate_padding_is_zero():
    logp = np.array([[-0.5, np.nan], [np.inf, -1.0]])
    logp_ref = np.array([[-0.7, 1.0], [-np.inf, -1.5]])
    mask = np.array([[1, 0], [0, 1]])
    for est in KL_ESTIMATORS:
        out = kl_estimate(logp, logp_ref, est, mask)
        assert np.all(np.isfinite(out)), (est, out)
        assert_zero_at_padding(out, mask, est, logp=logp, logp_ref=logp_ref)
    assert_close(kl_estimate(logp, logp_ref, "k1", mask), [[0.2, 0.0], [0.0, 0.5]],
                 rtol=1e-14, atol=1e-15)


# --- KL-shaped rewards -----------------------------------------------------------------------


def test_shaped_rewards_by_hand():
    logp, logp_ref = [-1.0, -2.0, -0.5], [-1.5, -1.8, -0.6]
    beta, score = 0.1, 1.0
    k1 = [-1.0 + 1.5, -2.0 + 1.8, -0.5 + 0.6]
    expected = [-beta * k1[0], -beta * k1[1], -beta * k1[2] + score]
    got = kl_shaped_rewards(score, logp, logp_ref, beta)
    assert_close(got, expected, rtol=1e-14, atol=1e-16, logp=logp, logp_ref=logp_ref)


def test_shaped_rewards_exact_fractions_with_k1():
    logp = [F(-1), F(-2), F(-1, 2)]
    logp_ref = [F(-3, 2), F(-9, 5), F(-3, 5)]
    beta, score = F(1, 10), F(1)
    # k1 = [1/2, -1/5, 1/10];  r~ = [-1/20, 1/50, -1/100 + 1]
    got = kl_shaped_rewards(score, logp, logp_ref, beta)
    assert_exact(got, [F(-1, 20), F(1, 50), F(99, 100)], logp=logp, logp_ref=logp_ref)
    # beta given as the float 0.1 is read as written: 1/10
    assert_exact(kl_shaped_rewards(score, logp, logp_ref, 0.1), [F(-1, 20), F(1, 50),
                                                                    F(99, 100)])


def test_score_goes_to_last_valid_token_right_and_left_padding():
    logp = np.array([[-1.0, -2.0, np.nan, np.nan],     # right padding
                     [np.nan, np.nan, -1.0, -2.0],     # left padding
                     [-1.0, -2.0, -0.5, -0.1]])        # full row
    logp_ref = np.array([[-1.0, -2.0, 7.0, 7.0],
                         [7.0, 7.0, -1.0, -2.0],
                         [-1.0, -2.0, -0.5, -0.1]])
    mask = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]])
    scores = np.array([2.0, -3.0, 0.5])
    got = kl_shaped_rewards(scores, logp, logp_ref, 0.1, mask)
    expected = [[0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, -3.0], [0.0, 0.0, 0.0, 0.5]]
    assert_same(got, np.array(expected), scores=scores, mask=mask)


def test_beta_zero_gives_score_only():
    rng = np.random.default_rng(0)
    logp, logp_ref = -rng.uniform(0, 3, (2, 5)), -rng.uniform(0, 3, (2, 5))
    mask = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]])
    for est in KL_ESTIMATORS:
        got = kl_shaped_rewards([1.5, -0.25], logp, logp_ref, 0.0, mask, est)
        want = np.zeros((2, 5))
        want[0, 2], want[1, 4] = 1.5, -0.25
        assert_same(got, want, estimator=est, logp=logp, logp_ref=logp_ref)


def test_shaped_rewards_k3_and_clamp():
    logp, logp_ref = [0.0, 0.0], [-0.5, -20.0]
    k3 = [math.exp(-0.5) - 1 + 0.5, math.exp(-20.0) - 1 + 20.0]
    got = kl_shaped_rewards(0.0, logp, logp_ref, 0.2, estimator="k3")
    assert_close(got, [-0.2 * k3[0], -0.2 * k3[1]], rtol=1e-14, atol=1e-16)
    got = kl_shaped_rewards(0.0, logp, logp_ref, 0.2, estimator="k3", kl_clamp=10.0)
    assert_close(got, [-0.2 * k3[0], -0.2 * 10.0], rtol=1e-14, atol=1e-16)


def test_shaped_rewards_with_holes_score_on_last_one():
    mask = [1, 0, 1, 0]
    got = kl_shaped_rewards(1.0, [0.5, 9.0, 0.0, 9.0], [0.0, 0.0, 0.0, 0.0], 1.0, mask)
    assert_close(got, [-0.5, 0.0, 1.0, 0.0], rtol=0, atol=0)


@pytest.mark.parametrize("est", KL_ESTIMATORS)
def test_shaped_rewards_padding_is_zero(est):
    logp = np.array([[-1.0, np.inf, np.nan]])
    mask = np.array([[1, 0, 0]])
    got = kl_shaped_rewards([1.0], logp, np.array([[-2.0, 0.0, -np.inf]]), 0.5, mask, est)
    assert_zero_at_padding(got, mask, "rewards", logp=logp)
