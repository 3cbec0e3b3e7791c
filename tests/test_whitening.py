"""Masked whitening (x - mean) / sqrt(var + eps): both ddof choices and shift_mean=False
by hand, batch statistics over all valid elements, masked_mean."""

import math

import numpy as np
import pytest

from ppo_numpy import masked_mean, whiten
from tests._helpers import assert_close, assert_zero_at_padding


def whiten_by_hand(xs, ddof, eps, shift_mean=True):
    """The mean and variance written out over a plain list of the valid elements."""
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - ddof)
    out = [(x - mean) / math.sqrt(var + eps) for x in xs]
    return out if shift_mean else [o + mean for o in out]


def test_ddof_one_by_hand():
    # mean 2.5, squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, var = 5 / 3
    sd = math.sqrt(5 / 3)
    want = [-1.5 / sd, -0.5 / sd, 0.5 / sd, 1.5 / sd]
    assert_close(whiten([1, 2, 3, 4], std_eps=0), want, rtol=1e-14, atol=1e-15)
    assert_close(whiten([1, 2, 3, 4], ddof=1, std_eps=0), want, rtol=1e-14, atol=1e-15)


def test_ddof_zero_by_hand():
    # var = 5 / 4
    sd = math.sqrt(5 / 4)
    want = [-1.5 / sd, -0.5 / sd, 0.5 / sd, 1.5 / sd]
    assert_close(whiten([1, 2, 3, 4], ddof=0, std_eps=0), want, rtol=1e-14, atol=1e-15)


def test_eps_goes_inside_the_square_root():
    # x = [0, 2]: mean 1, ddof 1 var = 2; eps = 2 -> divide by sqrt(4) = 2
    assert_close(whiten([0.0, 2.0], std_eps=2.0), [-0.5, 0.5], rtol=1e-15, atol=0)
    # default eps 1e-8
    want = [-1 / math.sqrt(2 + 1e-8), 1 / math.sqrt(2 + 1e-8)]
    assert_close(whiten([0.0, 2.0]), want, rtol=1e-15, atol=0)


@pytest.mark.parametrize("ddof", [0, 1])
def test_shift_mean_false_adds_the_mean_back(ddof):
    # x = [1, 2, 3, 6]: mean 3, deviations [-2, -1, 0, 3], sum of squares 14
    var = 14 / (4 - ddof)
    sd = math.sqrt(var + 1e-8)
    want = [3 + -2 / sd, 3 + -1 / sd, 3 + 0 / sd, 3 + 3 / sd]
    got = whiten([1.0, 2.0, 3.0, 6.0], shift_mean=False, ddof=ddof)
    assert_close(got, want, rtol=1e-14, atol=1e-15, ddof=ddof)


def test_batch_statistics_over_all_valid_elements():
    # valid elements 1, 2 | 3: mean 2, ddof 1 var = (1 + 0 + 1) / 2 = 1
    x = np.array([[1.0, 2.0, np.nan], [np.inf, 3.0, -1e300]])
    mask = np.array([[1, 1, 0], [0, 1, 0]])
    got = whiten(x, mask, std_eps=0)
    assert_close(got, [[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], rtol=1e-15, atol=1e-15,
                 x=x, mask=mask)
    assert_zero_at_padding(got, mask, "whitened", x=x)
    got = whiten(x, mask, shift_mean=False, std_eps=0)
    assert_close(got, [[1.0, 2.0, 0.0], [0.0, 3.0, 0.0]], rtol=1e-15, atol=1e-15)
    assert_zero_at_padding(got, mask, "whitened (shift_mean=False)", x=x)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ddof", [0, 1])
def test_random_batches_against_hand_statistics(seed, ddof):
    rng = np.random.default_rng(seed)
    x = rng.normal(3.0, 2.0, size=(3, 6))
    mask = (rng.random((3, 6)) < 0.7).astype(int)
    mask[0, :2] = 1
    valid = [float(v) for v in x[mask == 1]]
    for shift in (True, False):
        got = whiten(x, mask, shift_mean=shift, ddof=ddof)
        want = whiten_by_hand(valid, ddof, 1e-8, shift)
        assert_close(got[mask == 1], want, rtol=1e-12, atol=1e-12, x=x, mask=mask,
                     ddof=ddof, shift_mean=shift)


def test_whitened_output_has_mean_zero_and_unit_variance():
    rng = np.random.default_rng(1)
    x = rng.normal(-4.0, 7.0, size=50)
    for ddof in (0, 1):
        out = whiten(x, ddof=ddof, std_eps=0)
        assert abs(out.mean()) < 1e-14, out.mean()
        assert math.isclose(float(np.var(out, ddof=ddof)), 1.0, rel_tol=1e-13), ddof


def test_whiten_does_not_modify_input():
    x = np.array([1.0, 5.0, np.nan])
    mask = np.array([1, 1, 0])
    before = x.copy()
    whiten(x, mask)
    np.testing.assert_array_equal(x, before)


def test_float32_and_int_input_give_float64():
    assert whiten(np.array([1, 2, 3])).dtype == np.float64
    got = whiten(np.array([1.0, 2.0, 3.0], dtype=np.float32), std_eps=0)
    assert got.dtype == np.float64
    assert_close(got, [-1.0, 0.0, 1.0], rtol=0, atol=1e-15)


def test_masked_mean_by_hand():
    assert masked_mean([1.0, 2.0, 3.0, 99.0], [1, 1, 1, 0]) == (1.0 + 2.0 + 3.0) / 3
    assert masked_mean([[1.0, np.nan], [4.0, 7.0]], [[1, 0], [1, 1]]) == (1.0 + 4.0 + 7.0) / 3
    assert masked_mean([2.0, 4.0]) == 3.0


def test_constant_values_with_default_eps_give_zeros():
    assert_close(whiten([3.0, 3.0, 3.0]), [0.0, 0.0, 0.0], rtol=0, atol=0)
    assert_close(whiten([3.0, 3.0], shift_mean=False), [3.0, 3.0], rtol=0, atol=0)
