"""The policy-loss family is a table: a new loss type is one module and one table entry.

A toy loss, written here and registered from the test (the package is not touched), runs
through the public ``ppo_policy_loss`` and ``policy_loss_grad``: its value against a hand
calculation, its gradient against centered finite differences in float64 (rel. err < 1e-6)
at the token and the sequence level, with importance weights and a KL term around it (the
frame's work, written once for every member).

The toy term is t(rho) A = 2 (sqrt(rho) - 1) A, with dt/drho = A / sqrt(rho): smooth, no kink.
"""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy import PolicyLossOptions, aggregate, policy_loss_grad, ppo_policy_loss
from ppo_numpy.family.losses import LOSSES, Loss, register
from ppo_numpy.grads.gradcheck import numerical_grad
from ppo_numpy.ppo.ratio import loss_ratio_backward


def toy_forward(logp, logp_old, f, A, m, opts, is_weights):
    # 2 (sqrt(rho) - 1) A
    return np.where(m, 2.0 * (np.sqrt(f.rho) - 1.0) * A, 0.0), is_weights, None


def toy_backward(f, dterm, A, m, opts):
    # d term / d rho = A / sqrt(rho); rho = exp(log w): d log w = d rho * rho
    drho = dterm * np.where(m, A / np.sqrt(np.where(m, f.rho, 1.0)), 0.0)
    dlogp = loss_ratio_backward(drho * f.rho, f, m, opts)
    return dlogp if f.is_weights is None else dlogp * f.is_weights


def toy_stats(f, A, m, opts):
    return {"toy_sqrt_rho_mean": float(np.sqrt(f.rho)[m].mean())}


TOY = Loss(toy_forward, toy_backward, stats=toy_stats)


@pytest.fixture
def toy():
    """The toy loss registered under "toy" for one test (taken out of the table after)."""
    register("toy", TOY)
    yield "toy"
    del LOSSES["toy"]


def batch(seed=0, B=3, T=5):
    rng = np.random.default_rng(seed)
    m = np.arange(T)[None, :] < np.array([5, 3, 1])[:, None]
    logp = np.where(m, rng.normal(-1.0, 0.3, (B, T)), 0.0)
    logp_old = np.where(m, logp + rng.normal(0.0, 0.2, (B, T)), 0.0)
    A = np.where(m, rng.normal(0.0, 1.0, (B, T)), 0.0)
    ref = np.where(m, logp + rng.normal(0.0, 0.3, (B, T)), 0.0)
    w = np.where(m, rng.uniform(0.5, 1.5, (B, T)), 0.0)
    return logp, logp_old, A, m.astype(float), ref, w


def test_toy_loss_value_by_hand(toy):
    # rho = [4, 1/4], A = [1, -2], token-mean: terms 2 (2 - 1) 1 = 2 and 2 (1/2 - 1) (-2) = 2;
    # the loss is -(2 + 2) / 2 = -2
    loss, stats = ppo_policy_loss(np.log([4.0, 0.25]), [0.0, 0.0], [1.0, -2.0],
                                  loss_type=toy)
    assert loss == pytest.approx(-2.0, rel=1e-15)
    assert stats["toy_sqrt_rho_mean"] == pytest.approx(1.25, rel=1e-15)  # (2 + 1/2) / 2
    assert stats["clipfrac_active"] == 0.0  # the toy has no clip rule


def test_toy_loss_value_is_the_aggregate_of_its_terms(toy):
    logp, logp_old, A, m, _, w = batch()
    rho = np.exp(logp - logp_old)
    terms = w * 2.0 * (np.sqrt(rho) - 1.0) * A
    loss, _ = ppo_policy_loss(logp, logp_old, A, m, agg="seq-mean-token-mean", loss_type=toy,
                              is_weights=w)
    assert loss == pytest.approx(-aggregate(terms, m, "seq-mean-token-mean"), rel=1e-13)


@pytest.mark.parametrize("options", [
    dict(agg="token-mean"),
    dict(agg="grpo", importance_level="sequence"),
    dict(agg="grpo", importance_level="sequence", sequence_gradient="token"),
    dict(agg="dapo", log_ratio_clamp=0.5),
    dict(agg="token-mean", kl_coef=0.1, kl_estimator="k3"),
    dict(agg="token-mean", kl_coef=0.1, kl_gradient="ratio"),
], ids=["token", "sequence", "sequence-token-gradient", "clamp", "kl", "kl-ratio"])
@pytest.mark.parametrize("weighted", [False, True], ids=["", "is_weights"])
def test_toy_loss_gradient_by_finite_differences(toy, options, weighted):
    logp, logp_old, A, m, ref, w = batch(1)
    w = w if weighted else None
    if options.get("sequence_gradient") == "token":
        # verl's per-token form is not the derivative of the loss value: only with one
        # advantage and one weight per response do the two agree (ppo_policy_loss's docstring)
        A = np.where(m > 0, A[:, :1], 0.0)
        w = None
    elif w is not None and options.get("importance_level") == "sequence":
        # the same form: weights that vary along a response reach their own token only, which
        # is the derivative of the loss value for weights constant along each response
        w = np.where(m > 0, w[:, :1], 0.0)
    kw = dict(loss_type=toy, is_weights=w, **options)
    if "kl_coef" in options:
        kw["logp_ref"] = ref
    got = policy_loss_grad(logp, logp_old, A, m, **kw)

    def loss(p):
        return ppo_policy_loss(p["logp"], logp_old, A, m, **kw)[0]

    want = numerical_grad(loss, {"logp": logp}, "logp", h=1e-6)
    want = np.where(m > 0, want, 0.0)  # (the loss does not read logp at padding)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-12)
    assert err < 1e-6, (got, want)
    assert np.all(got[m == 0] == 0.0)


def test_an_unregistered_name_is_an_error_that_lists_the_table():
    with pytest.raises(ValueError, match="loss_type: .*'toy'.*clip"):
        PolicyLossOptions(loss_type="toy")


def test_register_refuses_a_taken_name_and_a_non_loss():
    with pytest.raises(ValueError, match="name"):
        register("clip", TOY)
    with pytest.raises(TypeError, match="Loss"):
        register("toy2", object())


def test_every_member_of_the_table_is_a_loss_with_both_halves():
    for name, loss in LOSSES.items():
        assert isinstance(loss, Loss), name
        assert callable(loss.forward) and callable(loss.backward), name


def test_an_algorithm_by_its_own_name_is_the_clip_member_with_its_fields():
    logp, logp_old, A, m, _, _ = batch(2)
    for name, fields in (("gspo", dict(importance_level="sequence")),
                         ("luspo", dict(importance_level="sequence", agg="luspo")),
                         ("dr_grpo", dict(agg="dr_grpo"))):
        by_name = ppo_policy_loss(logp, logp_old, A, m, loss_type=name)
        by_fields = ppo_policy_loss(logp, logp_old, A, m, **fields)
        # the same options object, so the same arithmetic: the same bits
        assert by_name == by_fields, name
        assert PolicyLossOptions(loss_type=name) == PolicyLossOptions(**fields)
    # a field given another value than the name's (and than its default) is an error
    with pytest.raises(ValueError, match="agg: loss_type='luspo' sets agg='luspo'; got 'grpo'"):
        PolicyLossOptions(loss_type="luspo", agg="grpo")
    # a field that agrees with the name is fine
    assert PolicyLossOptions(loss_type="luspo", agg="luspo").agg == "luspo"
