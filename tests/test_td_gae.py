"""delta_t and GAE: the running example by hand, the seed's sum definition in exact
Fraction arithmetic, and the limits lambda = 0, lambda = 1, gamma = 0."""

import random
from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy import gae, td_errors
from tests._helpers import assert_close, assert_exact, assert_same, assert_zero_at_padding

METHODS = ("loop", "blocked")


def td_by_hand(r, v, gamma):
    """delta_t = r_t + gamma V(s_{t+1}) - V(s_t) with V(s_{T+1}) = 0, one term at a time."""
    T = len(r)
    return [r[t] + gamma * (v[t + 1] if t + 1 < T else 0) - v[t] for t in range(T)]


def gae_by_sum(r, v, gamma, lam):
    """The seed's definition A_t = sum_{l=0}^{T-t} (gamma lam)^l delta_{t+l}, a double loop."""
    delta = td_by_hand(r, v, gamma)
    T = len(r)
    A = []
    for t in range(T):
        a = 0
        for l in range(T - t):
            a += (gamma * lam) ** l * delta[t + l]
        A.append(a)
    return A


def discounted_returns_by_hand(r, gamma):
    """G_t = sum_{k >= t} gamma^(k - t) r_k."""
    T = len(r)
    return [sum(gamma ** (k - t) * r[k] for k in range(t, T)) for t in range(T)]


def random_rationals(rnd, n, num=9, den=9):
    return [F(rnd.randint(-num, num), rnd.randint(1, den)) for _ in range(n)]


# --- the running example ---------------------------------------------------------------------


def test_running_example_td_errors():
    got = td_errors([0, 0, 1], [0.5, 0.6, 0.7], gamma=1.0)
    # [0 + 0.6 - 0.5, 0 + 0.7 - 0.6, 1 + 0 - 0.7]
    assert_close(got, [0.1, 0.1, 0.3], rtol=1e-14, atol=1e-15)
    exact = td_errors([F(0), F(0), F(1)], [F(1, 2), F(3, 5), F(7, 10)], gamma=1)
    assert_exact(exact, [F(1, 10), F(1, 10), F(3, 10)])


@pytest.mark.parametrize("method", METHODS)
def test_running_example_gae_float(method):
    A, R = gae([0, 0, 1], [0.5, 0.6, 0.7], gamma=1.0, lam=0.95, method=method)
    # A_3 = 0.3, A_2 = 0.1 + 0.95 * 0.3, A_1 = 0.1 + 0.95 * A_2
    A2 = 0.1 + 0.95 * 0.3
    A1 = 0.1 + 0.95 * A2
    assert_close(A, [A1, A2, 0.3], rtol=1e-14, atol=1e-15, method=method)
    assert_close(A, [0.46575, 0.385, 0.3], rtol=1e-14, atol=1e-15, method=method)
    assert_close(R, [0.46575 + 0.5, 0.385 + 0.6, 0.3 + 0.7], rtol=1e-14, atol=1e-15)


def test_running_example_gae_exact():
    r, v = [F(0), F(0), F(1)], [F(1, 2), F(3, 5), F(7, 10)]
    for lam in (F(19, 20), 0.95):  # the float 0.95 is read as written: 19/20
        A, R = gae(r, v, gamma=1, lam=lam)
        assert_exact(A, [F(1863, 4000), F(77, 200), F(3, 10)], lam=lam)
        assert_exact(R, [F(1863, 4000) + F(1, 2), F(77, 200) + F(3, 5), F(1)], lam=lam)


# --- TD errors -------------------------------------------------------------------------------


def test_td_errors_discounted_by_hand():
    r, v = [F(1), F(-2), F(3, 2)], [F(1, 4), F(1, 3), F(-1)]
    gamma = F(1, 2)
    # [1 + 1/2 * 1/3 - 1/4, -2 + 1/2 * (-1) - 1/3, 3/2 + 0 + 1]
    expected = [F(1) + F(1, 6) - F(1, 4), F(-2) - F(1, 2) - F(1, 3), F(5, 2)]
    assert_exact(td_errors(r, v, gamma), expected, rewards=r, values=v)


def test_td_errors_value_after_last_token_is_zero_whatever_padding_holds():
    r = np.array([[0.0, 0.0, 1.0, 5.0, np.nan], [np.inf, 0.0, 0.0, 1.0, 0.0]])
    v = np.array([[0.5, 0.6, 0.7, 100.0, np.nan], [-np.inf, 0.5, 0.6, 0.7, 42.0]])
    mask = np.array([[1, 1, 1, 0, 0], [0, 1, 1, 1, 0]])
    got = td_errors(r, v, 1.0, mask)
    expected = [[0.6 - 0.5, 0.7 - 0.6, 1.0 - 0.7, 0, 0], [0, 0.6 - 0.5, 0.7 - 0.6, 1.0 - 0.7, 0]]
    assert_close(got, expected, rtol=0, atol=0, rewards=r, values=v, mask=mask)
    assert_zero_at_padding(got, mask, "delta", rewards=r, values=v)


def test_td_errors_skip_holes_in_the_mask():
    # response tokens at 0, 2, 3: the next state of token 0 is token 2.
    r = [F(0), F(99), F(0), F(1)]
    v = [F(1, 2), F(99), F(3, 5), F(7, 10)]
    got = td_errors(r, v, F(1), [1, 0, 1, 1])
    assert_exact(got, [F(3, 5) - F(1, 2), 0, F(7, 10) - F(3, 5), F(1) - F(7, 10)])


def test_td_errors_gamma_zero():
    r, v = [F(1), F(2), F(3)], [F(1, 2), F(1, 3), F(1, 4)]
    assert_exact(td_errors(r, v, 0), [F(1, 2), F(5, 3), F(11, 4)])


def test_int_and_float32_inputs_give_float64():
    got = td_errors(np.array([0, 0, 1]), np.array([1, 2, 3]))
    assert got.dtype == np.float64
    assert_same(got, np.array([1.0, 1.0, -2.0]))
    got32 = td_errors(np.array([0, 0, 1], dtype=np.float32),
                      np.array([0.5, 0.25, 0.75], dtype=np.float32))
    assert got32.dtype == np.float64
    assert_same(got32, np.array([-0.25, 0.5, 0.25]))
    A, R = gae(np.array([0, 0, 1], dtype=np.float32), np.array([0, 0, 0]), lam=0.5)
    assert A.dtype == np.float64 and R.dtype == np.float64
    assert_close(A, [0.25, 0.5, 1.0], rtol=0, atol=1e-15)


# --- GAE against the sum definition ----------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_gae_equals_sum_definition_exactly(seed):
    rnd = random.Random(seed)
    T = rnd.randint(1, 9)
    r, v = random_rationals(rnd, T), random_rationals(rnd, T)
    gamma, lam = F(rnd.randint(0, 7), 7), F(rnd.randint(0, 11), 11)
    want = gae_by_sum(r, v, gamma, lam)
    A, R = gae(r, v, gamma, lam)  # exact input: the loop, in Fractions
    assert_exact(A, want, rewards=r, values=v, gamma=gamma, lam=lam)
    assert_exact(R, [a + vt for a, vt in zip(want, v)], rewards=r, values=v)
    A_loop, _ = gae(r, v, gamma, lam, method="loop")
    assert_exact(A_loop, want, rewards=r, values=v, gamma=gamma, lam=lam)


@pytest.mark.parametrize("seed", range(12))
def test_gae_float_methods_equal_sum_definition(seed):
    rnd = random.Random(100 + seed)
    T = rnd.randint(1, 40)
    r, v = random_rationals(rnd, T), random_rationals(rnd, T)
    gamma, lam = F(rnd.randint(0, 10), 10), F(rnd.randint(0, 20), 20)
    want = [float(a) for a in gae_by_sum(r, v, gamma, lam)]
    rf, vf = [float(x) for x in r], [float(x) for x in v]
    for block in (1, 2, 3, 5, 8, T, T + 1, 64):
        A, R = gae(rf, vf, float(gamma), float(lam), method="blocked", block=block)
        assert_close(A, want, rtol=1e-12, atol=1e-12, block=block, rewards=rf, values=vf,
                     gamma=float(gamma), lam=float(lam))
        assert_close(R, np.array(want) + vf, rtol=1e-12, atol=1e-12, block=block)
    A, _ = gae(rf, vf, float(gamma), float(lam), method="loop")
    assert_close(A, want, rtol=1e-12, atol=1e-12, method="loop", rewards=rf, values=vf)
    A, _ = gae(rf, vf, float(gamma), float(lam))
    assert_close(A, want, rtol=1e-12, atol=1e-12, method="default", rewards=rf, values=vf)


@pytest.mark.parametrize("placement", ["right", "left"])
def test_gae_exact_batch_rows_equal_sum_definition(placement):
    rnd = random.Random(7)
    B, T = 4, 8
    lengths = [8, 5, 1, 3]
    r = np.empty((B, T), dtype=object)
    v = np.empty((B, T), dtype=object)
    mask = np.zeros((B, T), dtype=int)
    gamma, lam = F(9, 10), F(4, 5)
    rows = []
    for i, n in enumerate(lengths):
        s = 0 if placement == "right" else T - n
        row_r, row_v = random_rationals(rnd, n), random_rationals(rnd, n)
        r[i] = [F(rnd.randint(-50, 50))] * T  # garbage in padding
        v[i] = [F(rnd.randint(-50, 50))] * T
        r[i, s:s + n], v[i, s:s + n] = row_r, row_v
        mask[i, s:s + n] = 1
        rows.append((s, n, row_r, row_v))
    A, R = gae(r, v, gamma, lam, mask)
    for i, (s, n, row_r, row_v) in enumerate(rows):
        want = gae_by_sum(row_r, row_v, gamma, lam)
        assert_exact(A[i, s:s + n], want, row=i, rewards=row_r, values=row_v)
    assert_zero_at_padding(A, mask, "advantages")
    assert_zero_at_padding(R, mask, "returns")
    rf = np.where(mask, r, 0).astype(float)
    vf = np.where(mask, v, 0).astype(float)
    for method in METHODS:
        Af, _ = gae(rf, vf, 0.9, 0.8, mask, method=method, block=3)
        assert_close(Af, A.astype(float), rtol=1e-12, atol=1e-12, method=method)


# --- limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_lambda_zero_gives_td_errors(seed):
    rnd = random.Random(200 + seed)
    T = rnd.randint(1, 9)
    r, v = random_rationals(rnd, T), random_rationals(rnd, T)
    gamma = F(rnd.randint(0, 5), 5)
    A, _ = gae(r, v, gamma, 0)
    assert_exact(A, td_by_hand(r, v, gamma), rewards=r, values=v, gamma=gamma)
    for method in METHODS:
        Af, _ = gae([float(x) for x in r], [float(x) for x in v], float(gamma), 0.0,
                    method=method, block=2)
        assert_close(Af, [float(d) for d in td_by_hand(r, v, gamma)], rtol=1e-14, atol=1e-14,
                     method=method)


@pytest.mark.parametrize("seed", range(6))
def test_lambda_one_gives_monte_carlo_returns_minus_values(seed):
    rnd = random.Random(300 + seed)
    T = rnd.randint(1, 9)
    r, v = random_rationals(rnd, T), random_rationals(rnd, T)
    gamma = F(rnd.randint(0, 5), 5)
    G = discounted_returns_by_hand(r, gamma)
    A, R = gae(r, v, gamma, 1)
    assert_exact(A, [g - vt for g, vt in zip(G, v)], rewards=r, values=v, gamma=gamma)
    assert_exact(R, G, rewards=r, values=v, gamma=gamma)
    for method in METHODS:
        Af, Rf = gae([float(x) for x in r], [float(x) for x in v], float(gamma), 1.0,
                     method=method, block=3)
        assert_close(Rf, [float(g) for g in G], rtol=1e-12, atol=1e-12, method=method)


def test_gamma_zero_advantage_is_reward_minus_value():
    r, v = [F(1), F(-2), F(3)], [F(1, 2), F(1, 3), F(1, 4)]
    A, R = gae(r, v, 0, F(19, 20))
    assert_exact(A, [F(1, 2), F(-7, 3), F(11, 4)])
    assert_exact(R, r)
    for method in METHODS:
        Af, _ = gae([1.0, -2.0, 3.0], [0.5, 1 / 3, 0.25], 0.0, 0.95, method=method)
        assert_close(Af, [0.5, -2.0 - 1 / 3, 2.75], rtol=1e-15, atol=1e-15, method=method)


@pytest.mark.parametrize("method", METHODS)
def test_long_undiscounted_sequence_is_reversed_cumsum(method):
    # gamma = lam = 1, values 0: A_t = sum_{k >= t} r_k; crosses many blocks.
    rng = np.random.default_rng(0)
    r = rng.integers(-3, 4, size=(2, 300)).astype(float)
    want = np.cumsum(r[:, ::-1], axis=1)[:, ::-1]
    A, _ = gae(r, np.zeros_like(r), 1.0, 1.0, method=method, block=16)
    assert_close(A, want, rtol=0, atol=1e-11, method=method)


@pytest.mark.parametrize("method", METHODS)
def test_long_sequence_with_strong_discount_does_not_underflow(method):
    # gamma lam = 0.5 over 3000 steps: (1/2)^3000 underflows; A_t stays near 2 r.
    r = np.ones(3000)
    A, _ = gae(r, np.zeros_like(r), 0.5, 1.0, method=method, block=64)
    # sum_{l=0}^{T-1-t} 0.5^l = 2 (1 - 0.5^(T - t))
    T = len(r)
    want = np.array([2.0 * (1.0 - 0.5 ** (T - t)) for t in range(T)])
    assert np.all(np.isfinite(A))
    assert_close(A, want, rtol=1e-13, atol=1e-13, method=method)


def test_gae_padding_is_zero_and_garbage_ignored():
    r = np.array([[0.0, 0.0, 1.0, np.nan], [np.inf, 0.0, 0.0, 1.0]])
    v = np.array([[0.5, 0.6, 0.7, np.inf], [np.nan, 0.5, 0.6, 0.7]])
    mask = np.array([[1, 1, 1, 0], [0, 1, 1, 1]])
    for method in METHODS:
        A, R = gae(r, v, 1.0, 0.95, mask, method=method)
        want = [[0.46575, 0.385, 0.3, 0.0], [0.0, 0.46575, 0.385, 0.3]]
        assert_close(A, want, rtol=1e-14, atol=1e-15, method=method)
        assert_zero_at_padding(A, mask, "advantages", method=method)
        assert_zero_at_padding(R, mask, "returns", method=method)


@pytest.mark.parametrize("method", METHODS)
def test_gae_holes_equal_compacted_row(method):
    mask = np.array([1, 0, 0, 1, 1, 0, 1])
    r = np.array([0.5, 9.0, np.nan, -1.0, 2.0, np.inf, 1.0])
    v = np.array([0.1, 9.0, np.nan, 0.3, -0.2, 7.0, 0.4])
    A, R = gae(r, v, 0.9, 0.8, mask, method=method, block=2)
    rc, vc = [0.5, -1.0, 2.0, 1.0], [0.1, 0.3, -0.2, 0.4]
    want = gae_by_sum([F(x) for x in rc], [F(x) for x in vc], F(9, 10), F(4, 5))
    assert_close(A[mask == 1], [float(a) for a in want], rtol=1e-12, atol=1e-12, method=method)
    assert_zero_at_padding(A, mask, "advantages")


def test_a_list_with_fractions_after_plain_ints_is_exact():
    # the first elements are ints; the Fractions later in the lists make the input exact
    got = td_errors([0, 0, F(1)], [0, F(1, 2), F(1, 4)])
    assert_exact(got, [F(1, 2), F(-1, 4), F(3, 4)])
    A, _ = gae([0, 0, F(1)], [0, F(1, 2), F(1, 4)], 1, F(1, 2))
    # A_3 = 3/4, A_2 = -1/4 + 1/2 * 3/4 = 1/8, A_1 = 1/2 + 1/2 * 1/8 = 9/16
    assert_exact(A, [F(9, 16), F(1, 8), F(3, 4)])


def test_exact_mode_reads_float_entries_as_written():
    # one Fraction makes the call exact; the floats 0.5, 0.6, 0.7 are then 1/2, 3/5, 7/10
    # (not Fraction(0.6) = 5404319552844595/9007199254740992), as gamma and lam are
    delta = td_errors([F(0), 0.0, 1.0], np.array([0.5, 0.6, 0.7]))
    assert_exact(delta, [F(1, 10), F(1, 10), F(3, 10)])
    A, R = gae([F(0), 0, 1], [0.5, 0.6, np.float32(0.7)], 1.0, 0.95)
    assert_exact(A, [F(1863, 4000), F(77, 200), F(3, 10)])
    assert_exact(R, [F(3863, 4000), F(197, 200), F(1)])


def test_blocked_method_with_exact_input_is_refused():
    with pytest.raises(ValueError, match=r"^method: .*blocked.*float.*loop"):
        gae([F(0), F(1)], [F(0), F(0)], method="blocked")


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("gamma", [F(9, 10), F(1, 10**105), F(0)])
def test_gae_empty_row_left_padding_and_underflowing_powers(method, gamma):
    # row 0 full, row 1 without any response token (garbage only), row 2 left-padded;
    # gamma 1e-105: (gamma lam)^3 is subnormal and (gamma lam)^4 underflows to 0
    rnd = random.Random(11)
    T = 70
    r = np.full((3, T), np.nan)
    v = np.full((3, T), np.inf)
    mask = np.zeros((3, T), dtype=int)
    rows = {0: (0, T), 2: (T - 9, 9)}
    want = np.zeros((3, T))
    for i, (s, n) in rows.items():
        row_r, row_v = random_rationals(rnd, n), random_rationals(rnd, n)
        r[i, s:s + n], v[i, s:s + n] = row_r, row_v
        mask[i, s:s + n] = 1
        want[i, s:s + n] = [float(a) for a in gae_by_sum(row_r, row_v, gamma, F(1))]
    A, R = gae(r, v, float(gamma), 1.0, mask, method=method, block=4)
    assert_close(A, want, rtol=1e-12, atol=1e-12, method=method, gamma=float(gamma))
    assert_zero_at_padding(A, mask, "advantages", method=method)
    assert_zero_at_padding(R, mask, "returns", method=method)


# --- the fast form (ppo_numpy/fast/gae_blocked.py) against the recursion ----------------------
#
# The blocked form adds the same terms in another order, so it is not bit-identical to the
# recursion in general. The bound stated (and tested) here: at every response token t,
#     |A_blocked_t - A_loop_t| <= (4 n_t + 4) u S_t,   S_t = sum_l (gamma lam)^l |delta_{t+l}|,
# with n_t the number of response tokens from t to the end of the row and u = 2^-53: each form
# is within about 2 n_t u S_t of the exact sum (a chain of n_t additions and products), and
# the powers (gamma lam)^k of the blocked form are rounded once each. Where every operation is
# exact (integer deltas and gamma lam in {0, 1/2, 1}) both give the exact sum, bit for bit.

U = 2.0**-53


def random_padded_batch(rng, B, T, placement):
    """rewards, values with NaN/inf garbage at padding, and a 0/1 mask: "right", "left", or
    "holes" (several runs of ones per row); some rows empty."""
    mask = np.zeros((B, T), dtype=int)
    for i in range(B):
        n = int(rng.integers(0, T + 1))
        if placement == "right":
            mask[i, :n] = 1
        elif placement == "left":
            mask[i, T - n:] = 1
        else:
            mask[i] = rng.random(T) < 0.6
    r = np.where(mask, rng.normal(0, 0.1, (B, T)), np.nan)
    v = np.where(mask, rng.normal(0, 1, (B, T)), np.inf)
    return r, v, mask


def stated_bound(delta, mask, g):
    """(4 n_t + 4) u S_t per position, by a plain loop over each row's response tokens."""
    bound = np.zeros(delta.shape)
    for i in range(delta.shape[0]):
        idx = [t for t in range(delta.shape[1]) if mask[i, t]]
        S = 0.0
        for n, t in enumerate(reversed(idx), start=1):
            S = abs(delta[i, t]) + g * S
            bound[i, t] = (4 * n + 4) * U * S * (1 + 1e-9)
    return bound


@pytest.mark.parametrize("placement", ["right", "left", "holes"])
@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.99, 0.9), (1.0, 1.0), (0.5, 1.0),
                                       (1.0, 0.0), (0.0, 0.95), (0.3, 0.7)])
def test_blocked_form_equals_the_recursion_within_the_stated_bound(placement, gamma, lam):
    rng = np.random.default_rng(int(gamma * 100 + lam * 10) + len(placement))
    for B, T, block in ((5, 200, 32), (3, 97, 8), (7, 33, 2), (2, 1, 32)):
        r, v, mask = random_padded_batch(rng, B, T, placement)
        A_loop, R_loop = gae(r, v, gamma, lam, mask, method="loop")
        A_blk, R_blk = gae(r, v, gamma, lam, mask, method="blocked", block=block)
        delta = td_errors(r, v, gamma, mask)
        bound = stated_bound(delta, mask, gamma * lam)
        worst = np.max(np.abs(A_blk - A_loop) - bound)
        assert worst <= 0, (placement, gamma, lam, B, T, block, worst)
        assert_zero_at_padding(A_blk, mask, "advantages", placement=placement)
        assert_zero_at_padding(R_blk, mask, "returns", placement=placement)
        if gamma * lam == 0:  # A = delta: no sum at all, the same bits
            assert_same(A_blk, A_loop, gamma=gamma, lam=lam)
            assert_same(A_loop, delta, gamma=gamma, lam=lam)


@pytest.mark.parametrize("gl", [F(0), F(1, 2), F(1)])
def test_both_forms_give_the_exact_sum_where_the_arithmetic_is_exact(gl):
    # small integer rewards and values, gamma = 1, lam = gl, rows of at most 40 tokens: every
    # product and sum is exact in float64 (|delta| <= 9 and 40 halvings span 44 bits < 53), so
    # both forms must return the sum definition (in Fractions) bit for bit
    rnd = random.Random(5)
    B, T = 4, 40
    r = [[rnd.randint(-3, 3) for _ in range(T)] for _ in range(B)]
    v = [[rnd.randint(-3, 3) for _ in range(T)] for _ in range(B)]
    mask = np.ones((B, T), dtype=int)
    for i, n in enumerate((T, 33, 7, 1)):
        mask[i, n:] = 0
    want = np.zeros((B, T))
    for i in range(B):
        n = int(mask[i].sum())
        want[i, :n] = [float(a) for a in gae_by_sum([F(x) for x in r[i][:n]],
                                                     [F(x) for x in v[i][:n]], F(1), gl)]
    rf, vf = np.array(r, dtype=float), np.array(v, dtype=float)
    for method, block in (("loop", 32), ("blocked", 32), ("blocked", 4)):
        A, _ = gae(rf, vf, 1.0, float(gl), mask, method=method, block=block)
        assert_same(A, want, method=method, block=block, lam=gl)


def test_the_reference_runs_the_recursion_at_every_size_and_the_size_rule_is_the_callers():
    # gae's default is the recursion whatever the size (the same bits as method="loop");
    # the size rule of ppo_numpy.fast.gae_blocked, which the presets and the training loop
    # apply, picks the blocked form from BLOCKED_FROM entries on
    from ppo_numpy.fast.gae_blocked import BLOCKED_FROM, use_blocked

    rng = np.random.default_rng(3)
    for B, T in ((4, 100), (BLOCKED_FROM // 256, 256)):
        r, v, mask = random_padded_batch(rng, B, T, "right")
        A, R = gae(r, v, 0.99, 0.95, mask)
        A_m, R_m = gae(r, v, 0.99, 0.95, mask, method="loop")
        assert_same(A, A_m, B=B, T=T)
        assert_same(R, R_m, B=B, T=T)
        assert use_blocked(v) == (B * T >= BLOCKED_FROM)
    assert not use_blocked(np.zeros(BLOCKED_FROM, dtype=object))  # exact: the recursion


def test_the_blocked_form_checks_the_values_on_its_result():
    # the blocked form reads rewards and values once, and looks at them again only when the
    # returns are not finite: a NaN or inf at a response token must still be named, whatever
    # the padding holds (a batch of BLOCKED_FROM entries, the size the callers' rule gives it)
    from ppo_numpy.fast.gae_blocked import BLOCKED_FROM

    rng = np.random.default_rng(11)
    B, T = 8, BLOCKED_FROM // 8
    r, v, mask = random_padded_batch(rng, B, T, "right")  # NaN / inf at padding
    mask[3, :10] = 1
    A, R = gae(r, v, 1.0, 0.95, mask, method="blocked")
    A_loop, _ = gae(r, v, 1.0, 0.95, mask, method="loop")
    assert np.all(np.isfinite(A)) and np.all(np.isfinite(R))
    assert_zero_at_padding(A, mask, "advantages")
    assert_zero_at_padding(R, mask, "returns")
    assert np.max(np.abs(A - A_loop)) < 1e-9
    for name, bad in (("rewards", np.nan), ("values", np.inf), ("values", np.nan),
                      ("rewards", -np.inf)):
        r2, v2 = r.copy(), v.copy()
        (r2 if name == "rewards" else v2)[3, 9] = bad
        with pytest.raises(ValueError, match=rf"^{name}: non-finite value .* at valid position"):
            gae(r2, v2, 1.0, 0.95, mask, method="blocked")
    # finite inputs whose sums overflow are not an input error
    big = np.where(mask, 1e308, 0.0)
    A, R = gae(big, -big, 1.0, 1.0, mask, method="blocked")
    assert not np.all(np.isfinite(A))


@pytest.mark.parametrize("lam", [0.95, 0.0, 1e-60])
def test_the_blocked_form_names_a_bad_value_at_every_step_of_a_block(lam):
    # gae checks the blocked form's block sums sum_j (gamma lambda)^j delta_(kC + j) instead
    # of the returns when every weight is > 0: a NaN or inf at any of the C steps of a block
    # must reach them. With lambda = 0, or (1e-60)^7 below the smallest normal float (the
    # weight flushed to 0), a weight is 0 and gae reads the returns instead: still named.
    from ppo_numpy.fast.gae_blocked import BLOCK, BLOCKED_FROM

    rng = np.random.default_rng(12)
    B, T = 8, BLOCKED_FROM // 8
    r, v, mask = random_padded_batch(rng, B, T, "right")  # NaN / inf at padding
    mask[5] = 0
    mask[5, :3 * BLOCK] = 1  # row 5: three whole blocks
    A, R = gae(r, v, 1.0, lam, mask, method="blocked")
    assert np.all(np.isfinite(A)) and np.all(np.isfinite(R))
    for t in range(BLOCK, 2 * BLOCK):
        for name, bad in (("rewards", np.inf), ("values", np.nan)):
            r2, v2 = r.copy(), v.copy()
            (r2 if name == "rewards" else v2)[5, t] = bad
            with pytest.raises(ValueError, match=rf"^{name}: non-finite value .* at valid"):
                gae(r2, v2, 1.0, lam, mask, method="blocked")
    # the step after the last token is padding: its value is not read
    v2 = v.copy()
    v2[5, 3 * BLOCK] = np.nan
    A2, R2 = gae(r, v2, 1.0, lam, mask, method="blocked")
    assert np.array_equal(A2, A) and np.array_equal(R2, R)


def test_right_padded_lengths_by_hand():
    from ppo_numpy.fast.gae_blocked import right_padded_lengths

    def lengths(rows):
        out = right_padded_lengths(np.array(rows, dtype=bool))
        return None if out is None else out.tolist()

    assert lengths([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]) == \
        [3, 1, 5, 0]
    assert lengths([1, 1, 0]) == 2  # one row: a number
    assert lengths([1, 1, 1]) == 3
    assert lengths([[1, 1, 0], [0, 1, 1]]) is None  # left padding
    assert lengths([[1, 1, 0], [1, 0, 1]]) is None  # a hole
    assert lengths([[0, 0, 1]]) is None  # a token after padding only
    assert lengths([[1, 1, 0], [0, 0, 0], [1, 0, 1]]) is None  # one bad row among good ones
