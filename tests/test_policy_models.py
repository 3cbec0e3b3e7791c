"""The toy policies: forward semantics checked by hand, backward against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.models import BOS, EOS, PAD, BigramPolicy, MLPPolicy, Vocab
from ppo_numpy.models.base import NEVER_LOGIT


def mlp(seed=0, K=7, C=3, D=4, H=6, max_len=12):
    return MLPPolicy(K, C, D, H, np.random.default_rng(seed), max_len=max_len)


def bigram(seed=0, K=7):
    return BigramPolicy(K, np.random.default_rng(seed))


MODELS = {"bigram": bigram, "mlp": mlp}


def test_vocab_ids_and_names():
    assert (PAD, BOS, EOS) == (0, 1, 2)
    v = Vocab(8)
    assert v.names == ("<pad>", "<bos>", "<eos>", "a", "b", "c", "d", "e")
    assert v.decode([1, 3, 7, 2, 0]) == "<bos> a e <eos>"
    assert v.decode([1, 3, 0], keep_pad=True) == "<bos> a <pad>"
    assert v.encode("<bos> e") == [1, 7]
    assert Vocab(32).names[-1] == "t31"
    with pytest.raises(ValueError, match="vocab_size"):
        Vocab(3)
    with pytest.raises(ValueError, match="ids"):
        v.decode([8])
    with pytest.raises(ValueError, match="text"):
        v.encode("zz")


def test_bigram_forward_by_hand():
    model = bigram(K=5)
    W, v = model.params["W"], model.params["v"]
    tokens = np.array([[1, 3, 4], [1, 1, 2]])
    logits, values, _ = model.forward(tokens)
    # logits[b, j] = W[y_j] with PAD and BOS pushed to NEVER_LOGIT
    for b in range(2):
        for j in range(3):
            row = W[tokens[b, j]].copy()
            row[[0, 1]] += NEVER_LOGIT
            np.testing.assert_array_equal(logits[b, j], row)
            assert values[b, j] == v[tokens[b, j]]


def test_mlp_forward_by_hand_one_position():
    # x_j = [e_{j-2}, e_{j-1}, e_j] with e_i = E_tok[y_i] + E_pos[i]; zeros before the start
    model = mlp(C=3)
    p = model.params
    tokens = np.array([[1, 4, 5, 2]])
    logits, values, _ = model.forward(tokens)

    def e(i):
        return p["E_tok"][tokens[0, i]] + p["E_pos"][i]
    for j, window in [(0, [None, None, 0]), (1, [None, 0, 1]), (3, [1, 2, 3])]:
        x = np.concatenate([np.zeros(4) if i is None else e(i) for i in window])
        h = np.tanh(x @ p["W1"] + p["b1"])
        want = h @ p["W_pi"] + p["b_pi"]
        want[[PAD, BOS]] += NEVER_LOGIT
        np.testing.assert_allclose(logits[0, j], want, rtol=1e-13)
        np.testing.assert_allclose(values[0, j], h @ p["w_v"] + p["b_v"], rtol=1e-13)


@pytest.mark.parametrize("name", MODELS)
def test_forward_is_causal_and_rows_are_independent(name):
    model = MODELS[name]()
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 7, (6, 9))
    logits, values, _ = model.forward(tokens)
    # changing tokens after position 4 leaves positions 0..4 unchanged, bit for bit
    changed = tokens.copy()
    changed[:, 5:] = rng.integers(0, 7, (6, 4))
    logits2, values2, _ = model.forward(changed)
    np.testing.assert_array_equal(logits2[:, :5], logits[:, :5])
    np.testing.assert_array_equal(values2[:, :5], values[:, :5])
    # any subset of rows gives the same bits (a minibatch recomputes the rollout exactly)
    for idx in ([3], [5, 0, 2], [1, 2, 3, 4]):
        sub_logits, sub_values, _ = model.forward(tokens[idx])
        np.testing.assert_array_equal(sub_logits, logits[idx])
        np.testing.assert_array_equal(sub_values, values[idx])


def test_mlp_sees_only_its_context_window():
    model = mlp(C=2)
    tokens = np.array([[1, 3, 4, 5, 6]])
    other = np.array([[1, 6, 4, 5, 6]])  # differs at position 1 only
    a, _, _ = model.forward(tokens)
    b, _, _ = model.forward(other)
    # positions 1 and 2 see token 1; position 3 sees tokens 2, 3 only
    assert not np.allclose(a[0, 1], b[0, 1]) and not np.allclose(a[0, 2], b[0, 2])
    np.testing.assert_array_equal(a[0, 3:], b[0, 3:])


@pytest.mark.parametrize("name", MODELS)
def test_backward_matches_finite_differences_for_every_parameter(name):
    # loss = sum(G_logits * logits) + sum(G_values * values) over the generated-token
    # columns (the NEVER_LOGIT columns are ~1e9 and would drown a difference quotient)
    model = MODELS[name]()
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 7, (3, 8))
    logits, values, cache = model.forward(tokens)
    G_logits = rng.normal(size=logits.shape)
    G_logits[..., [PAD, BOS]] = 0.0
    G_values = rng.normal(size=values.shape)

    def f(p):
        lg, v, _ = model.forward(tokens, params=p)
        return float((G_logits * lg).sum() + (G_values * v).sum())

    grads = model.backward(cache, G_logits, G_values)
    assert set(grads) == set(model.params)
    report = gradcheck(f, model.params, grads)
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, "\n".join(bad)
    for g in grads.values():
        assert g.dtype == np.float64


@pytest.mark.parametrize("name", MODELS)
def test_initialisation_is_non_trivial(name):
    model = MODELS[name]()
    for key, p in model.params.items():
        assert p.dtype == np.float64
        assert np.all(p != 0.0), key
        if p.size > 1:
            assert np.std(p) > 0, key
    # same seed, same parameters; another seed, different ones
    again, other = MODELS[name](0), MODELS[name](1)
    for key in model.params:
        np.testing.assert_array_equal(again.params[key], model.params[key])
        assert not np.array_equal(other.params[key], model.params[key])


def test_parameter_counts_are_small_enough_to_print():
    assert bigram(K=8).n_params == 8 * 8 + 8
    # E_tok 8x4, E_pos 12x4, W1 12x6, b1 6, W_pi 6x8, b_pi 8, w_v 6, b_v 1
    assert mlp(K=8).n_params == 32 + 48 + 72 + 6 + 48 + 8 + 6 + 1
    assert "W1 (12, 6)" in repr(mlp(K=8))


def test_with_params_does_not_touch_the_model():
    model = mlp()
    before = {k: v.copy() for k, v in model.params.items()}
    shifted = {k: v + 1.0 for k, v in model.params.items()}
    other = model.with_params(shifted)
    tokens = np.array([[1, 3, 4]])
    assert not np.allclose(other.forward(tokens)[0], model.forward(tokens)[0])
    for k in before:
        np.testing.assert_array_equal(model.params[k], before[k])


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("tokens, err, match", [
    (np.array([[1, 7]]), ValueError, "tokens: token id 7"),
    (np.array([[1, -1]]), ValueError, "tokens: token id -1"),
    (np.array([[1.0, 3.0]]), TypeError, "tokens: expected integer"),
    (np.array([1, 3]), ValueError, "tokens: expected shape"),
])
def test_bad_tokens_name_the_argument(name, tokens, err, match):
    with pytest.raises(err, match=match):
        MODELS[name]().forward(tokens)


def test_other_bad_input():
    model = mlp(max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        model.forward(np.ones((1, 5), dtype=int))
    with pytest.raises(ValueError, match="params"):
        model.forward(np.ones((1, 2), dtype=int), params={"W1": model.params["W1"]})
    bad = dict(model.params, b1=np.zeros(3))
    with pytest.raises(ValueError, match="b1"):
        model.forward(np.ones((1, 2), dtype=int), params=bad)
    logits, values, cache = model.forward(np.ones((2, 3), dtype=int))
    with pytest.raises(ValueError, match="dlogits"):
        model.backward(cache, logits[:, :2], values)
    with pytest.raises(ValueError, match="dvalues"):
        model.backward(cache, logits, values[:1])
    with pytest.raises(TypeError, match="rng"):
        MLPPolicy(7, 3, 4, 6, rng=0)
    with pytest.raises(ValueError, match="context"):
        MLPPolicy(7, 0, 4, 6, np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng"):
        BigramPolicy(7, None)
