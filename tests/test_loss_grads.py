"""Hand-written loss gradients (ppo_numpy.grads.loss_grads) against the core functions.

Independent checks: centered finite differences of the *core* forward functions
(ppo_policy_loss, value_loss + aggregate, entropy_from_logits + aggregate,
kl_estimate) at points away from every kink; hand-derived values; and at the
kinks, one-sided difference quotients that pin which side we return.
"""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy import (
    AGGREGATION_MODES,
    KL_ESTIMATORS,
    aggregate,
    entropy_from_logits,
    kl_estimate,
    ppo_policy_loss,
    value_loss,
)
from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.grads.loss_grads import (
    aggregate_grad,
    entropy_grad,
    kl_estimate_grad,
    policy_loss_grad,
    value_loss_grad,
)

RTOL = 1e-6
MASK = np.array([[1, 1, 1, 1, 1, 0],
                 [1, 1, 0, 0, 0, 0],
                 [1, 1, 1, 1, 1, 1],
                 [0, 0, 0, 0, 0, 0],
                 [1, 1, 1, 0, 0, 0]], dtype=float)
GARBAGE = 1e3


def check(f, x, analytic, name="x"):
    report = gradcheck(f, {name: x}, {name: analytic})
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, "\n".join(bad)
    return report[name]


def away_from(values, points, gap):
    """Resample entries of ``values`` closer than ``gap`` to any of ``points``."""
    values = values.copy()
    for p in points:
        near = np.abs(values - p) < gap
        values[near] = p + np.where(values[near] >= p, gap, -gap) * 3
    return values


def policy_inputs(rng, *, lo=0.8, hi=1.2, dual=None, clamp=None):
    shape = MASK.shape
    rho = np.exp(rng.uniform(-0.9, 0.9, shape))
    rho = away_from(rho, [lo, hi] + ([dual] if dual else []), 1e-3)
    log_ratio = np.log(rho)
    if clamp is not None:
        log_ratio = away_from(log_ratio, [-clamp, clamp], 1e-3)
    logp_old = rng.uniform(-3.0, -0.1, shape)
    logp = logp_old + log_ratio
    A = rng.normal(0.0, 1.5, shape)
    A = away_from(A, [0.0], 1e-2)
    # padding holds values that must not leak into the loss or the gradient
    logp = np.where(MASK == 1, logp, GARBAGE)
    return logp, logp_old, A


OPTIONS = [
    {},
    {"epsilon_high": 0.28},
    {"dual_clip": 1.6},
    {"log_ratio_clamp": 0.5},
    {"epsilon_high": 0.28, "dual_clip": 1.6, "log_ratio_clamp": 0.7},
]


@pytest.mark.parametrize("agg", AGGREGATION_MODES)
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_policy_loss_grad_matches_finite_differences(agg, opts):
    rng = np.random.default_rng(0)
    eps = 0.2
    hi = 1 + opts.get("epsilon_high", eps)
    logp, logp_old, A = policy_inputs(rng, lo=1 - eps, hi=hi, dual=opts.get("dual_clip"),
                                      clamp=opts.get("log_ratio_clamp"))
    norm = 4.0 if agg == "seq-mean-token-sum-norm" else None

    def f(p):
        return ppo_policy_loss(p["logp"], logp_old, A, MASK, eps, agg, norm=norm, **opts)[0]

    dlogp = policy_loss_grad(logp, logp_old, A, MASK, eps, agg, norm=norm, **opts)
    check(f, logp, dlogp, "logp")
    assert np.all(dlogp[MASK == 0] == 0.0)
    valid = MASK == 1
    # the inputs exercise both branches: some tokens clipped (gradient 0), some not
    assert 0 < np.sum(dlogp[valid] == 0) < valid.sum()


def test_policy_loss_grad_1d_matches_finite_differences():
    rng = np.random.default_rng(1)
    logp, logp_old, A = policy_inputs(rng)
    logp, logp_old, A, m = logp[0], logp_old[0], A[0], MASK[0]
    for agg in AGGREGATION_MODES:
        def f(p, agg=agg):
            return ppo_policy_loss(p["logp"], logp_old, A, m, agg=agg)[0]
        check(f, logp, policy_loss_grad(logp, logp_old, A, m, agg=agg), "logp")


def test_policy_loss_grad_hand_values():
    # rho = [[1.1, 1.5, pad], [0.5, pad, pad]], A = [[1, 2, .], [1, ., .]], eps 0.2
    # rho 1.1 inside: dterm/drho = A = 1; rho 1.5 > 1.2 with A > 0: clipped, 0;
    # rho 0.5 < 0.8 with A > 0: min picks rho A (unclipped), dterm/drho = 1.
    # dloss/dlogp = -w A rho.
    logp = np.log([[1.1, 1.5, 1.0], [0.5, 1.0, 1.0]])
    zeros = np.zeros((2, 3))
    A = np.array([[1.0, 2.0, 0.0], [1.0, 0.0, 0.0]])
    m = np.array([[1, 1, 0], [1, 0, 0]])
    # w per mode: token-mean 1/3; seq-mean-token-sum 1/2; seq-mean-token-mean
    # row 0 1/(2*2), row 1 1/(2*1); seq-mean-token-sum-norm 1/(2*3)
    expected = {
        "token-mean": [[-1.1 / 3, 0, 0], [-0.5 / 3, 0, 0]],
        "seq-mean-token-sum": [[-1.1 / 2, 0, 0], [-0.5 / 2, 0, 0]],
        "seq-mean-token-mean": [[-1.1 / 4, 0, 0], [-0.5 / 2, 0, 0]],
        "seq-mean-token-sum-norm": [[-1.1 / 6, 0, 0], [-0.5 / 6, 0, 0]],
    }
    for agg, want in expected.items():
        got = policy_loss_grad(logp, zeros, A, m, agg=agg)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15, err_msg=agg)
    # A < 0 below the range (rho 0.5): clipped (max(rho, lo) = lo), 0; above it (1.5): -A rho
    got = policy_loss_grad(np.log([0.5, 1.5]), [0.0, 0.0], [-1.0, -1.0])
    np.testing.assert_allclose(got, [0.0, 1.5 / 2], rtol=1e-14)
    # dual clip c = 1.4: rho 1.5 > c with A < 0 -> bounded by c A, gradient 0
    got = policy_loss_grad(np.log([0.5, 1.5]), [0.0, 0.0], [-1.0, -1.0], dual_clip=1.4)
    np.testing.assert_allclose(got, [0.0, 0.0], atol=0)


def one_sided(f, x, idx, h=1e-7):
    """Forward and backward difference quotients of f at x along coordinate idx."""
    xp, xm = x.copy(), x.copy()
    xp[idx] += h
    xm[idx] -= h
    f0 = f(x)
    return (f(xp) - f0) / h, (f0 - f(xm)) / h


def test_policy_loss_grad_at_kinks_returns_the_inside_derivative():
    # 1. rho exactly 1 + eps_high with A > 0: left derivative A rho (inside), right is 0.
    logp, logp_old, A = np.array([0.25]), np.array([0.0]), np.array([2.0])
    rho = float(np.exp(0.25))
    eps_high = rho - 1  # exact: 1 + (rho - 1) == rho for rho in [1, 2)
    assert 1 + eps_high == rho

    def f(x):
        return ppo_policy_loss(x, logp_old, A, epsilon_high=eps_high)[0]
    right, left = one_sided(f, logp, 0)
    got = policy_loss_grad(logp, logp_old, A, epsilon_high=eps_high)[0]
    assert got == -2.0 * rho
    assert abs(left - got) < 1e-5 and abs(right) < 1e-12

    # 2. rho exactly 1 - eps with A < 0: right derivative -A rho (inside), left is 0.
    logp = np.array([-0.25])
    rho = float(np.exp(-0.25))
    eps = 1 - rho
    assert 1 - eps == rho
    A = np.array([-1.0])

    def f2(x):
        return ppo_policy_loss(x, logp_old, A, epsilon=eps)[0]
    right, left = one_sided(f2, logp, 0)
    got = policy_loss_grad(logp, logp_old, A, epsilon=eps)[0]
    assert got == rho
    assert abs(right - got) < 1e-5 and abs(left) < 1e-12

    # 3. rho exactly at the dual clip bound c with A < 0: dual clip inactive, -A rho
    #    (the left derivative); the right derivative is 0.
    logp = np.array([0.5])
    c = float(np.exp(0.5))

    def f3(x):
        return ppo_policy_loss(x, logp_old, A, dual_clip=c)[0]
    right, left = one_sided(f3, logp, 0)
    got = policy_loss_grad(logp, logp_old, A, dual_clip=c)[0]
    assert got == c
    assert abs(left - got) < 1e-5 and abs(right) < 1e-12
    _, stats = ppo_policy_loss(logp, logp_old, A, dual_clip=c)
    assert stats["dual_clipfrac"] == 0.0  # the core counts the tie as not dual-clipped

    # 4. |logp - logp_old| exactly log_ratio_clamp: the gradient passes (left side).
    logp, A = np.array([0.3]), np.array([1.0])

    def f4(x):
        return ppo_policy_loss(x, logp_old, A, epsilon=0.5, log_ratio_clamp=0.3)[0]
    right, left = one_sided(f4, logp, 0)
    got = policy_loss_grad(logp, logp_old, A, epsilon=0.5, log_ratio_clamp=0.3)[0]
    assert got == -np.exp(0.3)
    assert abs(left - got) < 1e-5 and abs(right) < 1e-12

    # 5. rho = 1 inside the range (the tie clip(rho) = rho before the first update): -A.
    got = policy_loss_grad([-1.0, -2.0], [-1.0, -2.0], [0.5, -0.7])
    np.testing.assert_array_equal(got, [-0.25, 0.35])


def value_inputs(rng, c):
    shape = MASK.shape
    v_old = rng.normal(0.0, 1.0, shape)
    v = v_old + away_from(rng.uniform(-2 * c, 2 * c, shape), [-c, c], 1e-3)
    R = rng.normal(0.0, 1.5, shape)
    v_clip = v_old + np.clip(v - v_old, -c, c)
    # move R off the tie (v - R)^2 == (v_clip - R)^2, i.e. off the midpoint of v and v_clip
    mid = (v + v_clip) / 2
    R = np.where(np.abs(R - mid) < 1e-3, R + 0.01, R)
    v = np.where(MASK == 1, v, GARBAGE)
    return v, v_old, R


@pytest.mark.parametrize("agg", AGGREGATION_MODES)
@pytest.mark.parametrize("clip_range", [None, 0.3])
def test_value_loss_grad_matches_finite_differences(agg, clip_range):
    rng = np.random.default_rng(2)
    v, v_old, R = value_inputs(rng, 0.3)
    norm = 5.0 if agg == "seq-mean-token-sum-norm" else None

    def f(p):
        per_token = value_loss(p["values"], v_old, R, MASK, clip_range)
        return float(aggregate(per_token, MASK, agg, norm=norm))

    dv = value_loss_grad(v, v_old, R, MASK, clip_range, agg, norm=norm)
    check(f, v, dv, "values")
    assert np.all(dv[MASK == 0] == 0.0)
    if clip_range is not None:
        valid = MASK == 1
        assert 0 < np.sum(dv[valid] == 0) < valid.sum()


def test_value_loss_grad_hand_values_and_kinks():
    # V = [1.0, 1.0], V_old = [0.5, 0.9], R = [2.0, 0.0], c = 0.2, token-mean (w = 1/2).
    # token 0: V_clip = 0.7, (0.7-2)^2 > (1-2)^2: clipped wins -> 0.
    # token 1: V_clip = 1.0 = V (inside): V - R = 1 -> 1/2.
    got = value_loss_grad([1.0, 1.0], [0.5, 0.9], [2.0, 0.0], clip_range=0.2)
    np.testing.assert_allclose(got, [0.0, 0.5], rtol=1e-15)
    # V outside the range but the unclipped error is the larger: V - R.
    # V = 1, V_old = 0, c = 0.2 -> V_clip = 0.2; R = -1: (2)^2 > (1.2)^2.
    np.testing.assert_allclose(value_loss_grad([1.0], [0.0], [-1.0], clip_range=0.2), [2.0])

    # Inside the range V_clip = V_old + (V - V_old) is V only up to rounding: here
    # -0.34 + 0.23 = -0.10999999999999999 != -0.11 and its squared error wins the max by
    # ~1e-17, yet it still moves with V: the derivative is V_clip - R ~ 1.89, not 0.
    v, v_old, R = np.array([-0.11]), np.array([-0.34]), np.array([-2.0])
    assert v_old + (v - v_old) != v
    got = value_loss_grad(v, v_old, R, clip_range=0.3)
    check(lambda p: float(value_loss(p["v"], v_old, R, clip_range=0.3)[0]), v, got, "v")
    np.testing.assert_allclose(got, [1.89], rtol=1e-12)

    # Kink 1: V - V_old exactly c, R > V: inside derivative V - R (the left one).
    def f(x):
        return float(value_loss(x, [0.75], [2.0], clip_range=0.25)[0])
    x = np.array([1.0])
    right, left = one_sided(f, x, 0)
    got = value_loss_grad(x, [0.75], [2.0], clip_range=0.25)[0]
    assert got == -1.0 and abs(left - got) < 1e-6 and abs(right) < 1e-12

    # Kink 2: the two squared errors tie with V_clip != V (R halfway between V_clip and V):
    # V = 1, V_old = 0, c = 0.5 -> V_clip = 0.5, R = 0.75. Unclipped branch: V - R = 0.25
    # (the right derivative; the left one is 0 because the clipped error wins below).
    def g(x):
        return float(value_loss(x, [0.0], [0.75], clip_range=0.5)[0])
    right, left = one_sided(g, x, 0)
    got = value_loss_grad(x, [0.0], [0.75], clip_range=0.5)[0]
    assert got == 0.25 and abs(right - got) < 1e-6 and abs(left) < 1e-12


@pytest.mark.parametrize("agg", AGGREGATION_MODES)
def test_entropy_grad_matches_finite_differences(agg):
    rng = np.random.default_rng(3)
    K = 5
    logits = rng.normal(0.0, 2.0, MASK.shape + (K,))
    logits[MASK == 0] = GARBAGE
    norm = 3.0 if agg == "seq-mean-token-sum-norm" else None

    def f(p):
        return float(aggregate(entropy_from_logits(p["logits"], MASK), MASK, agg, norm=norm))

    dlogits = entropy_grad(logits, MASK, agg, norm=norm)
    check(f, logits, dlogits, "logits")
    assert np.all(dlogits[MASK == 0] == 0.0)
    # softmax is shift invariant, so each gradient row sums to 0
    np.testing.assert_allclose(dlogits.sum(axis=-1), 0.0, atol=1e-15)


def test_entropy_grad_hand_values():
    # two logits z = [log 2, 0]: p = [2/3, 1/3], dH/dz_0 = -(2/9) log 2 = -dH/dz_1.
    # (T, K) input with T = 2 and token-mean: w = 1/2 per token.
    z = np.array([[np.log(2.0), 0.0], [0.0, 0.0]])
    want = np.array([[-2 / 9 * np.log(2), 2 / 9 * np.log(2)], [0.0, 0.0]]) / 2
    np.testing.assert_allclose(entropy_grad(z), want, rtol=1e-13, atol=1e-17)


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
@pytest.mark.parametrize("clamp", [None, 0.3])
def test_kl_estimate_grad_per_token_matches_finite_differences(estimator, clamp):
    rng = np.random.default_rng(4)
    logp_ref = rng.uniform(-3.0, -0.1, MASK.shape)
    d = away_from(rng.uniform(-1.5, 1.5, MASK.shape), [0.0], 1e-2)
    if clamp is not None:
        kl = kl_estimate(logp_ref + d, logp_ref, estimator)
        bad = (np.abs(np.abs(kl) - clamp) < 1e-3)
        d = np.where(bad, d * 1.05, d)
    logp = np.where(MASK == 1, logp_ref + d, GARBAGE)

    def f(p):
        # KL_t depends on logp_t only, so d(sum_t KL_t)/d logp_t = d KL_t / d logp_t
        return float(kl_estimate(p["logp"], logp_ref, estimator, MASK, clamp=clamp).sum())

    dlogp = kl_estimate_grad(logp, logp_ref, estimator, MASK, clamp=clamp)
    check(f, logp, dlogp, "logp")
    assert np.all(dlogp[MASK == 0] == 0.0)


@pytest.mark.parametrize("agg", AGGREGATION_MODES)
def test_kl_estimate_grad_aggregated_matches_finite_differences(agg):
    rng = np.random.default_rng(5)
    logp_ref = rng.uniform(-3.0, -0.1, MASK.shape)
    logp = np.where(MASK == 1, logp_ref + rng.uniform(-1.0, 1.0, MASK.shape), GARBAGE)
    for estimator in ("k1", "k2", "k3"):
        def f(p, estimator=estimator):
            return float(aggregate(kl_estimate(p["logp"], logp_ref, estimator, MASK), MASK, agg))
        check(f, logp, kl_estimate_grad(logp, logp_ref, estimator, MASK, agg=agg), "logp")


def test_kl_estimate_grad_hand_values_and_kinks():
    # d = logp - logp_ref = [0.5, -1.0, 0.0]
    logp, ref = [0.0, -1.0, -2.0], [-0.5, 0.0, -2.0]
    np.testing.assert_array_equal(kl_estimate_grad(logp, ref, "k1"), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(kl_estimate_grad(logp, ref, "k2"), [0.5, -1.0, 0.0])
    # k3: 1 - exp(-d)
    np.testing.assert_allclose(kl_estimate_grad(logp, ref, "k3"),
                               [1 - np.exp(-0.5), 1 - np.e, 0.0], rtol=1e-14)
    # abs: sign(d), with 0 at the kink d = 0 (both one-sided derivatives are +-1)
    np.testing.assert_array_equal(kl_estimate_grad(logp, ref, "abs"), [1.0, -1.0, 0.0])
    # clamp bound reached exactly (|k1| = 0.5 = clamp): the gradient passes; beyond it, 0
    np.testing.assert_array_equal(kl_estimate_grad(logp, ref, "k1", clamp=0.5), [1.0, 0.0, 1.0])

    # at the clamp bound the returned derivative is the one from the unclamped side:
    # KL = d = 0.5 = clamp, the left difference quotient is 1, the right one 0
    def f(x):
        return float(kl_estimate(x, [-0.5], "k1", clamp=0.5)[0])
    right, left = one_sided(f, np.array([0.0]), 0)
    got = kl_estimate_grad([0.0], [-0.5], "k1", clamp=0.5)[0]
    assert got == 1.0 and abs(left - got) < 1e-6 and abs(right) < 1e-12
    # abs at d = 0: the returned 0 lies between the one-sided derivatives -1 and +1
    def g(x):
        return float(kl_estimate(x, [0.0], "abs")[0])
    right, left = one_sided(g, np.array([0.0]), 0)
    assert kl_estimate_grad([0.0], [0.0], "abs")[0] == 0.0
    assert abs(right - 1.0) < 1e-6 and abs(left + 1.0) < 1e-6


def test_aggregate_grad_is_the_weight_of_each_token():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [7.0, 8.0, 9.0]])
    m = np.array([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    # 4 tokens in 2 non-empty rows (B' = 2), n = [3, 1, 0]
    want = {
        "token-mean": [[1 / 4] * 3, [1 / 4, 0, 0], [0, 0, 0]],
        "seq-mean-token-sum": [[1 / 2] * 3, [1 / 2, 0, 0], [0, 0, 0]],
        "seq-mean-token-mean": [[1 / 6] * 3, [1 / 2, 0, 0], [0, 0, 0]],
        "seq-mean-token-sum-norm": [[1 / 6] * 3, [1 / 6, 0, 0], [0, 0, 0]],
    }
    for mode, w in want.items():
        got = aggregate_grad(x, m, mode)
        np.testing.assert_allclose(got, w, rtol=1e-15, err_msg=mode)
        assert abs(float((got * x).sum()) - float(aggregate(x, m, mode))) < 1e-12
    np.testing.assert_allclose(aggregate_grad(x, m, "seq-mean-token-sum-norm", norm=2.0)[0],
                               [1 / 4] * 3)


def test_inputs_not_modified_and_outputs_float64():
    rng = np.random.default_rng(6)
    logp, logp_old, A = policy_inputs(rng)
    copies = [a.copy() for a in (logp, logp_old, A)]
    out = policy_loss_grad(logp, logp_old, A, MASK, dual_clip=2.0)
    for a, c in zip((logp, logp_old, A), copies):
        np.testing.assert_array_equal(a, c)
    assert out.dtype == np.float64 and out.shape == logp.shape
    z = rng.normal(size=(2, 3, 4))
    z0 = z.copy()
    entropy_grad(z)
    np.testing.assert_array_equal(z, z0)


@pytest.mark.parametrize("call, match", [
    (lambda: policy_loss_grad([0.0, 0.0], [0.0], [1.0, 1.0]), "logp_old"),
    (lambda: policy_loss_grad([0.0], [0.0], [1.0], agg="mean"), "^agg: unknown aggregation"),
    (lambda: value_loss_grad([0.0], [0.0], [0.0], agg="sum"), "^agg: unknown aggregation"),
    (lambda: entropy_grad([[0.0]], agg="sum"), "^agg: unknown aggregation"),
    (lambda: aggregate_grad([0.0], mode="sum"), "^mode: unknown aggregation"),
    (lambda: policy_loss_grad([0.0], [0.0], [1.0], epsilon=-0.1), "epsilon"),
    (lambda: policy_loss_grad([0.0], [0.0], [1.0], dual_clip=0.5), "dual_clip"),
    (lambda: policy_loss_grad([0.0], [0.0], [1.0], mask=[2]), "mask"),
    (lambda: policy_loss_grad([0.0], [0.0], [1.0], mask=[0]), "mask"),
    (lambda: value_loss_grad([0.0], [0.0, 1.0], [0.0]), "old_values"),
    (lambda: value_loss_grad([0.0], [0.0], [0.0], clip_range=-1.0), "clip_range"),
    (lambda: entropy_grad([1.0, 2.0]), "logits"),
    (lambda: entropy_grad([[1.0, np.nan]]), "logits"),
    (lambda: kl_estimate_grad([0.0], [0.0], "k4"), "estimator"),
    (lambda: kl_estimate_grad([0.0], [0.0], "k1", agg="sum"), "^agg: unknown aggregation"),
    # norm is the divisor of seq-mean-token-sum-norm only: elsewhere it would be ignored
    (lambda: aggregate_grad([0.0], mode="token-mean", norm=2.0), "^norm: only mode"),
    (lambda: policy_loss_grad([0.0], [0.0], [1.0], norm=2.0), "^norm: only mode"),
    (lambda: value_loss_grad([0.0], [0.0], [0.0], norm=2.0), "^norm: only mode"),
    (lambda: entropy_grad([[0.0]], norm=2.0), "^norm: only mode"),
    (lambda: kl_estimate_grad([0.0], [0.0], norm=2.0), "^norm: only agg"),
    (lambda: aggregate_grad([[1.0]], [[1.0]], "seq-mean-token-sum-norm", norm=0), "norm"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
