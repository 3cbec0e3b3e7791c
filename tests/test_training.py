"""End-to-end PPO training: warm-up gradients, one iteration's bookkeeping, learning,
determinism, checkpoint/resume, the ratio check, the KL controller, the beta sweep."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ppo_numpy.grads.gradcheck import gradcheck
from ppo_numpy.models.bigram import BigramPolicy
from ppo_numpy.models.checkpoint import load_checkpoint, save_checkpoint
from ppo_numpy.models.mlp import MLPPolicy
from ppo_numpy.training import loop
from ppo_numpy.training.config import PPOConfig
from ppo_numpy.training.loop import RatioNotOneError, new_run, ppo_iteration
from ppo_numpy.training.metrics import (
    COLUMNS,
    explained_variance,
    format_value,
    read_metrics,
    read_rows,
)
from ppo_numpy.training.run import RunError, beta_sweep, resume, train
from ppo_numpy.training.tasks import make_task, response_lengths
from ppo_numpy.training.warmup import cross_entropy_and_grads

# small and quick: a few hundred milliseconds per run
QUICK = PPOConfig(task="length", iterations=4, warmup_steps=10, batch_size=16, minibatches=2,
                  epochs=2, d_hidden=16)


# ---------------------------------------------------------------- the warm-up's cross-entropy


def prior_batch(task, seed=0, n=6):
    rng = np.random.default_rng(seed)
    x = task.sample_prompts(rng, n)
    y, m = task.sample_prior(x, rng)
    return x, y, m


@pytest.mark.parametrize("kind", ["mlp", "bigram"])
def test_cross_entropy_gradients_match_finite_differences(kind):
    # the length task's prior has random lengths: the batch holds padding
    task = make_task("length")
    rng = np.random.default_rng(1)
    model = (MLPPolicy(task.vocab_size, 4, 3, 5, rng, max_len=12) if kind == "mlp"
             else BigramPolicy(task.vocab_size, rng))
    x, y, m = prior_batch(task)
    assert 0 < m.sum() < m.size
    loss, grads = cross_entropy_and_grads(model, x, y, m)

    def f(p):
        return cross_entropy_and_grads(model, x, y, m, params=p)[0]

    report = gradcheck(f, model.params, grads, n_coords=12, rng=np.random.default_rng(2))
    assert all(c.close for c in report.values()), "\n".join(str(c) for c in report.values())
    assert not any(np.all(g == 0) for name, g in grads.items() if name not in ("w_v", "b_v", "v"))


def test_cross_entropy_by_hand():
    # bigram policy with W[a] = log q for every previous token a: pi(y) = q(y) at every step
    task = make_task("length")  # K = 9: PAD, BOS, EOS, 6 content tokens
    model = BigramPolicy(task.vocab_size, np.random.default_rng(0))
    q = np.array([0, 0, 0.25, 0.25, 0.1, 0.1, 0.1, 0.1, 0.1])
    with np.errstate(divide="ignore"):
        W = np.tile(np.where(q > 0, np.log(np.where(q > 0, q, 1)), 0.0), (task.vocab_size, 1))
    params = {"W": W, "v": np.zeros(task.vocab_size)}
    x = np.array([[1, 4], [1, 5]])
    y = np.array([[3, 4, 2, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0, 0]])
    m = (np.arange(7) < np.array([[3], [1]])).astype(float)
    loss, _ = cross_entropy_and_grads(model, x, y, m, params=params)
    # tokens a (0.25), b (0.1), EOS (0.25) and EOS (0.25): -(3 log 0.25 + log 0.1) / 4
    assert loss == pytest.approx(-(3 * math.log(0.25) + math.log(0.1)) / 4, rel=1e-12)


def test_warm_up_makes_the_reference_a_model_of_the_prior():
    config = PPOConfig(task="target", warmup_steps=150, iterations=0)
    state = new_run(config)
    losses = state.warmup_losses
    # The prior: n ~ U{1..5} content tokens, uniform over N = 6, then EOS. The least
    # cross-entropy per token is its entropy: per response n log 6 + H(n) nats over n + 1
    # tokens, E[n] = 3, so (3 log 6 + log 5) / 4 = 1.7461. The first policy is nearly
    # uniform over the 7 tokens it can emit: about log 7 = 1.9459.
    entropy_rate = (3 * math.log(6) + math.log(5)) / 4
    assert abs(losses[0] - math.log(7)) < 0.1
    assert abs(np.mean(losses[-30:]) - entropy_rate) < 0.03, np.mean(losses[-30:])
    # the reference reproduces the prior's length distribution: uniform 1 .. T - 1, then EOS
    task = state.task
    rng = np.random.default_rng(9)
    x = task.sample_prompts(rng, 2000)
    from ppo_numpy.models.sampling import sample

    r = sample(state.reference, x, rng, task.max_new_tokens)
    n, stopped = response_lengths(r.responses, r.mask)
    assert np.mean(stopped) > 0.95
    counts = np.bincount(n[stopped], minlength=task.max_new_tokens)[1:task.max_new_tokens]
    assert np.all(np.abs(counts / stopped.sum() - 1 / 5) < 0.05), counts
    # and the reference equals the policy at the start of PPO
    for name, p in state.policy.params.items():
        assert np.array_equal(p, state.reference.params[name])
        assert p is not state.reference.params[name]


# ---------------------------------------------------------------- one iteration, checked by hand


def test_first_iteration_bookkeeping(monkeypatch):
    captured = {}
    real_sample = loop.sample

    def spy(model, prompts, rng, max_new_tokens, temperature=1.0):
        captured["rollout"] = real_sample(model, prompts, rng, max_new_tokens, temperature)
        return captured["rollout"]

    monkeypatch.setattr(loop, "sample", spy)
    state = new_run(QUICK)
    ref_before = {k: v.copy() for k, v in state.reference.params.items()}
    row = ppo_iteration(state)
    r = captured["rollout"]
    task = state.task
    assert list(row) == list(COLUMNS)
    assert row["iteration"] == 1 and state.iteration == 1
    # pi_theta = pi_ref before the first update: KL to the reference is exactly 0
    assert row["kl_ref"] == 0.0
    assert row["ratio_first_min"] == row["ratio_first_max"] == row["ratio_first_mean"] == 1.0
    scores = task.score(r.prompts, r.responses, r.mask)
    assert row["score"] == float(np.mean(scores))
    assert row["score_frac"] == row["score"] / task.optimum
    lengths = r.mask.sum(axis=1)
    assert row["response_length"] == float(np.mean(lengths))
    ends = r.responses[np.arange(len(lengths)), lengths.astype(int) - 1]
    assert row["eos_frac"] == float(np.mean(ends == 2))
    assert row["beta"] == QUICK.beta
    # the update moved the policy but never the reference
    for name, p in state.reference.params.items():
        assert np.array_equal(p, ref_before[name])
    assert any(not np.array_equal(state.policy.params[k], ref_before[k]) for k in ref_before)
    assert all(np.isfinite(v) for v in row.values())


def test_kl_ref_and_explained_variance_follow_their_definitions(monkeypatch):
    # iteration 2 (pi_theta != pi_ref), from the rollout, by plain loops over each response
    rollouts = []
    real_sample = loop.sample

    def spy(model, prompts, rng, max_new_tokens, temperature=1.0):
        rollouts.append(real_sample(model, prompts, rng, max_new_tokens, temperature))
        return rollouts[-1]

    monkeypatch.setattr(loop, "sample", spy)
    config = QUICK.replace(lam=0.9)
    state = new_run(config)
    ppo_iteration(state)
    row = ppo_iteration(state)
    r, task, beta = rollouts[-1], state.task, config.beta
    P = r.prompts.shape[1]
    logits, _, _ = state.reference.forward(np.concatenate([r.prompts, r.responses], 1)[:, :-1])
    kl_sums, R_all, V_all = [], [], []
    scores = task.score(r.prompts, r.responses, r.mask)
    for b in range(len(scores)):
        n = int(r.mask[b].sum())
        k1 = []
        for t in range(n):
            z = logits[b, P - 1 + t]
            logp_ref = z[r.responses[b, t]] - z.max() - math.log(np.exp(z - z.max()).sum())
            k1.append(r.logp[b, t] - logp_ref)
        kl_sums.append(sum(k1))
        # r~_t = -beta k1_t, plus the score at the last token; V after the last token is 0
        rewards = [-beta * k for k in k1]
        rewards[-1] += scores[b]
        V = list(r.values[b, :n]) + [0.0]
        A = 0.0
        R = [0.0] * n
        for t in reversed(range(n)):
            A = rewards[t] + V[t + 1] - V[t] + config.lam * A
            R[t] = A + V[t]
        R_all += R
        V_all += V[:n]
    assert row["kl_ref"] != 0.0
    assert row["kl_ref"] == pytest.approx(np.mean(kl_sums), rel=1e-12)
    R_all, V_all = np.array(R_all), np.array(V_all)
    ev = 1 - np.var(R_all - V_all) / np.var(R_all)
    assert row["explained_variance"] == pytest.approx(ev, rel=1e-10)


def test_stale_logp_old_stops_the_run(monkeypatch):
    real_sample = loop.sample

    def stale(model, prompts, rng, max_new_tokens, temperature=1.0):
        r = real_sample(model, prompts, rng, max_new_tokens, temperature)
        stale = np.where(r.mask == 1, r.logp * (1 + 1e-12), 0.0)
        return dataclasses.replace(r, logp=stale, logp_old=stale)

    monkeypatch.setattr(loop, "sample", stale)
    state = new_run(QUICK)
    with pytest.raises(RatioNotOneError, match="iteration 1: on the first minibatch rho must be "
                                               "exactly 1"):
        ppo_iteration(state)


# ---------------------------------------------------------------- learning


def test_short_training_improves_the_score_and_logs_finite_statistics():
    config = PPOConfig(task="length", iterations=30, warmup_steps=60)
    history = train(config)
    scores = np.array([row["score"] for row in history])
    initial, final = scores[0], scores[-5:].mean()
    assert final > initial + 0.3, (initial, final)
    assert final > 0.75
    for row in history:
        bad = {k: v for k, v in row.items() if not np.isfinite(v)}
        assert not bad, (row["iteration"], bad)
        assert row["ratio_first_min"] == row["ratio_first_max"] == 1.0
    assert max(row["kl_ref"] for row in history) > 0


def test_same_seed_same_history_other_seed_other_history():
    a = train(QUICK)
    b = train(QUICK)
    c = train(QUICK.replace(seed=1))
    assert a == b
    assert a != c


# ---------------------------------------------------------------- outputs, checkpoint, resume


def test_outputs_and_bit_identical_resume(tmp_path):
    full = tmp_path / "full"
    history = train(QUICK.replace(iterations=6), full)
    assert [r["iteration"] for r in history] == list(range(1, 7))
    for name in ("metrics.csv", "checkpoint.npz", "config.json", "dashboard.png"):
        assert (full / name).exists(), name
    # the CSV holds exactly the returned values
    cols = read_metrics(full / "metrics.csv")
    for name in COLUMNS:
        assert cols[name].tolist() == [r[name] for r in history]

    # stopped after 3 iterations, then resumed to 6
    part = tmp_path / "part"
    train(QUICK.replace(iterations=3), part, plot=False)
    resumed = resume(part, {"iterations": 6}, plot=False)
    assert resumed == history
    assert (part / "metrics.csv").read_bytes() == (full / "metrics.csv").read_bytes()

    # interrupted inside iteration 5 (after 4 rows were written), then resumed
    cut = tmp_path / "cut"

    def interrupt(row):
        if row["iteration"] == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(QUICK.replace(iterations=6), cut, callback=interrupt, plot=False)
    assert len(read_rows(cut / "metrics.csv")) == 4
    resume(cut, plot=False)
    assert (cut / "metrics.csv").read_bytes() == (full / "metrics.csv").read_bytes()


def test_resume_keeps_only_the_checkpointed_rows(tmp_path):
    # a row written after the last checkpoint (a kill between the two) is dropped and redone
    out = tmp_path / "run"
    train(QUICK.replace(iterations=3), out, plot=False)
    text = (out / "metrics.csv").read_text()
    last = text.splitlines()[-1]
    (out / "metrics.csv").write_text(text + last.replace("3,", "4,", 1) + "\n")
    resume(out, {"iterations": 3}, plot=False)
    assert (out / "metrics.csv").read_text() == text


def test_refusals(tmp_path):
    out = tmp_path / "run"
    train(QUICK.replace(iterations=2), out, plot=False)
    before = (out / "metrics.csv").read_bytes()
    with pytest.raises(RunError, match="already holds a run .*--force"):
        train(QUICK, out)
    with pytest.raises(RunError, match="another configuration: epsilon = 0.2 in the "
                                       "checkpoint, 0.3 asked"):
        resume(out, {"epsilon": 0.3})
    with pytest.raises(RunError, match="already has 2 iterations; iterations = 1 would "
                                       "shorten it"):
        resume(out, {"iterations": 1})
    with pytest.raises(RunError, match="no checkpoint"):
        resume(tmp_path / "nothing-here")
    # Adam's state keeps its own keys ("m/W1"); renamed ones are refused, as is version 1
    saved = load_checkpoint(out / "checkpoint.npz")
    assert "m/W1" in saved["optimizer_state"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.csv").write_bytes(before)
    renamed = {k.replace("/", "|"): v for k, v in saved["optimizer_state"].items()}
    save_checkpoint(other / "checkpoint.npz", saved["params"], renamed, saved["extra"])
    with pytest.raises(RunError, match="optimizer state does not match"):
        resume(other)
    save_checkpoint(other / "checkpoint.npz", saved["params"], saved["optimizer_state"],
                    dict(saved["extra"], version=np.array(1)))
    with pytest.raises(RunError, match="checkpoint version 1, this code reads 2"):
        resume(other)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RunError, match="cannot write there|not a directory"):
        train(QUICK, blocker / "sub")
    assert (out / "metrics.csv").read_bytes() == before
    # --force replaces the run
    train(QUICK.replace(iterations=1), out, force=True, plot=False)
    assert len(read_rows(out / "metrics.csv")) == 1


# ---------------------------------------------------------------- KL controller, beta sweep


def test_adaptive_beta_follows_the_controller_formula():
    config = QUICK.replace(kl_controller="adaptive", beta=0.1, kl_target=0.5, kl_horizon=50.0,
                           iterations=5)
    history = train(config)
    assert history[0]["beta"] == 0.1
    for prev, row in zip(history, history[1:]):
        # beta_{k+1} = beta_k (1 + clip(KL_k / KL_target - 1, -0.2, 0.2) * B / horizon)
        error = min(max(prev["kl_ref"] / 0.5 - 1, -0.2), 0.2)
        assert row["beta"] == pytest.approx(prev["beta"] * (1 + error * 16 / 50.0), rel=1e-14)
    assert len({row["beta"] for row in history}) > 1


def test_beta_sweep_shares_the_warm_up_and_equals_separate_runs():
    config = QUICK.replace(iterations=3)
    results = beta_sweep([0.0, 0.2], config)
    assert results[0.2] == train(config.replace(beta=0.2))
    assert results[0.0] == train(config.replace(beta=0.0))


def test_larger_beta_stays_closer_to_the_reference():
    config = PPOConfig(task="target", iterations=25, warmup_steps=100)
    results = beta_sweep([0.0, 0.5], config)
    kl = {b: np.mean([r["kl_ref"] for r in h[-5:]]) for b, h in results.items()}
    score = {b: np.mean([r["score"] for r in h[-5:]]) for b, h in results.items()}
    assert kl[0.5] < 0.5 * kl[0.0], kl
    assert score[0.5] < score[0.0], score


# ---------------------------------------------------------------- config and metrics


def test_config_checks_name_the_field():
    with pytest.raises(ValueError, match="iterations: must be >= 0, got -1"):
        PPOConfig(iterations=-1)
    with pytest.raises(ValueError, match="task: unknown value 'nope'"):
        PPOConfig(task="nope")
    with pytest.raises(ValueError, match="minibatches: must divide batch_size=64, got 5"):
        PPOConfig(minibatches=5)
    with pytest.raises(ValueError, match="lam: must be in"):
        PPOConfig(lam=1.5)
    with pytest.raises(TypeError, match="epochs: expected int"):
        PPOConfig(epochs=2.0)
    c = PPOConfig(value_clip=0.2, max_grad_norm=None)
    assert PPOConfig.from_json(c.to_json()) == c
    assert c.differences(c.replace(iterations=7)) == {}
    assert c.differences(c.replace(epsilon=0.1)) == {"epsilon": (0.2, 0.1)}
    for f in dataclasses.fields(PPOConfig):
        assert f.metadata["help"], f.name


def test_docs_list_every_config_field_and_column():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    for f in dataclasses.fields(PPOConfig):
        assert f"| `{f.name}` |" in text, f.name
    for name in COLUMNS:
        assert f"`{name}`" in text, name


def test_explained_variance_limits():
    R = np.array([1.0, 3.0, 2.0, 5.0])
    assert explained_variance(R, R) == 1.0
    # predicting the mean of R explains nothing
    assert explained_variance(np.full(4, R.mean()), R) == 0.0
    assert math.isnan(explained_variance(np.zeros(3), np.ones(3)))
    # padding is ignored
    assert explained_variance([1.0, 2.0, 2.0, 99.0], [1.0, 3.0, 2.0, -5.0], [1, 1, 1, 0]) == \
        pytest.approx(2 / 3, rel=1e-14)


def test_csv_floats_round_trip_exactly():
    for x in (0.1, 1 / 3, 2.0**-1074, 1e300, -0.0, 123456789.123456789):
        assert float(format_value(x)) == x
    assert format_value(7) == "7" and format_value(np.int64(7)) == "7"


def test_dashboard_and_sweep_figures(tmp_path):
    from ppo_numpy.plotting.training import plot_beta_sweep, plot_training

    history = train(QUICK.replace(iterations=2))
    fig = plot_training(history, random_score=0.1, path=tmp_path / "d.png")
    assert (tmp_path / "d.png").stat().st_size > 10_000
    assert len(fig.axes) >= 9
    fig = plot_beta_sweep({0.0: history, 0.1: history}, last=2)
    assert len(fig.axes) == 3
    with pytest.raises(ValueError, match="metrics: no iteration"):
        plot_training([])
