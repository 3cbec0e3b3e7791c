"""The over-optimisation experiment: the loop's score_fn hook, a tiny run end to end
(CSV, PNG, summary; finite, deterministic), the summary by hand, the CLI and its checks.
The effect itself (gold falling for beta = 0) takes a minute and is reported in
docs/overoptimisation.md, not asserted here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ppo_numpy.programs import overoptimisation as overoptimisation_cli
from ppo_numpy.reward import overoptimisation as oo
from ppo_numpy.training.config import PPOConfig
from ppo_numpy.training.loop import new_run, ppo_iteration

TINY = PPOConfig(task="length", iterations=1, warmup_steps=5, batch_size=8, minibatches=2,
                 epochs=1, d_hidden=8)


def test_score_fn_replaces_the_task_rule_in_the_loop():
    seen = []

    def constant(prompts, responses, mask):
        seen.append((prompts.shape, responses.shape, mask.shape))
        return np.full(prompts.shape[0], 0.7)

    state = new_run(TINY)
    state.score_fn = constant
    row = ppo_iteration(state)
    assert row["score"] == pytest.approx(0.7, rel=1e-15)
    T = state.task.max_new_tokens
    assert seen == [((8, 2), (8, T), (8, T))]
    # without it, the task's rule
    plain = ppo_iteration(new_run(TINY))
    assert plain["score"] != pytest.approx(0.7)


def test_proxy_and_gold_recorder_returns_the_proxy_and_remembers_both_means():
    rec = oo._ProxyAndGold(lambda x, y, m: np.array([1.0, 2.0]),
                           lambda x, y, m: np.array([0.0, 0.5]))
    out = rec(None, None, None)
    assert out.tolist() == [1.0, 2.0] and rec.last == (1.5, 0.25)


def test_quick_run_writes_finite_outputs_and_is_deterministic(tmp_path):
    assert overoptimisation_cli.main(["--quick", "--quiet", "--out", str(tmp_path)]) == 0
    rows = oo.read_csv(tmp_path / "overoptimisation.csv")
    q = oo.QUICK
    assert len(rows) == len(q.betas) * q.iterations
    assert [(r["beta"], r["iteration"]) for r in rows] == \
        [(b, i) for b in q.betas for i in range(1, q.iterations + 1)]
    for r in rows:
        assert all(math.isfinite(v) for v in r.values()), r
        assert r["sqrt_kl"] == math.sqrt(max(r["kl_ref"], 0.0))
        assert 0.0 <= r["gold_score"] <= 1.0
    # iteration 1 of every beta: pi_theta = pi_ref, the same start and generator state
    firsts = [r for r in rows if r["iteration"] == 1]
    assert all(r["kl_ref"] == 0.0 for r in firsts)
    assert len({(r["proxy_score"], r["gold_score"]) for r in firsts}) == 1
    assert (tmp_path / "overoptimisation.png").stat().st_size > 10_000
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["final"]) == {str(b) for b in q.betas}
    assert 0.0 <= summary["heldout"]["gold_accuracy"] <= 1.0
    # the same configuration gives the same numbers, bit for bit
    again = oo.run_overoptimisation(q)
    assert again.rows == rows


def test_gold_is_the_task_rule_and_proxy_the_calibrated_model_on_each_rollout(monkeypatch):
    import ppo_numpy.training.loop as loop

    rollouts = []
    real = loop.sample

    def spy(*args, **kwargs):
        rollouts.append(real(*args, **kwargs))
        return rollouts[-1]

    monkeypatch.setattr(loop, "sample", spy)
    config = oo.QUICK.replace(betas=(0.0,), iterations=2)
    result = oo.run_overoptimisation(config)
    from ppo_numpy.training.tasks import make_task

    task = make_task(config.task)
    model = result.reward_model
    # only the PPO rollouts go through loop.sample (the warm-up uses the prior)
    assert len(rollouts) == 2
    for r, row in zip(rollouts, result.rows):
        gold = task.score(r.prompts, r.responses, r.mask)
        raw = model.reward(r.prompts, r.responses, r.mask)
        assert row["gold_score"] == float(np.mean(gold))
        assert row["proxy_score"] == pytest.approx(
            float(np.mean(model.offset + model.scale * raw)), rel=1e-14)


def test_summary_by_hand():
    rows = [{"beta": 0.0, "iteration": i + 1, "proxy_score": p, "gold_score": g, "kl_ref": k,
             "sqrt_kl": math.sqrt(k), "response_length": 3.0, "eos_frac": 1.0}
            for i, (p, g, k) in enumerate([(0.1, 0.2, 0.0), (0.3, 0.6, 1.0), (0.5, 0.4, 4.0),
                                           (0.9, 0.1, 9.0)])]
    s = oo.summarise(rows, last=2)[0.0]
    assert s["proxy"] == pytest.approx(0.7) and s["gold"] == pytest.approx(0.25)
    assert s["kl_ref"] == pytest.approx(6.5)
    # windows of 2: 0.4, 0.5, 0.25 -> the peak 0.5 ends at iteration 3
    assert s["gold_peak"] == pytest.approx(0.5) and s["gold_peak_iteration"] == 3
    with pytest.raises(ValueError, match="last: must be an integer >= 1"):
        oo.summarise(rows, last=0)


def test_csv_round_trip_is_exact(tmp_path):
    rows = [{"beta": 0.1, "iteration": 1, "proxy_score": 1 / 3, "gold_score": 0.1,
             "kl_ref": 2.0**-1074, "sqrt_kl": 0.0, "response_length": 4.25, "eos_frac": 1.0}]
    oo.write_csv(rows, tmp_path / "a.csv")
    assert oo.read_csv(tmp_path / "a.csv") == rows
    (tmp_path / "b.csv").write_text("x,y\n1,2\n")
    with pytest.raises(ValueError, match="not an overoptimisation.csv"):
        oo.read_csv(tmp_path / "b.csv")


def test_config_checks_name_the_field(capsys):
    with pytest.raises(ValueError, match="betas: need at least one"):
        oo.OveroptimisationConfig(betas=())
    with pytest.raises(ValueError, match="betas: need at least one finite beta >= 0"):
        oo.OveroptimisationConfig(betas=(0.0, -0.1))
    with pytest.raises(ValueError, match="betas: repeated"):
        oo.OveroptimisationConfig(betas=(0.1, 0.1))
    with pytest.raises(ValueError, match="n_pairs: must be an integer >= 1"):
        oo.OveroptimisationConfig(n_pairs=0)
    with pytest.raises(ValueError, match="task: unknown value 'nope'"):
        oo.OveroptimisationConfig(task="nope")
    with pytest.raises(TypeError, match="config: expected an OveroptimisationConfig"):
        oo.run_overoptimisation(PPOConfig())
    assert overoptimisation_cli.main(["--quick", "--betas", "0,-1"]) == 2
    assert "betas" in capsys.readouterr().err
    for flag, value, match in [("--tau", "-1", "tau: must be >= 0"),
                               ("--random-frac", "1.5", "random_frac: must be <= 1"),
                               ("--rm-lr", "0", "rm_lr: must be > 0"),
                               ("--seed", "-1", "seed: must be >= 0")]:
        assert overoptimisation_cli.main(["--quick", flag, value]) == 2
        assert match in capsys.readouterr().err
    assert overoptimisation_cli.main(["--quick", "--out", "/proc/no-such-dir/x"]) == 2
    assert "cannot write there" in capsys.readouterr().err
    assert oo.OveroptimisationConfig(betas=(0, 1)).betas == (0.0, 1.0)


def test_reward_model_fit_figure():
    from ppo_numpy.plotting.overoptimisation import plot_overoptimisation, plot_reward_model_fit

    _, history, _ = oo.fit_proxy(oo.QUICK)
    fig = plot_reward_model_fit(history)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="history: nothing"):
        plot_reward_model_fit([])
    with pytest.raises(ValueError, match="rows: nothing"):
        plot_overoptimisation([])
