"""Group baselines of issue 13 (GRPO, Dr. GRPO, RLOO, REINFORCE++, REINFORCE++-baseline, ReMax).

Expectations are derived here, independently of the module: hand-computed groups in exact
Fractions, the returns-to-go as the sum written out over a row's response tokens, the
whitening statistics over a plain list, and the frameworks' recurrences written in the test
(verl's reset after the last token, OpenRLHF's masked sum) for masks without holes.
Properties: row permutations, shifted groups, equal scores, interleaved groups, padding.
"""

import math
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ppo_numpy import gae
from ppo_numpy.family.advantages import (
    SCALES,
    grpo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    remax_advantages,
    returns_to_go,
    rloo_advantages,
)
from tests._helpers import (
    FAST,
    assert_close,
    assert_exact,
    assert_same,
    assert_zero_at_padding,
    masks_with_holes,
    padded_batches,
)

# two interleaved groups: prompt 4 = {1/2, 0, 5/2} (mean 1), prompt 9 = {3, 1, 2} (mean 2)
S6 = [F(1, 2), F(3), F(0), F(1), F(5, 2), F(2)]
G6 = [4, 9, 4, 9, 4, 9]
CENTRED6 = [F(-1, 2), F(1), F(-1), F(-1), F(3, 2), F(0)]
# leave-one-out baselines: prompt 4: (0 + 5/2)/2, (1/2 + 5/2)/2, (1/2 + 0)/2;
# prompt 9: (1 + 2)/2, (3 + 2)/2, (3 + 1)/2
RLOO6 = [F(1, 2) - F(5, 4), F(3) - F(3, 2), F(0) - F(3, 2), F(1) - F(5, 2),
         F(5, 2) - F(1, 4), F(2) - F(2)]


def whiten_list(xs, ddof, eps, floor=False):
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - ddof)
    scale = math.sqrt(max(var, eps) if floor else var + eps)
    return [(x - mean) / scale for x in xs]


def rtg_by_sum(rewards, mask, gamma):
    """G_t = sum_{k >= j} gamma^(k - j) r at the k-th response token, written as the sum."""
    out = [[F(0)] * len(row) for row in rewards]
    for i, (row, mrow) in enumerate(zip(rewards, mask)):
        idx = [t for t, m in enumerate(mrow) if m]
        for j, t in enumerate(idx):
            out[i][t] = sum(gamma ** (k - j) * row[idx[k]] for k in range(j, len(idx)))
    return out


# --- hand-computed groups -------------------------------------------------------------------


def test_dr_grpo_and_rloo_exact_on_interleaved_groups():
    assert_exact(grpo_advantages(S6, G6, scale="none"), CENTRED6, scores=S6, groups=G6)
    assert RLOO6 == [F(-3, 4), F(3, 2), F(-3, 2), F(-3, 2), F(9, 4), F(0)]
    assert_exact(rloo_advantages(S6, G6), RLOO6, scores=S6, groups=G6)
    # RLOO = n / (n - 1) * (s - mean) for groups of 3
    assert [F(3, 2) * c for c in CENTRED6] == RLOO6


def test_brief_example_pairs():
    s, g = [1, 0, 0, 1], [0, 0, 1, 1]
    assert_same(grpo_advantages(s, g, scale="none"), np.array([0.5, -0.5, -0.5, 0.5]))
    assert_same(rloo_advantages(s, g), np.array([1.0, -1.0, -1.0, 1.0]))
    # std of {1, 0} with ddof 1: sqrt(1/2); with ddof 0: 1/2
    for ddof, std in [(1, math.sqrt(0.5)), (0, 0.5)]:
        for eps in (0.0, 1e-6, 1e-4):
            want = [0.5 / (std + eps), -0.5 / (std + eps), -0.5 / (std + eps), 0.5 / (std + eps)]
            assert_close(grpo_advantages(s, g, std_eps=eps, ddof=ddof), want, rtol=1e-15, atol=0,
                         eps=eps, ddof=ddof)


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-4, 1e-9])
def test_grpo_group_scale_by_hand(ddof, eps):
    # prompt 4: deviations -1/2, -1, 3/2, squares sum 7/2; prompt 9: 1, -1, 0, squares sum 2
    std4, std9 = math.sqrt(3.5 / (3 - ddof)), math.sqrt(2 / (3 - ddof))
    stds = [std4, std9, std4, std9, std4, std9]
    want = [float(c) / (sd + eps) for c, sd in zip(CENTRED6, stds)]
    got = grpo_advantages([float(x) for x in S6], G6, std_eps=eps, ddof=ddof)
    assert_close(got, want, rtol=1e-15, atol=1e-16, eps=eps, ddof=ddof)
    # Fraction input gives the same floats (the square root is float)
    assert_close(grpo_advantages(S6, G6, std_eps=eps, ddof=ddof), want, rtol=1e-15, atol=1e-16)


@pytest.mark.parametrize("ddof", [0, 1])
def test_grpo_batch_scale_divides_by_the_std_of_all_scores(ddof):
    # all six: mean 3/2, deviations -1, 3/2, -3/2, -1/2, 1, 1/2, squares sum 7
    std = math.sqrt(7 / (6 - ddof))
    want = [float(c) / (std + 1e-4) for c in CENTRED6]
    got = grpo_advantages(S6, G6, scale="batch", std_eps=1e-4, ddof=ddof)
    assert_close(got, want, rtol=1e-15, atol=1e-16, ddof=ddof)


def test_float32_follows_float32_arithmetic():
    # TRL computes in float32: A = 0.5 / (sqrt(0.5) + 1e-4), every step in float32
    f = np.float32
    std = np.sqrt((f(0.5) * f(0.5) + f(0.5) * f(0.5)) / f(1))
    want = f(0.5) / (std + f(1e-4))
    got = grpo_advantages([1, 0, 0, 1], [0, 0, 1, 1], std_eps=1e-4, dtype=np.float32)
    assert got.dtype == np.float64
    assert_same(got, np.array([want, -want, -want, want], dtype=np.float64))
    got64 = grpo_advantages([1, 0, 0, 1], [0, 0, 1, 1], std_eps=1e-4)
    assert got64[0] != got[0] and abs(got64[0] - got[0]) < 1e-6, (got64, got)
    # a score that float32 cannot hold is rounded first
    s = [0.1, 0.2, 0.3, 0.3]
    got = grpo_advantages(s, [0, 0, 1, 1], scale="none", dtype="float32")
    assert got[0] == float(f(0.1) - (f(0.1) + f(0.2)) / f(2)), got


def test_group_of_one_in_each_framework():
    s, g = [1.0, 0.0, 5.0], [0, 0, 1]
    with pytest.raises(ValueError, match=r"^groups: prompt id 1 has a single response \(row 2\)"):
        grpo_advantages(s, g)
    with pytest.raises(ValueError, match="^groups: prompt id 1"):
        rloo_advantages(s, g)
    with pytest.raises(ValueError, match="^groups: prompt id 1"):
        reinforce_plus_plus_baseline_advantages(s, g, np.ones((3, 2)))
    pair = 0.5 / (math.sqrt(0.5) + 1e-6)
    # TRL: its own mean is its baseline, advantage 0
    assert_close(grpo_advantages(s, g, singleton="zero"), [pair, -pair, 0.0], rtol=1e-15, atol=0)
    assert grpo_advantages(s, g, singleton="zero")[2] == 0.0
    # verl: mean 0 and std 1, so 5 / (1 + eps); 5 itself without the std
    assert_close(grpo_advantages(s, g, singleton="raw"), [pair, -pair, 5 / (1 + 1e-6)],
                 rtol=1e-15, atol=0)
    assert grpo_advantages(s, g, scale="none", singleton="raw")[2] == 5.0
    assert grpo_advantages(s, g, scale="none", singleton="zero")[2] == 0.0
    # RLOO: verl keeps the score, "zero" gives 0
    assert_same(rloo_advantages(s, g, singleton="raw"), np.array([1.0, -1.0, 5.0]))
    assert_same(rloo_advantages(s, g, singleton="zero"), np.array([1.0, -1.0, 0.0]))
    assert_exact(rloo_advantages([F(1), F(0), F(5, 3)], g, singleton="raw"), [1, -1, F(5, 3)])


def test_groups_of_equal_scores_give_exactly_zero():
    # 0.1 + 0.1 + 0.1 = 0.30000000000000004: the float mean misses 0.1 by one rounding
    s = [0.1, 0.1, 0.1, 1.0, 2.0, 0.7]
    g = [3, 3, 3, 5, 5, 5]
    for scale in SCALES:
        for eps in (1e-6, 1e-4, 1e-9):
            assert_same(grpo_advantages(s, g, scale=scale, std_eps=eps)[:3], np.zeros(3))
    assert_same(rloo_advantages(s, g)[:3], np.zeros(3))
    A = reinforce_plus_plus_baseline_advantages(s, g, np.ones((6, 2)))
    # every token of the flat group is the batch mean shifted by 0 - mean(c)
    assert np.all(A[:3] == A[0, 0]), A
    # with eps = 0 a flat group is 0 / 0
    with pytest.raises(ValueError, match="^scores: the group of prompt id 3 has equal scores"):
        grpo_advantages(s, g, std_eps=0)
    with pytest.raises(ValueError, match="^scores: every score of the batch"):
        grpo_advantages([2.0, 2.0, 2.0, 2.0], [0, 0, 1, 1], scale="batch", std_eps=0)
    assert_same(grpo_advantages(s, g, scale="none", std_eps=0)[:3], np.zeros(3))


# --- returns-to-go, REINFORCE++, REINFORCE++-baseline, ReMax -------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_returns_to_go_is_the_sum_over_response_tokens(seed):
    rng = np.random.default_rng(seed)
    B, T = 3, 7
    mask = (rng.random((B, T)) < 0.7).astype(int)
    mask[:, 0] = 1
    num = rng.integers(-9, 10, size=(B, T))
    rewards = [[F(int(num[i, t]), 4) for t in range(T)] for i in range(B)]
    gamma = F(int(rng.integers(0, 11)), 10)
    want = rtg_by_sum(rewards, mask.tolist(), gamma)
    garbage = np.array(rewards, dtype=object)
    garbage[mask == 0] = np.nan
    got = returns_to_go(garbage, mask, gamma)
    assert_exact(got, want, rewards=garbage, mask=mask, gamma=gamma)
    # the same as GAE with values 0 and lambda 1
    A, _ = gae(garbage, np.zeros((B, T)), gamma, 1, mask, method="loop")
    assert_exact(A, want)


def test_returns_to_go_by_hand():
    # gamma 1/2: [1, pad, 3] -> G = [1 + 3/2, 0, 3]
    assert_exact(returns_to_go([[F(1), F(2), F(3)]], [[1, 0, 1]], F(1, 2)), [[F(5, 2), 0, 3]])


def verl_reinforce_pp_returns(rewards, mask, gamma):
    """verl's recurrence: G = r + gamma G, stored, then G reset to 0 at padding."""
    B, T = rewards.shape
    out = np.zeros((B, T))
    for i in range(B):
        running = 0.0
        for t in reversed(range(T)):
            running = rewards[i, t] + gamma * running
            out[i, t] = running
            running *= mask[i, t]
    return out


def openrlhf_returns(rewards, mask, gamma):
    """OpenRLHF's cumulative returns of the masked rewards (no reset)."""
    B, T = rewards.shape
    out = np.zeros((B, T))
    for i in range(B):
        running = 0.0
        for t in reversed(range(T)):
            running = rewards[i, t] * mask[i, t] + gamma * running
            out[i, t] = running
    return out


@pytest.mark.parametrize("placement", ["right", "left"])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_matches_verl_and_openrlhf_without_holes(placement, gamma):
    rng = np.random.default_rng(7)
    B, T = 4, 6
    lengths = [6, 3, 1, 4]
    mask = np.zeros((B, T), dtype=int)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    if placement == "left":
        mask = mask[:, ::-1].copy()
    rewards = np.where(mask == 1, rng.normal(size=(B, T)), 0.0)
    valid = mask == 1
    # verl: Bessel variance, rsqrt(var + 1e-8)
    G = verl_reinforce_pp_returns(rewards, mask, gamma)
    want = whiten_list(list(G[valid]), 1, 1e-8)
    got = reinforce_plus_plus_advantages(rewards, mask, gamma)
    assert_close(got[valid], want, rtol=1e-12, atol=1e-12, mask=mask, gamma=gamma)
    assert_zero_at_padding(got, mask, "reinforce++")
    # OpenRLHF: population variance clamped at 1e-8
    G = openrlhf_returns(rewards, mask, gamma)
    want = whiten_list(list(G[valid]), 0, 1e-8, floor=True)
    got = reinforce_plus_plus_advantages(rewards, mask, gamma, ddof=0, eps_mode="floor")
    assert_close(got[valid], want, rtol=1e-12, atol=1e-12, mask=mask, gamma=gamma)


def test_reinforce_pp_hole_is_skipped_where_verl_restarts():
    rewards = np.array([[0.0, 0.0, 0.0, 1.0]])
    mask = np.array([[1, 0, 1, 1]])
    assert_same(returns_to_go(rewards, mask), np.array([[1.0, 0.0, 1.0, 1.0]]))
    # verl's reset at the hole: the first token does not see the reward after it
    assert verl_reinforce_pp_returns(rewards, mask, 1.0)[0, 0] == 0.0


def test_reinforce_pp_baseline_by_hand():
    # c = [1/2, -1/2, -1/2, 1/2] on 2 tokens each: mean 0, squares 8 * 1/4 = 2
    A = reinforce_plus_plus_baseline_advantages([1, 0, 0, 1], [0, 0, 1, 1], np.ones((4, 2)),
                                                std_eps=0)
    sd = math.sqrt(2 / 7)
    assert_close(A, [[0.5 / sd] * 2, [-0.5 / sd] * 2, [-0.5 / sd] * 2, [0.5 / sd] * 2],
                 rtol=1e-15, atol=0)
    # verl's defaults: ddof 1, eps 1e-8 inside the root
    A = reinforce_plus_plus_baseline_advantages([1, 0, 0, 1], [0, 0, 1, 1], np.ones((4, 2)))
    assert_close(A[:, 0], [x for x in whiten_list([0.5, -0.5, -0.5, 0.5] * 2, 1, 1e-8)[:4]],
                 rtol=1e-15, atol=0)


def test_reinforce_pp_baseline_with_token_rewards_openrlhf_style():
    scores = [2.0, 0.0, 1.0, 1.0]
    groups = [0, 0, 1, 1]
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    kl = np.array([[0.1, -0.2, 0.3], [0.0, 0.4, np.nan], [0.5, np.inf, 7.0],
                   [0.2, 0.2, 0.2]])
    beta = 0.5
    token_rewards = -beta * kl
    # c = [1, -1, 0, 0]; the returns-to-go of -beta KL, then c at the last token (gamma 1)
    c = [1.0, -1.0, 0.0, 0.0]
    tr = np.where(mask == 1, token_rewards, 0.0)
    G = [[c[i] + sum(tr[i, u] for u in range(t, 3)) for t in range(3) if mask[i, t]]
         for i in range(4)]
    flat = [x for row in G for x in row]
    want = whiten_list(flat, 0, 1e-8, floor=True)
    got = reinforce_plus_plus_baseline_advantages(scores, groups, mask,
                                                  token_rewards=token_rewards, ddof=0,
                                                  eps_mode="floor")
    assert_close(got[mask == 1], want, rtol=1e-12, atol=1e-14, mask=mask)
    assert_zero_at_padding(got, mask, "rf++ baseline")


def test_reinforce_pp_baseline_group_of_one():
    s, g, mask = [1.0, 0.0, 5.0], [0, 0, 1], np.ones((3, 2))
    # verl: mean 0, c = 5; OpenRLHF: its own mean, c = 0
    for singleton, c in [("raw", [0.5, -0.5, 5.0]), ("zero", [0.5, -0.5, 0.0])]:
        A = reinforce_plus_plus_baseline_advantages(s, g, mask, singleton=singleton)
        want = whiten_list([x for x in c for _ in range(2)], 1, 1e-8)
        assert_close(A.ravel(), want, rtol=1e-14, atol=1e-15, singleton=singleton)


def test_reinforce_pp_baseline_row_without_tokens_counts_in_its_group():
    mask = np.array([[1, 1], [0, 0], [1, 1], [1, 0]])
    # prompt 0: scores 3 and 1 (the row without tokens), mean 2 -> c_0 = 1
    A = reinforce_plus_plus_baseline_advantages([3, 1, 0, 2], [0, 0, 1, 1], mask, std_eps=0)
    want = whiten_list([1.0, 1.0, -1.0, -1.0, 1.0], 1, 0)
    assert_close(A[mask == 1], want, rtol=1e-15, atol=1e-15)
    assert_same(A[1], np.zeros(2))


def test_remax_exact_by_hand():
    rewards = [[F(1, 10), F(0), F(1)], [F(0), F(-1, 5), F(3)]]
    mask = [[1, 1, 1], [1, 1, 0]]
    # G row 0 = [11/10, 1, 1] minus 1/2; row 1 = [-1/5, -1/5] minus 1/4
    want = [[F(3, 5), F(1, 2), F(1, 2)], [F(-9, 20), F(-9, 20), F(0)]]
    assert_exact(remax_advantages(rewards, [F(1, 2), F(1, 4)], mask), want)
    # Fraction baselines with integer rewards stay exact too
    assert_exact(remax_advantages([[0, 1], [0, 0]], [F(1, 3), 0], None),
                 [[F(2, 3), F(2, 3)], [0, 0]])
    # gamma 1/2 discounts the returns (verl has none: gamma 1)
    assert_exact(remax_advantages(rewards, [0, 0], mask, gamma=F(1, 2)),
                 [[F(1, 10) + F(1, 4), F(1, 2), F(1)], [F(-1, 10), F(-1, 5), F(0)]])


# --- properties ----------------------------------------------------------------------------

quarters = st.integers(-12, 12).map(lambda k: F(k, 4))


@st.composite
def grouped_scores(draw, min_size=2):
    """Fraction scores and integer group ids (each group >= min_size rows), in any order."""
    n_groups = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(min_size, 4), min_size=n_groups, max_size=n_groups))
    ids = draw(st.lists(st.integers(-50, 50), min_size=n_groups, max_size=n_groups,
                        unique=True))
    groups = [gid for gid, n in zip(ids, sizes) for _ in range(n)]
    order = draw(st.permutations(range(len(groups))))
    groups = [groups[k] for k in order]
    scores = draw(st.lists(quarters, min_size=len(groups), max_size=len(groups)))
    return scores, groups


def group_fns():
    return {
        "grpo-none": lambda s, g: grpo_advantages(s, g, scale="none"),
        "rloo": rloo_advantages,
    }


@FAST
@given(grouped_scores(), st.data())
def test_permuting_rows_permutes_advantages(sg, data):
    s, g = sg
    perm = data.draw(st.permutations(range(len(s))))
    sp, gp = [s[k] for k in perm], [g[k] for k in perm]
    for name, fn in group_fns().items():
        assert_exact(fn(sp, gp), [fn(s, g)[k] for k in perm], fn=name, scores=s, groups=g)
    for scale in ("group", "batch"):
        want = grpo_advantages(s, g, scale=scale)[list(perm)]
        assert_close(grpo_advantages(sp, gp, scale=scale), want, rtol=1e-12, atol=1e-12,
                     scale=scale, scores=s, groups=g, perm=perm)


@FAST
@given(grouped_scores(), quarters, st.data())
def test_adding_a_constant_to_a_group_changes_nothing(sg, c, data):
    s, g = sg
    target = data.draw(st.sampled_from(sorted(set(g))))
    shifted = [x + c if gi == target else x for x, gi in zip(s, g)]
    for name, fn in group_fns().items():
        assert_exact(fn(shifted, g), fn(s, g), fn=name, scores=s, groups=g, c=c)
    assert_close(grpo_advantages(shifted, g), grpo_advantages(s, g), rtol=1e-9, atol=1e-9,
                 scores=s, groups=g, c=c)


@FAST
@given(grouped_scores(), st.floats(-1e3, 1e3, allow_nan=False), st.data())
def test_a_group_of_equal_scores_gets_zero(sg, v, data):
    s, g = sg
    target = data.draw(st.sampled_from(sorted(set(g))))
    s = [v if gi == target else float(x) for x, gi in zip(s, g)]
    rows = [i for i, gi in enumerate(g) if gi == target]
    for scale in SCALES:
        A = grpo_advantages(s, g, scale=scale)
        assert np.all(A[rows] == 0), (scale, s, g, A)
    assert np.all(rloo_advantages(s, g)[rows] == 0), (s, g)


def test_interleaved_groups_equal_contiguous_groups():
    s = np.array([0.3, 1.7, -2.0, 0.9, 4.1, 0.0, 2.2, -1.3])
    contiguous = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    # the layout of TRL's legacy RLOO (rloo_k copies of the prompt batch) and verl's uid order
    order = np.array([0, 4, 1, 5, 2, 6, 3, 7])
    for fn in (lambda s, g: grpo_advantages(s, g),
               lambda s, g: grpo_advantages(s, g, scale="batch"),
               lambda s, g: grpo_advantages(s, g, scale="none"), rloo_advantages):
        A = fn(s, contiguous)
        assert_close(fn(s[order], contiguous[order]), A[order], rtol=1e-15, atol=1e-15)
    mask = np.ones((8, 3))
    A = reinforce_plus_plus_baseline_advantages(s, contiguous, mask)
    got = reinforce_plus_plus_baseline_advantages(s[order], contiguous[order], mask)
    assert_close(got, A[order], rtol=1e-14, atol=1e-14)


@FAST
@given(padded_batches([st.integers(-8, 8).map(lambda k: k / 4)], min_len=1), st.data())
def test_padding_content_never_matters(b, data):
    (rewards,) = b.arrays
    B = rewards.shape[0]
    clean = np.where(b.mask == 1, rewards, 0.0)
    base = np.array(data.draw(st.lists(st.integers(-8, 8), min_size=B, max_size=B))) / 4
    got = remax_advantages(rewards, base, b.mask)
    assert_same(got, remax_advantages(clean, base, b.mask), mask=b.mask, rewards=rewards)
    assert_zero_at_padding(got, b.mask, "remax", rewards=rewards)
    for i in range(B):  # each row on its own slice
        assert_same(b.valid(got, i), remax_advantages(b.rows[i][0][None], base[i:i + 1],
                                                      None)[0])
    if b.mask.sum() >= 2:
        got = reinforce_plus_plus_advantages(rewards, b.mask)
        assert_same(got, reinforce_plus_plus_advantages(clean, b.mask), mask=b.mask)
        assert_zero_at_padding(got, b.mask, "reinforce++", rewards=rewards)
        groups = np.arange(B) // 2
        if B % 2 == 0:
            got = reinforce_plus_plus_baseline_advantages(base, groups, b.mask,
                                                          token_rewards=rewards)
            want = reinforce_plus_plus_baseline_advantages(base, groups, b.mask,
                                                           token_rewards=clean)
            assert_same(got, want, mask=b.mask)
            assert_zero_at_padding(got, b.mask, "rf++ baseline", rewards=rewards)


@FAST
@given(masks_with_holes(), st.data(), st.sampled_from([F(0), F(1, 2), F(9, 10), F(1)]))
def test_returns_to_go_with_holes_equals_sum_definition(mask, data, gamma):
    B, T = mask.shape
    rewards = [[data.draw(quarters) for _ in range(T)] for _ in range(B)]
    assert_exact(returns_to_go(rewards, mask, gamma), rtg_by_sum(rewards, mask.tolist(), gamma),
                 rewards=rewards, mask=mask, gamma=gamma)


def test_inputs_are_not_modified():
    s = np.array([1.0, 0.0, 0.5, 2.0])
    g = np.array([3, 3, 8, 8])
    rewards = np.array([[0.0, 1.0, np.nan], [0.5, 0.0, 1.0], [1.0, np.inf, 2.0],
                        [0.0, 0.0, 0.0]])
    mask = np.array([[1, 1, 0], [1, 1, 1], [1, 0, 1], [1, 1, 1]])
    before = [a.copy() for a in (s, g, rewards, mask)]
    for scale in SCALES:
        grpo_advantages(s, g, scale=scale)
    rloo_advantages(s, g)
    reinforce_plus_plus_advantages(rewards, mask)
    reinforce_plus_plus_baseline_advantages(s, g, mask, token_rewards=rewards)
    remax_advantages(rewards, s, mask)
    returns_to_go(rewards, mask)
    for a, b in zip((s, g, rewards, mask), before):
        assert_same(a, b)


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("groups, err, msg", [
    ([0.5, 0.5, 1.0, 1.0], TypeError, "groups: expected integer prompt ids"),
    ([0.0, 0.0, 1.0, 1.0], TypeError, "groups: expected integer prompt ids"),
    (["a", "a", "b", "b"], TypeError, "groups: expected integer prompt ids"),
    ([True, True, False, False], TypeError, "groups: .* got bool"),
    ([0, 0, 1], ValueError, r"groups: expected shape \(4,\)"),
    ([[0, 0], [1, 1]], ValueError, r"groups: expected shape \(4,\)"),
    ([[0, 0], [1]], ValueError, "groups: not a rectangular array"),
])
def test_bad_groups(groups, err, msg):
    for fn in (grpo_advantages, rloo_advantages,
               lambda s, g: reinforce_plus_plus_baseline_advantages(s, g, np.ones((4, 2)))):
        with pytest.raises(err, match="^" + msg):
            fn([1.0, 0.0, 0.0, 1.0], groups)


@pytest.mark.parametrize("scores, msg", [
    ([1.0, np.nan, 0.0, 1.0], r"scores: non-finite value nan at row 1"),
    ([1.0, 0.0, np.inf, 1.0], r"scores: non-finite value inf at row 2"),
    ([[1.0, 0.0], [0.0, 1.0]], r"scores: expected shape \(B,\)"),
    ([], r"scores: expected shape \(B,\)"),
])
def test_bad_scores(scores, msg):
    with pytest.raises(ValueError, match="^" + msg):
        grpo_advantages(scores, [0, 0, 1, 1])
    with pytest.raises(ValueError, match="^" + msg):
        rloo_advantages(scores, [0, 0, 1, 1])


def test_bad_scores_type_and_count():
    with pytest.raises(TypeError, match="^scores:"):
        grpo_advantages(["a", "b"], [0, 0])
    with pytest.raises(ValueError, match=r"^groups: expected shape \(3,\)"):
        rloo_advantages([1.0, 2.0, 3.0], [0, 0, 1, 1])


def test_bad_keywords():
    s, g = [1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1]
    with pytest.raises(ValueError, match="^scale:"):
        grpo_advantages(s, g, scale="std")
    with pytest.raises(ValueError, match="^singleton:"):
        rloo_advantages(s, g, singleton="nan")
    with pytest.raises(ValueError, match="^std_eps:"):
        grpo_advantages(s, g, std_eps=-1e-6)
    with pytest.raises(ValueError, match="^ddof:"):
        grpo_advantages(s, g, ddof=2)
    with pytest.raises(ValueError, match="^dtype:"):
        grpo_advantages(s, g, dtype=np.int64)
    with pytest.raises(ValueError, match="^gamma:"):
        reinforce_plus_plus_advantages([[1.0, 2.0]], None, gamma=1.5)
    with pytest.raises(ValueError, match="^scores: scale='batch' needs at least 2"):
        grpo_advantages([1.0], [0], scale="batch", singleton="zero")


def test_bad_token_inputs():
    mask = np.array([[1, 1], [1, 0]])
    with pytest.raises(ValueError, match=r"^baseline_scores: expected shape \(2,\), one score"):
        remax_advantages([[0.0, 1.0], [0.0, 0.0]], [1.0, 2.0, 3.0], mask)
    with pytest.raises(ValueError, match=r"^baseline_scores: expected shape \(B,\)"):
        remax_advantages([[0.0, 1.0], [0.0, 0.0]], [[1.0, 2.0]], mask)
    with pytest.raises(ValueError, match="^baseline_scores: non-finite value nan at row 0"):
        remax_advantages([[0.0, 1.0], [0.0, 0.0]], [np.nan, 2.0], mask)
    with pytest.raises(ValueError, match=r"^rewards: non-finite value nan at valid position"):
        remax_advantages([[0.0, np.nan], [0.0, 0.0]], [1.0, 2.0], mask)
    with pytest.raises(ValueError, match=r"^rewards: expected shape \(B, T\)"):
        remax_advantages([0.0, 1.0], [1.0], None)
    with pytest.raises(ValueError, match="^mask: shape"):
        reinforce_plus_plus_advantages([[0.0, 1.0]], [[1, 1, 0]])
    with pytest.raises(ValueError, match="^mask: whitening needs at least 2 valid elements"):
        reinforce_plus_plus_advantages([[0.0, 1.0], [1.0, 0.0]], [[0, 1], [0, 0]])
    with pytest.raises(ValueError, match="^mask: required"):
        reinforce_plus_plus_baseline_advantages([1.0, 0.0], [0, 0], None)
    with pytest.raises(ValueError, match=r"^scores: expected shape \(3,\), one score per row"):
        reinforce_plus_plus_baseline_advantages([1.0, 0.0], [0, 0], np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"^mask: must contain only 0 and 1"):
        reinforce_plus_plus_baseline_advantages([1.0, 0.0], [0, 0], [[1, 2], [1, 1]])
    with pytest.raises(ValueError, match="^token_rewards: non-finite value"):
        reinforce_plus_plus_baseline_advantages([1.0, 0.0], [0, 0], mask,
                                                token_rewards=[[np.nan, 0.0], [0.0, 0.0]])


def test_worked_numbers_of_docs_conventions():
    # docs/conventions.md, "Group baselines": one group of four, scores [1, 0, 0, 0]
    s, g = [1, 0, 0, 0], [0, 0, 0, 0]

    def r(a, k):
        return [round(float(x), k) for x in a[:2]]

    assert r(grpo_advantages(s, g), 6) == [1.499997, -0.499999]
    assert r(grpo_advantages(s, g, std_eps=1e-4, dtype=np.float32), 6) == [1.4997, -0.4999]
    assert r(grpo_advantages(s, g, std_eps=1e-9), 10) == [1.499999997, -0.499999999]
    assert_exact(grpo_advantages([F(x) for x in s], g, scale="none"), [F(3, 4)] + [F(-1, 4)] * 3)
    assert_exact(rloo_advantages([F(x) for x in s], g), [1] + [F(-1, 3)] * 3)
    assert round(float(grpo_advantages([1], [0], singleton="raw")[0]), 6) == 0.999999
    A = reinforce_plus_plus_advantages([[0, 1, 0], [0, 0, -1]], [[1, 1, 0], [1, 1, 1]])
    assert [round(float(A[0, 0]), 6), round(float(A[1, 0]), 6)] == [1.095445, -0.730297]
    A = reinforce_plus_plus_advantages([[0, 1, 0], [0, 0, -1]], [[1, 1, 0], [1, 1, 1]],
                                       ddof=0, eps_mode="floor")
    assert [round(float(A[0, 0]), 6), round(float(A[1, 0]), 6)] == [1.224745, -0.816497]


def test_reinforce_pp_baseline_score_clip():
    # c = [15, -15, 1/2, -1/2]; OpenRLHF clips it to (-10, 10) before the last token
    s, g, mask = [30.0, 0.0, 1.0, 0.0], [0, 0, 1, 1], np.ones((4, 1))
    want = whiten_list([10.0, -10.0, 0.5, -0.5], 0, 1e-8, floor=True)
    for clip in (10, (-10, 10), [-10.0, 10.0]):
        got = reinforce_plus_plus_baseline_advantages(s, g, mask, score_clip=clip, ddof=0,
                                                      eps_mode="floor")
        assert_close(got.ravel(), want, rtol=1e-15, atol=1e-15, clip=clip)
    got = reinforce_plus_plus_baseline_advantages(s, g, mask, score_clip=(-20, 12))
    assert_close(got.ravel(), whiten_list([12.0, -15.0, 0.5, -0.5], 1, 1e-8), rtol=1e-15,
                 atol=1e-15)
    for bad in (0, -1, (1, 0), (1, 2, 3)):
        with pytest.raises(ValueError, match="^score_clip"):
            reinforce_plus_plus_baseline_advantages(s, g, mask, score_clip=bad)
