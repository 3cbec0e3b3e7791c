"""verl 0.9.1's newer outcome estimators (issue 27): OPO, GPG, Pass@k, GDPO.

Expectations are derived here, independently of the module: groups worked by hand in exact
Fractions, and each estimator as a plain loop over the rows (the formula of its docstring,
written out with Python lists and ``statistics``). Properties: row permutations, shifted
scores, equal lengths (OPO = Dr. GRPO), one component (GDPO = GRPO whitened).
"""

import math
import statistics
from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy.family.advantages import (
    gdpo_advantages,
    gpg_advantages,
    grpo_advantages,
    grpo_passk_advantages,
    opo_advantages,
)


def _by_group(groups):
    out = {}
    for i, g in enumerate(groups):
        out.setdefault(g, []).append(i)
    return out


# --- OPO ------------------------------------------------------------------------------------


def test_opo_by_hand_in_fractions():
    # prompt 4: scores 1/2, 0, 5/2 with lengths 2, 1, 1 -> b = (1 + 0 + 5/2) / 4 = 7/8
    # prompt 9: scores 3, 1 with lengths 1, 3 -> b = (3 + 3) / 4 = 3/2
    s = [F(1, 2), F(3), F(0), F(1), F(5, 2)]
    g = [4, 9, 4, 9, 4]
    n = [2, 1, 1, 3, 1]
    A = opo_advantages(s, g, n)
    assert list(A) == [F(1, 2) - F(7, 8), F(3, 2), -F(7, 8), F(-1, 2), F(5, 2) - F(7, 8)]


def opo_loop(s, g, n, singleton="raw"):
    out = []
    groups = _by_group(g)
    for i in range(len(s)):
        rows = groups[g[i]]
        if len(rows) == 1:
            out.append(s[i] if singleton == "raw" else 0.0)
            continue
        b = sum(n[j] * s[j] for j in rows) / sum(n[j] for j in rows)
        out.append(s[i] - b)
    return out


def test_opo_matches_a_loop_on_random_groups():
    rng = np.random.default_rng(0)
    for _ in range(20):
        B = int(rng.integers(2, 12))
        g = rng.integers(0, 4, B)
        s = rng.normal(size=B)
        n = rng.integers(1, 9, B)
        A = opo_advantages(s, g, n, singleton="raw")
        np.testing.assert_allclose(A, opo_loop(s.tolist(), g.tolist(), n.tolist()),
                                   rtol=1e-12, atol=1e-14)


def test_opo_with_equal_lengths_is_dr_grpo():
    s, g = [0.3, 1.0, -2.0, 0.5, 0.25], [0, 1, 0, 1, 1]
    np.testing.assert_allclose(opo_advantages(s, g, [4] * 5),
                               grpo_advantages(s, g, scale="none"), rtol=1e-13, atol=1e-15)


def test_opo_singletons_and_bad_input():
    assert list(opo_advantages([F(2), F(1), F(3)], [0, 1, 1], [1, 1, 1], singleton="raw"))[0] \
        == F(2)
    assert float(opo_advantages([2.0, 1.0, 3.0], [0, 1, 1], [1, 1, 1], singleton="zero")[0]) == 0
    with pytest.raises(ValueError, match="single response"):
        opo_advantages([2.0, 1.0, 3.0], [0, 1, 1], [1, 1, 1])
    with pytest.raises(ValueError, match="lengths: expected shape"):
        opo_advantages([1.0, 2.0], [0, 0], [1, 2, 3])
    with pytest.raises(ValueError, match="lengths: a token count is >= 0"):
        opo_advantages([1.0, 2.0], [0, 0], [1, -2])
    with pytest.raises(TypeError, match="lengths: expected integer"):
        opo_advantages([1.0, 2.0], [0, 0], [1.5, 2])
    with pytest.raises(ValueError, match="0 tokens in all"):
        opo_advantages([1.0, 2.0], [0, 0], [0, 0])
    s = np.array([1.0, 2.0])
    opo_advantages(s, [0, 0], [1, 2])
    assert s.tolist() == [1.0, 2.0]  # not modified


# --- GPG ------------------------------------------------------------------------------------


def test_gpg_by_hand_in_fractions():
    # six scores, two nonzero -> alpha = 6 / 2 = 3; prompt 0 {1, 0, 0} mean 1/3,
    # prompt 1 {0, 2, 0} mean 2/3; f_norm 2
    s = [F(1), F(0), F(0), F(0), F(2), F(0)]
    g = [0, 0, 0, 1, 1, 1]
    A = gpg_advantages(s, g, f_norm=2)
    third = F(1, 3)
    want = [3 * (1 - third) / 2, 3 * -third / 2, 3 * -third / 2,
            3 * -2 * third / 2, 3 * (2 - 2 * third) / 2, 3 * -2 * third / 2]
    assert list(A) == want


def test_gpg_matches_a_loop_and_its_alpha_counts_nonzero_scores():
    rng = np.random.default_rng(1)
    for _ in range(20):
        B = int(rng.integers(2, 12))
        g = rng.integers(0, 3, B)
        s = np.where(rng.random(B) < 0.5, 0.0, rng.normal(size=B))
        groups = _by_group(g.tolist())
        alpha = B / max(sum(1 for v in s if v != 0), 1)
        want = []
        for i in range(B):
            rows = groups[g[i]]
            mean = statistics.fmean(s[j] for j in rows) if len(rows) > 1 else 0.0
            want.append(alpha * (s[i] - mean))
        np.testing.assert_allclose(gpg_advantages(s, g, singleton="raw"), want, rtol=1e-12,
                                   atol=1e-14)


def test_gpg_all_zero_scores_and_bad_input():
    assert gpg_advantages([0.0, 0.0], [0, 0]).tolist() == [0.0, 0.0]  # alpha = 2 / max(0, 1)
    with pytest.raises(ValueError, match="f_norm"):
        gpg_advantages([1.0, 0.0], [0, 0], f_norm=0)
    with pytest.raises(ValueError, match="scores: non-finite"):
        gpg_advantages([1.0, np.nan], [0, 0])
    with pytest.raises(TypeError, match="groups: expected integer"):
        gpg_advantages([1.0, 0.0], [0.5, 0.5])


# --- Pass@k ---------------------------------------------------------------------------------


def test_passk_by_hand():
    # prompt 0: [3, 1, 2] -> best 3 leads 2 by 1; std (ddof 1) of {3, 1, 2} = 1
    # prompt 1: [0, 0] tied -> 0
    # prompt 2: [F(1, 2), 2] -> best 2 leads by 3/2 (scale none)
    s = [F(3), F(1), F(2), F(0), F(0), F(1, 2), F(2)]
    g = [0, 0, 0, 1, 1, 2, 2]
    assert list(grpo_passk_advantages(s, g, scale="none")) == [1, 0, 0, 0, 0, 0, F(3, 2)]
    A = grpo_passk_advantages([float(x) for x in s], g, std_eps=1e-6)
    # group 2's std: |2 - 1/2| / sqrt(2)
    std2 = 1.5 / math.sqrt(2)
    np.testing.assert_allclose(A, [1 / (1 + 1e-6), 0, 0, 0, 0, 0, 1.5 / (std2 + 1e-6)],
                               rtol=1e-14)


def test_passk_matches_a_loop_with_ddof_zero():
    rng = np.random.default_rng(2)
    for _ in range(20):
        B = int(rng.integers(4, 12))
        g = np.repeat(np.arange(B // 2), 2)[:B] if B % 2 == 0 else np.r_[np.repeat(
            np.arange(B // 2), 2), 0]
        s = rng.normal(size=B)
        want = [0.0] * B
        for rows in _by_group(g.tolist()).values():
            vals = sorted(((s[j], j) for j in rows), reverse=True)
            std = statistics.pstdev([s[j] for j in rows])
            want[vals[0][1]] = (vals[0][0] - vals[1][0]) / (std + 1e-6)
        np.testing.assert_allclose(grpo_passk_advantages(s, g, ddof=0), want, rtol=1e-12,
                                   atol=1e-15)


def test_passk_is_permutation_equivariant_and_refuses_a_group_of_one():
    s, g = np.array([0.2, 0.9, 0.4, 1.5, -1.0]), np.array([0, 0, 1, 1, 1])
    perm = np.array([3, 0, 4, 2, 1])
    np.testing.assert_allclose(grpo_passk_advantages(s[perm], g[perm]),
                               grpo_passk_advantages(s, g)[perm], rtol=1e-15)
    with pytest.raises(ValueError, match="single response"):
        grpo_passk_advantages([1.0, 0.0, 2.0], [0, 0, 1])
    with pytest.raises(ValueError, match="scale"):
        grpo_passk_advantages([1.0, 0.0], [0, 0], scale="batch")


# --- GDPO -----------------------------------------------------------------------------------


def whiten_loop(values, ddof=1, eps=1e-8):
    mean = statistics.fmean(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - ddof)
    return [(v - mean) / math.sqrt(var + eps) for v in values]


def test_gdpo_by_hand_two_components():
    # one prompt, three responses of 1, 2, 1 tokens; components c1 = [1, 0, 0],
    # c2 = [0, 10, 20]; eps 0. c1: mean 1/3, std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = 1/sqrt(3)
    # -> A1 = [2/sqrt(3), -1/sqrt(3), -1/sqrt(3)]; c2: mean 10, std 10 -> A2 = [-1, 0, 1]
    c = [[1.0, 0.0], [0.0, 10.0], [0.0, 20.0]]
    mask = [[1, 0], [1, 1], [1, 0]]
    r3 = math.sqrt(3)
    S = [2 / r3 - 1, -1 / r3, -1 / r3 + 1]
    A = gdpo_advantages(c, [7, 7, 7], mask, std_eps=0, weights=[1.0, 1.0])
    tokens = whiten_loop([S[0], S[1], S[1], S[2]])
    np.testing.assert_allclose(A, [[tokens[0], 0.0], [tokens[1], tokens[2]], [tokens[3], 0.0]],
                               rtol=1e-12, atol=1e-15)
    # weights scale each component's GRPO before the sum
    A = gdpo_advantages(c, [7, 7, 7], mask, std_eps=0, weights=[2.0, 0.5])
    S = [4 / r3 - 0.5, -2 / r3, -2 / r3 + 0.5]
    tokens = whiten_loop([S[0], S[1], S[1], S[2]])
    np.testing.assert_allclose(A[np.asarray(mask) == 1], tokens, rtol=1e-12)


def test_gdpo_with_one_component_is_grpo_whitened():
    rng = np.random.default_rng(3)
    g = np.repeat(np.arange(3), 4)
    s = rng.normal(size=12)
    lengths = rng.integers(1, 6, 12)
    mask = (np.arange(5)[None, :] < lengths[:, None]).astype(float)
    A = gdpo_advantages(s[:, None], g, mask)
    grpo = grpo_advantages(s, g)
    tokens = whiten_loop([grpo[i] for i in range(12) for _ in range(lengths[i])])
    np.testing.assert_allclose(A[mask == 1], tokens, rtol=1e-12, atol=1e-14)
    assert np.all(A[mask == 0] == 0)


def test_gdpo_bad_input():
    m = [[1], [1]]
    with pytest.raises(ValueError, match=r"components: expected shape \(B, K\)"):
        gdpo_advantages([1.0, 0.0], [0, 0], m)
    with pytest.raises(ValueError, match="weights: expected shape"):
        gdpo_advantages([[1.0], [0.0]], [0, 0], m, weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="weights"):
        gdpo_advantages([[1.0], [0.0]], [0, 0], m, weights=[np.nan])
    with pytest.raises(ValueError, match="mask: required"):
        gdpo_advantages([[1.0], [0.0]], [0, 0], None)
    with pytest.raises(ValueError, match="components"):
        gdpo_advantages([[1.0], [0.0], [2.0]], [0, 0, 0], m)
    c = np.array([[1.0], [0.0]])
    gdpo_advantages(c, [0, 0], m)
    assert c.tolist() == [[1.0], [0.0]]
