"""The KL term's gradient forms (ppo_numpy.ppo.kl_gradient) on (B, T) batches.

Independent checks: each form's d value / d logp against centered finite differences of the
function the framework differentiates, written out here (plain: k; ratio: k rho; verl's
straight-through: k2; OpenRLHF's: w k2 with w a constant), for every estimator, with padding
and a clamp; the hand values of the docstring at logp - logp_ref = 0.5; the on-policy
identity (every form but the plain one gives d = logp - logp_ref per token); the estimator
table against ppo_numpy.ppo.kl's kernels bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ppo_numpy import KL_ESTIMATORS
from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.ppo.kl import kl_estimate_grad_kernel, kl_estimate_kernel
from ppo_numpy.ppo.kl_gradient import FORMS, estimator_terms, kl_term_and_grad

MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=bool)
RTOL = 1e-6


def inputs(rng, spread=1.0):
    """logp, logp_ref, logp_old (3, 4), with d = logp - logp_ref away from 0 (abs's kink)."""
    logp = rng.uniform(-3, -0.1, MASK.shape)
    d = rng.uniform(0.05, spread, MASK.shape) * rng.choice([-1, 1], MASK.shape)
    logp_old = logp + rng.uniform(-0.5, 0.5, MASK.shape)
    return logp, logp - d, logp_old


def k_of(d, estimator):
    """The estimators written out (the docstring of ppo_numpy.ppo.kl), for the references."""
    return {"k1": d, "k2": d**2 / 2, "k3": np.exp(-d) - 1 + d, "abs": np.abs(d)}[estimator]


def surrogate(form, estimator, logp, logp_ref, logp_old, logp_at, bound, clamp=None):
    """The function each framework differentiates, summed over the response tokens.

    ``logp_at`` is the point of the check: OpenRLHF's weight w = min(rho, bound) is computed
    there and held constant (``.detach()``), as its ``compute_approx_kl`` does.
    """
    d = logp - logp_ref
    k = k_of(d, estimator)
    if clamp is not None:
        k = np.clip(k, -clamp, clamp)
    rho = np.exp(logp - logp_old)
    if form == "plain":
        s = k
    elif form == "ratio":
        s = k * rho
    elif form == "straight_through":
        s = d**2 / 2
    else:
        w = np.exp(logp_at - logp_old)
        s = (w if bound is None else np.minimum(w, bound)) * d**2 / 2
    return float(s[MASK].sum())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_each_form_against_finite_differences(form, estimator):
    rng = np.random.default_rng(38)
    logp, logp_ref, logp_old = inputs(rng)
    # w = exp(logp - logp_old) ranges over [0.6, 1.65]: a bound of 1.2 binds on some tokens
    bound = 1.2
    _, dlogp = kl_term_and_grad(logp, logp_ref, estimator, form, MASK, logp_old=logp_old,
                                bound=bound)
    f = lambda p: surrogate(form, estimator, p["logp"], logp_ref, logp_old, logp, bound)  # noqa: E731
    report = gradcheck(f, {"logp": logp}, {"logp": dlogp})
    assert report["logp"].close, str(report["logp"])
    assert np.all(dlogp[~MASK] == 0)


@pytest.mark.parametrize("form", ("plain", "ratio", "straight_through", "importance"))
def test_clamp_cuts_the_plain_and_ratio_gradients_only(form):
    # k3 with |d| up to 3: k3 = e^-d - 1 + d reaches 17; clamp 1.5, away from the kink
    rng = np.random.default_rng(7)
    logp, logp_ref, logp_old = inputs(rng, spread=3.0)
    k = k_of(logp - logp_ref, "k3")
    ok = np.abs(k - 1.5) > 1e-3
    logp_ref = np.where(ok, logp_ref, logp_ref - 0.01)
    value, dlogp = kl_term_and_grad(logp, logp_ref, "k3", form, MASK, logp_old=logp_old,
                                    bound=None, clamp=1.5)
    f = lambda p: surrogate(form, "k3", p["logp"], logp_ref, logp_old, logp, None, 1.5)  # noqa: E731
    report = gradcheck(f, {"logp": logp}, {"logp": dlogp})
    assert report["logp"].close, str(report["logp"])
    clamped = MASK & (k_of(logp - logp_ref, "k3") > 1.5)
    assert clamped.any()
    rho = np.exp(logp - logp_old)
    want = 1.5 * (rho if form == "ratio" else 1.0)
    np.testing.assert_allclose(value[clamped], np.broadcast_to(want, MASK.shape)[clamped],
                               rtol=1e-15)


def test_hand_values_at_half():
    # logp - logp_ref = 0.5: k3 = e^-0.5 - 1 + 0.5, its derivative 1 - e^-0.5; on-policy the
    # other forms give d = 0.5. Off-policy rho = e^0.5: ratio multiplies by it (value and
    # gradient: rho (1 - r + r - 1 + d) = rho d); importance bounded at 1.2 gives 0.6.
    k3, dk3 = math.exp(-0.5) - 0.5, 1 - math.exp(-0.5)
    want = {"plain": (k3, dk3), "ratio": (k3, 0.5), "straight_through": (k3, 0.5),
            "importance": (k3, 0.5)}
    for form, (v, g) in want.items():
        value, dlogp = kl_term_and_grad([0.0], [-0.5], "k3", form)
        assert math.isclose(value[0], v, rel_tol=1e-15) and math.isclose(dlogp[0], g,
                                                                          rel_tol=1e-15)
    rho = math.exp(0.5)
    value, dlogp = kl_term_and_grad([0.0], [-0.5], "k3", "ratio", logp_old=[-0.5])
    assert math.isclose(value[0], k3 * rho, rel_tol=1e-14)
    assert math.isclose(dlogp[0], 0.5 * rho, rel_tol=1e-14)
    value, dlogp = kl_term_and_grad([0.0], [-0.5], "k3", "importance", logp_old=[-0.5],
                                    bound=1.2)
    assert math.isclose(value[0], k3, rel_tol=1e-15) and math.isclose(dlogp[0], 0.6,
                                                                       rel_tol=1e-15)
    # unbounded: the weight is rho itself; no logp_old: w = 1 (OpenRLHF without old log-probs)
    assert math.isclose(kl_term_and_grad([0.0], [-0.5], "k3", "importance", logp_old=[-0.5],
                                         bound=None)[1][0], 0.5 * rho, rel_tol=1e-15)


def test_on_policy_every_form_but_plain_gives_d_per_token():
    """docs/derivations.md section 13: on-policy (rho = 1 in value) the ratio-weighted k3,
    verl's straight-through forms, OpenRLHF's importance forms and the plain k2 all give the
    per-token gradient d = logp - logp_ref."""
    rng = np.random.default_rng(3)
    logp, logp_ref, _ = inputs(rng)
    d = np.where(MASK, logp - logp_ref, 0.0)
    # the ratio form computes rho (k3' + k3) = (1 - r) + (r - 1 + d): a few ulps of the
    # terms r = exp(-d) <= e^1 and |d| <= 1 apart from d
    tol = 8 * np.finfo(float).eps * 3
    cases = [("k3", "ratio"), ("k1", "ratio"), ("k2", "plain")]
    cases += [(e, f) for e in KL_ESTIMATORS for f in ("straight_through", "importance")]
    for estimator, form in cases:
        for logp_old in (None, logp):
            _, dlogp = kl_term_and_grad(logp, logp_ref, estimator, form, MASK,
                                        logp_old=logp_old)
            if estimator == "k1" and form == "ratio":
                # k1 rho: rho (1 + d), the 1 averages out only in expectation
                np.testing.assert_allclose(dlogp[MASK], 1 + d[MASK], rtol=0, atol=tol)
            else:
                np.testing.assert_allclose(dlogp, d, rtol=0, atol=tol,
                                           err_msg=f"{estimator} {form}")
    # ... and the plain k3 does not: 1 - r
    _, dlogp = kl_term_and_grad(logp, logp_ref, "k3", "plain", MASK)
    np.testing.assert_allclose(dlogp[MASK], 1 - np.exp(-d[MASK]), rtol=1e-14)


def test_ratio_weighted_k3_is_rho_d_at_every_point():
    rng = np.random.default_rng(4)
    logp, logp_ref, logp_old = inputs(rng)
    _, dlogp = kl_term_and_grad(logp, logp_ref, "k3", "ratio", MASK, logp_old=logp_old)
    rho_d = np.exp(logp - logp_old) * (logp - logp_ref)
    np.testing.assert_allclose(dlogp[MASK], rho_d[MASK], rtol=0, atol=1e-15 * 20)


def test_values_of_the_forms():
    rng = np.random.default_rng(5)
    logp, logp_ref, logp_old = inputs(rng)
    for estimator in KL_ESTIMATORS:
        k = np.where(MASK, k_of(logp - logp_ref, estimator), 0.0)
        for form in FORMS:
            value, _ = kl_term_and_grad(logp, logp_ref, estimator, form, MASK,
                                        logp_old=logp_old)
            want = k * np.exp(logp - logp_old) if form == "ratio" else k
            np.testing.assert_allclose(value, np.where(MASK, want, 0.0), rtol=1e-14, atol=0)


def test_estimator_terms_are_the_kl_kernels_bit_for_bit():
    rng = np.random.default_rng(6)
    d = rng.normal(0, 2, 1000)
    d[:3] = 0.0
    logp, logp_ref = rng.normal(-2, 1, 1000), None
    logp_ref = logp - d
    d = logp - logp_ref  # the kernels' own d
    m = np.ones(1000, dtype=bool)
    for estimator in KL_ESTIMATORS:
        k, dk = estimator_terms(d, np.expm1(-d), estimator)
        assert np.array_equal(k, kl_estimate_kernel(logp, logp_ref, estimator)), estimator
        assert np.array_equal(dk, kl_estimate_grad_kernel(logp, logp_ref, estimator, m))


def test_padding_inputs_untouched_and_shapes():
    logp = np.array([[-1.0, -2.0, np.nan]])
    logp_ref = np.array([[-1.5, -1.0, np.inf]])
    logp_old = np.array([[-1.2, -2.0, 0.0]])
    mask = np.array([[1, 1, 0]])
    copies = [a.copy() for a in (logp, logp_ref, logp_old)]
    for form in FORMS:
        value, dlogp = kl_term_and_grad(logp, logp_ref, "k3", form, mask, logp_old=logp_old)
        assert value.shape == dlogp.shape == (1, 3)
        assert value[0, 2] == 0 and dlogp[0, 2] == 0 and np.isfinite(value).all()
    for a, c in zip((logp, logp_ref, logp_old), copies):
        np.testing.assert_array_equal(a, c)
    value, dlogp = kl_term_and_grad([-1.0, -2.0], [-1.5, -1.0], "k1")
    assert value.shape == (2,) and np.array_equal(dlogp, [1.0, 1.0])


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(bound=0.5, form="importance"), ValueError, "bound: must be >= 1"),
    (dict(bound=0.999), ValueError, "bound: must be >= 1"),
    (dict(bound="10"), TypeError, "bound: expected a real number"),
    (dict(form="k3+"), ValueError, "form: unknown gradient form 'k3+'; valid ones are plain"),
    (dict(estimator="low_var_kl"), ValueError, "estimator: unknown estimator"),
    (dict(logp_old=[0.0, 0.0]), ValueError, "logp_old: shape (2,) does not match logp"),
    (dict(clamp=0), ValueError, "clamp: must be > 0"),
    (dict(logp_old=[np.nan]), ValueError, "logp_old: non-finite value"),
])
def test_bad_input_names_the_argument(kwargs, error, message):
    args = dict(logp=[0.0], logp_ref=[-0.5], estimator="k3", form="plain")
    args.update(kwargs)
    with pytest.raises(error) as err:
        kl_term_and_grad(**args)
    assert message in str(err.value), str(err.value)


# ---------------------------------------------------------------- in the loss of a toy policy


@pytest.mark.parametrize("form", FORMS)
def test_policy_parameters_against_differences_of_what_is_differentiated(form):
    """ppo_loss_and_grads(..., kl_gradient=form): every parameter's gradient against finite
    differences of the loss without the KL term plus the KL surrogate of the form (the
    function the framework differentiates, written out above), with a weight bound that cuts
    some tokens."""
    from ppo_numpy.models import BOS, MLPPolicy, evaluate, ppo_loss_and_grads, sample
    from ppo_numpy.ppo.aggregation import aggregation_weights

    model = MLPPolicy(7, 3, 4, 6, np.random.default_rng(0), max_len=8)
    rng = np.random.default_rng(1)
    prompts = np.array([[BOS, 3], [BOS, 4], [BOS, 5], [BOS, 6]])
    r = sample(model, prompts, rng, 5)
    m = r.mask.astype(bool)
    batch = dict(prompts=prompts, responses=r.responses, mask=r.mask,
                 logp_old=r.logp - rng.uniform(-0.4, 0.4, m.shape), old_values=r.values,
                 advantages=np.zeros(m.shape), returns=r.values,
                 logp_ref=r.logp + rng.uniform(0.1, 0.6, m.shape) * rng.choice([-1, 1], m.shape))
    kw = dict(c_v=0.0, agg="seq-mean-token-mean", kl_coef=0.5, kl_estimator="k3",
              kl_gradient=form, kl_is_bound=1.1)
    _, grads, _ = ppo_loss_and_grads(model, batch, **kw)
    w_agg = aggregation_weights(m, "seq-mean-token-mean")
    logp0 = r.logp

    def f(p):
        logp = evaluate(model, prompts, r.responses, r.mask, params=p).logp
        d = logp - batch["logp_ref"]
        k3 = np.exp(-d) - 1 + d
        rho = np.exp(logp - batch["logp_old"])
        w = np.minimum(np.exp(logp0 - batch["logp_old"]), 1.1)  # held at the check's point
        s = {"plain": k3, "ratio": k3 * rho, "straight_through": d**2 / 2,
             "importance": w * d**2 / 2}[form]
        return 0.5 * float((w_agg * np.where(m, s, 0.0)).sum())

    report = gradcheck(f, model.params, grads, n_coords=8, rng=np.random.default_rng(2))
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, "\n".join(bad)
    assert (np.exp(logp0 - batch["logp_old"])[m] > 1.1).any()  # the bound cuts


def test_the_loop_passes_the_form(monkeypatch):
    from ppo_numpy.training import loop
    from ppo_numpy.training.config import PPOConfig

    seen = []
    real = loop.loss_and_grads_kernel

    def spy(model, batch, opts, **kw):
        seen.append(opts)
        return real(model, batch, opts, **kw)

    monkeypatch.setattr(loop, "loss_and_grads_kernel", spy)
    config = PPOConfig(iterations=1, warmup_steps=5, batch_size=8, minibatches=2, epochs=1,
                       beta=0.0, kl_loss_coef=0.1, kl_loss_gradient="importance",
                       kl_loss_is_bound=None)
    loop.ppo_iteration(loop.new_run(config))
    assert (seen[0].kl_gradient, seen[0].kl_is_bound, seen[0].kl_coef) == ("importance", None,
                                                                            0.1)


@pytest.mark.parametrize("fields, message", [
    (dict(kl_loss_is_bound=0.5), "kl_loss_is_bound: must be >= 1 or None"),
    (dict(kl_loss_gradient="k3+"), "kl_loss_gradient: unknown"),
    (dict(kl_loss_gradient="ratio", importance_level="sequence"),
     "kl_loss_gradient: 'ratio' is written for importance_level='token'"),
])
def test_config_errors_name_the_field(fields, message):
    from ppo_numpy.training.config import PPOConfig

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PPOConfig(**fields)


def test_the_per_token_forms_are_the_same_at_the_sequence_level():
    """straight_through and importance read no sequence ratio: verl adds its KL loss apart
    from the policy loss of any loss_mode (gspo included), OpenRLHF weights it by the token
    ratio whatever policy_loss_type. One response of two tokens, A = 0 (no policy term),
    beta 1, token mean (weight 1/2): rho = (2, 1/2), d = logp - logp_ref = (1/2, -1/2)."""
    from ppo_numpy.grads.loss_grads import policy_loss_and_grad

    logp_old = np.array([[-1.0, -1.5]])
    logp = logp_old + np.log([2.0, 0.5])
    ref = logp - np.array([0.5, -0.5])
    d = logp - ref  # (1/2, -1/2) within an ulp of logp's size
    A = np.zeros((1, 2))
    # value: mean of k3 = e^-d - 1 + d: (e^-1/2 + e^1/2 - 2) / 2
    k3_mean = (math.exp(-0.5) + math.exp(0.5) - 2) / 2
    want = {"straight_through": 0.5 * d,  # (1/2) d: k2's gradient
            # (1/2) min(rho, 1.5) d: the bound 1.5 cuts the first token's weight 2
            "importance": 0.5 * np.array([[1.5, 0.5]]) * d}
    for form, grad in want.items():
        for level in ("token", "sequence"):
            loss, _, dlogp = policy_loss_and_grad(logp, logp_old, A, logp_ref=ref, kl_coef=1.0,
                                                  kl_gradient=form, kl_is_bound=1.5,
                                                  importance_level=level)
            assert loss == pytest.approx(k3_mean, rel=1e-14), (form, level)
            # (d = 0.5 carries the rounding of logp - ref, |logp| <= 2: 4 ulps of 2)
            np.testing.assert_allclose(dlogp, grad, rtol=0, atol=4 * 2 * np.finfo(float).eps,
                                       err_msg=f"{form} {level}")


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(kl_is_bound=0.9), ValueError, "kl_is_bound: must be >= 1"),
    (dict(kl_is_bound=-1.0), ValueError, "kl_is_bound: must be >= 1"),
    (dict(kl_is_bound="10"), TypeError, "kl_is_bound: expected a real number"),
    (dict(kl_gradient="k3+"), ValueError, "kl_gradient: unknown gradient form 'k3+'"),
])
def test_policy_loss_options_name_a_bad_kl_field(kwargs, error, message):
    from ppo_numpy import PolicyLossOptions, policy_loss_and_grad

    with pytest.raises(error) as err:
        PolicyLossOptions(**kwargs)
    assert message in str(err.value), str(err.value)
    # the public loss says the same (its options are built from its keywords)
    with pytest.raises(error) as err:
        policy_loss_and_grad([[0.0]], [[0.0]], [[1.0]], logp_ref=[[-0.1]], kl_coef=0.1,
                             **kwargs)
    assert message in str(err.value), str(err.value)
    # a bound of 1 is the smallest (on-policy every weight is 1), None no bound
    assert PolicyLossOptions(kl_is_bound=1).kl_is_bound == 1.0
    assert PolicyLossOptions(kl_is_bound=None).kl_is_bound is None
