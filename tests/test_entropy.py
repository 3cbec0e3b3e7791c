"""entropy_from_logits and log_softmax by hand: uniform gives log K, the two-token case
-(p log p + (1-p) log(1-p)), stability for logits of order 1e3, masking."""

import math

import numpy as np
import pytest

from ppo_numpy import entropy_from_logits, log_softmax
from tests._helpers import assert_close, assert_zero_at_padding


@pytest.mark.parametrize("K", [1, 2, 3, 7, 50])
def test_uniform_gives_log_K(K):
    H = entropy_from_logits(np.full((2, K), 0.3))
    assert_close(H, [math.log(K)] * 2, rtol=1e-14, atol=1e-15, K=K)


def test_two_token_case_by_hand():
    # logits [0, log 3] -> p = [1/4, 3/4]
    p = 0.25
    want = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    H = entropy_from_logits([[0.0, math.log(3.0)]])
    assert_close(H, [want], rtol=1e-14, atol=0)


def test_stable_for_large_logits():
    p = 0.25
    want = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    H = entropy_from_logits([[1000.0, 1000.0 + math.log(3.0)], [1000.0, 1000.0],
                             [-1000.0, -1000.0], [1000.0, -1000.0]])
    assert np.all(np.isfinite(H)), H
    assert_close(H, [want, math.log(2.0), math.log(2.0), 0.0], rtol=1e-12, atol=1e-300)


def test_three_token_case_by_hand_batched():
    # logits log [1, 2, 5] -> p = [1/8, 2/8, 5/8]
    p = [1 / 8, 2 / 8, 5 / 8]
    want = -sum(q * math.log(q) for q in p)
    logits = np.log([[[1.0, 2.0, 5.0], [1.0, 1.0, 1.0]]])  # (B=1, T=2, K=3)
    H = entropy_from_logits(logits)
    assert H.shape == (1, 2) and H.dtype == np.float64
    assert_close(H, [[want, math.log(3.0)]], rtol=1e-14, atol=0)


def test_padding_is_zero_whatever_it_holds():
    logits = np.array([[[0.0, 0.0], [np.nan, np.inf]], [[-np.inf, 1.0], [0.0, math.log(3.0)]]])
    mask = np.array([[1, 0], [0, 1]])
    H = entropy_from_logits(logits, mask)
    p = 0.25
    want = [[math.log(2.0), 0.0], [0.0, -(p * math.log(p) + (1 - p) * math.log(1 - p))]]
    assert_close(H, want, rtol=1e-14, atol=0, logits=logits, mask=mask)
    assert_zero_at_padding(H, mask, "entropy", logits=logits)


def test_entropy_does_not_modify_input():
    logits = np.array([[1.0, 2.0], [np.nan, 3.0]])
    before = logits.copy()
    entropy_from_logits(logits, [1, 0])
    np.testing.assert_array_equal(logits, before)


def test_log_softmax_by_hand():
    # log softmax([0, log 3]) = [log 1/4, log 3/4]
    got = log_softmax(np.array([0.0, math.log(3.0)]))
    assert_close(got, [math.log(0.25), math.log(0.75)], rtol=1e-14, atol=0)
    got = log_softmax(np.array([[1000.0, 1000.0], [5.0, 5.0]]))
    assert_close(got, [[-math.log(2.0)] * 2] * 2, rtol=1e-14, atol=0)


def test_log_softmax_accepts_lists():
    got = log_softmax([0.0, 0.0])
    assert_close(got, [-math.log(2.0)] * 2, rtol=1e-14, atol=0)
