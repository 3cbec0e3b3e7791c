"""The critic-free family's loss forms in ppo_policy_loss / policy_loss_grad.

GSPO's sequence ratio, TRL's delta bound, CISPO, a KL term in the loss and TRL's
normalisations: hand values written out below (the numbers are derived in the
comments), centered finite differences of the loss for every gradient, and the
properties that tie them to PPO.
"""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy import (
    PolicyLossOptions,
    aggregate,
    ppo_policy_loss,
    probability_ratio,
)
from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.grads.loss_grads import policy_loss_grad
from ppo_numpy.ppo.aggregation import TRL_MODES

MASK = np.array([[1, 1, 1, 1, 0],
                 [1, 1, 0, 0, 0],
                 [1, 1, 1, 1, 1],
                 [1, 0, 0, 0, 0]], dtype=float)


def check(f, x, analytic):
    report = gradcheck(f, {"logp": x}, {"logp": analytic})
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, "\n".join(bad)


def sequence_inputs(rng, means, spread=0.3):
    """Token log-ratios whose row means are ``means`` exactly (away from every bound)."""
    n = MASK.sum(axis=1).astype(int)
    log_ratio = np.zeros(MASK.shape)
    for i, k in enumerate(n):
        d = rng.uniform(-spread, spread, k)
        log_ratio[i, :k] = means[i] + d - d.mean()
    logp_old = rng.uniform(-3.0, -0.5, MASK.shape)
    logp = np.where(MASK == 1, logp_old + log_ratio, 7.0)  # garbage at padding
    return logp, logp_old


# --------------------------------------------------------------------------------------
# hand values


def test_gspo_hand_values():
    # token log-ratios [0.3, 0.1]: s = exp(0.2) = 1.2214 > 1.2, A = 1: clipped to 1.2 at both
    # tokens, loss -1.2, gradient 0
    loss, stats = ppo_policy_loss([0.3, 0.1], [0.0, 0.0], [1.0, 1.0], importance_level="sequence")
    assert loss == pytest.approx(-1.2, abs=1e-15)
    assert stats["clipfrac_active"] == 1.0
    assert stats["ratio_mean"] == pytest.approx(np.exp(0.2), rel=1e-15)
    d = policy_loss_grad([0.3, 0.1], [0.0, 0.0], [1.0, 1.0], importance_level="sequence")
    assert d.tolist() == [0.0, 0.0]
    # [0.1, -0.1]: s = 1, unclipped; loss = -(1/2)(s + s) = -s; ds/dlogp_t = s / 2, so
    # d loss / d logp_t = -1/2 at each token
    loss, _ = ppo_policy_loss([0.1, -0.1], [0.0, 0.0], [1.0, 1.0], importance_level="sequence")
    assert loss == pytest.approx(-1.0, abs=1e-15)
    d = policy_loss_grad([0.1, -0.1], [0.0, 0.0], [1.0, 1.0], importance_level="sequence")
    np.testing.assert_allclose(d, [-0.5, -0.5], rtol=1e-15)


def test_sequence_ratio_by_hand():
    # rows: log-ratios [0.3, 0.1, pad] -> exp(0.2); [-0.4] -> exp(-0.4)
    s = probability_ratio([[0.3, 0.1, 9.0], [-0.4, 9.0, 9.0]], np.zeros((2, 3)),
                          [[1, 1, 0], [1, 0, 0]], level="sequence")
    np.testing.assert_allclose(s, [[np.exp(0.2), np.exp(0.2), 0.0], [np.exp(-0.4), 0, 0]],
                               rtol=1e-15)


def test_log_ratio_max_caps_the_sequence_log_ratio():
    # verl's GSPO: log s capped at 10. Log-ratios [30, 10] -> mean 20 -> capped at 10; A = -1
    # is clipped below? rho = e^10 > 1 + eps, A < 0 takes rho A (unclipped) = -e^10: the loss
    # e^10, and the gradient 0 (the cap binds)
    loss, _ = ppo_policy_loss([30.0, 10.0], [0.0, 0.0], [-1.0, -1.0],
                              importance_level="sequence", log_ratio_max=10.0)
    assert loss == pytest.approx(np.exp(10.0), rel=1e-15)
    d = policy_loss_grad([30.0, 10.0], [0.0, 0.0], [-1.0, -1.0],
                         importance_level="sequence", log_ratio_max=10.0)
    assert d.tolist() == [0.0, 0.0]


def test_delta_hand_values():
    # TRL's delta = 3, A = -1, eps = 0.2: rho = 4 -> -min(3 (-1), 1.2 (-1)) = 3, constant
    logp = [np.log(4.0)]
    loss, _ = ppo_policy_loss(logp, [0.0], [-1.0], delta=3.0)
    assert loss == pytest.approx(3.0, rel=1e-15)
    assert policy_loss_grad(logp, [0.0], [-1.0], delta=3.0).tolist() == [0.0]
    # rho = 2.5 < delta: unclipped, loss 2.5, d loss / d logp = -w A rho = 2.5
    logp = [np.log(2.5)]
    loss, _ = ppo_policy_loss(logp, [0.0], [-1.0], delta=3.0)
    assert loss == pytest.approx(2.5, rel=1e-15)
    np.testing.assert_allclose(policy_loss_grad(logp, [0.0], [-1.0], delta=3.0), [2.5],
                               rtol=1e-15)
    # A > 0 and delta = 1.1 < 1 + eps: rho = 1.15 is capped at 1.1 (the delta case), loss -1.1
    logp = [np.log(1.15)]
    loss, stats = ppo_policy_loss(logp, [0.0], [1.0], delta=1.1)
    assert loss == pytest.approx(-1.1, rel=1e-15)
    assert policy_loss_grad(logp, [0.0], [1.0], delta=1.1).tolist() == [0.0]
    assert stats["clipfrac_high"] == 0.0  # min(rho, delta) = 1.1 is not above 1.2


def test_cispo_weights_by_hand():
    # rho = 1.5, A = +1, one token, logp = log 0.3: loss = -w A logp, d loss / d logp = -w A
    logp, logp_old = [np.log(0.3)], [np.log(0.2)]
    # TRL (w = min(rho, epsilon_high) with epsilon_high = 5): w = 1.5
    loss, _ = ppo_policy_loss(logp, logp_old, [1.0], loss_type="cispo", cispo_clip="max",
                              epsilon_high=5.0)
    assert loss == pytest.approx(-1.5 * np.log(0.3), rel=1e-14)
    d = policy_loss_grad(logp, logp_old, [1.0], loss_type="cispo", cispo_clip="max",
                         epsilon_high=5.0)
    np.testing.assert_allclose(d, [-1.5], rtol=1e-14)
    # verl (w = clip(rho, 0.8, 1.2)): w = 1.2
    d = policy_loss_grad(logp, logp_old, [1.0], loss_type="cispo")
    np.testing.assert_allclose(d, [-1.2], rtol=1e-14)
    # rho = 0.5: TRL has no lower bound (w = 0.5), verl's is 0.8
    logp_old = [np.log(0.6)]
    d_trl = policy_loss_grad(logp, logp_old, [1.0], loss_type="cispo", cispo_clip="max",
                             epsilon_high=5.0)
    d_verl = policy_loss_grad(logp, logp_old, [1.0], loss_type="cispo")
    np.testing.assert_allclose([d_trl[0], d_verl[0]], [-0.5, -0.8], rtol=1e-14)
    # TRL's default epsilon_high is epsilon itself: w = min(1.5, 0.2) = 0.2
    d = policy_loss_grad([np.log(0.3)], [np.log(0.2)], [1.0], loss_type="cispo",
                         cispo_clip="max")
    np.testing.assert_allclose(d, [-0.2], rtol=1e-14)


def test_trl_normalisations_by_hand():
    # per-token losses [2] and [1, 1, 1], T = 4 (through A with rho = 1: the term is A)
    A = np.array([[2.0, 0, 0, 0], [1.0, 1, 1, 0]])
    m = np.array([[1, 0, 0, 0], [1, 1, 1, 0]], dtype=float)
    want = {"bnpo": 5 / 4, "dapo": 5 / 4, "grpo": (2 / 1 + 3 / 3) / 2, "dr_grpo": 5 / (2 * 4)}
    for mode, value in want.items():
        assert aggregate(A, m, mode) == pytest.approx(value, rel=1e-15), mode
        loss, _ = ppo_policy_loss(np.zeros(A.shape), np.zeros(A.shape), A, m, agg=mode)
        assert loss == pytest.approx(-value, rel=1e-15), mode
    # the second row fully masked (a truncated completion): grpo still counts it in B,
    # dapo divides by the global token count given (4, counted before masking)
    m2 = np.array([[1, 0, 0, 0], [0, 0, 0, 0]], dtype=float)
    assert aggregate(A, m2, "grpo") == pytest.approx(1.0, rel=1e-15)
    assert aggregate(A, m2, "dapo", norm=4) == pytest.approx(0.5, rel=1e-15)
    assert aggregate(A, m2, "bnpo") == pytest.approx(2.0, rel=1e-15)
    assert aggregate(A, m2, "dr_grpo", norm=4) == pytest.approx(2 / 8, rel=1e-15)


def test_kl_term_by_hand():
    # logp = -1, logp_ref = -1.5, k3 = exp(-0.5) - 1 + 0.5 = 0.10653066; beta = 0.1, rho = 1,
    # A = 0: loss = beta k3; d loss / d logp = beta (1 - exp(logp_ref - logp)) = beta (1 - e^-0.5)
    k3 = np.exp(-0.5) - 1 + 0.5
    loss, stats = ppo_policy_loss([-1.0], [-1.0], [0.0], logp_ref=[-1.5], kl_coef=0.1)
    assert loss == pytest.approx(0.1 * k3, rel=1e-14)
    assert stats["kl_ref"] == pytest.approx(k3, rel=1e-14)
    d = policy_loss_grad([-1.0], [-1.0], [0.0], logp_ref=[-1.5], kl_coef=0.1)
    np.testing.assert_allclose(d, [0.1 * (1 - np.exp(-0.5))], rtol=1e-14)
    # verl's low_var_kl clamp at 10: logp_ref - logp = -19 gives k3 = 18 unclamped, 10 clamped
    loss, _ = ppo_policy_loss([-1.0], [-1.0], [0.0], logp_ref=[-20.0], kl_coef=1.0)
    assert loss == pytest.approx(np.exp(-19.0) + 18.0, rel=1e-14)
    loss, _ = ppo_policy_loss([-1.0], [-1.0], [0.0], logp_ref=[-20.0], kl_coef=1.0, kl_clamp=10)
    assert loss == 10.0
    assert policy_loss_grad([-1.0], [-1.0], [0.0], logp_ref=[-20.0], kl_coef=1.0,
                            kl_clamp=10).tolist() == [0.0]


# --------------------------------------------------------------------------------------
# finite differences


SEQUENCE_OPTIONS = [
    {"importance_level": "sequence"},
    {"importance_level": "sequence", "log_ratio_max": 0.1},
    {"importance_level": "sequence", "epsilon_high": 0.28},
]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "grpo", "dr_grpo"])
@pytest.mark.parametrize("opts", SEQUENCE_OPTIONS, ids=lambda o: ",".join(o))
@pytest.mark.parametrize("per_token_A", [False, True])
def test_sequence_level_gradient_matches_finite_differences(agg, opts, per_token_A):
    rng = np.random.default_rng(1)
    # row means: inside the range, above 1 + eps, below 1 - eps, inside (away from bounds,
    # and with log_ratio_max = 0.1 the second row's mean 0.35 is capped)
    logp, logp_old = sequence_inputs(rng, [0.05, 0.35, -0.4, -0.1])
    A = np.array([1.3, 0.7, -0.9, -1.1])[:, None] * np.ones(MASK.shape)
    if per_token_A:
        A = A + rng.normal(0, 0.3, MASK.shape)

    def f(p):
        return ppo_policy_loss(p["logp"], logp_old, A, MASK, agg=agg, **opts)[0]

    d = policy_loss_grad(logp, logp_old, A, MASK, agg=agg, **opts)
    check(f, logp, d)
    assert np.all(d[MASK == 0] == 0.0)
    assert np.any(d != 0.0)


@pytest.mark.parametrize("opts", [
    {"delta": 1.5},
    {"delta": 1.1, "epsilon_high": 0.28},
    {"loss_type": "cispo"},
    {"loss_type": "cispo", "cispo_clip": "max", "epsilon_high": 1.3},
    {"kl_coef": 0.3, "kl_estimator": "k3"},
    {"kl_coef": 0.3, "kl_estimator": "k1", "kl_agg": "token-mean"},
    {"kl_coef": 0.3, "kl_estimator": "k2", "kl_clamp": 0.2},
    {"kl_coef": 0.1, "importance_level": "sequence", "delta": 1.4},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", *TRL_MODES])
def test_loss_form_gradients_match_finite_differences(opts, agg):
    rng = np.random.default_rng(2)
    log_ratio = rng.choice([-0.5, -0.12, 0.0, 0.12, 0.3, 0.6], MASK.shape)
    log_ratio += rng.uniform(-0.03, 0.03, MASK.shape)  # away from every bound by > 0.01
    logp_old = rng.uniform(-3.0, -0.5, MASK.shape)
    logp = np.where(MASK == 1, logp_old + log_ratio, 5.0)
    logp_ref = logp_old + rng.normal(0, 0.4, MASK.shape)
    if "kl_clamp" in opts:  # keep k2 = d^2 / 2 away from its clamp 0.2
        d = logp - logp_ref
        logp_ref = np.where(np.abs(np.abs(d) - np.sqrt(0.4)) < 0.05, logp_ref + 0.2, logp_ref)
    A = rng.normal(0.0, 1.0, MASK.shape)
    A = np.where(np.abs(A) < 0.05, 0.5, A)
    norm = 6.0 if agg in ("dapo", "dr_grpo") else None

    def f(p):
        return ppo_policy_loss(p["logp"], logp_old, A, MASK, agg=agg, norm=norm,
                               logp_ref=logp_ref, **opts)[0]

    if opts.get("loss_type") == "cispo":
        # CISPO's weight is a constant of the gradient (stop-gradient): differentiate
        # -aggregate(w A logp) with w held at its value, written out here
        rho = np.exp(logp - logp_old)
        if opts.get("cispo_clip") == "max":
            w = np.minimum(rho, opts["epsilon_high"])
        else:
            w = np.clip(rho, 0.8, 1 + opts.get("epsilon_high", 0.2))

        def f(p):  # noqa: F811
            return -aggregate(np.where(MASK == 1, w * A * p["logp"], 0.0), MASK, agg,
                              norm=norm)

        assert f({"logp": logp}) == pytest.approx(
            ppo_policy_loss(logp, logp_old, A, MASK, agg=agg, norm=norm, **opts)[0], rel=1e-14)

    d = policy_loss_grad(logp, logp_old, A, MASK, agg=agg, norm=norm, logp_ref=logp_ref, **opts)
    check(f, logp, d)
    assert np.all(d[MASK == 0] == 0.0)


# --------------------------------------------------------------------------------------
# properties and errors


def test_sequence_equals_token_for_one_token_responses():
    rng = np.random.default_rng(3)
    m = np.zeros((6, 4))
    m[:, 0] = 1
    logp, logp_old = rng.normal(-1, 0.3, (2, 6, 4))
    A = rng.normal(0, 1, (6, 4))
    for agg in ("token-mean", "grpo"):
        tok = ppo_policy_loss(logp, logp_old, A, m, agg=agg, epsilon_high=0.3)
        seq = ppo_policy_loss(logp, logp_old, A, m, agg=agg, epsilon_high=0.3,
                              importance_level="sequence")
        assert tok[0] == seq[0]
        np.testing.assert_array_equal(
            policy_loss_grad(logp, logp_old, A, m, agg=agg, epsilon_high=0.3),
            policy_loss_grad(logp, logp_old, A, m, agg=agg, epsilon_high=0.3,
                             importance_level="sequence"))


def test_no_option_of_the_family_changes_ppo():
    rng = np.random.default_rng(4)
    logp, logp_old, A = rng.normal(-1, 0.3, (3, 4, 5))
    base = ppo_policy_loss(logp, logp_old, A)
    same = ppo_policy_loss(logp, logp_old, A, importance_level="token", loss_type="clip",
                           kl_coef=0.0)
    assert base == same


def test_options_object_equals_the_keywords():
    """Keywords are the one way; a whole PolicyLossOptions still works, deprecated."""
    rng = np.random.default_rng(5)
    logp, logp_old, A = rng.normal(-1, 0.3, (3, 4, 5))
    opts = PolicyLossOptions(agg="grpo", importance_level="sequence", delta=1.5)
    with pytest.warns(DeprecationWarning, match="pass the options as keywords"):
        old = ppo_policy_loss(logp, logp_old, A, options=opts)
    assert old == ppo_policy_loss(logp, logp_old, A, agg="grpo", importance_level="sequence",
                                  delta=1.5)
    with pytest.warns(DeprecationWarning), pytest.raises(
            ValueError, match="options: pass the loss options as keywords, not both ways"):
        ppo_policy_loss(logp, logp_old, A, options=opts, delta=2.0)


@pytest.mark.parametrize("kwargs, pattern", [
    ({"importance_level": "seq"},
     r"^importance_level: unknown level 'seq'; valid ones are token, sequence"),
    ({"loss_type": "ppo"}, r"^loss_type: unknown loss type 'ppo'; valid ones are clip, cispo"),
    ({"loss_type": "cispo", "dual_clip": 3.0}, r"^loss_type: 'cispo' takes no dual_clip"),
    ({"cispo_clip": "min"},
     r"^cispo_clip: unknown CISPO clip 'min'; valid ones are range, max"),
    ({"delta": 0.0}, r"^delta: must be > 0"),
    ({"kl_coef": -1.0}, r"^kl_coef: must be >= 0"),
    ({"kl_coef": 0.1}, r"^logp_ref: the KL term of the loss"),
    ({"kl_estimator": "k4"},
     r"^kl_estimator: unknown estimator 'k4'; valid ones are k1, k2, k3, abs"),
    ({"kl_agg": "mean"}, r"^kl_agg: unknown aggregation mode 'mean'"),
    ({"agg": "dapo", "norm": -1}, r"^norm: must be > 0"),
    ({"unknown_option": 1}, r"^unknown_option: not a policy-loss option; valid ones are eps"),
])
def test_bad_options_name_the_argument(kwargs, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        ppo_policy_loss([-1.0, -2.0], [-1.0, -2.0], [1.0, 0.5], **kwargs)
