"""The transformer policy: forward by hand, backward against finite differences through the
whole PPO loss, causality, row independence, bit-identical re-evaluation, checkpoints,
bad arguments, determinism, and PyTorch autograd as an independent implementation
(``benchmarks/transformer.py``'s model; skipped when torch is not importable)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.models.base import NEVER_LOGIT
from ppo_numpy.models.checkpoint import load_checkpoint, save_checkpoint
from ppo_numpy.models.loss import ppo_loss_and_grads
from ppo_numpy.models.sampling import evaluate, sample
from ppo_numpy.models.transformer import TransformerPolicy
from ppo_numpy.models.vocab import BOS, EOS, PAD

K = 9


def model(seed=0, d_model=8, n_heads=2, n_layers=2, max_len=12, **kw):
    return TransformerPolicy(K, np.random.default_rng(seed), d_model=d_model, n_heads=n_heads,
                             n_layers=n_layers, max_len=max_len, **kw)


# ---------------------------------------------------------------- forward, by hand


def naive_forward(m, tokens):
    """The module docstring's equations, one sequence and one position at a time."""
    p = m.params
    D, H = m.d_model, m.n_heads
    d = D // H

    def ln(v, g, b):
        mu = v.mean()
        var = ((v - mu) ** 2).mean()
        return (v - mu) / np.sqrt(var + 1e-5) * g + b

    def gelu(u):
        return 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))

    out_logits, out_values = [], []
    for seq in tokens:
        L = len(seq)
        xs = [p["E_tok"][seq[j]] + p["E_pos"][j] for j in range(L)]
        for layer in range(m.n_layers):
            w = {k.split(".", 1)[1]: v for k, v in p.items() if k.startswith(f"h{layer}.")}
            qkv = [ln(x, w["ln1_g"], w["ln1_b"]) @ w["W_qkv"] + w["b_qkv"] for x in xs]
            new = []
            for i in range(L):
                heads = []
                for h in range(H):
                    q = qkv[i][h * d:(h + 1) * d]
                    scores = [q @ qkv[j][D + h * d:D + (h + 1) * d] / np.sqrt(d)
                              for j in range(i + 1)]  # keys j <= i only
                    e = np.exp(np.array(scores) - max(scores))
                    att = e / e.sum()
                    heads.append(sum(att[j] * qkv[j][2 * D + h * d:2 * D + (h + 1) * d]
                                     for j in range(i + 1)))
                x1 = xs[i] + np.concatenate(heads) @ w["W_o"] + w["b_o"]
                f = gelu(ln(x1, w["ln2_g"], w["ln2_b"]) @ w["W_fc"] + w["b_fc"])
                new.append(x1 + f @ w["W_proj"] + w["b_proj"])
            xs = new
        hs = [ln(x, p["lnf_g"], p["lnf_b"]) for x in xs]
        out_logits.append([hj @ p["W_pi"] + p["b_pi"] + m.logit_bias for hj in hs])
        out_values.append([hj @ p["w_v"] + p["b_v"] for hj in hs])
    return np.array(out_logits), np.array(out_values)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_forward_equals_the_equations_one_position_at_a_time(n_layers):
    m = model(n_layers=n_layers)
    tokens = np.array([[1, 3, 4, 5, 2, 0], [1, 8, 8, 3, 0, 0]])
    logits, values, _ = m.forward(tokens)
    want_logits, want_values = naive_forward(m, tokens)
    assert logits.shape == (2, 6, K) and values.shape == (2, 6)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(values, want_values, rtol=1e-12, atol=1e-12)
    # PAD and BOS are never generated
    assert np.all(logits[..., [PAD, BOS]] < NEVER_LOGIT / 2)


def test_layer_norm_and_gelu_helpers_by_hand():
    from ppo_numpy.models.transformer import gelu, layer_norm

    # x = [1, 2, 3, 6]: mu 3, var (4 + 1 + 0 + 9) / 4 = 3.5
    y, _ = layer_norm(np.array([1.0, 2.0, 3.0, 6.0]), np.full(4, 2.0), np.full(4, 0.5))
    want = (np.array([-2.0, -1.0, 0.0, 3.0]) / np.sqrt(3.5 + 1e-5)) * 2.0 + 0.5
    np.testing.assert_allclose(y, want, rtol=1e-15)
    # GELU(1) = 1/2 (1 + tanh(sqrt(2/pi) 1.044715))
    assert gelu(np.array([1.0]))[0][0] == pytest.approx(
        0.5 * (1 + np.tanh(np.sqrt(2 / np.pi) * 1.044715)), rel=1e-15)


# ---------------------------------------------------------------- backward


def ppo_batch(m, rng, temperature):
    """Prompts, some left-padded with PAD before BOS (PAD is an ordinary token to the model),
    responses with padding after EOS, and a logp_old a little away from the policy's."""
    prompts = np.array([[1, 3, 4], [0, 1, 5], [0, 0, 1], [1, 7, 7]])
    responses = np.array([[5, 6, 2, 0], [3, 2, 0, 0], [8, 8, 8, 8], [2, 0, 0, 0]])
    mask = (np.arange(4)[None, :] < np.array([3, 2, 4, 1])[:, None]).astype(float)
    ev = evaluate(m, prompts, responses, mask, temperature)
    logp_old = np.where(mask == 1, ev.logp + rng.normal(0.0, 0.25, mask.shape), 0.0)
    return {"prompts": prompts, "responses": responses, "mask": mask, "logp_old": logp_old,
            "old_values": ev.values + rng.normal(0.0, 0.1, mask.shape) * mask,
            "advantages": rng.normal(size=mask.shape) * mask,
            "returns": rng.normal(size=mask.shape) * mask}


@pytest.mark.parametrize("n_layers", [1, 2])
def test_ppo_loss_gradients_match_finite_differences_for_every_parameter(n_layers):
    # policy + value + entropy terms, a value clip, temperature 0.8
    m = model(seed=3, n_layers=n_layers)
    rng = np.random.default_rng(4)
    kw = dict(epsilon=0.2, c_v=0.5, c_H=0.05, value_clip=0.3, temperature=0.8)
    batch = ppo_batch(m, rng, kw["temperature"])
    loss, grads, stats = ppo_loss_and_grads(m, batch, **kw)
    assert set(grads) == set(m.params)
    for name, g in grads.items():
        assert g.shape == m.params[name].shape and g.dtype == np.float64, name
    # away from the kinks: no ratio and no value within 1e-4 of a clip boundary
    ev = evaluate(m, batch["prompts"], batch["responses"], batch["mask"], 0.8)
    on = batch["mask"] == 1
    rho = np.exp(ev.logp - batch["logp_old"])[on]
    assert np.min(np.abs(np.abs(rho - 1) - 0.2)) > 1e-4
    assert np.min(np.abs(np.abs(ev.values - batch["old_values"])[on] - 0.3)) > 1e-4
    assert 0 < stats["clipfrac_active"] < 1  # both branches of the clip are exercised

    def f(p):
        return ppo_loss_and_grads(m, batch, params=p, **kw)[0]

    report = gradcheck(f, m.params, grads, n_coords=12, rng=np.random.default_rng(5))
    bad = [str(c) for c in report.values() if not (c.close and c.rel_error < 1e-6)]
    assert not bad, "\n".join(bad)
    # nothing is trivially zero: every tensor gets gradient (E_pos only on used rows)
    for name, g in grads.items():
        assert np.any(g != 0), name


def test_backward_against_finite_differences_of_a_random_linear_functional():
    # every coordinate of a 1-layer model, with random weights on logits and values
    m = model(seed=6, d_model=4, n_heads=2, n_layers=1, max_len=6, d_mlp=6)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, K, (3, 5))
    logits, values, cache = m.forward(tokens)
    G = rng.normal(size=logits.shape)
    G[..., [PAD, BOS]] = 0.0
    Gv = rng.normal(size=values.shape)

    def f(p):
        lg, v, _ = m.forward(tokens, params=p)
        return float((G * lg).sum() + (Gv * v).sum())

    report = gradcheck(f, m.params, m.backward(cache, G, Gv))
    bad = [str(c) for c in report.values() if not c.close]
    assert not bad, "\n".join(bad)


def test_backward_does_not_modify_its_inputs():
    m = model()
    tokens = np.array([[1, 3, 4, 2]])
    logits, values, cache = m.forward(tokens)
    G, Gv = np.ones_like(logits), np.ones_like(values)
    before = {k: v.copy() for k, v in m.params.items()}
    m.backward(cache, G, Gv)
    assert np.all(G == 1) and np.all(Gv == 1) and np.array_equal(tokens, [[1, 3, 4, 2]])
    for k in before:
        np.testing.assert_array_equal(m.params[k], before[k])


# ---------------------------------------------------------------- what the sampler relies on


def test_future_tokens_change_no_earlier_position():
    m = model()
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, K, (5, 10))
    logits, values, _ = m.forward(tokens)
    for cut in (1, 4, 9):
        changed = tokens.copy()
        changed[:, cut:] = rng.integers(0, K, (5, 10 - cut))
        assert np.any(changed != tokens)
        logits2, values2, _ = m.forward(changed)
        np.testing.assert_array_equal(logits2[:, :cut], logits[:, :cut])
        np.testing.assert_array_equal(values2[:, :cut], values[:, :cut])
    # ... while an earlier token does change later positions
    changed = tokens.copy()
    changed[:, 0] = (tokens[:, 0] + 1) % K
    assert not np.allclose(m.forward(changed)[0][:, -1], logits[:, -1])


def test_padded_batch_equals_its_rows_one_by_one():
    m = model()
    rng = np.random.default_rng(2)
    tokens = rng.integers(3, K, (6, 9))
    lengths = [9, 4, 1, 7, 9, 2]
    for i, n in enumerate(lengths):
        tokens[i, n:] = PAD
    logits, values, _ = m.forward(tokens)
    for i, n in enumerate(lengths):
        # alone and unpadded: the same numbers (other shapes may sum in another order)
        row_logits, row_values, _ = m.forward(tokens[i:i + 1, :n])
        np.testing.assert_allclose(row_logits[0], logits[i, :n], rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(row_values[0], values[i, :n], rtol=1e-13, atol=1e-13)
    # any subset of rows at the same length: the same bits
    for idx in ([3], [5, 0, 2], [1, 2, 3, 4]):
        sub_logits, sub_values, _ = m.forward(tokens[idx])
        np.testing.assert_array_equal(sub_logits, logits[idx])
        np.testing.assert_array_equal(sub_values, values[idx])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_evaluate_reproduces_the_sampled_logp_bit_for_bit(temperature):
    m = model(seed=1, max_len=10)
    x = np.array([[1, 3, 4], [1, 5, 6], [1, 4, 4], [1, 8, 3], [1, 7, 6], [1, 3, 3]])
    r = sample(m, x, np.random.default_rng(3), 6, temperature=temperature)
    assert 0 < r.mask.sum() < r.mask.size  # some responses stopped early: padding
    ev = evaluate(m, x, r.responses, r.mask, temperature)
    np.testing.assert_array_equal(ev.logp, r.logp)
    np.testing.assert_array_equal(ev.values, r.values)
    # a minibatch of rows, as the PPO update recomputes it
    idx = [4, 1, 2]
    sub = evaluate(m, x[idx], r.responses[idx], r.mask[idx], temperature)
    np.testing.assert_array_equal(sub.logp, r.logp[idx])
    assert np.all(r.responses[r.mask == 0] == PAD) and np.any(r.responses == EOS)


# ---------------------------------------------------------------- construction, persistence


def test_initialisation_is_non_trivial_and_deterministic():
    m = model()
    for name, p in m.params.items():
        assert p.dtype == np.float64, name
        assert np.all(p != 0.0), name
        if p.size > 1:
            assert np.std(p) > 0, name
    again, other = model(0), model(1)
    for name in m.params:
        np.testing.assert_array_equal(again.params[name], m.params[name])
        assert not np.array_equal(other.params[name], m.params[name]), name


def test_parameter_names_and_shapes():
    m = model(d_model=8, n_heads=2, n_layers=2, max_len=12)
    shapes = {k: v.shape for k, v in m.params.items()}
    assert shapes["E_tok"] == (K, 8) and shapes["E_pos"] == (12, 8)
    assert shapes["h1.W_qkv"] == (8, 24) and shapes["h1.W_fc"] == (8, 32)
    assert shapes["h0.W_proj"] == (32, 8) and shapes["W_pi"] == (8, K)
    assert shapes["b_v"] == () and "h2.W_o" not in shapes
    assert m.n_params == sum(int(np.prod(s)) for s in shapes.values())


def test_checkpoint_round_trip(tmp_path):
    m = model(seed=0)
    path = tmp_path / "transformer.npz"
    save_checkpoint(path, m.params)
    fresh = model(seed=9)  # another initialisation, same architecture
    saved = load_checkpoint(path, expected_params=fresh.params)["params"]
    for name in fresh.params:
        fresh.params[name][...] = saved[name]
    tokens = np.array([[1, 3, 4, 2], [1, 6, 0, 0]])
    np.testing.assert_array_equal(fresh.forward(tokens)[0], m.forward(tokens)[0])
    # a checkpoint of another architecture is refused whole
    with pytest.raises(ValueError, match=r"unexpected \['h1\.W_fc'"):
        load_checkpoint(path, expected_params=model(n_layers=1).params)


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(d_model=10, n_heads=4), ValueError, "n_heads: must divide d_model=10"),
    (dict(n_layers=0), ValueError, "n_layers"),
    (dict(d_model=0), ValueError, "d_model"),
    (dict(n_heads=0), ValueError, "n_heads"),
    (dict(d_mlp=0), ValueError, "d_mlp"),
    (dict(max_len=0), ValueError, "max_len"),
    (dict(n_layers=1.5), TypeError, "n_layers"),
])
def test_bad_constructor_arguments_name_the_argument(kwargs, err, match):
    with pytest.raises(err, match=match):
        model(**kwargs)


def test_other_bad_input():
    with pytest.raises(TypeError, match="rng"):
        TransformerPolicy(K, 0)
    with pytest.raises(ValueError, match="vocab_size"):
        TransformerPolicy(3, np.random.default_rng(0))
    m = model(max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        m.forward(np.ones((1, 5), dtype=int))
    with pytest.raises(ValueError, match="tokens: token id 9"):
        m.forward(np.array([[1, 9]]))
    with pytest.raises(TypeError, match="tokens"):
        m.forward(np.array([[1.0, 3.0]]))
    with pytest.raises(ValueError, match="h0.W_o"):
        m.forward(np.ones((1, 2), dtype=int), params=dict(m.params, **{"h0.W_o": np.zeros(3)}))
    logits, values, cache = m.forward(np.ones((2, 3), dtype=int))
    with pytest.raises(ValueError, match="dlogits"):
        m.backward(cache, logits[:, :2], values)
    with pytest.raises(ValueError, match="dvalues"):
        m.backward(cache, logits, values[:1])


# ---------------------------------------------------------------- PyTorch, independently


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_torch_autograd_gives_the_same_outputs_and_gradients():
    # the benchmark's PyTorch model (torch.nn.functional: layer_norm,
    # scaled_dot_product_attention with a causal mask, gelu "tanh"), float64 autograd
    import torch

    from benchmarks.transformer import torch_grads

    m = model(seed=2, d_model=16, n_heads=4, n_layers=2, max_len=10)
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, K, (4, 10))
    logits, values, cache = m.forward(tokens)
    G = rng.normal(size=logits.shape)
    G[..., [PAD, BOS]] = 0.0
    Gv = rng.normal(size=values.shape)
    grads = m.backward(cache, G, Gv)
    t_logits, t_values, t_grads = torch_grads(torch, m, tokens, G, Gv)
    np.testing.assert_allclose(t_logits, logits, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(t_values, values, rtol=1e-12, atol=1e-12)
    for name, g in grads.items():
        np.testing.assert_allclose(g, t_grads[name], rtol=1e-10, atol=1e-12, err_msg=name)
    # and the check would fail on a wrong gradient
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(1.001 * grads["h0.W_qkv"], t_grads["h0.W_qkv"],
                                   rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- PPO training with it

TINY = dict(task="add", model="transformer", d_model=8, n_heads=2, n_layers=1, iterations=3,
            warmup_steps=5, batch_size=8, minibatches=2, epochs=1)


def test_training_is_deterministic_and_resumes_bit_identically(tmp_path):
    from ppo_numpy.training.config import PPOConfig
    from ppo_numpy.training.run import resume, train

    config = PPOConfig(**TINY)
    full = train(config, tmp_path / "full", plot=False)
    assert train(config) == full  # same seed, same history (no output directory)
    for row in full:  # the ratio check passed: rho exactly 1 on every first minibatch
        assert row["ratio_first_min"] == row["ratio_first_max"] == 1.0
        assert 0.0 <= row["heldout_accuracy"] <= 1.0
    train(config.replace(iterations=1), tmp_path / "part", plot=False)
    assert resume(tmp_path / "part", {"iterations": 3}, plot=False) == full
    assert (tmp_path / "part/metrics.csv").read_bytes() == \
        (tmp_path / "full/metrics.csv").read_bytes()
    assert train(config.replace(seed=1)) != full


def test_the_command_line_takes_policy_as_an_alias_and_the_add_defaults(capsys, tmp_path):
    from ppo_numpy.programs import train as cli
    from ppo_numpy.training.config import TASK_DEFAULTS, PPOConfig, config_for_task

    argv = ["--task", "add", "--policy", "transformer", "--d-model", "8", "--n-heads", "2",
            "--n-layers", "1", "--iterations", "2", "--warmup-steps", "3", "--batch-size", "8",
            "--minibatches", "2", "--epochs", "1", "--no-plot", "--out", str(tmp_path / "r")]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "greedy acc" in text
    saved = PPOConfig.from_json((tmp_path / "r/config.json").read_text())
    assert saved.model == "transformer" and saved.d_model == 8
    # options not given take the task's defaults, then PPOConfig's
    assert saved.lr == TASK_DEFAULTS["add"]["lr"] and saved.epsilon == PPOConfig().epsilon
    assert config_for_task(task="add").model == "transformer"
    assert config_for_task(task="length") == PPOConfig(task="length")
    with pytest.raises(ValueError, match="n_heads: must divide d_model=8"):
        PPOConfig(**dict(TINY, n_heads=3))
