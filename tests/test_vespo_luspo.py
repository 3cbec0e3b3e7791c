"""TRL 1.16.0's loss types vespo and luspo (issue 27).

VESPO's weight is checked against a plain loop over rows and tokens with ``math`` (the
formula of ``ppo_numpy.family.losses.vespo`` written out), at hand-picked values and at the
clamps; its
gradient by finite differences of the loss with the weight held at its value (it is a
stop-gradient); LUSPO (the ``"luspo"`` aggregation at the sequence level) by hand and by
finite differences.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ppo_numpy import PolicyLossOptions, aggregate, ppo_policy_loss
from ppo_numpy.family.losses.vespo import vespo_weights
from ppo_numpy.grads.loss_grads import policy_loss_grad

# the GRPO loss tests' batch and finite-difference check
from tests.test_grpo_loss import MASK, check  # noqa: E402


def phi_loop(logp, logp_old, A, mask, k_pos=2.0, lam_pos=3.0, k_neg=3.0, lam_neg=2.0,
             is_weights=None):
    """TRL's get_gamma_weights, one row and one token at a time."""
    out = np.zeros(np.shape(logp))
    lo = math.log(1e-8)
    for i in range(len(logp)):
        s = 0.0
        for t in range(len(logp[i])):
            if mask[i][t]:
                s += min(max(logp[i][t] - logp_old[i][t], -20.0), 20.0)
                if is_weights is not None:
                    w = is_weights[i][t]
                    s += min(max(math.log(w), lo), 20.0) if w > 0 else lo
        log_w = min(max(s, lo), 20.0)
        for t in range(len(logp[i])):
            if mask[i][t]:
                k, lam = (k_pos, lam_pos) if A[i][t] >= 0 else (k_neg, lam_neg)
                lam = max(lam, 1e-4)
                out[i, t] = math.exp(lam) * math.exp(k * log_w) * math.exp(-lam * math.exp(log_w))
    return out


def inputs(seed=0, spread=0.3):
    rng = np.random.default_rng(seed)
    logp_old = rng.uniform(-3.0, -0.5, MASK.shape)
    logp = np.where(MASK == 1, logp_old + rng.normal(0, spread, MASK.shape), 9.0)
    A = np.array([1.2, -0.7, 0.4, -1.5])[:, None] * np.ones(MASK.shape)
    return logp, logp_old, A


def test_vespo_weight_by_hand():
    # log w = 0.5 + 0.2 = 0.7 with A > 0: phi = e^3 e^(2 * 0.7) e^(-3 e^0.7)
    phi = vespo_weights([[0.5, 0.2]], [[0.0, 0.0]], [[1.0, 1.0]])
    want = math.exp(3 + 1.4 - 3 * math.exp(0.7))
    assert phi.tolist() == [[pytest.approx(want, rel=1e-14)] * 2]
    # phi(1) = 1 for either sign; lambda 0 is floored at 1e-4
    assert vespo_weights([0.0], [0.0], [-2.0]).tolist() == [1.0]
    phi = vespo_weights([0.3], [0.0], [1.0], lambda_pos=0.0, k_pos=1.0)
    assert phi[0] == pytest.approx(math.exp(1e-4 + 0.3 - 1e-4 * math.exp(0.3)), rel=1e-14)


def test_vespo_weight_matches_a_loop_with_clamps_and_is_weights():
    logp, logp_old, A = inputs(1, spread=2.0)
    logp[2, 0] = logp_old[2, 0] + 45.0   # clamped at +20 per token, then the sum at 20
    logp[1, 1] = logp_old[1, 1] - 30.0   # clamped at -20; the sum below log 1e-8
    A[0, 2] = -0.5                        # signs may vary along a response
    w_is = np.where(MASK == 1, np.exp(np.random.default_rng(2).normal(0, 0.5, MASK.shape)), 0)
    w_is[0, 1] = 0.0                      # a masked token (token_mask): log 0 -> log 1e-8
    for kw in ({}, {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 4.0, "lambda_neg": 1.5}):
        loop_kw = {"k_pos": kw.get("k_pos", 2.0), "lam_pos": kw.get("lambda_pos", 3.0),
                   "k_neg": kw.get("k_neg", 3.0), "lam_neg": kw.get("lambda_neg", 2.0)}
        for w in (None, w_is):
            got = vespo_weights(logp, logp_old, A, MASK, is_weights=w, **kw)
            want = phi_loop(logp, logp_old, A, MASK, is_weights=w, **loop_kw)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
            assert np.all(got[MASK == 0] == 0)


def test_vespo_loss_by_hand():
    # one response of two tokens, log-ratios [0.5, 0.2], A = 1, logp = [-1, -2]; dapo over
    # its 2 tokens: loss = -phi * (1 * -1 + 1 * -2) / 2 = 1.5 phi
    logp = np.array([[-1.0, -2.0]])
    logp_old = logp - [[0.5, 0.2]]
    phi = math.exp(3 + 1.4 - 3 * math.exp(0.7))
    loss, stats = ppo_policy_loss(logp, logp_old, [[1.0, 1.0]], loss_type="vespo", agg="dapo")
    assert loss == pytest.approx(1.5 * phi, rel=1e-14)
    assert stats["vespo_phi_mean"] == pytest.approx(phi, rel=1e-14)
    assert stats["clipfrac_active"] == 0.0
    d = policy_loss_grad(logp, logp_old, [[1.0, 1.0]], loss_type="vespo", agg="dapo")
    np.testing.assert_allclose(d, [[-phi / 2, -phi / 2]], rtol=1e-14)


@pytest.mark.parametrize("agg", ["dapo", "token-mean", "grpo", "luspo"])
@pytest.mark.parametrize("weights", [False, True])
def test_vespo_gradient_matches_finite_differences(agg, weights):
    logp, logp_old, A = inputs(3)
    A = A + np.random.default_rng(4).normal(0, 0.3, MASK.shape)
    w = (np.where(MASK == 1, np.random.default_rng(5).uniform(0.5, 2.0, MASK.shape), 0)
         if weights else None)
    phi = phi_loop(logp, logp_old, A, MASK, is_weights=w)
    # phi is a stop-gradient: differentiate -aggregate(phi A logp) with phi held
    def f(p):
        return -aggregate(np.where(MASK == 1, phi * A * p["logp"], 0.0), MASK, agg)

    assert f({"logp": logp}) == pytest.approx(ppo_policy_loss(
        logp, logp_old, A, MASK, agg=agg, loss_type="vespo", is_weights=w)[0], rel=1e-13)
    d = policy_loss_grad(logp, logp_old, A, MASK, agg=agg, loss_type="vespo", is_weights=w)
    check(f, logp, d)
    assert np.all(d[MASK == 0] == 0.0)


def test_vespo_is_weights_enter_phi_not_the_term():
    logp, logp_old, A = inputs(6)
    w = np.where(MASK == 1, 2.0, 0.0)
    with_w = ppo_policy_loss(logp, logp_old, A, MASK, loss_type="vespo", is_weights=w)[0]
    # the same loss as the log-ratios shifted by log 2 per token (logp kept in the term)
    phi = phi_loop(logp + np.log(2.0), logp_old, A, MASK)
    want = -np.where(MASK == 1, phi * A * logp, 0).sum() / MASK.sum()
    assert with_w == pytest.approx(want, rel=1e-13)


def test_vespo_bad_options():
    for kw, pat in (({"vespo_k_pos": -1.0}, "vespo_k_pos"),
                    ({"vespo_lambda_neg": np.nan}, "vespo_lambda_neg"),
                    ({"loss_type": "vespo", "importance_level": "sequence"},
                     "loss_type: 'vespo' takes no"),
                    ({"loss_type": "vespo", "delta": 2.0}, "loss_type: 'vespo' takes no")):
        with pytest.raises(ValueError, match=pat):
            PolicyLossOptions(**kw)
    with pytest.raises(ValueError, match="k_neg"):
        vespo_weights([0.0], [0.0], [1.0], k_neg=-2.0)
    with pytest.raises(ValueError, match="is_weights"):
        vespo_weights([0.0], [0.0], [1.0], is_weights=[-1.0])


# --- LUSPO --------------------------------------------------------------------------------


def test_luspo_by_hand():
    # responses of 2 and 1 tokens, a padded row of none (B = 3 counts it, as TRL's .mean());
    # sequence log-ratios: row 0 mean (0.1 + 0.3) / 2 = 0.2 -> s = e^0.2 = 1.2214 > 1.2,
    # clipped with A = 1: term 1.2 on each of 2 tokens; row 1 s = e^-0.1 = 0.9048, A = -2:
    # min(-1.8097, -1.8097) unclipped (inside [0.8, 1.2]).
    logp_old = np.full((3, 2), -1.0)
    logp = logp_old + [[0.1, 0.3], [-0.1, 0.0], [0.0, 0.0]]
    A = [[1.0, 1.0], [-2.0, 0.0], [0.0, 0.0]]
    m = [[1, 1], [1, 0], [0, 0]]
    loss, _ = ppo_policy_loss(logp, logp_old, A, m, agg="luspo", importance_level="sequence")
    assert loss == pytest.approx(-(2 * 1.2 + 1 * -2 * math.exp(-0.1)) / 3, rel=1e-14)
    d = policy_loss_grad(logp, logp_old, A, m, agg="luspo", importance_level="sequence")
    # row 0 clipped: 0; row 1: d/dlogp of -(1/3) n_1 A s_1 = -(1/3)(-2) e^-0.1 (n_1 = 1)
    np.testing.assert_allclose(d, [[0, 0], [2 * math.exp(-0.1) / 3, 0], [0, 0]], rtol=1e-14)
    # the aggregation itself: a sequence mean of token sums over every row
    assert aggregate([[1.0, 2.0], [4.0, 0.0], [0.0, 0.0]], m, "luspo") == 7 / 3


@pytest.mark.parametrize("level", ["sequence", "token"])
@pytest.mark.parametrize("weights", [False, True])
def test_luspo_gradient_matches_finite_differences(level, weights):
    rng = np.random.default_rng(7)
    logp_old = rng.uniform(-3.0, -0.5, MASK.shape)
    # row means 0.05 (inside), 0.35 (above 1.2), -0.4 (below 0.8), -0.1 (inside)
    log_ratio = np.zeros(MASK.shape)
    for i, (mu, k) in enumerate(zip([0.05, 0.35, -0.4, -0.1], MASK.sum(1).astype(int))):
        dev = rng.uniform(-0.03, 0.03, k)
        log_ratio[i, :k] = mu + dev - dev.mean()
    logp = np.where(MASK == 1, logp_old + log_ratio, 3.0)
    A = np.array([1.3, 0.7, -0.9, -1.1])[:, None] * MASK
    w = np.where(MASK == 1, rng.uniform(0.5, 2.0, MASK.shape), 0) if weights else None
    if weights and level == "sequence":
        # weights constant along each response: then the gradient (each token's weight times
        # the derivative of the sequence term, verl's per-token form) is the loss's derivative
        w = np.where(MASK == 1, rng.uniform(0.5, 2.0, (MASK.shape[0], 1)), 0)

    def f(p):
        return ppo_policy_loss(p["logp"], logp_old, A, MASK, agg="luspo",
                               importance_level=level, is_weights=w)[0]

    d = policy_loss_grad(logp, logp_old, A, MASK, agg="luspo", importance_level=level,
                         is_weights=w)
    check(f, logp, d)
    assert np.any(d != 0)


def test_luspo_is_gspo_scaled_by_length():
    # with one advantage per response: luspo = (1/B) sum_i n_i term_i, where
    # seq-mean-token-mean (GSPO's mean) is (1/B) sum_i term_i
    rng = np.random.default_rng(8)
    logp_old = rng.uniform(-3.0, -0.5, MASK.shape)
    logp = logp_old + rng.normal(0, 0.2, MASK.shape)
    A = rng.normal(size=(4, 1)) * MASK
    n = MASK.sum(1)
    per_row = []
    for i in range(4):
        row = ppo_policy_loss(logp[i:i + 1], logp_old[i:i + 1], A[i:i + 1], MASK[i:i + 1],
                              agg="seq-mean-token-mean", importance_level="sequence")[0]
        per_row.append(row)
    luspo = ppo_policy_loss(logp, logp_old, A, MASK, agg="luspo", importance_level="sequence")[0]
    assert luspo == pytest.approx(sum(ni * r for ni, r in zip(n, per_row)) / 4, rel=1e-13)
