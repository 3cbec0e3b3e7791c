"""rho_t = pi_theta / pi_theta_old = exp(logp - logp_old): values by hand, masking, clamp."""

import math

import numpy as np

from ppo_numpy import probability_ratio
from tests._helpers import assert_close, assert_same, assert_zero_at_padding


def test_ratio_by_hand_from_probabilities():
    p_new = [0.6, 0.3, 0.05, 0.9]
    p_old = [0.5, 0.3, 0.1, 0.45]
    # rho = p_new / p_old, written out
    expected = [0.6 / 0.5, 0.3 / 0.3, 0.05 / 0.1, 0.9 / 0.45]
    logp, logp_old = np.log(p_new), np.log(p_old)
    rho = probability_ratio(logp, logp_old)
    assert_close(rho, expected, rtol=1e-14, atol=0, logp=logp, logp_old=logp_old)
    assert rho.dtype == np.float64


def test_policy_against_itself_is_exactly_one():
    logp = np.array([[-0.1, -3.7, -12.0], [-1e-9, -50.0, -0.69]])
    rho = probability_ratio(logp, logp)
    assert_same(rho, np.ones_like(logp), logp=logp)


def test_tiny_probabilities_do_not_underflow():
    # pi = e^-1000 underflows to 0 as a probability; the ratio is still e^1.
    logp, logp_old = [-1000.0, -745.0], [-1001.0, -745.5]
    rho = probability_ratio(logp, logp_old)
    assert_close(rho, [math.e, math.exp(0.5)], rtol=1e-14, atol=0, logp=logp)


def test_padding_is_exactly_zero_whatever_it_holds():
    logp = np.array([[-0.5, -1.0, np.nan], [np.inf, -0.2, -0.3]])
    logp_old = np.array([[-0.7, -1.0, 5.0], [-np.inf, -0.2, -0.1]])
    mask = np.array([[1, 1, 0], [0, 1, 1]])
    rho = probability_ratio(logp, logp_old, mask)
    expected = [[math.exp(0.2), 1.0, 0.0], [0.0, 1.0, math.exp(-0.2)]]
    assert_close(rho, expected, rtol=1e-14, atol=0, logp=logp, logp_old=logp_old, mask=mask)
    assert_zero_at_padding(rho, mask, "rho", logp=logp, mask=mask)


def test_log_ratio_clamp_bounds_the_log_ratio_on_both_sides():
    logp = [5.0, -5.0, 0.5]
    logp_old = [0.0, 0.0, 0.0]
    rho = probability_ratio(logp, logp_old, log_ratio_clamp=2.0)
    # clamp(5) = 2, clamp(-5) = -2, 0.5 untouched
    assert_close(rho, [math.exp(2.0), math.exp(-2.0), math.exp(0.5)], rtol=1e-14, atol=0,
                 logp=logp, logp_old=logp_old)


def test_ratio_without_clamp_is_not_clamped():
    rho = probability_ratio([30.0], [0.0])
    assert_close(rho, [math.exp(30.0)], rtol=1e-14, atol=0)


def test_float32_and_int_input_give_float64():
    rho32 = probability_ratio(np.array([0.0, -1.0], dtype=np.float32),
                              np.array([0.0, -2.0], dtype=np.float32))
    assert rho32.dtype == np.float64
    assert_close(rho32, [1.0, math.e], rtol=1e-14, atol=0)
    rho_int = probability_ratio([1, 0], [0, 0])
    assert rho_int.dtype == np.float64
    assert_close(rho_int, [math.e, 1.0], rtol=1e-14, atol=0)
