"""The combined PPO loss of a toy policy: every parameter, every term, every aggregation mode,
against centered finite differences of the loss itself (float64, relative error < 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy import AGGREGATION_MODES, aggregate, kl_estimate, log_softmax, value_loss
from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.models import BOS, BigramPolicy, MLPPolicy, evaluate, ppo_loss_and_grads, sample
from ppo_numpy.models.loss import logits_grad_from_logp

EPS, EPS_HIGH, DUAL, VCLIP, TEMP = 0.2, 0.28, 1.8, 0.2, 0.8


def mlp():
    return MLPPolicy(7, 3, 4, 6, np.random.default_rng(0), max_len=8)


def bigram():
    return BigramPolicy(7, np.random.default_rng(0))


MODELS = {"bigram": bigram, "mlp": mlp}


def push_away(x, points, gap):
    x = x.copy()
    for p in points:
        near = np.abs(x - p) < gap
        x[near] = p + np.where(x[near] >= p, 3 * gap, -3 * gap)
    return x


def make_batch(model, seed=1):
    """A rollout with padding, and old quantities chosen away from every kink."""
    rng = np.random.default_rng(seed)
    prompts = np.array([[BOS, 3], [BOS, 4], [BOS, 5], [BOS, 6], [BOS, 3]])
    r = sample(model, prompts, rng, 6, TEMP)
    B, T = r.mask.shape
    # rho = exp(logp - logp_old) spread over [e^-0.8, e^0.8], away from the clip bounds
    log_rho = push_away(rng.uniform(-0.8, 0.8, (B, T)),
                        np.log([1 - EPS, 1 + EPS, 1 + EPS_HIGH, DUAL]), 1e-3)
    # V - V_old away from +-VCLIP
    dv = push_away(rng.uniform(-0.5, 0.5, (B, T)), [-VCLIP, VCLIP], 1e-3)
    batch = {
        "prompts": prompts, "responses": r.responses, "mask": r.mask,
        "logp_old": r.logp - log_rho,
        "old_values": r.values - dv,
        "advantages": push_away(rng.normal(0.0, 1.0, (B, T)), [0.0], 1e-2),
        "returns": rng.normal(0.0, 1.0, (B, T)),
        "logp_ref": r.logp + rng.normal(0.0, 0.4, (B, T)),
    }
    v_clip = r.values - dv + np.clip(dv, -VCLIP, VCLIP)
    mid = (r.values + v_clip) / 2  # where the two squared errors tie
    batch["returns"] = np.where(np.abs(batch["returns"] - mid) < 1e-3, batch["returns"] + 0.01,
                                batch["returns"])
    assert 0 < r.mask.sum() < r.mask.size, "the batch must contain padding"
    return batch


def no_policy(batch):
    # A = 0 makes the clipped surrogate 0 with gradient 0: the other terms alone remain
    return dict(batch, advantages=np.zeros_like(batch["advantages"]))


TERMS = {
    "policy": (lambda b: b, dict(c_v=0.0, c_H=0.0)),
    "policy-clip-options": (lambda b: b, dict(c_v=0.0, c_H=0.0, epsilon_high=EPS_HIGH,
                                              dual_clip=DUAL, log_ratio_clamp=2.0)),
    "value": (no_policy, dict(c_v=1.0, c_H=0.0)),
    "value-clipped": (no_policy, dict(c_v=1.0, c_H=0.0, value_clip=VCLIP)),
    "entropy": (no_policy, dict(c_v=0.0, c_H=1.0)),
    "kl-k1": (no_policy, dict(c_v=0.0, kl_coef=1.0, kl_estimator="k1")),
    "kl-k3": (no_policy, dict(c_v=0.0, kl_coef=1.0, kl_estimator="k3")),
    "kl-k2": (no_policy, dict(c_v=0.0, kl_coef=1.0, kl_estimator="k2")),
    # TRL 1.16's default: k3 times the differentiable ratio (its value is what is
    # differentiated); the other forms: tests/test_kl_gradient.py
    "kl-k3-ratio": (no_policy, dict(c_v=0.0, kl_coef=1.0, kl_estimator="k3",
                                    kl_gradient="ratio")),
    "combined": (lambda b: b, dict(c_v=0.7, c_H=0.05, value_clip=VCLIP, epsilon_high=EPS_HIGH,
                                   dual_clip=DUAL, kl_coef=0.1)),
}


@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("agg", AGGREGATION_MODES)
@pytest.mark.parametrize("term", TERMS)
def test_every_parameter_matches_finite_differences(model_name, agg, term):
    model = MODELS[model_name]()
    prepare, opts = TERMS[term]
    batch = prepare(make_batch(model))
    kw = dict(epsilon=EPS, agg=agg, temperature=TEMP, **opts)
    if agg == "seq-mean-token-sum-norm":
        kw["norm"] = 4.0
    loss, grads, stats = ppo_loss_and_grads(model, batch, **kw)

    def f(p):
        return ppo_loss_and_grads(model, batch, params=p, **kw)[0]

    # every coordinate for the combined loss; 6 random coordinates per tensor otherwise
    n_coords = None if term == "combined" else 6
    report = gradcheck(f, model.params, grads, n_coords=n_coords, rng=np.random.default_rng(4))
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, f"{model_name} {agg} {term}:\n" + "\n".join(bad)
    # the gradient is not trivially zero
    assert max(float(np.abs(g).max()) for g in grads.values()) > 1e-4
    if term.startswith("policy") or term == "combined":
        assert 0 < stats["clipfrac_active"] < 1


def test_loss_is_the_sum_of_its_terms():
    model = mlp()
    batch = make_batch(model)
    kw = dict(agg="seq-mean-token-mean", c_v=0.7, c_H=0.05, value_clip=VCLIP, kl_coef=0.1,
              temperature=TEMP)
    loss, _, stats = ppo_loss_and_grads(model, batch, **kw)
    ev = evaluate(model, batch["prompts"], batch["responses"], batch["mask"], TEMP)
    m, agg = batch["mask"], kw["agg"]
    L_V = aggregate(value_loss(ev.values, batch["old_values"], batch["returns"], m, VCLIP), m,
                    agg)
    H = aggregate(ev.entropy, m, agg)
    kl = aggregate(kl_estimate(ev.logp, batch["logp_ref"], "k3", m), m, agg)
    assert stats["value_loss"] == pytest.approx(L_V, rel=1e-14)
    assert stats["entropy"] == pytest.approx(H, rel=1e-14)
    assert stats["kl"] == pytest.approx(kl, rel=1e-14)
    want = stats["policy_loss"] + 0.7 * L_V - 0.05 * H + 0.1 * kl
    assert loss == pytest.approx(want, rel=1e-14)


@pytest.mark.parametrize("model_name", MODELS)
def test_ratio_is_exactly_one_on_fresh_rollouts(model_name):
    model = MODELS[model_name]()
    prompts = np.tile([BOS, 3], (8, 1))
    r = sample(model, prompts, np.random.default_rng(2), 6, TEMP)
    batch = {"prompts": prompts, "responses": r.responses, "mask": r.mask, "logp_old": r.logp,
             "old_values": r.values, "advantages": np.ones_like(r.logp),
             "returns": r.values}
    idx = [5, 1, 6]
    mini = {k: v[idx] for k, v in batch.items()}
    for b in (batch, mini):
        _, _, stats = ppo_loss_and_grads(model, b, temperature=TEMP)
        assert stats["ratio_min"] == 1.0 and stats["ratio_max"] == 1.0
        assert stats["clipfrac_active"] == 0.0 and stats["approx_kl_k1"] == 0.0


def test_logits_grad_from_logp_matches_finite_differences():
    rng = np.random.default_rng(3)
    z = rng.normal(size=(2, 3, 5))
    y = rng.integers(0, 5, (2, 3))
    dlogp = rng.normal(size=(2, 3))

    def f(p):
        logq = log_softmax(p["z"])
        return float((dlogp * np.take_along_axis(logq, y[..., None], -1)[..., 0]).sum())

    dz = logits_grad_from_logp(log_softmax(z), y, dlogp)
    report = gradcheck(f, {"z": z}, {"z": dz})
    assert report["z"].close, str(report["z"])


def test_batch_as_object_and_missing_field():
    model = bigram()
    batch = make_batch(model)

    class Batch:
        pass
    obj = Batch()
    for k, v in batch.items():
        setattr(obj, k, v)
    a = ppo_loss_and_grads(model, batch)[0]
    b = ppo_loss_and_grads(model, obj)[0]
    assert a == b
    with pytest.raises(KeyError, match="returns"):
        ppo_loss_and_grads(model, {k: v for k, v in batch.items() if k != "returns"})
    with pytest.raises(KeyError, match="logp_ref"):
        ppo_loss_and_grads(model, {k: v for k, v in batch.items() if k != "logp_ref"},
                           kl_coef=0.1)
    with pytest.raises(ValueError, match="c_v"):
        ppo_loss_and_grads(model, batch, c_v=-1.0)
    with pytest.raises(ValueError, match="mode"):
        ppo_loss_and_grads(model, batch, agg="sum")
    with pytest.raises(ValueError, match="advantages"):
        ppo_loss_and_grads(model, dict(batch, advantages=batch["advantages"][:, :2]))


# ------------------------------------------------------- the rollout correction's weights

@pytest.mark.parametrize("model_name", MODELS)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_is_weights_gradient_matches_finite_differences(model_name, agg, level):
    model = MODELS[model_name]()
    batch = make_batch(model)
    w = np.random.default_rng(5).uniform(0.3, 1.7, batch["mask"].shape)
    if level == "sequence":
        # (weights constant along each response: there the per-token form of the GSPO
        # gradient with weights is the derivative of the loss value, which this checks)
        w = np.repeat(w[:, :1], w.shape[1], axis=1)
    kw = dict(epsilon=EPS, agg=agg, temperature=TEMP, c_v=0.3, importance_level=level,
              is_weights=w)
    loss, grads, stats = ppo_loss_and_grads(model, batch, **kw)

    def f(p):
        return ppo_loss_and_grads(model, batch, params=p, **kw)[0]

    report = gradcheck(f, model.params, grads, n_coords=6, rng=np.random.default_rng(4))
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, f"{model_name} {agg} {level}:\n" + "\n".join(bad)
    # the weights scale the policy loss only: the value loss is the same
    plain = ppo_loss_and_grads(model, batch, **{k: v for k, v in kw.items()
                                                if k != "is_weights"})[2]
    assert stats["value_loss"] == plain["value_loss"]
    assert stats["policy_loss"] != plain["policy_loss"]


def test_rollout_is_reads_logp_rollout_from_the_batch():
    from ppo_numpy import Rollout, rollout_importance_weights

    model = mlp()
    batch = make_batch(model)
    rng = np.random.default_rng(6)
    batch["logp_rollout"] = batch["logp_old"] + rng.normal(0, 0.3, batch["mask"].shape)
    correction = dict(level="sequence", mode="mask", clip_max=1.5)
    w = rollout_importance_weights(batch["logp_old"], batch["logp_rollout"], batch["mask"],
                                   **correction)
    assert 0 < np.count_nonzero(w) < batch["mask"].sum()  # the mask drops some responses
    got = ppo_loss_and_grads(model, batch, temperature=TEMP, rollout_is=correction)
    want = ppo_loss_and_grads(model, batch, temperature=TEMP, is_weights=w)
    assert got[0] == want[0] and got[2] == want[2]
    for k in got[1]:
        np.testing.assert_array_equal(got[1][k], want[1][k])
    # the same from a Rollout
    r = Rollout(**{k: batch[k] for k in ("prompts", "responses", "mask", "logp_old",
                                         "old_values", "advantages", "returns",
                                         "logp_rollout")})
    assert ppo_loss_and_grads(model, r, temperature=TEMP, rollout_is=correction)[0] == got[0]
    # logp_rollout = logp_old: weights 1, the loss of no correction
    same = dict(batch, logp_rollout=batch["logp_old"])
    assert (ppo_loss_and_grads(model, same, temperature=TEMP, rollout_is=True)[0]
            == ppo_loss_and_grads(model, batch, temperature=TEMP)[0])


def test_rollout_is_without_logp_rollout_is_an_error():
    from ppo_numpy import Rollout

    model = mlp()
    batch = make_batch(model)
    with pytest.raises(ValueError, match="^rollout_is: the rollout correction needs "
                                         "logp_rollout"):
        ppo_loss_and_grads(model, batch, rollout_is=dict(level="token"))
    r = Rollout(**{k: batch[k] for k in ("prompts", "responses", "mask", "logp_old",
                                         "old_values", "advantages", "returns")})
    with pytest.raises(ValueError, match="^rollout_is: the rollout correction needs "
                                         "logp_rollout"):
        ppo_loss_and_grads(model, r, rollout_is=True)
    with pytest.raises(ValueError, match="^rollout_is: give either rollout_is"):
        ppo_loss_and_grads(model, dict(batch, logp_rollout=batch["logp_old"]), rollout_is=True,
                           is_weights=np.ones(batch["mask"].shape))
    with pytest.raises(TypeError, match="^rollout_is: expected a dict"):
        ppo_loss_and_grads(model, batch, rollout_is="token")
    with pytest.raises(ValueError, match="^is_weights: shape"):
        ppo_loss_and_grads(model, batch, is_weights=np.ones((1, 1)))
    with pytest.raises(ValueError, match="^clip_max: must be > 0"):
        ppo_loss_and_grads(model, dict(batch, logp_rollout=batch["logp_old"]),
                           rollout_is=dict(clip_max=-1.0))
