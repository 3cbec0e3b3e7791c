"""aggregate: the four modes by hand; rows without a response token are not counted."""

from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy import AGGREGATION_MODES, aggregate


def test_modes_are_the_four_named():
    assert tuple(AGGREGATION_MODES) == ("token-mean", "seq-mean-token-sum",
                                        "seq-mean-token-mean", "seq-mean-token-sum-norm")


def test_all_modes_by_hand_exact():
    # rows [1, 2, 3] (3 tokens), [4] (1 token), and an empty row (no response token)
    x = [[F(1), F(2), F(3)], [F(4), F(50), F(60)], [F(70), F(80), F(90)]]
    mask = [[1, 1, 1], [1, 0, 0], [0, 0, 0]]
    total, n_tokens, n_seq, T = F(1 + 2 + 3 + 4), 4, 2, 3
    want = {
        "token-mean": total / n_tokens,                         # 10 / 4
        "seq-mean-token-sum": total / n_seq,                    # (6 + 4) / 2
        "seq-mean-token-mean": (F(6, 3) + F(4, 1)) / n_seq,     # (2 + 4) / 2
        "seq-mean-token-sum-norm": total / (n_seq * T),         # 10 / (2 * 3)
    }
    for mode, w in want.items():
        got = aggregate(x, mask, mode)
        assert isinstance(got, F), (mode, type(got))
        assert got == w, f"{mode}: expected {w}, got {got}"
    got = aggregate(x, mask, "seq-mean-token-sum-norm", norm=10)
    assert got == total / (n_seq * 10), got


def test_all_modes_in_float_with_garbage_in_padding():
    x = np.array([[1.0, 2.0, 3.0], [4.0, np.nan, np.inf], [np.nan, -np.inf, 1e300]])
    mask = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    want = {"token-mean": 10 / 4, "seq-mean-token-sum": 10 / 2,
            "seq-mean-token-mean": (2 + 4) / 2, "seq-mean-token-sum-norm": 10 / 6}
    for mode, w in want.items():
        got = aggregate(x, mask, mode)
        assert got == pytest.approx(w, rel=1e-15), (mode, w, got)
        assert isinstance(got, float)


def test_left_padded_rows_count_the_same():
    x = np.array([[0.0, 1.0, 2.0, 3.0], [np.nan, np.nan, np.nan, 4.0]])
    mask = np.array([[0, 1, 1, 1], [0, 0, 0, 1]])
    assert aggregate(x, mask, "seq-mean-token-mean") == pytest.approx((2 + 4) / 2, rel=1e-15)
    assert aggregate(x, mask, "token-mean") == pytest.approx(10 / 4, rel=1e-15)


def test_one_dimensional_input_is_one_sequence():
    x, mask = [1.0, 2.0, 6.0, 100.0], [1, 1, 1, 0]
    assert aggregate(x, mask, "token-mean") == pytest.approx(3.0, rel=1e-15)
    assert aggregate(x, mask, "seq-mean-token-sum") == pytest.approx(9.0, rel=1e-15)
    assert aggregate(x, mask, "seq-mean-token-mean") == pytest.approx(3.0, rel=1e-15)
    assert aggregate(x, mask, "seq-mean-token-sum-norm") == pytest.approx(9 / 4, rel=1e-15)


def test_default_mode_is_token_mean_and_no_mask_means_all_valid():
    assert aggregate([[1.0, 3.0], [5.0, 7.0]]) == pytest.approx(4.0, rel=1e-15)


def test_all_rows_empty_raises():
    with pytest.raises(ValueError, match="mask: no response token"):
        aggregate([[1.0, 2.0]], [[0, 0]])
