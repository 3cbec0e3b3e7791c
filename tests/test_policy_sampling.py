"""Sampling responses and re-evaluating them."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.models import (
    BOS,
    EOS,
    PAD,
    BigramPolicy,
    MLPPolicy,
    TransformerPolicy,
    evaluate,
    sample,
)
from ppo_numpy.models.base import ToyPolicy


def mlp(seed=0, K=7):
    return MLPPolicy(K, 3, 4, 8, np.random.default_rng(seed), max_len=24)


def bigram(seed=0, K=7):
    return BigramPolicy(K, np.random.default_rng(seed))


MODELS = {"bigram": bigram, "mlp": mlp}
PROMPTS = np.array([[BOS, 3, 4], [BOS, 5, 5], [BOS, 6, 3], [BOS, 4, 4]] * 4)  # (16, 3)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_evaluate_recomputes_sampled_logp_and_values_bit_for_bit(name, temperature):
    model = MODELS[name]()
    r = sample(model, PROMPTS, np.random.default_rng(3), 10, temperature)
    ev = evaluate(model, PROMPTS, r.responses, r.mask, temperature)
    np.testing.assert_array_equal(ev.logp, r.logp)
    np.testing.assert_array_equal(ev.values, r.values)
    # a minibatch of rows, in another order, gives the same bits (rho = 1 exactly)
    idx = np.array([7, 2, 11, 0, 5])
    sub = evaluate(model, PROMPTS[idx], r.responses[idx], r.mask[idx], temperature)
    np.testing.assert_array_equal(sub.logp, r.logp[idx])


def critic_models():
    """Each model kind with a critic of its own (value_hidden > 0) and without."""
    rng = np.random.default_rng
    return {"bigram": bigram(),
            "mlp": mlp(),
            "mlp, value_hidden": MLPPolicy(7, 3, 4, 8, rng(1), max_len=24, value_hidden=5),
            "transformer": TransformerPolicy(7, rng(2), d_model=8, n_heads=2, n_layers=1,
                                             max_len=24),
            "transformer, value_hidden": TransformerPolicy(7, rng(3), d_model=8, n_heads=2,
                                                           n_layers=1, max_len=24,
                                                           value_hidden=5)}


@pytest.mark.parametrize("name", list(critic_models()))
def test_values_are_those_of_the_pass_at_each_step(name):
    # sample() reads V(s_t) from one pass over the finished responses after its loop; a state's
    # value depends on the tokens before it only, so V(s_t) must be what a pass over the
    # tokens of step t gives (responses after t still PAD, the same (B, P + T - 1) tokens as
    # at step t). Exact: the same operations on arrays of the same shapes, whose entries at
    # position P - 1 + t read nothing after it (a causal model: products row by row, zero
    # attention weights beyond t, so 0 * v adds exact zeros). A pass that read a later token,
    # or values taken at the wrong position, would differ by far more than a bit.
    model = critic_models()[name]
    T = 7
    r = sample(model, PROMPTS, np.random.default_rng(11), T, 0.8)
    P = PROMPTS.shape[1]
    assert r.mask.all(axis=1).any() and not r.mask.all()  # full rows and rows ended by EOS
    for t in range(T):
        y = np.where(np.arange(T) <= t, r.responses, PAD)  # (B, T): the responses of step t
        tokens = np.concatenate([PROMPTS, y], axis=1)[:, :-1]  # (B, P + T - 1)
        logits, values, _ = model.forward(tokens)
        want = np.where(r.mask[:, t], values[:, P - 1 + t], 0.0)
        np.testing.assert_array_equal(r.values[:, t], want, err_msg=f"step {t}")
        # the policy's pass without the critic gives forward's logits, the same bits
        alone, none, cache = model._forward(tokens, model.params, values=False)
        assert none is None and cache is None
        np.testing.assert_array_equal(alone, logits)


@pytest.mark.parametrize("name", MODELS)
def test_rollout_structure(name):
    model = MODELS[name]()
    T = 8
    r = sample(model, PROMPTS, np.random.default_rng(4), T)
    B = PROMPTS.shape[0]
    assert r.responses.shape == r.mask.shape == r.logp.shape == r.values.shape == (B, T)
    assert r.responses.dtype == np.int64 and r.mask.dtype == bool
    np.testing.assert_array_equal(r.prompts, PROMPTS)
    for b in range(B):
        n = int(r.mask[b].sum())
        assert n >= 1
        # mask: n ones then zeros; PAD after; the last response token is EOS or row is full
        np.testing.assert_array_equal(r.mask[b], [1.0] * n + [0.0] * (T - n))
        assert np.all(r.responses[b, n:] == PAD)
        assert r.responses[b, n - 1] == EOS or n == T
        assert not np.any(r.responses[b, : n - 1] == EOS)
        # PAD and BOS are never generated
        assert not np.any(np.isin(r.responses[b, :n], [PAD, BOS]))
        assert np.all(r.logp[b, n:] == 0.0) and np.all(r.values[b, n:] == 0.0)
        assert np.all(r.logp[b, :n] < 0.0)
    # the rollout contains both outcomes: some EOS, some truncated
    lengths = r.mask.sum(axis=1)
    assert (lengths < T).any()


def test_bigram_logp_and_values_by_hand():
    # for the bigram, y_t ~ softmax(W[prev] / temperature) with prev the token before y_t
    model = bigram()
    W, v = model.params["W"], model.params["v"]
    temperature = 0.7
    r = sample(model, PROMPTS, np.random.default_rng(5), 6, temperature)
    for b in range(PROMPTS.shape[0]):
        seq = list(PROMPTS[b]) + list(r.responses[b])
        for t in range(int(r.mask[b].sum())):
            prev, y = seq[2 + t], seq[3 + t]
            z = W[prev] / temperature
            z[[PAD, BOS]] = -np.inf
            p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            assert abs(r.logp[b, t] - np.log(p[y])) < 1e-12
            assert r.values[b, t] == v[prev]


def test_entropy_by_hand():
    model = bigram()
    x, y, m = np.array([[BOS, 3]]), np.array([[4, EOS]]), np.array([[1.0, 0.0]])
    ev = evaluate(model, x, y, m)
    z = model.params["W"][3][2:]  # PAD and BOS have probability 0
    p = np.exp(z) / np.exp(z).sum()
    assert abs(ev.entropy[0, 0] - float(-(p * np.log(p)).sum())) < 1e-12
    assert ev.entropy[0, 1] == 0.0 and ev.logp[0, 1] == 0.0 and ev.values[0, 1] == 0.0


def test_sampling_frequencies_follow_the_tempered_softmax():
    # one step from the same state, many rows: frequencies within 5 sigma of softmax(W[3] / T)
    model = bigram(K=6)
    n, temperature = 20000, 1.7
    prompts = np.tile([BOS, 3], (n, 1))
    r = sample(model, prompts, np.random.default_rng(6), 1, temperature)
    z = model.params["W"][3, 2:] / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    freq = np.bincount(r.responses[:, 0], minlength=6)[2:] / n
    sigma = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(freq - p) < 5 * sigma), (freq, p)


def test_same_generator_state_same_rollout_bit_for_bit():
    model = mlp()
    a = sample(model, PROMPTS, np.random.default_rng(7), 9, 1.3)
    b = sample(model, PROMPTS, np.random.default_rng(7), 9, 1.3)
    for field in ("responses", "mask", "logp", "values"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    c = sample(model, PROMPTS, np.random.default_rng(8), 9, 1.3)
    assert not np.array_equal(a.responses, c.responses)


def test_low_temperature_is_nearly_greedy():
    model = bigram()
    r = sample(model, PROMPTS[:4], np.random.default_rng(9), 1, temperature=1e-3)
    W = model.params["W"] + model.logit_bias
    np.testing.assert_array_equal(r.responses[:, 0], np.argmax(W[PROMPTS[:4, -1]], axis=1))


def test_inputs_not_modified():
    model = mlp()
    prompts = PROMPTS.copy()
    r = sample(model, prompts, np.random.default_rng(10), 5)
    np.testing.assert_array_equal(prompts, PROMPTS)
    responses, mask = r.responses.copy(), r.mask.copy()
    evaluate(model, prompts, responses, mask)
    np.testing.assert_array_equal(responses, r.responses)
    np.testing.assert_array_equal(mask, r.mask)


@pytest.mark.parametrize("call, err, match", [
    (lambda m: sample(m, PROMPTS, np.random.default_rng(0), 4, temperature=0.0),
     ValueError, "temperature"),
    (lambda m: sample(m, PROMPTS, np.random.default_rng(0), 4, temperature=-1.0),
     ValueError, "temperature"),
    (lambda m: sample(m, PROMPTS, 0, 4), TypeError, "rng"),
    (lambda m: sample(m, PROMPTS, np.random.default_rng(0), 0), ValueError, "max_new_tokens"),
    (lambda m: sample(m, PROMPTS, np.random.default_rng(0), 2.5), TypeError, "max_new_tokens"),
    (lambda m: sample(m, np.array([[1, 9]]), np.random.default_rng(0), 2), ValueError,
     "prompts: token id 9"),
    (lambda m: sample(m, np.array([1, 3]), np.random.default_rng(0), 2), ValueError, "prompts"),
    (lambda m: sample(m, np.zeros((2, 0), dtype=int), np.random.default_rng(0), 2), ValueError,
     "prompts"),
    (lambda m: evaluate(m, PROMPTS[:2], np.array([[3, 2], [4, 2]]), np.ones((2, 3))),
     ValueError, "mask"),
    (lambda m: evaluate(m, PROMPTS[:2], np.array([[3, 2], [4, 2]]), [[1, 2], [1, 1]]),
     ValueError, "mask"),
    (lambda m: evaluate(m, PROMPTS[:2], np.array([[3, 2]]), np.ones((1, 2))),
     ValueError, "responses"),
    (lambda m: evaluate(m, PROMPTS[:1], np.array([[3, 70]]), np.ones((1, 2))),
     ValueError, "responses: token id 70"),
    (lambda m: evaluate(m, PROMPTS[:1], np.array([[3, 2]]), np.ones((1, 2)), 0.0),
     ValueError, "temperature"),
])
def test_bad_input_names_the_argument(call, err, match):
    with pytest.raises(err, match=match):
        call(bigram())


def test_sampling_checks_its_tokens_once_and_a_forward_only_policy_samples_the_same():
    # sample() checks the prompts once; its forward passes at every step run on tokens it
    # built itself (the models' _forward), not checked again
    model, prompts = mlp(0), np.array([[BOS, 3], [BOS, 4], [BOS, 5]])
    checked = []
    real = model.check_tokens
    model.check_tokens = lambda tokens, name="tokens": checked.append(name) or real(tokens, name)
    r = sample(model, prompts, np.random.default_rng(2), 6)
    assert checked == ["prompts"]
    del model.check_tokens

    class ForwardOnly(ToyPolicy):
        """A policy that implements forward only (checking its tokens, as a user's may)."""

        def __init__(self, inner):
            super().__init__(inner.vocab_size)
            self.inner, self.params = inner, inner.params

        def forward(self, tokens, params=None):
            return self.inner.forward(tokens, params)

    other = ForwardOnly(model)
    r2 = sample(other, prompts, np.random.default_rng(2), 6)
    for name in ("responses", "mask", "logp_old", "old_values"):
        np.testing.assert_array_equal(getattr(r2, name), getattr(r, name))
    e, e2 = (evaluate(m, prompts, r.responses, r.mask) for m in (model, other))
    np.testing.assert_array_equal(e2.logp, e.logp)
    # a sequence longer than the model's max_len is refused on the unchecked path too
    with pytest.raises(ValueError, match="exceeds max_len 24"):
        sample(model, prompts, np.random.default_rng(2), 30)
