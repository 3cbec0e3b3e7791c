"""min(rho A, clip(rho, 1-eps, 1+eps) A): the four cases by hand, asymmetric and dual clip,
the seed's L_PPO and the policy loss with its clip statistics."""

import math
from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy import AGGREGATION_MODES, clipped_surrogate, ppo_objective, ppo_policy_loss
from tests._helpers import assert_close, assert_exact, assert_zero_at_padding


def test_the_four_cases_by_hand_exact():
    eps = F(1, 5)  # range [4/5, 6/5]
    rho = [F(11, 10), F(3, 2), F(9, 10), F(1, 2)]
    A = [F(2), F(2), F(-1), F(-1)]
    expected = [
        # A > 0, rho inside: min(11/10 * 2, 11/10 * 2) = 11/5
        min(F(11, 10) * 2, F(11, 10) * 2),
        # A > 0, rho above 1 + eps: min(3/2 * 2, 6/5 * 2) = 12/5 (clipped)
        min(F(3, 2) * 2, F(6, 5) * 2),
        # A < 0, rho inside: min(-9/10, -9/10) = -9/10
        min(F(9, 10) * -1, F(9, 10) * -1),
        # A < 0, rho below 1 - eps: min(-1/2, -4/5) = -4/5 (clipped)
        min(F(1, 2) * -1, F(4, 5) * -1),
    ]
    assert expected == [F(11, 5), F(12, 5), F(-9, 10), F(-4, 5)]
    out = clipped_surrogate(rho, A, eps)
    assert_exact(out, expected, rho=rho, advantages=A)


def test_the_pessimistic_cases_are_not_clipped():
    # A > 0 with rho below the range and A < 0 with rho above it: the min keeps rho A.
    rho = [F(1, 2), F(3, 2)]
    A = [F(2), F(-1)]
    # min(1/2 * 2, 4/5 * 2) = 1;  min(3/2 * -1, 6/5 * -1) = -3/2
    out = clipped_surrogate(rho, A, F(1, 5))
    assert_exact(out, [F(1), F(-3, 2)], rho=rho, advantages=A)


def test_the_four_cases_in_float():
    out = clipped_surrogate([1.1, 1.5, 0.9, 0.5], [2.0, 2.0, -1.0, -1.0], 0.2)
    assert_close(out, [2.2, 2.4, -0.9, -0.8], rtol=1e-15, atol=1e-15)
    assert out.dtype == np.float64


def test_float_epsilon_with_exact_input_keeps_the_written_bounds():
    # eps = 0.7 -> range [3/10, 17/10]; 1 - 0.7 in binary floating point is
    # 0.30000000000000004, which must not leak into exact arithmetic.
    rho, A = [F(1, 5), F(2)], [F(-1), F(1)]
    out = clipped_surrogate(rho, A, 0.7)
    # min(-1/5, -3/10) = -3/10;  min(2, 17/10) = 17/10
    assert_exact(out, [F(-3, 10), F(17, 10)], rho=rho, advantages=A)


def test_rho_one_gives_the_advantage():
    A = [F(3, 7), F(-5, 2), F(0), F(9)]
    out = clipped_surrogate([F(1)] * 4, A, F(1, 5))
    assert_exact(out, A, advantages=A)


def test_asymmetric_epsilon_high_by_hand():
    eps, eps_high = F(1, 5), F(7, 25)  # range [4/5, 32/25]
    rho = [F(3, 2), F(5, 4), F(1, 2), F(3, 2)]
    A = [F(1), F(1), F(-1), F(-1)]
    expected = [
        min(F(3, 2), F(32, 25)),          # above 1 + eps_high: 32/25
        min(F(5, 4), F(5, 4)),            # 5/4 < 32/25 = 1.28: inside, not clipped
        min(-F(1, 2), -F(4, 5)),          # below 1 - eps: -4/5
        min(-F(3, 2), -F(32, 25)),        # A < 0 above: unclipped -3/2
    ]
    out = clipped_surrogate(rho, A, eps, epsilon_high=eps_high)
    assert_exact(out, expected, rho=rho, advantages=A)
    # With the symmetric range 5/4 would be clipped to 6/5.
    assert clipped_surrogate([F(5, 4)], [F(1)], eps)[0] == F(6, 5)


def test_dual_clip_by_hand():
    eps, c = F(1, 5), F(3)
    rho = [F(5), F(2), F(5), F(1, 2), F(1)]
    A = [F(-1), F(-1), F(1), F(-1), F(-2)]
    expected = [
        max(min(F(5) * -1, F(6, 5) * -1), c * -1),    # min = -5, bounded below by -3
        max(min(F(2) * -1, F(6, 5) * -1), c * -1),    # -2 > -3: dual clip inactive
        min(F(5) * 1, F(6, 5) * 1),                   # A > 0: dual clip never applies
        max(min(F(1, 2) * -1, F(4, 5) * -1), c * -1),  # -4/5
        max(min(F(1) * -2, F(1) * -2), c * -2),        # -2
    ]
    assert expected == [F(-3), F(-2), F(6, 5), F(-4, 5), F(-2)]
    out = clipped_surrogate(rho, A, eps, dual_clip=c)
    assert_exact(out, expected, rho=rho, advantages=A)
    # Without the dual clip the first term is -5.
    assert clipped_surrogate(rho, A, eps)[0] == F(-5)


def test_zero_epsilon_gives_min_of_rho_A_and_A():
    rho, A = [F(3, 2), F(1, 2), F(3, 2), F(1, 2)], [F(1), F(1), F(-1), F(-1)]
    out = clipped_surrogate(rho, A, 0)
    assert_exact(out, [F(1), F(1, 2), F(-3, 2), F(-1)], rho=rho, advantages=A)


def test_clipped_surrogate_padding_is_zero():
    rho = np.array([[1.5, np.nan, 0.0], [np.inf, 0.9, 1.0]])
    A = np.array([[2.0, 1.0, -np.inf], [1.0, -1.0, 0.5]])
    mask = np.array([[1, 0, 0], [0, 1, 1]])
    out = clipped_surrogate(rho, A, 0.2, mask=mask)
    assert_close(out, [[2.4, 0.0, 0.0], [0.0, -0.9, 0.5]], rtol=1e-15, atol=0,
                 rho=rho, advantages=A, mask=mask)
    assert_zero_at_padding(out, mask, "surrogate", rho=rho, advantages=A)


# --- the seed's L_PPO and the policy loss --------------------------------------------------


def test_ppo_objective_by_hand():
    # Row 1: rho = [3/2, 1/2, 1], A = [2, -1, 1/2];  row 2: rho = [1], A = [-3], then padding.
    logp_old = np.array([[-1.0, -2.0, -0.3], [-0.7, 0.0, 0.0]])
    logp = logp_old + np.log([[1.5, 0.5, 1.0], [1.0, 1.0, 1.0]])
    logp[1, 1:] = np.nan
    A = np.array([[2.0, -1.0, 0.5], [-3.0, 9.0, 9.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    # row 1: min(3, 2.4) + min(-0.5, -0.8) + 0.5 = 2.4 - 0.8 + 0.5 = 2.1; row 2: -3.
    expected = (2.1 + -3.0) / 2
    got = ppo_objective(logp, logp_old, A, mask)
    assert isinstance(got, float)
    assert math.isclose(got, expected, rel_tol=1e-12), (expected, got, logp, A, mask)


def test_ppo_objective_at_rho_one_is_mean_of_summed_advantages():
    logp = np.array([[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0]])
    A = np.array([[0.46575, 0.385, 0.3], [1.0, 5.0, 5.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    expected = ((0.46575 + 0.385 + 0.3) + 1.0) / 2
    got = ppo_objective(logp, logp, A, mask)
    assert math.isclose(got, expected, rel_tol=1e-14), (expected, got)


def test_ppo_objective_passes_clip_options():
    logp, logp_old, A = [math.log(5.0)], [0.0], [-1.0]
    assert math.isclose(ppo_objective(logp, logp_old, A), -5.0, rel_tol=1e-12)
    assert math.isclose(ppo_objective(logp, logp_old, A, dual_clip=3.0), -3.0, rel_tol=1e-12)
    assert math.isclose(ppo_objective([math.log(1.25)], [0.0], [1.0], epsilon_high=0.28),
                        1.25, rel_tol=1e-12)


def _random_batch(seed):
    rng = np.random.default_rng(seed)
    B, T = 4, 7
    logp_old = -rng.uniform(0.05, 3.0, size=(B, T))
    logp = logp_old + rng.normal(0.0, 0.4, size=(B, T))
    A = rng.normal(size=(B, T))
    mask = np.zeros((B, T), dtype=int)
    for i, (s, n) in enumerate([(0, 7), (0, 3), (2, 5), (6, 1)]):
        mask[i, s:s + n] = 1
    logp[mask == 0] = np.nan
    return logp, logp_old, A, mask


@pytest.mark.parametrize("seed", range(5))
def test_policy_loss_seq_mean_token_sum_is_minus_objective(seed):
    logp, logp_old, A, mask = _random_batch(seed)
    for opts in ({}, {"epsilon_high": 0.28}, {"dual_clip": 3.0}):
        obj = ppo_objective(logp, logp_old, A, mask, 0.2, **opts)
        loss, _ = ppo_policy_loss(logp, logp_old, A, mask, 0.2, agg="seq-mean-token-sum", **opts)
        assert loss == -obj, (f"expected loss == -objective = {-obj!r}, got {loss!r} "
                              f"(options {opts}, seed {seed})")


def test_policy_loss_aggregations_by_hand():
    # rho = [[1.5, 0.5, 1.1], [1.0, pad, pad]], A = [[2, -1, 1], [-3, ., .]]
    # terms: [[2.4, -0.8, 1.1], [-3]]
    logp_old = np.zeros((2, 3))
    logp = np.log([[1.5, 0.5, 1.1], [1.0, 1.0, 1.0]])
    A = np.array([[2.0, -1.0, 1.0], [-3.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    row1, row2 = 2.4 - 0.8 + 1.1, -3.0
    expected = {
        "token-mean": -(row1 + row2) / 4,
        "seq-mean-token-sum": -(row1 + row2) / 2,
        "seq-mean-token-mean": -(row1 / 3 + row2 / 1) / 2,
        "seq-mean-token-sum-norm": -(row1 + row2) / (2 * 3),
    }
    assert set(expected) == set(AGGREGATION_MODES)
    for mode, want in expected.items():
        loss, _ = ppo_policy_loss(logp, logp_old, A, mask, agg=mode)
        assert math.isclose(loss, want, rel_tol=1e-12), (mode, want, loss)
    loss, _ = ppo_policy_loss(logp, logp_old, A, mask, agg="seq-mean-token-sum-norm", norm=10)
    assert math.isclose(loss, -(row1 + row2) / (2 * 10), rel_tol=1e-12), loss


def test_policy_loss_stats_by_hand():
    rho = np.array([1.5, 0.5, 1.1, 0.7, 1.3])
    A = np.array([2.0, -1.0, 1.0, 1.0, -1.0])
    # eps = 0.2, range [0.8, 1.2]:
    #   1.5, A>0: min(3.0, 2.4) clipped      -> active, outside
    #   0.5, A<0: min(-0.5, -0.8) clipped    -> active, outside
    #   1.1: inside                          -> neither
    #   0.7, A>0: min(0.7, 0.8) = rho A      -> not active, outside
    #   1.3, A<0: min(-1.3, -1.2) = rho A    -> not active, outside
    # Padding column with garbage appended.
    logp = np.append(np.log(rho), np.nan)[None]
    logp_old = np.zeros((1, 6))
    adv = np.append(A, np.inf)[None]
    mask = np.array([[1, 1, 1, 1, 1, 0]])
    loss, stats = ppo_policy_loss(logp, logp_old, adv, mask)
    log_rho = [math.log(x) for x in rho]
    expected = {
        "clipfrac_active": 2 / 5,
        "clipfrac_outside": 4 / 5,
        "dual_clipfrac": 0.0,
        "approx_kl_k1": sum(-lr for lr in log_rho) / 5,
        "approx_kl_k2": sum(lr * lr / 2 for lr in log_rho) / 5,
        "approx_kl_k3": sum(x - 1 - math.log(x) for x in rho) / 5,
        "ratio_mean": (1.5 + 0.5 + 1.1 + 0.7 + 1.3) / 5,
        "ratio_min": 0.5,
        "ratio_max": 1.5,
    }
    assert set(expected) <= set(stats), sorted(stats)
    for key, want in expected.items():
        assert math.isclose(stats[key], want, rel_tol=1e-12, abs_tol=1e-15), (
            f"{key}: expected {want!r}, got {stats[key]!r}")
    terms = [2.4, -0.8, 1.1, 0.7, -1.3]
    assert math.isclose(loss, -sum(terms) / 5, rel_tol=1e-12), loss


def test_policy_loss_dual_clip_stats_by_hand():
    rho = [5.0, 2.0, 0.5, 5.0]
    A = [-1.0, -1.0, -1.0, 1.0]
    # c = 3: only the first term is raised to c A = -3; the third is clipped by the min.
    loss, stats = ppo_policy_loss(np.log(rho), [0.0] * 4, A, dual_clip=3.0)
    assert math.isclose(stats["dual_clipfrac"], 1 / 4), stats
    assert math.isclose(stats["clipfrac_active"], 2 / 4), stats   # 0.5 with A<0, 5 with A>0
    assert math.isclose(loss, -(-3.0 - 2.0 - 0.8 + 1.2) / 4, rel_tol=1e-12), loss


def test_policy_loss_stats_survive_extreme_log_ratios():
    # log rho = -800: rho underflows to 0, but -log rho = 800 is finite.
    _, stats = ppo_policy_loss([-800.0, 0.0], [0.0, 0.0], [1.0, 1.0])
    assert math.isclose(stats["approx_kl_k1"], 800.0 / 2, rel_tol=1e-12), stats
    assert math.isclose(stats["approx_kl_k2"], 800.0**2 / 2 / 2, rel_tol=1e-12), stats
    # k3 = rho - 1 - log rho = 0 - 1 + 800 = 799 for the first token
    assert math.isclose(stats["approx_kl_k3"], 799.0 / 2, rel_tol=1e-12), stats


def test_policy_loss_with_fraction_advantages_is_the_float_computation():
    # rho needs exp, so Fraction advantages are computed in float64: the clip statistics
    # compare like with like (they counted rounding differences as clipped tokens)
    rng = np.random.default_rng(3)
    logp_old = -rng.uniform(0.1, 2.0, 8)
    logp = logp_old + rng.normal(0.0, 0.05, 8)  # every rho inside [0.8, 1.2]
    A = [F(int(k), 7) for k in rng.integers(-20, 20, 8)]
    A_float = [float(a) for a in A]
    loss, stats = ppo_policy_loss(logp, logp_old, A)
    assert stats["clipfrac_active"] == 0.0 and stats["clipfrac_outside"] == 0.0, stats
    assert (loss, stats) == ppo_policy_loss(logp, logp_old, A_float)
    obj = ppo_objective(logp, logp_old, A)
    assert obj == ppo_objective(logp, logp_old, A_float)
    assert ppo_policy_loss(logp, logp_old, A, agg="seq-mean-token-sum")[0] == -obj
