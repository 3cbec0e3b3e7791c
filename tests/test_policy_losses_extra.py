"""verl 0.9.1's policy losses sapo, geo_mean (GMPO), gpg, clip_cov, kl_cov, dppo_tv, dppo_kl, dro
and TRL 1.16.0's sapo, through ppo_policy_loss / policy_loss_grad.

Expected values come from plain Python loops over the tokens written here from the formulas
(verl/trainer/ppo/core_algos.py), from hand calculations in the comments, and the gradients
from centred finite differences (float64, relative error < 1e-6); the stop-gradient weights
of GPG-like losses (DPPO) are held at their value in the differenced function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ppo_numpy import aggregate, ppo_policy_loss
from ppo_numpy.family.losses.cov import clip_cov_selection, covariance, kl_cov_selection
from ppo_numpy.family.losses.dppo import dppo_valid
from ppo_numpy.family.losses.gmpo import gmpo_log_ratio
from ppo_numpy.family.losses.sapo import sapo_gate
from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.grads.loss_grads import policy_loss_and_grad, policy_loss_grad

MASK = np.array([[1, 1, 1, 1, 0],
                 [1, 1, 0, 0, 0],
                 [1, 1, 1, 1, 1],
                 [1, 0, 0, 0, 0]], dtype=float)


def inputs(seed=0, token_advantages=False):
    """Log-probs in (0, 1) probabilities with log-ratios of std 0.3, garbage at padding."""
    rng = np.random.default_rng(seed)
    logp_old = np.log(rng.uniform(0.05, 0.9, MASK.shape))
    logp = np.minimum(logp_old + rng.normal(0.0, 0.3, MASK.shape), -1e-3)
    A = (rng.normal(0.0, 1.0, MASK.shape) if token_advantages
         else np.repeat(rng.normal(0.0, 1.0, (MASK.shape[0], 1)), MASK.shape[1], axis=1))
    w = rng.uniform(0.5, 1.5, MASK.shape)
    pad = MASK == 0
    return (np.where(pad, 7.0, logp), np.where(pad, -9.0, logp_old), np.where(pad, 3.0, A), w)


def tokens(mask):
    return [(i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t]]


def seq_mean_token_mean(values, mask):
    """(1/B') sum_i (1/n_i) sum_t values[i][t] over the response tokens, in plain Python."""
    rows = [[values[i][t] for t in range(mask.shape[1]) if mask[i, t]]
            for i in range(mask.shape[0])]
    rows = [r for r in rows if r]
    return sum(sum(r) / len(r) for r in rows) / len(rows)


def token_mean(values, mask):
    ts = tokens(mask)
    return sum(values[i][t] for i, t in ts) / len(ts)


def reference_terms(kind, logp, logp_old, A, mask, w, **p):
    """The per-token term of each loss (to maximise), token by token with math."""
    out = [[0.0] * mask.shape[1] for _ in range(mask.shape[0])]
    for i, t in tokens(mask):
        lr = logp[i, t] - logp_old[i, t]
        if p.get("clamp"):
            lr = max(-20.0, min(20.0, lr))
        rho, a = math.exp(lr), A[i, t]
        if kind == "sapo":
            tau = p["tau_pos"] if a > 0 else p["tau_neg"]
            term = 4 / tau / (1 + math.exp(-tau * (rho - 1))) * a
        elif kind == "gpg":
            term = a * logp[i, t]
        elif kind == "dro":
            term = a * logp[i, t] - 0.5 * p["beta"] * lr * lr
        elif kind in ("dppo_tv", "dppo_kl"):
            pr, po = math.exp(logp[i, t]), math.exp(logp_old[i, t])
            if kind == "dppo_tv":
                ok = pr - po <= p["hi"] if a > 0 else pr - po >= -p["lo"]
            else:
                d = po * (logp_old[i, t] - logp[i, t]) + (1 - po) * math.log(
                    (1 - po + 1e-8) / (1 - pr + 1e-8))
                ok = (d <= p["hi"] or pr <= po) if a > 0 else (d <= p["lo"] or pr >= po)
            term = min(rho, p["c"]) * ok * a * logp[i, t]
        out[i][t] = term * w[i, t]
    return out


# --------------------------------------------------------------------------------------
# hand values


def test_sapo_by_hand():
    # rho = e^0.5 = 1.648721, A = 1, tau 1: g = 4 sigmoid(0.648721) = 4 * 0.656722 = 2.626889;
    # rho = 1, A = -1, tau 1.05: g = (4 / 1.05) / 2 = 1.904762, term -1.904762;
    # seq-mean-token-mean of one row: -(2.626889 - 1.904762) / 2 = -0.361064
    loss, stats = ppo_policy_loss([0.5, 0.0], [0.0, 0.0], [1.0, -1.0], loss_type="sapo",
                                  agg="seq-mean-token-mean")
    assert loss == pytest.approx(-(4 / (1 + math.exp(-(math.exp(0.5) - 1))) - 2 / 1.05) / 2,
                                 rel=1e-14)
    assert loss == pytest.approx(-0.361064, abs=1e-6)
    assert stats["clipfrac_active"] == 0.0
    # d/d logp: 4 s (1 - s) rho A per token / 2, s = sigmoid(tau (rho - 1)): at rho = 1 the
    # slope is 1, PPO's own (-A / 2 = 0.5 here)
    d = policy_loss_grad([0.5, 0.0], [0.0, 0.0], [1.0, -1.0], loss_type="sapo",
                         agg="seq-mean-token-mean")
    s = 1 / (1 + math.exp(-(math.exp(0.5) - 1)))
    assert d.tolist() == pytest.approx([-4 * s * (1 - s) * math.exp(0.5) / 2, 0.5], rel=1e-13)


def test_sapo_matches_loops_and_its_temperatures():
    logp, logp_old, A, w = inputs(1, token_advantages=True)
    for tp, tn in ((1.0, 1.05), (2.0, 0.5)):
        loss, _ = ppo_policy_loss(logp, logp_old, A, MASK, loss_type="sapo", sapo_tau_pos=tp,
                                  sapo_tau_neg=tn, agg="seq-mean-token-mean", is_weights=w)
        terms = reference_terms("sapo", logp, logp_old, A, MASK, w, tau_pos=tp, tau_neg=tn)
        assert loss == pytest.approx(-seq_mean_token_mean(terms, MASK), rel=1e-13)


def test_sapo_gate_block():
    g, dg = sapo_gate(np.array([1.0, 3.0, 0.0]), np.array([2.0, 0.0, -1.0]), 1.0, 1.05)
    assert g.tolist() == pytest.approx([2.0, 4 / 1.05 / (1 + math.exp(-2.1)),
                                        4 / 1.05 / (1 + math.exp(1.05))], rel=1e-15)
    s = 1 / (1 + math.exp(-2.1))  # A = 0 takes tau_neg (verl's and TRL's "A > 0" test)
    assert dg[1] == pytest.approx(4 * s * (1 - s), rel=1e-14)


def test_geo_mean_by_hand():
    # one row, A = 1 at both tokens, eps 0.2: token log-ratios [0.5, -0.5] -> [0.2, -0.5]
    # (A > 0 caps above only); s = exp(-0.15), loss -s A = -0.860708
    loss, stats = ppo_policy_loss([0.5, -0.5], [0.0, 0.0], [1.0, 1.0], loss_type="geo_mean",
                                  agg="grpo")
    assert loss == pytest.approx(-math.exp(-0.15), rel=1e-14)
    # verl's pg_clipfrac counts A > 0 tokens outside [-eps, eps_high] on either side (both
    # here); the cap binds at one of them
    assert stats["clipfrac_high"] == 1.0 and stats["clipfrac_low"] == 0.0
    assert stats["clipfrac_active"] == 0.5
    # gradient: the capped token gets 0, the other s / n = exp(-0.15) / 2, times -A
    d = policy_loss_grad([0.5, -0.5], [0.0, 0.0], [1.0, 1.0], loss_type="geo_mean", agg="grpo")
    assert d.tolist() == pytest.approx([0.0, -math.exp(-0.15) / 2], rel=1e-14)
    # A = -1: the floor -0.2 binds at the second token; s = exp(0.15), loss +s
    loss, _ = ppo_policy_loss([0.5, -0.5], [0.0, 0.0], [-1.0, -1.0], loss_type="geo_mean",
                              agg="grpo")
    assert loss == pytest.approx(math.exp(0.15), rel=1e-14)


def test_geo_mean_rows_and_weights_by_loops():
    # two rows: the loss is the mean over rows of -s_i Abar_i; is_weights enter as the row's
    # geometric mean of w + 1e-10 (verl 0.9.1)
    logp, logp_old, A, w = inputs(2, token_advantages=True)
    loss, _ = ppo_policy_loss(logp, logp_old, A, MASK, loss_type="geo_mean", agg="grpo",
                              epsilon=0.1, epsilon_high=0.3, is_weights=w)
    total = 0.0
    for i in range(MASK.shape[0]):
        ts = [t for t in range(MASK.shape[1]) if MASK[i, t]]
        lrs = []
        for t in ts:
            lr = logp[i, t] - logp_old[i, t]
            a = A[i, t]
            lrs.append(min(lr, 0.3) if a > 0 else max(lr, -0.1) if a < 0 else 0.0)
        s = math.exp(sum(lrs) / len(ts))
        a_bar = sum(A[i, t] for t in ts) / len(ts)
        w_row = math.exp(sum(math.log(w[i, t] + 1e-10) for t in ts) / len(ts))
        total += -a_bar * s * w_row
    assert loss == pytest.approx(total / MASK.shape[0], rel=1e-13)


def test_gmpo_log_ratio_sign_zero():
    lr, passes = gmpo_log_ratio(np.array([0.9]), np.array([0.0]), 0.2, 0.2)
    assert lr.tolist() == [0.0] and passes.tolist() == [False]


@pytest.mark.parametrize("kind, opts, ref", [
    ("gpg", {}, {}),
    ("dro", {"dro_beta": 0.3}, {"beta": 0.3}),
    ("dppo_tv", {"epsilon": 0.1, "epsilon_high": 0.05, "dppo_ratio_max": 1.2,
                 "log_ratio_clamp": 20.0},
     {"lo": 0.1, "hi": 0.05, "c": 1.2, "clamp": True}),
    ("dppo_kl", {"epsilon": 0.02, "epsilon_high": 0.01, "dppo_ratio_max": 3.0},
     {"lo": 0.02, "hi": 0.01, "c": 3.0}),
])
def test_token_losses_match_loops(kind, opts, ref):
    logp, logp_old, A, w = inputs(3, token_advantages=True)
    for agg, reduce in (("token-mean", token_mean), ("seq-mean-token-mean", seq_mean_token_mean)):
        for weights in (None, w):
            loss, _ = ppo_policy_loss(logp, logp_old, A, MASK, loss_type=kind, agg=agg,
                                      is_weights=weights, **opts)
            terms = reference_terms(kind, logp, logp_old, A, MASK,
                                    np.ones(MASK.shape) if weights is None else weights, **ref)
            assert loss == pytest.approx(-reduce(terms, MASK), rel=1e-13)


def test_dppo_regions_by_hand():
    # p: 0.5 vs 0.2 (A > 0, +0.3 > 0.2: out), 0.8 vs 0.7 (+0.1: in), 0.5 vs 0.8 (A < 0,
    # -0.3 < -0.2: out), 0.9 vs 0.2 (A < 0 but moving up: in whatever the distance)
    logp, old = np.log([0.5, 0.8, 0.5, 0.9]), np.log([0.2, 0.7, 0.8, 0.2])
    A = np.array([1.0, 1.0, -1.0, -1.0])
    assert dppo_valid(logp, old, A, 0.2, 0.2, "tv").tolist() == [False, True, False, True]
    # binary KL of (0.2, 0.5): 0.2 log(0.4) + 0.8 log(0.8 / 0.5) = 0.192745 (out at 0.19, in at
    # 0.2); the token moving against its advantage is kept
    kl = 0.2 * math.log(0.4) + 0.8 * math.log(0.8 / 0.5)
    assert kl == pytest.approx(0.192745, abs=1e-6)
    assert dppo_valid(logp[:1], old[:1], A[:1], 0.2, 0.19, "kl").tolist() == [False]
    assert dppo_valid(logp[:1], old[:1], A[:1], 0.2, 0.2, "kl").tolist() == [True]
    assert dppo_valid(logp[3:], old[3:], A[3:], 1e-6, 1e-6, "kl").tolist() == [True]
    _, stats = ppo_policy_loss(logp, old, A, loss_type="dppo_tv")
    assert stats["dppo_masked_frac"] == 0.5 and stats["clipfrac_active"] == 0.5


def test_dro_and_gpg_by_hand():
    # gpg: -(A logp) token mean: -(1 * -1 + -2 * -0.5) / 2 = 0
    loss, _ = ppo_policy_loss([-1.0, -0.5], [-1.2, -0.5], [1.0, -2.0], loss_type="gpg")
    assert loss == 0.0
    # dro, beta 0.5: -(A logp - 0.25 lr^2): -( -1 - 0.25 * 0.04 + 1 - 0) / 2 = 0.005
    loss, _ = ppo_policy_loss([-1.0, -0.5], [-1.2, -0.5], [1.0, -2.0], loss_type="dro",
                              dro_beta=0.5)
    assert loss == pytest.approx(0.005, rel=1e-12)
    d = policy_loss_grad([-1.0, -0.5], [-1.2, -0.5], [1.0, -2.0], loss_type="dro",
                         dro_beta=0.5)
    # -(A - beta lr) / 2 = [-(1 - 0.1) / 2, -(-2 - 0) / 2]
    assert d.tolist() == pytest.approx([-0.45, 1.0], rel=1e-12)


# --------------------------------------------------------------------------------------
# the covariance selections: verl's rules pinned down


def test_covariance_by_hand_and_verl_eps():
    logp, A = np.array([[-1.0, -2.0, -4.0]]), np.array([[2.0, 0.0, 1.0]])
    m = np.ones((1, 3), bool)
    # mean A = 1, mean logp = -7/3: [(1)(4/3), (-1)(1/3), (0)(-5/3)]
    assert covariance(logp, A, m)[0].tolist() == pytest.approx([4 / 3, -1 / 3, 0.0], rel=1e-15)
    # with verl's masked_mean eps the means are sums / (3 + 1e-8)
    mA, ml = 3 / (3 + 1e-8), -7 / (3 + 1e-8)
    got = covariance(logp, A, m, eps=1e-8)
    assert got[0, 0] == (2.0 - mA) * (-1.0 - ml)


def test_clip_cov_selection_rules():
    m = np.ones((2, 5), bool)
    cov = np.array([[1.0, 1.5, 5.0, 4.9, 0.2],
                    [3.0, 2.0, 6.0, 1.2, 2.5]])
    clipped = np.zeros((2, 5), bool)
    clipped[1, 0] = True
    # candidates: 1 < cov < 5 strictly, not clipped: (0,1), (0,3), (1,1), (1,3), (1,4)
    every = clip_cov_selection(cov, m, clipped, 1.0, (1.0, 5.0))
    assert np.argwhere(every).tolist() == [[0, 1], [0, 3], [1, 1], [1, 3], [1, 4]]
    # k = max(int(0.29 * 10), 1) = 2 (int(2.9)); the two drawn are the first two of the
    # permutation of the five candidates in row-major order
    picked = clip_cov_selection(cov, m, clipped, 0.29, (1.0, 5.0), seed=7)
    assert picked.sum() == 2 and not np.any(picked & ~every)
    assert np.array_equal(picked, clip_cov_selection(cov, m, clipped, 0.29, (1.0, 5.0), seed=7))
    seen = {tuple(np.flatnonzero(clip_cov_selection(cov, m, clipped, 0.29, (1.0, 5.0),
                                                    seed=s))) for s in range(60)}
    assert len(seen) == 10  # every pair of the five comes up: a uniform draw
    # k is at least 1: a tiny ratio still drops one token
    assert clip_cov_selection(cov, m, clipped, 1e-9, (1.0, 5.0)).sum() == 1
    # Python's float product truncated: int(0.29 * 100) = 28, not 29
    assert int(0.29 * 100) == 28
    big = np.full((1, 100), 2.0)
    assert clip_cov_selection(big, np.ones((1, 100), bool), np.zeros((1, 100), bool), 0.29,
                              (1.0, 5.0)).sum() == 28
    # no candidate: nothing dropped
    assert not clip_cov_selection(cov, m, clipped, 0.5, (10.0, 20.0)).any()


def test_kl_cov_selection_rules():
    m = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    cov = np.array([[0.5, 2.0, -1.0, 99.0], [2.0, 0.1, 2.0, 0.3]])
    # n = 7, k = max(1, int(7 * 0.3)) = 2: the two 2.0 at (0,1) and (1,0) (row-major first
    # among the three ties), never the padded 99
    assert np.argwhere(kl_cov_selection(cov, m, 0.3)).tolist() == [[0, 1], [1, 0]]
    assert np.argwhere(kl_cov_selection(cov, m, 1e-9)).tolist() == [[0, 1]]
    assert kl_cov_selection(cov, m, 1.0).sum() == 7


def test_clip_cov_loss_by_loops():
    logp, logp_old, A, _ = inputs(4)
    m = MASK == 1
    # ratio 1: every candidate dropped, no randomness; bounds that catch some tokens
    opts = dict(loss_type="clip_cov", cov_ratio=1.0, cov_bounds=(0.0, 0.5))
    loss, stats = ppo_policy_loss(logp, logp_old, A, MASK, **opts)
    ts = tokens(MASK)
    n = len(ts)
    mean_A = sum(A[i, t] for i, t in ts) / (n + 1e-8)
    mean_lp = sum(logp[i, t] for i, t in ts) / (n + 1e-8)
    total, dropped, clipped = 0.0, 0, 0
    for i, t in ts:
        rho = math.exp(logp[i, t] - logp_old[i, t])
        a = A[i, t]
        unclipped, clip = rho * a, min(max(rho, 0.8), 1.2) * a
        is_clipped = clip < unclipped
        cov = (a - mean_A) * (logp[i, t] - mean_lp)
        if not is_clipped and 0.0 < cov < 0.5:
            dropped += 1
            continue
        clipped += is_clipped
        total += min(unclipped, clip)
    assert 0 < dropped < n and clipped > 0
    assert loss == pytest.approx(-total / n, rel=1e-13)
    assert stats["cov_selected_frac"] == dropped / n
    assert np.all(policy_loss_grad(logp, logp_old, A, MASK, **opts)[
        clip_cov_selection(covariance(np.where(m, logp, 0), np.where(m, A, 0), m, eps=1e-8),
                           m, np.zeros_like(m), 1.0, (0.0, 0.5)) & m] == 0.0)


def test_kl_cov_loss_by_loops():
    logp, logp_old, A, _ = inputs(5, token_advantages=True)
    loss, stats = ppo_policy_loss(logp, logp_old, A, MASK, loss_type="kl_cov", cov_ratio=0.2,
                                  kl_cov_coef=0.7)
    ts = tokens(MASK)
    n = len(ts)
    mean_A = sum(A[i, t] for i, t in ts) / n
    mean_lp = sum(logp[i, t] for i, t in ts) / n
    covs = sorted(((A[i, t] - mean_A) * (logp[i, t] - mean_lp), (i, t)) for i, t in ts)
    top = {it for _, it in covs[-max(1, int(n * 0.2)):]}
    total = 0.0
    for i, t in ts:
        lr = logp[i, t] - logp_old[i, t]
        total += math.exp(lr) * A[i, t] - (0.7 * abs(lr) if (i, t) in top else 0.0)
    assert loss == pytest.approx(-total / n, rel=1e-13)
    assert stats["approx_kl_abs"] == pytest.approx(
        sum(abs(logp[i, t] - logp_old[i, t]) for i, t in ts) / n, rel=1e-13)


# --------------------------------------------------------------------------------------
# gradients by finite differences


def check(f, x, analytic):
    report = gradcheck(f, {"logp": x}, {"logp": analytic}, rtol=1e-6)
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, "\n".join(bad)


CASES = [
    {"loss_type": "sapo"},
    {"loss_type": "sapo", "sapo_tau_pos": 2.0, "sapo_tau_neg": 0.5, "log_ratio_clamp": 0.25},
    {"loss_type": "sapo", "importance_level": "sequence"},
    {"loss_type": "geo_mean", "agg": "grpo"},
    {"loss_type": "geo_mean", "epsilon": 0.1, "epsilon_high": 0.3},
    {"loss_type": "gpg"},
    {"loss_type": "clip_cov", "cov_ratio": 0.4, "cov_bounds": (-0.3, 2.0), "cov_seed": 3},
    {"loss_type": "kl_cov", "cov_ratio": 0.3, "kl_cov_coef": 0.5},
    {"loss_type": "dppo_tv", "epsilon": 0.1},
    {"loss_type": "dppo_kl", "epsilon": 0.03, "log_ratio_clamp": 20.0},
    {"loss_type": "dro", "dro_beta": 0.3},
    {"loss_type": "dro", "dro_beta": 0.3, "log_ratio_clamp": 0.25},
    {"loss_type": "sapo", "kl_coef": 0.2, "kl_agg": "token-mean"},
]


@pytest.mark.parametrize("opts", CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("token_advantages", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_gradients_match_finite_differences(opts, token_advantages, weighted):
    logp, logp_old, A, w = inputs(6, token_advantages)
    rng = np.random.default_rng(7)
    logp_ref = logp_old + rng.normal(0, 0.3, MASK.shape)
    opts = {"agg": "seq-mean-token-mean", **opts}
    is_weights = w if weighted else None
    if weighted and opts.get("importance_level") == "sequence":
        # weights constant along each response: then the gradient (each token's weight times
        # the derivative of the sequence term, verl's per-token form) is the loss's derivative
        is_weights = np.where(MASK == 1, w.sum(axis=-1, keepdims=True) / MASK.sum(-1,
                              keepdims=True), 0.0)
    d = policy_loss_grad(logp, logp_old, A, MASK, logp_ref=logp_ref, is_weights=is_weights,
                         **opts)

    def f(p):
        return ppo_policy_loss(p["logp"], logp_old, A, MASK, logp_ref=logp_ref,
                               is_weights=is_weights, **opts)[0]

    if opts["loss_type"].startswith("dppo"):
        # the weight sg(min(rho, c)) v_t is a constant of the gradient: held at its value
        lr = np.clip(logp - logp_old, -20, 20)
        c = opts.get("dppo_ratio_max", 20.0)
        at = MASK == 1  # (padding holds garbage: read the response tokens only)
        v = dppo_valid(np.where(at, logp, 0.0), np.where(at, logp_old, 0.0), A, opts["epsilon"],
                       opts["epsilon"], opts["loss_type"][5:])
        weight = np.minimum(np.exp(lr), c) * v * (1.0 if is_weights is None else w)

        def f(p):  # noqa: F811
            return -aggregate(np.where(MASK == 1, weight * A * p["logp"], 0.0), MASK,
                              opts["agg"])

        assert f({"logp": logp}) == pytest.approx(
            ppo_policy_loss(logp, logp_old, A, MASK, is_weights=is_weights, **opts)[0],
            rel=1e-13)
    check(f, logp, d)
    assert np.all(d[MASK == 0] == 0.0) and np.any(d != 0.0)


def test_sapo_slope_is_ppo_at_rho_one():
    # before an update (rho = 1) SAPO's gradient is the unclipped PPO gradient, as GPG's is
    logp, _, A, _ = inputs(8, token_advantages=True)
    ppo = policy_loss_grad(logp, logp, A, MASK)
    for kind in ("sapo", "gpg", "clip_cov"):
        assert policy_loss_grad(logp, logp, A, MASK, loss_type=kind,
                                cov_bounds=(50.0, 60.0)) == pytest.approx(ppo, rel=1e-14)
    assert policy_loss_grad(logp, logp, A, MASK, loss_type="dro", dro_beta=2.0) == \
        pytest.approx(ppo, rel=1e-14)


def test_is_weights_of_one_change_nothing():
    logp, logp_old, A, _ = inputs(9, token_advantages=True)
    for opts in CASES:
        a = policy_loss_and_grad(logp, logp_old, A, MASK, logp_ref=logp_old, **opts)
        b = policy_loss_and_grad(logp, logp_old, A, MASK, logp_ref=logp_old,
                                 is_weights=np.ones(MASK.shape), **opts)
        # (GMPO's row weight is the geometric mean of w + 1e-10: 1 + 1e-10, as in verl)
        rtol = 2e-10 if opts["loss_type"] == "geo_mean" else 1e-15
        assert a[0] == pytest.approx(b[0], rel=rtol, abs=1e-300)
        assert np.allclose(a[2], b[2], rtol=rtol, atol=0)


# --------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize("kwargs, pattern", [
    ({"loss_type": "dro"}, r"^dro_beta: loss_type 'dro' needs dro_beta > 0"),
    ({"loss_type": "dro", "dro_beta": 0.0}, r"^dro_beta: must be > 0"),
    ({"loss_type": "sapo", "sapo_tau_pos": 0.0}, r"^sapo_tau_pos: must be > 0"),
    ({"loss_type": "clip_cov", "cov_bounds": (5.0, 1.0)}, r"^cov_bounds: low must be < high"),
    ({"loss_type": "kl_cov", "cov_ratio": 0.0}, r"^cov_ratio: must be > 0"),
    ({"loss_type": "clip_cov", "cov_seed": -1}, r"^cov_seed: must be an integer >= 0"),
    ({"loss_type": "gpg", "importance_level": "sequence"},
     r"^importance_level: 'sequence' is for loss types"),
    ({"loss_type": "geo_mean", "dual_clip": 3.0}, r"^loss_type: 'geo_mean' takes no dual_clip"),
    ({"loss_type": "sapo", "delta": 2.0}, r"^loss_type: 'sapo' takes no dual_clip or delta"),
])
def test_bad_options(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ppo_policy_loss([-1.0], [-1.0], [1.0], **kwargs)


def test_dppo_kl_needs_probabilities():
    with pytest.raises(ValueError, match=r"^logp: loss_type 'dppo_kl' reads exp\(logp\)"):
        ppo_policy_loss([0.5], [-1.0], [1.0], loss_type="dppo_kl")


def test_inputs_not_modified():
    logp, logp_old, A, w = inputs(10)
    copies = [x.copy() for x in (logp, logp_old, A, w)]
    for opts in CASES:
        policy_loss_and_grad(logp, logp_old, A, MASK, logp_ref=logp_old, is_weights=w, **opts)
    for x, c in zip((logp, logp_old, A, w), copies):
        assert np.array_equal(x, c)


# --------------------------------------------------------------------------------------
# the presets and the documented numbers


def test_docs_sapo_numbers():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "conventions.md").read_text()
    section = text[text.index("### verl's `sapo` and TRL's `sapo`"):]
    rows = re.findall(r"^\| ([^|]+) \| ([-+0-9.]+) \| ([-+0-9., ]+) \|$", section, flags=re.M)
    assert len(rows) == 4
    m = np.array([[1, 0, 0], [1, 1, 1]], dtype=float)
    logp_old = np.where(m == 1, np.log(0.5), 0.0)
    logp = logp_old + np.array([[0.3, 0, 0], [-0.2, 0.1, 0.4]])
    A = np.array([[1.0, 0, 0], [-1.0, -1, -1]])
    verl = dict(loss_type="sapo", agg="seq-mean-token-mean", log_ratio_clamp=20.0,
                kl_coef=0.1, kl_estimator="k3", kl_clamp=10.0, kl_agg="token-mean")
    trl = dict(loss_type="sapo", agg="grpo", kl_coef=0.1, kl_estimator="k3")
    settings = [dict(verl, kl_coef=0.0), verl, trl, dict(trl, importance_level="sequence")]
    for (_, loss, grads), opts in zip(rows, settings):
        got, _, d = policy_loss_and_grad(logp, logp_old, A, m, logp_ref=logp_old, **opts)
        assert f"{got:+.9f}" == loss
        assert ", ".join(f"{x:+.9f}" for x in d[m == 1]) == grads
    # the hand value of the text, without the KL term (gates written out)
    gates2 = [4 / 1.05 / (1 + math.exp(-1.05 * (math.exp(x) - 1))) for x in (-0.2, 0.1, 0.4)]
    hand = -(4 / (1 + math.exp(-(math.exp(0.3) - 1))) - sum(gates2) / 3) / 2
    assert float(rows[0][1]) == pytest.approx(hand, abs=5e-10)


def group_case():
    from ppo_numpy.oracle.group_cases import group_inputs

    rng = np.random.default_rng(11)
    x = group_inputs(rng, [0, 0, 0, 1, 1], [2, 3, 1, 3, 2], 3, binary=False)
    return x


def test_verl_preset_loss_modes_call_the_loss():
    from ppo_numpy.oracle.presets import get_preset

    verl = get_preset("verl-grpo")
    x = group_case()
    m = x["mask"] == 1
    base = verl(x)
    A = base["advantages"]
    mode_opts = {
        "sapo": dict(loss_type="sapo", agg="seq-mean-token-mean", log_ratio_clamp=20.0,
                     sapo_tau_pos=1.0, sapo_tau_neg=float(np.float32(1.05))),
        "geo_mean": dict(loss_type="geo_mean", agg="grpo"),
        "gpg": dict(loss_type="gpg"),
        "clip_cov": dict(loss_type="clip_cov"),
        "kl_cov": dict(loss_type="kl_cov"),
        "dppo_tv": dict(loss_type="dppo_tv", log_ratio_clamp=20.0, dppo_ratio_max=3.0),
        "dppo_kl": dict(loss_type="dppo_kl", log_ratio_clamp=20.0, dppo_ratio_max=3.0),
        "dro": dict(loss_type="dro", dro_beta=0.5),
    }
    for mode, opts in mode_opts.items():
        extra = {"dro_beta": 0.5} if mode == "dro" else {}
        # loss_agg_mode changes neither sapo's nor geo_mean's policy term (verl ignores it)
        agg = "seq-mean-token-sum" if mode in ("sapo", "geo_mean") else "token-mean"
        out = verl(x, loss_mode=mode, loss_agg_mode=agg, **extra)
        loss, _, d = policy_loss_and_grad(np.where(m, x["logp"], 0), np.where(m, x["logp_old"], 0),
                                          A, m, **opts)
        assert out["policy_loss"] == pytest.approx(loss, rel=1e-14), mode
        assert np.allclose(out["dlogp"], d, rtol=1e-14, atol=0), mode
    assert "stat/actor/pg_clipfrac" not in verl(x, loss_mode="gpg")
    with pytest.raises(ValueError, match=r"verl-grpo: dro_beta: loss_mode 'dro' needs"):
        verl(x, loss_mode="dro")


def test_trl_preset_sapo():
    from ppo_numpy.oracle.presets import get_preset

    trl = get_preset("trl-grpo")
    x = group_case()
    m = x["mask"] == 1
    out = trl(x, loss_type="sapo", sapo_temperature_pos=2.0, delta=1.5)
    loss, _, d = policy_loss_and_grad(np.where(m, x["logp"], 0), np.where(m, x["logp_old"], 0),
                                      out["advantages"], m, loss_type="sapo", agg="grpo",
                                      sapo_tau_pos=2.0, sapo_tau_neg=float(np.float32(1.05)))
    assert out["policy_loss"] == pytest.approx(loss, rel=1e-14)
    assert np.allclose(out["dlogp"], d, rtol=1e-14, atol=0)
    assert not any(k.startswith("stat/clip_ratio") for k in out)
