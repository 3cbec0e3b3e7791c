"""The value head learns: the demo's run (issue 15, item 3) and a critic that predicts (issue 25).

Issue 15's criterion and its table below were measured with the first version's value head
(``value_hidden`` 0, linear on the policy's features); the default critic since issue 25
(its own layer, ``value_hidden`` 64) passes the same tests. The second half of this file is
issue 25's: the critic beats a constant and predicts on ``target``, its layer's gradients,
the value warm-up, the true value V^pi by Monte Carlo, the dashboard's words.

On the default ``length`` run explained variance is about 0 while the policy learns and
noise afterwards (``docs/training.md``). That is the task, not a broken critic: a state
predicts little of its return (the best function of (prompt token, position) reaches a
held-out explained variance of 0.20), and once nearly every response scores 1, Var(R) is
tiny. What shows the critic learning is that its loss follows Var(R) down. Measured over
seeds 0-5 with ``critic_summary(history_to_columns(train(PPOConfig(seed=s))))``:

====  ==============  ===============  ========================  ===================
seed  learning phase  EV, median over  value loss drop (first 5  median of value loss
      (iterations)    learning phase   -> last 10 iterations)    / (Var(R) / 2)
====  ==============  ===============  ========================  ===================
0     17              -0.009           12.8x                     1.08
1     14              0.194            13.6x                     1.03
2     22              0.112            18.7x                     1.04
3     18              0.032            16.2x                     1.03
4     28              0.192            10.8x                     0.49
5     14              0.076            22.0x                     1.24
====  ==============  ===============  ========================  ===================

The thresholds below leave a margin on every one of them: a value loss falling at least
5x, never much worse than the loss of a constant V (ratio at most 1.5), and explained
variance over the learning phase at least -0.1. A value head that is not trained (c_V = 0,
30 iterations, seed 0) fails all three: its loss grows (drop 0.55x), its median loss is
4.4 times a constant's, its explained variance over the learning phase is -0.28.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ppo_numpy.programs.demo import describe_critic
from ppo_numpy.training import PPOConfig, train
from ppo_numpy.training.metrics import critic_summary, history_to_columns, learning_phase_end


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_demo_runs_critic_learns(seed):
    c = history_to_columns(train(PPOConfig(seed=seed)))
    s = critic_summary(c)
    ratio = np.median(c["value_loss"] / (c["return_variance"] / 2))
    assert s["value_loss_drop"] >= 5, s
    assert ratio <= 1.5, (ratio, s)
    assert s["ev_learning"] >= -0.1, s
    assert s["learning_end"] <= 30, s              # 90% of the optimum reached early


def test_a_critic_without_value_loss_fails_the_criterion():
    c = history_to_columns(train(PPOConfig(c_v=0.0, iterations=30, value_hidden=0)))
    s = critic_summary(c)
    ratio = np.median(c["value_loss"] / (c["return_variance"] / 2))
    assert s["value_loss_drop"] < 1 and ratio > 3 and s["ev_learning"] < -0.2, (ratio, s)


def test_critic_summary_by_hand():
    cols = {"score_frac": np.array([0.5, 0.95, 1.0, 1.0]),
            "explained_variance": np.array([-0.2, 0.4, -3.0, -1.0]),
            "value_loss": np.array([0.4, 0.2, 0.1, 0.1]),
            "return_variance": np.array([1.0, 0.5, 0.2, 0.1])}
    s = critic_summary(cols, start=2, end=2)
    assert s["learning_end"] == 2 == learning_phase_end(cols["score_frac"])
    assert s["ev_learning"] == pytest.approx(0.1) and s["ev_after"] == pytest.approx(-2.0)
    assert s["value_loss_drop"] == pytest.approx(0.3 / 0.1)
    assert (s["return_variance_start"], s["return_variance_end"]) == (0.75, pytest.approx(0.15))
    text = describe_critic(s, "length")
    assert "3x lower" in text and "iterations 1-2" in text and "about 0.2" in text
    assert "noise (median -2.00" in text
    assert learning_phase_end([0.1, 0.2]) == 2              # never reached: every iteration


def test_critic_summary_of_a_run_without_a_value_head_is_nan_without_a_warning():
    # a critic-free run logs NaN for its value loss, explained variance and Var(R)
    # (train --algo grpo's metrics.csv): the dashboard summarises it all the same
    import warnings

    cols = {"score_frac": np.array([0.5, 0.95, 1.0]),
            **{k: np.full(3, np.nan) for k in ("explained_variance", "value_loss",
                                                "return_variance")}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = critic_summary(cols, start=1, end=1)
    assert math.isnan(s["ev_learning"]) and math.isnan(s["ev_after"])
    # nothing after the learning phase: NaN too
    assert math.isnan(critic_summary({**cols, "score_frac": np.zeros(3)}, start=1,
                                     end=1)["ev_after"])


# ---- issue 25: a critic that earns its keep -------------------------------------------
#
# Measured (docs/training.md, "What the critic buys"): on `target` the critic with its own
# layer (value_hidden 64, the default) has a median explained variance of 0.735, 0.652,
# 0.626 over iterations 1-40 (the first half of the default 80) on seeds 0, 1, 2, and a
# value loss 0.31, 0.35, 0.34 times Var(R) / 2; the v1 critic (value_hidden 0) 0.40 on
# seed 0. 40 iterations of `target` take about 2 CPU seconds.

def _first_half(**fields):
    from ppo_numpy.training.config import config_for_task
    from ppo_numpy.training.metrics import critic_vs_constant

    return critic_vs_constant(history_to_columns(train(config_for_task(iterations=40,
                                                                       **fields),
                                                       plot=False)), fraction=1.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_critic_predicts_on_target_while_the_policy_learns(seed):
    s = _first_half(task="target", seed=seed)
    assert s["iterations"] == 40
    assert s["ev_median"] >= 0.5, s
    assert s["value_loss_ratio"] <= 0.6, s           # well below a constant's loss (1)


def test_the_v1_critic_and_an_untrained_one_fail_that_criterion():
    v1 = _first_half(task="target", seed=0, value_hidden=0)
    assert v1["ev_median"] < 0.5, v1
    untrained = _first_half(task="target", seed=0, c_v=0.0)
    assert untrained["ev_median"] < 0 and untrained["value_loss_ratio"] > 1, untrained


def test_critic_vs_constant_by_hand_and_bad_input():
    from ppo_numpy.training.metrics import critic_verdict, critic_vs_constant

    cols = {"value_loss": [0.05, 0.15, 0.5, 0.5, 0.5], "return_variance": [0.4, 0.2, 1, 1, 1],
            "explained_variance": [0.9, 0.5, -1, -1, -1]}
    s = critic_vs_constant(cols)                      # first int(5 * 0.5) = 2 iterations
    # mean loss 0.1 over mean Var(R) / 2 = 0.15; median of 0.9 and 0.5
    assert s["iterations"] == 2
    assert s["value_loss_ratio"] == pytest.approx(0.1 / 0.15, rel=1e-12)
    assert s["ev_median"] == pytest.approx(0.7, rel=1e-12)
    assert critic_verdict(s) == ("V beats a constant: loss 0.67x Var(R) / 2 (iterations 1-2)",
                                 "V is predicting: median 0.70 (iterations 1-2)")
    nan = {k: [math.nan] * 2 for k in cols}
    assert critic_verdict(critic_vs_constant(nan))[1] == "no value head: nothing to explain"
    with pytest.raises(ValueError, match="fraction"):
        critic_vs_constant(cols, fraction=0)
    with pytest.raises(ValueError, match="one length"):
        critic_vs_constant({**cols, "value_loss": [0.1]})


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_the_critic_layer_gradients_match_finite_differences(model):
    from ppo_numpy import cmp
    from ppo_numpy.models import MLPPolicy, TransformerPolicy

    rng = np.random.default_rng(3)
    if model == "mlp":
        m = MLPPolicy(7, 3, 4, 5, rng, max_len=8, value_hidden=6)
    else:
        m = TransformerPolicy(7, rng, d_model=8, n_heads=2, n_layers=1, max_len=6,
                              value_hidden=5)
    tokens = np.array([[1, 3, 4, 2, 5], [1, 5, 5, 6, 3]])
    up = np.random.default_rng(4)
    A = up.normal(size=(2, 5, 7))
    A[..., :2] = 0.0                                  # PAD and BOS logits are constants
    W = up.normal(size=(2, 5))

    def f(params):                                    # sum A * logits + sum W * V^2
        logits, values, _ = m.forward(tokens, params)
        return float((A * np.where(A == 0, 0.0, logits)).sum() + (W * values**2).sum())

    _, values, cache = m.forward(tokens)
    grads = m.backward(cache, A, 2 * W * values)
    assert {"W1_v", "b1_v"} <= set(grads) and grads["w_v"].shape == (m.value_hidden,)
    # per tensor, the norm-wise relative error of ppo_numpy.cmp (largest difference over the
    # largest magnitude) on every fifth coordinate: an element-wise ratio is rounding noise
    # where the true gradient is 0 (the attention's key bias: softmax ignores it), and that
    # noise, about eps |f| / h = 1e-10, is another number on another CPU kind
    h = 1e-6
    for name, p in m.params.items():
        numeric = np.full(p.shape, np.nan)
        for idx in list(np.ndindex(p.shape))[:: max(1, p.size // 5)]:
            plus = {k: v.copy() for k, v in m.params.items()}
            minus = {k: v.copy() for k, v in m.params.items()}
            plus[name][idx] += h
            minus[name][idx] -= h
            numeric[idx] = (f(plus) - f(minus)) / (2 * h)
        check = cmp(name, grads[name], numeric)
        assert check.close, str(check)


def test_the_critic_layer_changes_only_the_values():
    from ppo_numpy.models import MLPPolicy

    tokens = np.array([[1, 3, 4, 2, 5]])
    old = MLPPolicy(7, 3, 4, 5, np.random.default_rng(0), max_len=8)
    new = MLPPolicy(7, 3, 4, 5, np.random.default_rng(0), max_len=8, value_hidden=6)
    # the policy's parameters are drawn first, as they always were: the policy is the same
    for name in old.params:
        if name not in ("w_v", "b_v"):
            np.testing.assert_array_equal(old.params[name], new.params[name])
    (lo, vo, _), (ln, vn, _) = old.forward(tokens), new.forward(tokens)
    np.testing.assert_array_equal(lo, ln)
    assert not np.allclose(vo, vn)
    # V = tanh(x W1_v + b1_v) . w_v + b_v, by hand at the last position
    x = new.forward(tokens)[2]["x"][0, -1]
    p = new.params
    want = float(np.tanh(x @ p["W1_v"] + p["b1_v"]) @ p["w_v"] + p["b_v"])
    assert vn[0, -1] == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="value_hidden"):
        MLPPolicy(7, 3, 4, 5, np.random.default_rng(0), value_hidden=-1)


def test_critic_free_runs_ignore_value_hidden():
    a = train(PPOConfig(algo="grpo", iterations=3, value_hidden=0), plot=False)
    b = train(PPOConfig(algo="grpo", iterations=3, value_hidden=64), plot=False)
    assert a == b or all(np.array_equal(np.array(list(x.values())), np.array(list(y.values())),
                                        equal_nan=True) for x, y in zip(a, b))


def test_the_value_warm_up_moves_only_the_critic_and_fits_the_scores():
    from ppo_numpy.models import MLPPolicy
    from ppo_numpy.training.tasks import make_task
    from ppo_numpy.training.warmup import warm_up_value

    task = make_task("length")
    model = MLPPolicy(task.vocab_size, 8, 8, 16, np.random.default_rng(0), value_hidden=16)
    before = {k: v.copy() for k, v in model.params.items()}
    losses = warm_up_value(model, task, np.random.default_rng(1), 60, 1e-2, 64)
    moved = {k for k in model.params if not np.array_equal(model.params[k], before[k])}
    assert moved == {"W1_v", "b1_v", "w_v", "b_v"}
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:5]), losses     # measured 0.70
    # the loss of step 1, by hand from its own rollout: 1/2 mean over tokens of (V - score)^2
    from ppo_numpy.models.sampling import sample

    fresh = MLPPolicy(task.vocab_size, 8, 8, 16, np.random.default_rng(0), value_hidden=16)
    rng = np.random.default_rng(1)
    x = task.sample_prompts(rng, 64)
    r = sample(fresh, x, rng, task.max_new_tokens)
    s = task.score(x, r.responses, r.mask)
    errs = [(r.old_values[i, t] - s[i]) ** 2 for i in range(64) for t in range(r.mask.shape[1])
            if r.mask[i, t]]
    assert losses[0] == pytest.approx(0.5 * sum(errs) / len(errs), rel=1e-12)
    assert warm_up_value(fresh, task, rng, 0, 1e-2, 64) == []


def test_value_warm_up_with_gamma_discounts_the_score_by_the_tokens_to_go():
    from ppo_numpy.models import BigramPolicy
    from ppo_numpy.models.sampling import sample
    from ppo_numpy.training.tasks import make_task
    from ppo_numpy.training.warmup import warm_up_value

    task = make_task("length")
    model = BigramPolicy(task.vocab_size, np.random.default_rng(0))
    loss = warm_up_value(model, task, np.random.default_rng(5), 1, 1e-2, 8, gamma=0.5)[0]
    fresh = BigramPolicy(task.vocab_size, np.random.default_rng(0))
    rng = np.random.default_rng(5)
    x = task.sample_prompts(rng, 8)
    r = sample(fresh, x, rng, task.max_new_tokens)
    s = task.score(x, r.responses, r.mask)
    errs = []
    for i in range(8):
        n = int(r.mask[i].sum())
        for t in range(n):                     # R_t = 0.5^(n - 1 - t) score
            errs.append((r.old_values[i, t] - 0.5 ** (n - 1 - t) * s[i]) ** 2)
    assert loss == pytest.approx(0.5 * sum(errs) / len(errs), rel=1e-12)


def test_the_value_warm_up_leaves_the_policy_equal_to_the_reference():
    from ppo_numpy.training.loop import new_run

    state = new_run(PPOConfig(value_warmup_steps=5, iterations=1))
    for name, p in state.reference.params.items():
        if name not in ("W1_v", "b1_v", "w_v", "b_v"):
            np.testing.assert_array_equal(p, state.policy.params[name])
    assert not np.array_equal(state.reference.params["w_v"], state.policy.params["w_v"])


def test_monte_carlo_values_agree_with_exact_enumeration():
    """V^pi(s_t) on a bigram policy and `length` with 2 content tokens (T = 3), computed
    exactly by enumerating every continuation from the bigram's table, against the
    Monte Carlo estimate with 4000 continuations (within 4 standard errors)."""
    import itertools

    from ppo_numpy.models import BigramPolicy
    from ppo_numpy.models.vocab import EOS
    from ppo_numpy.training.tasks import LengthTask
    from ppo_numpy.training.value_ceiling import monte_carlo_values

    task = LengthTask(n_content=2)                  # tokens: EOS 2, a 3, b 4; T = 3
    pi = BigramPolicy(task.vocab_size, np.random.default_rng(0))
    ref = BigramPolicy(task.vocab_size, np.random.default_rng(1))
    beta = 0.1

    def probs(model, prev):
        z = model.params["W"][prev] + model.logit_bias
        e = np.exp(z - z.max())
        return e / e.sum()

    def exact(prompt, prefix):
        """sum over continuations of pi's probability x (score - beta sum_{s >= t} k1_s)."""
        t, total = len(prefix), 0.0
        for k in range(1, task.max_new_tokens - t + 1):
            for cont in itertools.product([EOS, 3, 4], repeat=k):
                if EOS in cont[:-1] or (k < task.max_new_tokens - t and cont[-1] != EOS):
                    continue                        # ends at its first EOS, or fills T slots
                seq = [*prompt, *prefix, *cont]
                p, kl = 1.0, 0.0
                for j in range(len(prompt) + t, len(seq)):
                    q, q_ref = probs(pi, seq[j - 1])[seq[j]], probs(ref, seq[j - 1])[seq[j]]
                    p *= q
                    kl += np.log(q) - np.log(q_ref)
                y = np.array([[*prefix, *cont]])
                score = task.score(np.array([prompt]), y, np.ones_like(y))[0]
                total += p * (score - beta * kl)
        return total

    x = np.array([[1, 3], [1, 4]])
    y = np.array([[3, 4, 2], [4, 2, 0]])
    m = np.array([[1, 1, 1], [1, 1, 0]], dtype=bool)
    n = 4000
    V = monte_carlo_values(pi, ref, task, x, y, m, beta, np.random.default_rng(2), n)
    wants = []
    for i in range(2):
        for t in range(3):
            if not m[i, t]:
                assert V[i, t] == 0.0
                continue
            want = exact(list(x[i]), list(y[i, :t]))
            # the return lies in [-beta * 10, 1] here; its sd is at most about 0.6
            assert abs(V[i, t] - want) < 4 * 0.6 / np.sqrt(n), (i, t, V[i, t], want)
            wants.append(want)
    # the states' values differ by far more than the tolerance: a misplaced state would fail
    assert np.ptp(wants) > 0.2, wants               # 0.04 .. 0.29 here


def _cols(n, **given):
    from ppo_numpy.training.metrics import COLUMNS

    return [{c: float(given[c][k]) if c in given else float(k + 1) for c in COLUMNS}
            for k in range(n)]


def _verdict(ax):
    """The words under a value-head panel: the title of its legend (below the axes)."""
    return ax.get_legend().get_title().get_text()


def test_the_dashboard_says_in_words_whether_V_beats_a_constant_and_predicts():
    from ppo_numpy.plotting.training import plot_training

    # 4 iterations, the learning phase = iterations 1-3 (0.95 >= 90 % first at 3):
    # loss mean (0.1 + 0.1 + 0.1) / 3 against Var(R)/2 = 0.2; EV median of 0.6, 0.8, 0.7
    rows = _cols(4, score=[0.2, 0.5, 0.95, 1.0], value_loss=[0.1, 0.1, 0.1, 9],
                 return_variance=[0.4, 0.4, 0.4, 1], explained_variance=[0.6, 0.8, 0.7, -3])
    fig = plot_training(rows)
    loss, ev = fig.axes[7], fig.axes[8]
    # on three lines, to fit a panel half the site's width: the verdict, its numbers, the span
    assert _verdict(loss) == "V beats a constant:\nloss 0.50x Var(R) / 2\n(iterations 1-3)"
    assert _verdict(ev) == "V is predicting:\nmedian 0.70\n(iterations 1-3)"
    # the words sit under the panel, not on its curves (issue 39: the inset covered them)
    assert not loss.texts and not ev.texts
    # one window: the shaded learning phase, the same as the panel's title says
    assert "1-3" in ev.get_title() and "median" not in ev.get_title()
    # the constant predictor is drawn on both panels: Var(R) / 2 and explained variance 0
    assert any("constant" in line.get_label() for line in loss.lines)
    assert any("constant" in line.get_label() and set(line.get_ydata()) == {0.0}
               for line in ev.lines)
    worse = _cols(4, score=[0.2, 0.5, 0.95, 1.0], value_loss=[0.3, 0.3, 0.3, 9],
                  return_variance=[0.4, 0.4, 0.4, 1], explained_variance=[-0.2, 0.0, -0.1, 1])
    fig = plot_training(worse)
    assert _verdict(fig.axes[7]).startswith("V does not beat a constant:\nloss 1.50x")
    assert _verdict(fig.axes[8]).startswith("V is not predicting:\nno better than a "
                                            "constant, median -0.10")


def test_the_family_comparison_table_and_figure_from_runs_by_hand():
    from ppo_numpy.plotting.training import plot_critic_comparison
    from ppo_numpy.programs.critic import markdown_table, results_json, summary_rows

    def run(seed, it, final, ratio):
        return {"seed": seed, "iteration_90": it, "responses_90": None if it is None else 64 * it,
                "cpu_90": None if it is None else 0.1 * it, "cpu_total": 1.0, "final": final,
                "value_loss_ratio": ratio, "ev_median": 0.5,
                "score_frac": [0.5, 0.95 if it == 2 else 0.6, 0.95]}

    results = {"target": {"PPO": [run(0, 2, 0.9, 0.4), run(1, 3, 0.8, 0.6), run(2, None, 0.7, 0.5)],
                          "GRPO": [run(0, 3, 0.9, math.nan), run(1, 3, 0.9, math.nan),
                                   run(2, 3, 0.9, math.nan)]}}
    ppo, grpo = summary_rows(results)
    # medians over the seeds that reached 90% (2 and 3: 2.5), over all seeds otherwise
    assert (ppo["reached"], ppo["iteration_90"], ppo["responses_90"]) == (2, 2.5, 160)
    assert ppo["final"] == 0.8 and ppo["value_loss_ratio"] == 0.5
    assert grpo["value_loss_ratio"] is None                  # no critic: NaN left out
    table = markdown_table([ppo, grpo])
    assert "| target | PPO | 2/3 | 2, 3, - | 2.5 | 160 |" in table
    assert "| target | GRPO | 3/3 | 3, 3, 3 | 3 | 192 |" in table
    assert json.loads(results_json(results))["target"]["PPO"][0]["score_frac"] == [0.5, 0.95,
                                                                                     0.95]
    fig = plot_critic_comparison(results)
    left, right = fig.axes[:2]
    # median over seeds per iteration: [0.5, 0.6, 0.95] for PPO
    np.testing.assert_allclose(left.lines[0].get_ydata(), [0.5, 0.6, 0.95])
    # the dots of PPO are the seeds that reached 90%; the one that did not sits at the edge
    assert list(right.lines[0].get_xdata()) == [2, 3]
    assert list(right.lines[1].get_xdata()) == [3] and right.lines[1].get_mfc() == "none"
    with pytest.raises(ValueError, match="results"):
        plot_critic_comparison({})
