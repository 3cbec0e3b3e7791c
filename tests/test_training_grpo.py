"""Critic-free training (``algo`` grpo, rloo, reinforce_plus_plus): the groups of one
iteration, its advantages against hand computations, no value head, KL in the loss,
the ratio check, determinism, resume and the CLI."""

from __future__ import annotations

import dataclasses
import math
import statistics

import numpy as np
import pytest

from ppo_numpy.batch import Rollout
from ppo_numpy.family.advantages import grpo_advantages
from ppo_numpy.programs.train import main as train_main
from ppo_numpy.training import loop
from ppo_numpy.training.config import PPOConfig
from ppo_numpy.training.loop import RatioNotOneError, new_run, ppo_iteration
from ppo_numpy.training.metrics import COLUMNS, read_rows
from ppo_numpy.training.run import resume, train

# B = 16 responses: 4 prompts x G = 4
QUICK = PPOConfig(algo="grpo", group_size=4, task="length", iterations=3, warmup_steps=10,
                  batch_size=16, minibatches=2, epochs=2, d_hidden=16)


def one_iteration(monkeypatch, config, iterations=1):
    """Run ``iterations`` iterations; return the last one's rollout, full batch, row, state."""
    seen = {}
    real_sample, real_rows = loop.sample, Rollout.rows

    def spy_sample(model, prompts, rng, max_new_tokens, temperature=1.0):
        seen["rollout"] = real_sample(model, prompts, rng, max_new_tokens, temperature)
        seen.pop("batch", None)
        return seen["rollout"]

    def spy_rows(self, idx):
        seen.setdefault("batch", self)  # the first minibatch is cut from the whole batch
        return real_rows(self, idx)

    monkeypatch.setattr(loop, "sample", spy_sample)
    monkeypatch.setattr(Rollout, "rows", spy_rows)
    state = new_run(config)
    for _ in range(iterations):
        row = ppo_iteration(state)
    return seen["rollout"], seen["batch"], row, state


def hand_kl_returns(rollout, batch, beta):
    """score - beta sum_t (logp_old - logp_ref) of each response, by a loop over its tokens."""
    out = []
    for b in range(rollout.B):
        n = int(rollout.mask[b].sum())
        kl = sum(batch.logp_old[b, t] - batch.logp_ref[b, t] for t in range(n))
        out.append(batch.scores[b] - beta * kl)
    return out


def hand_grpo(values, G, eps):
    """(s - mean) / (std + eps) per block of G, std with divisor G - 1, by plain loops."""
    A = []
    for start in range(0, len(values), G):
        block = values[start:start + G]
        mean = sum(block) / G
        std = math.sqrt(sum((v - mean) ** 2 for v in block) / (G - 1))
        A += [0.0 if std == 0 else (v - mean) / (std + eps) for v in block]
    return A


def test_groups_are_consecutive_copies_and_advantages_are_grpo_of_the_scores(monkeypatch):
    config = QUICK.replace(beta=0.0)
    r, batch, row, state = one_iteration(monkeypatch, config)
    G, P = 4, 16 // 4
    # 4 prompts, each in 4 consecutive rows; groups = prompt ids 0 0 0 0 1 1 1 1 ...
    for p in range(P):
        block = r.prompts[p * G:(p + 1) * G]
        assert (block == block[0]).all(), (p, block)
    assert batch.groups.tolist() == [p for p in range(P) for _ in range(G)]
    # the scores, by the task's rule on the sampled responses
    scores = state.task.score(r.prompts, r.responses, r.mask)
    assert batch.scores.tolist() == scores.tolist()
    expected = grpo_advantages(scores, np.repeat(np.arange(P), G))
    # the same A_i on every token of response i, 0 at padding
    for b in range(16):
        n = int(r.mask[b].sum())
        assert (batch.advantages[b, :n] == expected[b]).all(), b
        assert (batch.advantages[b, n:] == 0).all(), b
    # and against plain loops (verl's eps 1e-6 and ddof 1)
    assert batch.advantages[:, 0] == pytest.approx(hand_grpo(list(scores), G, 1e-6), rel=1e-12)
    assert np.ptp(scores) > 0  # not a degenerate batch of equal scores
    assert math.isnan(row["explained_variance"]) and math.isnan(row["value_loss"])


def test_kl_in_the_reward_enters_the_grpo_return(monkeypatch):
    # iteration 2, where pi_theta != pi_ref: score - beta sum_t k1_t, then the group baseline
    config = QUICK.replace(beta=0.3, grpo_scale="none")
    r, batch, row, _ = one_iteration(monkeypatch, config, iterations=2)
    returns = hand_kl_returns(r, batch, 0.3)
    assert row["kl_ref"] != 0  # an estimate of KL on 16 samples: either sign
    centred = []
    for start in range(0, 16, 4):
        block = returns[start:start + 4]
        centred += [v - sum(block) / 4 for v in block]
    assert batch.advantages[:, 0] == pytest.approx(centred, rel=1e-9, abs=1e-12)


def test_rloo_and_reinforce_plus_plus_advantages_by_hand(monkeypatch):
    r, batch, _, _ = one_iteration(monkeypatch, QUICK.replace(algo="rloo", beta=0.0))
    s = batch.scores.tolist()
    rloo = [s[i] - (sum(s[i - i % 4:i - i % 4 + 4]) - s[i]) / 3 for i in range(16)]
    assert batch.advantages[:, 0] == pytest.approx(rloo, rel=1e-12, abs=1e-15)

    config = QUICK.replace(algo="reinforce_plus_plus", beta=0.2, gamma=0.9)
    r, batch, _, _ = one_iteration(monkeypatch, config, iterations=2)
    G_all, where = [], []
    for b in range(16):
        n = int(r.mask[b].sum())
        rew = [-0.2 * (batch.logp_old[b, t] - batch.logp_ref[b, t]) for t in range(n)]
        rew[-1] += batch.scores[b]
        ret, G_t = 0.0, [0.0] * n
        for t in reversed(range(n)):
            ret = rew[t] + 0.9 * ret
            G_t[t] = ret
        G_all += G_t
        where += [(b, t) for t in range(n)]
    mean, std = statistics.fmean(G_all), statistics.stdev(G_all)  # ddof 1
    expected = [(g - mean) / math.sqrt(std**2 + 1e-8) for g in G_all]
    assert [batch.advantages[b, t] for b, t in where] == pytest.approx(expected, rel=1e-9)
    assert (batch.advantages[r.mask == 0] == 0).all()


@pytest.mark.parametrize("algo", ["grpo", "rloo", "reinforce_plus_plus"])
def test_no_gradient_reaches_the_value_head(monkeypatch, algo):
    seen = []
    real = loop.loss_and_grads_kernel

    def spy(model, batch, opts, **kw):
        loss, grads, stats = real(model, batch, opts, **kw)
        seen.append((kw["c_v"], {k: g.copy() for k, g in grads.items()}))
        return loss, grads, stats

    monkeypatch.setattr(loop, "loss_and_grads_kernel", spy)
    state = new_run(QUICK.replace(algo=algo))
    before = {k: v.copy() for k, v in state.policy.params.items()}
    for _ in range(2):
        ppo_iteration(state)
    assert all(c_v == 0.0 for c_v, _ in seen)
    assert all(not g["w_v"].any() and not g["b_v"].any() for _, g in seen)
    for name in ("w_v", "b_v"):
        assert np.array_equal(state.policy.params[name], before[name]), name
    assert not np.array_equal(state.policy.params["W_pi"], before["W_pi"])


def test_ppo_still_trains_its_value_head():
    # the test above can fail: PPO's value head does move
    state = new_run(QUICK.replace(algo="ppo", group_size=None))
    before = state.policy.params["w_v"].copy()
    ppo_iteration(state)
    assert not np.array_equal(state.policy.params["w_v"], before)


def test_kl_in_the_loss_reaches_the_kernel(monkeypatch):
    seen = []
    real = loop.loss_and_grads_kernel

    def spy(model, batch, opts, **kw):
        out = real(model, batch, opts, **kw)
        seen.append((opts, batch.logp_ref is not None))
        return out

    monkeypatch.setattr(loop, "loss_and_grads_kernel", spy)
    config = QUICK.replace(beta=0.0, kl_loss_coef=0.04, kl_loss_estimator="k3",
                           importance_level="sequence", agg="grpo")
    state = new_run(config)
    rows = [ppo_iteration(state) for _ in range(2)]
    opts, has_ref = seen[0]
    assert (opts.kl_coef, opts.kl_estimator, opts.importance_level, opts.agg) == (
        0.04, "k3", "sequence", "grpo")
    assert has_ref
    # beta = 0: no KL in the reward; the first minibatch's rho is still exactly 1
    assert all(r["beta"] == 0.0 for r in rows)
    assert all(r["ratio_first_min"] == r["ratio_first_max"] == r["ratio_first_mean"] == 1.0
               for r in rows)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_stale_logp_old_stops_a_grpo_run(monkeypatch, level):
    real_sample = loop.sample

    def stale(model, prompts, rng, max_new_tokens, temperature=1.0):
        r = real_sample(model, prompts, rng, max_new_tokens, temperature)
        bad = np.where(r.mask == 1, r.logp * (1 + 1e-12), 0.0)
        return dataclasses.replace(r, logp=bad, logp_old=bad)

    monkeypatch.setattr(loop, "sample", stale)
    state = new_run(QUICK.replace(importance_level=level))
    with pytest.raises(RatioNotOneError, match="iteration 1: on the first minibatch rho"):
        ppo_iteration(state)


@pytest.mark.parametrize("algo", ["grpo", "rloo", "reinforce_plus_plus"])
def test_rows_well_formed_deterministic_and_resume_byte_identical(tmp_path, algo):
    config = QUICK.replace(algo=algo, iterations=4)
    a, b = tmp_path / "a", tmp_path / "b"
    history = train(config, a, plot=False)
    train(config, b, plot=False)
    assert (a / "metrics.csv").read_bytes() == (b / "metrics.csv").read_bytes()
    rows = read_rows(a / "metrics.csv")
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    assert all(len(r) == len(COLUMNS) for r in rows)
    for row in history:
        assert list(row) == list(COLUMNS)
        nan = sorted(k for k, v in row.items() if math.isnan(v))
        assert nan == ["explained_variance", "return_variance", "value_loss"], nan
        assert row["ratio_first_min"] == row["ratio_first_max"] == 1.0
    other = train(config.replace(seed=1))
    assert [r["score"] for r in other] != [r["score"] for r in history]
    # stopped after 2, resumed to 4: the same bytes
    part = tmp_path / "part"
    train(config.replace(iterations=2), part, plot=False)
    resume(part, {"iterations": 4}, plot=False)
    assert (part / "metrics.csv").read_bytes() == (a / "metrics.csv").read_bytes()


def test_default_ppo_config_samples_one_response_per_prompt(monkeypatch):
    r, batch, _, _ = one_iteration(monkeypatch, QUICK.replace(algo="ppo", group_size=None))
    assert batch.groups.tolist() == list(range(16))
    assert not math.isnan(ppo_iteration(new_run(QUICK.replace(algo="ppo", group_size=None)))[
        "explained_variance"])


@pytest.mark.parametrize("changes, message", [
    ({"algo": "ppo2"}, "algo: unknown value 'ppo2'"),
    ({"group_size": 3}, "group_size: must divide batch_size=16"),
    ({"group_size": 1}, "group_size: grpo needs at least 2 responses per prompt"),
    ({"algo": "rloo", "group_size": 1}, "group_size: rloo needs at least 2"),
    ({"group_size": 0}, "group_size: must be > 0 or None, got 0"),
    ({"grpo_std_eps": -1.0}, "grpo_std_eps: must be >= 0"),
    ({"grpo_scale": "std"}, "grpo_scale: unknown value 'std'"),
    ({"importance_level": "seq"}, "importance_level: unknown value 'seq'"),
    ({"kl_loss_coef": -0.1}, "kl_loss_coef: must be >= 0"),
    ({"kl_loss_estimator": "k4"}, "kl_loss_estimator: unknown value 'k4'"),
    ({"agg": "sum"}, "agg: unknown value 'sum'"),
])
def test_bad_config_values_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        QUICK.replace(**changes)


def test_reinforce_plus_plus_takes_one_response_per_prompt():
    assert QUICK.replace(algo="reinforce_plus_plus", group_size=1).group_size == 1


def test_cli_trains_grpo_and_refuses_bad_values_in_one_line(tmp_path, capsys):
    out = tmp_path / "run"
    code = train_main(["--algo", "grpo", "--group-size", "4", "--batch-size", "16",
                       "--minibatches", "2", "--epochs", "1", "--iterations", "2",
                       "--warmup-steps", "5", "--d-hidden", "16", "--out", str(out),
                       "--quiet"])
    assert code == 0
    assert (out / "dashboard.png").exists() and len(read_rows(out / "metrics.csv")) == 2
    capsys.readouterr()
    assert train_main(["--algo", "grpo", "--group-size", "3", "--out",
                       str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "group_size: must divide batch_size=64" in err
    with pytest.raises(SystemExit) as exit_:
        train_main(["--algo", "dpo"])
    assert exit_.value.code == 2
