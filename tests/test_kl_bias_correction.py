"""The KL term's importance-sampling correction (issue 34): TRL 1.16.0's
``use_bias_correction_kl`` (default True) multiplies the per-token k3 by the ratio coef_1, the
token ratio or the sequence ratio, before ``delta`` clamps it, and differentiates through it
(trl/trainer/grpo_trainer.py ``_compute_loss``: ``per_token_kl = per_token_kl * coef_1``).
ppo_numpy: ``kl_gradient="ratio"`` of the policy loss; preset ``trl-grpo``'s
``use_bias_correction_kl``.

Expectations: hand values (docs/conventions.md section 16's worked example) and central
finite differences of the loss value in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ppo_numpy.grads.loss_grads import policy_loss_and_grad
from ppo_numpy.oracle.group_cases import generate_group_cases
from ppo_numpy.oracle.presets import get_preset


def test_at_ratio_one_the_correction_adds_the_kl_itself_to_the_gradient():
    # one response of two tokens, pi_theta = pi_old (rho = 1), A = 0, beta = 1, token mean;
    # d = logp - logp_ref = ln 2 at both tokens: k3 = e^-d + d - 1 = ln 2 - 1/2 and
    # dk3/dd = 1 - e^-d = 1/2. The corrected term is k3 rho with d rho / d logp = rho = 1:
    # dlogp = (1/2) (1/2 + k3) = (1/2) ln 2 per token, against (1/2)(1/2) without it.
    logp = np.array([[-1.0, -2.0]])
    ref = logp - math.log(2)
    A = np.zeros((1, 2))
    k3 = math.log(2) - 0.5
    for level in ("token", "sequence"):
        loss, stats, d = policy_loss_and_grad(logp, logp, A, logp_ref=ref, kl_coef=1.0,
                                              kl_gradient="ratio", importance_level=level)
        assert loss == pytest.approx(k3, rel=1e-15)
        # (at the sequence level each token gets s/n times the row's sum of w_u k3_u: the
        # same (1/2)(2 k3 / 2) = k3 / 2 here, plus the KL's own (1/2)(1/2))
        np.testing.assert_allclose(d, [[0.5 * math.log(2)] * 2], rtol=1e-15)
    _, _, d0 = policy_loss_and_grad(logp, logp, A, logp_ref=ref, kl_coef=1.0)
    np.testing.assert_allclose(d0, [[0.25, 0.25]], rtol=1e-15)


def test_the_sequence_ratio_spreads_the_kl_over_the_response():
    # rho = (2, 1/2): the sequence ratio is exp((ln 2 - ln 2)/2) = 1, the token ratios are
    # not. KL_t r_t summed and meaned: token level sum(k3_t rho_t)/2, sequence level
    # sum(k3_t)/2. k3 at d = 0 and d = ln 2: 0 and ln 2 - 1/2.
    logp_old = np.array([[-1.0, -1.0]])
    logp = logp_old + np.log([2.0, 0.5])
    ref = logp - np.array([0.0, math.log(2)])
    A = np.zeros((1, 2))
    k3 = np.array([0.0, math.log(2) - 0.5])
    tok, _, _ = policy_loss_and_grad(logp, logp_old, A, logp_ref=ref, kl_coef=1.0,
                                     kl_gradient="ratio")
    seq, _, d = policy_loss_and_grad(logp, logp_old, A, logp_ref=ref, kl_coef=1.0,
                                     kl_gradient="ratio", importance_level="sequence")
    assert tok == pytest.approx((k3 * [2.0, 0.5]).sum() / 2, rel=1e-14)
    assert seq == pytest.approx(k3.sum() / 2, rel=1e-14)
    # d/dlogp_t: (1/2)(s dk3_t + (s/2) sum_u k3_u), dk3 = (0, 1/2), s = 1
    np.testing.assert_allclose(d, [[0.5 * (0.0 + k3.sum() / 2), 0.5 * (0.5 + k3.sum() / 2)]],
                               rtol=1e-13)


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("agg", ["token-mean", "grpo", "dapo"])
def test_the_gradient_by_finite_differences(level, agg):
    rng = np.random.default_rng([34, len(agg), len(level)])
    B, T = 3, 5
    m = np.arange(T)[None, :] < np.array([[5], [3], [4]])
    logp_old = rng.normal(-1.0, 0.5, (B, T))
    logp = logp_old + rng.normal(0.0, 0.3, (B, T))
    ref = logp + rng.normal(0.0, 0.4, (B, T))
    A = np.repeat(rng.normal(0.0, 1.0, (B, 1)), T, axis=1)
    opts = dict(kl_coef=0.3, kl_gradient="ratio", importance_level=level, agg=agg, delta=1.4,
                epsilon=0.2, epsilon_high=0.28)

    def loss(x):
        # (the reference's log-probs move with logp: d = logp - ref fixed would hide the
        # KL's own gradient, so ref is held and logp moved)
        return policy_loss_and_grad(x, logp_old, A, m, logp_ref=ref, **opts)[0]

    _, _, d = policy_loss_and_grad(logp, logp_old, A, m, logp_ref=ref, **opts)
    h = 1e-6
    num = np.zeros_like(logp)
    for idx in zip(*np.nonzero(m)):
        e = np.zeros_like(logp)
        e[idx] = h
        num[idx] = (loss(logp + e) - loss(logp - e)) / (2 * h)
    # away from the clip's kinks (the draws keep every ratio off the bounds by > 1e-4)
    err = np.abs(d - num)[m] / np.maximum(np.abs(num[m]), 1e-3)
    assert err.max() < 1e-6, (d, num)


def test_trl_grpo_defaults_to_the_correction_on_the_kl_case():
    # the numbers on kl-in-loss (beta 0.04): TRL 1.16.0 -0.096402, the preset
    # without the correction -0.095772
    preset = get_preset("trl-grpo")
    assert preset.defaults["use_bias_correction_kl"] is True
    case = generate_group_cases(0, ["kl-in-loss"], preset="trl-grpo")[0]
    assert preset(case)["policy_loss"] == pytest.approx(-0.096402, abs=5e-7)
    assert preset(case, use_bias_correction_kl=False)["policy_loss"] == \
        pytest.approx(-0.095772, abs=5e-7)
    with pytest.raises(TypeError, match="use_bias_correction_kl"):
        preset(case, use_bias_correction_kl="yes")


def test_kl_gradient_and_its_ratio_level_are_checked():
    with pytest.raises(ValueError, match="kl_gradient"):
        policy_loss_and_grad([0.0], [0.0], [1.0], logp_ref=[0.0], kl_coef=0.1,
                             kl_gradient="row")
    with pytest.raises(ValueError, match="kl_ratio_level"):
        policy_loss_and_grad([0.0], [0.0], [1.0], logp_ref=[0.0], kl_coef=0.1,
                             kl_gradient="ratio", kl_ratio_level="row")


def test_the_ratio_level_may_differ_from_the_importance_level():
    # TRL's VESPO: its weight per token, the KL times the sequence ratio. rho = (2, 1/2),
    # s = 1: with kl_ratio_level="sequence" the token-level loss's KL term is sum(k3_t)/2
    logp_old = np.array([[-1.0, -1.0]])
    logp = logp_old + np.log([2.0, 0.5])
    ref = logp - np.array([0.0, math.log(2)])
    k3 = np.array([0.0, math.log(2) - 0.5])
    A = np.zeros((1, 2))
    loss, _, _ = policy_loss_and_grad(logp, logp_old, A, logp_ref=ref, kl_coef=1.0,
                                      kl_gradient="ratio", kl_ratio_level="sequence")
    assert loss == pytest.approx(k3.sum() / 2, rel=1e-14)
