"""The learned reward model: the Bradley-Terry loss and its gradient by hand, the network
against an explicit loop, every gradient against finite differences, the preference data,
and a short training run that must beat chance on held-out pairs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ppo_numpy.grads.gradcheck import gradcheck, numerical_grad
from ppo_numpy.reward import (
    PreferencePairs,
    RewardModel,
    bradley_terry_grad,
    bradley_terry_loss,
    evaluate_reward_model,
    fit_reward_model,
    make_preference_pairs,
    preference_accuracy,
    preference_probability,
    reward_loss_and_grads,
)
from ppo_numpy.training.tasks import make_task, response_lengths
from tests._helpers import assert_close

# ---------------------------------------------------------------- Bradley-Terry by hand


def test_bradley_terry_loss_and_gradient_by_hand():
    # Delta = 0: p = 1/2, loss log 2, d/dDelta = -1/2
    assert bradley_terry_loss([0.0], [0.0]) == pytest.approx(math.log(2), rel=1e-15)
    dr_w, dr_l = bradley_terry_grad([0.0], [0.0])
    # 1 - sigmoid(0) through logaddexp (a log1p) and an exp: within 2 ulps of 1/2 on every
    # CPU kind (0.1 ulp above it with NumPy's AVX2 loops; the AVX-512 exp may round below)
    assert dr_w.tolist() == [pytest.approx(-0.5, rel=2**-51)]
    assert dr_l.tolist() == [pytest.approx(0.5, rel=2**-51)]
    # Delta = log 3: p = 3/4, loss log(4/3), d/dDelta = -(1 - 3/4) = -1/4
    assert bradley_terry_loss([math.log(3) + 2.0], [2.0]) == pytest.approx(math.log(4 / 3),
                                                                          rel=1e-14)
    # Delta = -log 3: p = 1/4, loss log 4, d/dDelta = -3/4
    dr_w, dr_l = bradley_terry_grad([0.0], [math.log(3)])
    assert dr_w[0] == pytest.approx(-0.75, rel=1e-15) and dr_l[0] == pytest.approx(0.75, rel=1e-15)
    # the mean over n = 3 pairs: (log 2 + log(4/3) + log 4) / 3, each gradient divided by 3
    r_w, r_l = [0.0, math.log(3), 0.0], [0.0, 0.0, math.log(3)]
    assert bradley_terry_loss(r_w, r_l) == pytest.approx(
        (math.log(2) + math.log(4 / 3) + math.log(4)) / 3, rel=1e-14)
    dr_w, dr_l = bradley_terry_grad(r_w, r_l)
    assert_close(dr_w, [-1 / 6, -1 / 12, -1 / 4], rtol=1e-14, atol=0)
    assert_close(dr_l, [1 / 6, 1 / 12, 1 / 4], rtol=1e-14, atol=0)


def test_bradley_terry_is_stable_for_large_margins():
    # log(1 + e^{-800}) is 0 in float64, log(1 + e^{800}) = 800 (+ e^{-800})
    assert bradley_terry_loss([800.0], [0.0]) == 0.0
    assert bradley_terry_loss([0.0], [800.0]) == 800.0
    dr_w, dr_l = bradley_terry_grad([800.0, -800.0], [0.0, 0.0])
    assert np.all(np.isfinite(dr_w)) and dr_w[0] == -0.0 and dr_w[1] == -0.5
    # Delta = 40: e^{-40} = 4.248e-18, far below 1 ulp of 1, must not round to 0
    assert bradley_terry_loss([40.0], [0.0]) == pytest.approx(math.exp(-40), rel=1e-12)


def test_bradley_terry_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    r = {"r_w": rng.normal(0, 2, 7), "r_l": rng.normal(0, 2, 7)}
    dr_w, dr_l = bradley_terry_grad(r["r_w"], r["r_l"])
    report = gradcheck(lambda p: bradley_terry_loss(p["r_w"], p["r_l"]), r,
                       {"r_w": dr_w, "r_l": dr_l})
    assert all(c.close for c in report.values()), "\n".join(map(str, report.values()))


def test_preference_probability_and_accuracy():
    p = preference_probability([math.log(3), 0.0, -math.log(3)], [0.0, 0.0, 0.0])
    assert_close(p, [0.75, 0.5, 0.25], rtol=1e-15, atol=0)
    # p(a > b) + p(b > a) = 1
    assert_close(p + preference_probability([0.0] * 3, [math.log(3), 0.0, -math.log(3)]),
                 np.ones(3), rtol=1e-15, atol=0)
    # 2 right, 1 tie, 1 wrong of 4: (2 + 1/2) / 4
    assert preference_accuracy([1.0, 3.0, 0.0, 0.0], [0.0, 2.0, 0.0, 1.0]) == 0.625


def test_bradley_terry_bad_input():
    with pytest.raises(ValueError, match="r_l: shape"):
        bradley_terry_loss([0.0, 1.0], [0.0])
    with pytest.raises(ValueError, match="r_w: non-finite"):
        bradley_terry_grad([np.nan], [0.0])
    with pytest.raises(ValueError, match=r"r_w: expected shape \(T,\)"):
        bradley_terry_loss([[0.0]], [[0.0]])


# ---------------------------------------------------------------- the network


def small_model(seed=0, init_std=0.6, H=5):
    # init_std 0.6: tanh well away from linear, so a wrong (1 - h^2) cannot hide
    return RewardModel(9, 2, 4, H, np.random.default_rng(seed), init_std=init_std)


BATCH = (np.array([[1, 3], [1, 8], [1, 3]]),
         np.array([[4, 4, 2, 0], [8, 7, 6, 5], [2, 0, 0, 0]]),
         np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=float))


def test_forward_equals_an_explicit_loop():
    model = small_model()
    p = model.params
    x, y, m = BATCH
    r, _ = model.forward(x, y, m)
    for b in range(3):
        a = p["b1"].copy()
        for pos in range(2):
            a += p["W_x"][pos, x[b, pos]]
        for t in range(4):
            if m[b, t]:
                a += p["W_y"][t, y[b, t]]
        expected = sum(math.tanh(a[j]) * p["w2"][j] for j in range(model.d_hidden))
        assert r[b] == pytest.approx(expected, rel=1e-13, abs=1e-15), b


def test_padding_and_trimmed_responses_do_not_change_r():
    model = small_model()
    x, y, m = BATCH
    r = model.reward(x, y, m)
    garbage = np.where(m == 1, y, 7)
    assert np.array_equal(model.reward(x, garbage, m), r)
    # the first row's response has 3 tokens: trimmed to 3 columns it scores the same, up to
    # the order in which BLAS sums products of other shapes (another order per shape and
    # OpenBLAS kernel). Each computation rounds a_j = b1_j + (P + n) selected weights
    # within (P + n) u A_j (A_j: the sum of their magnitudes), tanh adds 2 ulps and does
    # not stretch an error, and r = sum_j h_j w2_j adds H u sum_j |h_j w2_j|; the two
    # computations together at most twice that. A misplaced or unmasked token moves r by a
    # weight (about 0.5), far above it.
    p, u, n = model.params, 2.0**-53, int(m[0].sum())
    A = np.abs(p["b1"]) + sum(np.abs(p["W_x"][k, x[0, k]]) for k in range(2)) + sum(
        np.abs(p["W_y"][t, y[0, t]]) for t in range(n))
    h = np.tanh(p["b1"] + sum(p["W_x"][k, x[0, k]] for k in range(2))
                + sum(p["W_y"][t, y[0, t]] for t in range(n)))
    bound = 2 * u * ((2 + n + 2) * np.sum(np.abs(p["w2"]) * A)
                     + model.d_hidden * np.sum(np.abs(h * p["w2"])))
    assert abs(model.reward(x[:1], y[:1, :3], m[:1, :3])[0] - r[0]) <= bound
    other = np.array([[4, 4, 3]])                      # one token changed
    assert abs(model.reward(x[:1], other, m[:1, :3])[0] - r[0]) > 1000 * bound
    # inputs are not modified
    assert np.array_equal(y, BATCH[1]) and np.array_equal(m, BATCH[2])


def test_backward_matches_finite_differences_for_any_upstream_gradient():
    model = small_model(seed=1)
    x, y, m = BATCH
    c = np.array([0.7, -1.3, 0.4])
    _, cache = model.forward(x, y, m)
    grads = model.backward(cache, c)

    def f(params):
        return float(c @ model.reward(x, y, m, params))

    report = gradcheck(f, model.params, grads)
    assert all(r.close for r in report.values()), "\n".join(map(str, report.values()))
    # (position, token) pairs the batch never shows get exactly 0: W_y[3, :] only sees token 5
    assert np.all(grads["W_y"][3, [k for k in range(9) if k != 5]] == 0)
    assert np.any(grads["W_y"][3, 5] != 0)


def test_loss_gradients_with_weight_decay_match_finite_differences():
    task = make_task("reverse")
    pairs = make_preference_pairs(task, np.random.default_rng(4), 12, tau=0.1, random_frac=0.5)
    model = RewardModel(task.vocab_size, task.prompt_length, task.max_new_tokens, 6,
                        np.random.default_rng(5), init_std=0.5)
    loss, grads, stats = reward_loss_and_grads(model, pairs, weight_decay=0.03)

    def f(params):
        return reward_loss_and_grads(model, pairs, weight_decay=0.03, params=params)[0]

    report = gradcheck(f, model.params, grads)
    assert all(r.close for r in report.values()), "\n".join(map(str, report.values()))
    # the penalty: loss - bt_loss = 0.03 / 2 * (|W_x|^2 + |W_y|^2 + |w2|^2), b1 not decayed
    p = model.params
    penalty = 0.015 * sum(float((p[k] ** 2).sum()) for k in ("W_x", "W_y", "w2"))
    assert loss - stats["bt_loss"] == pytest.approx(penalty, rel=1e-12)
    g0 = reward_loss_and_grads(model, pairs)[1]
    assert np.array_equal(grads["b1"], g0["b1"])
    assert_close(grads["w2"] - g0["w2"], 0.03 * p["w2"], rtol=1e-10, atol=1e-15)


def test_reward_model_bad_input():
    model = small_model()
    x, y, m = BATCH
    with pytest.raises(ValueError, match="prompts: expected 2 tokens per prompt"):
        model.reward(x[:, :1], y, m)
    with pytest.raises(ValueError, match="responses: expected 1 to 4 columns"):
        model.reward(x, np.zeros((3, 5), dtype=int), np.ones((3, 5)))
    with pytest.raises(ValueError, match="mask: shape"):
        model.reward(x, y, m[:, :2])
    with pytest.raises(ValueError, match="responses: token id 9"):
        model.reward(x, np.where(m == 1, 9, 0), m)
    with pytest.raises(TypeError, match="prompts: expected integer"):
        model.reward(x.astype(float), y, m)
    with pytest.raises(ValueError, match=r"dr: expected shape \(3,\)"):
        model.backward(model.forward(x, y, m)[1], np.zeros(2))
    with pytest.raises(ValueError, match="params: missing"):
        model.reward(x, y, m, {"W_x": model.params["W_x"]})
    with pytest.raises(TypeError, match="rng"):
        RewardModel(9, 2, 4, 5, 0)
    with pytest.raises(ValueError, match="d_hidden: must be an integer >= 1"):
        RewardModel(9, 2, 4, 0, np.random.default_rng(0))


def test_calibrate_matches_the_gold_mean_and_spread():
    model = small_model()
    x, y, m = BATCH
    gold = np.array([0.2, 1.0, 0.0])
    offset, scale = model.calibrate(x, y, m, gold)
    s = model.score(x, y, m)
    assert s.mean() == pytest.approx(0.4, rel=1e-12)
    # population std of [0.2, 1, 0]: sqrt(((-0.2)^2 + 0.6^2 + 0.4^2) / 3) = sqrt(0.56 / 3)
    assert s.std() == pytest.approx(math.sqrt(0.56 / 3), rel=1e-12)
    assert_close(s, offset + scale * model.reward(x, y, m), rtol=1e-15, atol=0)
    assert np.array_equal(model(x, y, m), s)
    with pytest.raises(ValueError, match="constant"):
        model.calibrate(x, y, m, np.ones(3))
    with pytest.raises(ValueError, match="gold: shape"):
        model.calibrate(x, y, m, np.ones(2))


# ---------------------------------------------------------------- preference data


def test_noiseless_labels_follow_the_gold_order_and_ties_are_coin_flips():
    task = make_task("length")
    pairs = make_preference_pairs(task, np.random.default_rng(0), 4000, tau=0)
    assert np.all(pairs.gold_chosen >= pairs.gold_rejected)
    # the stored gold scores are the task's rule on the stored responses
    assert np.array_equal(pairs.gold_chosen,
                          task.score(pairs.prompts, pairs.chosen, pairs.chosen_mask))
    assert np.array_equal(pairs.gold_rejected,
                          task.score(pairs.prompts, pairs.rejected, pairs.rejected_mask))
    # no random responses: every response is the prior's, 1 .. N tokens then EOS
    n, stopped = response_lengths(pairs.chosen, pairs.chosen_mask)
    assert stopped.all() and n.min() == 1 and n.max() == task.n_content


def test_label_noise_follows_the_bradley_terry_probability():
    task = make_task("reverse")
    tau = 0.1
    pairs = make_preference_pairs(task, np.random.default_rng(1), 20000, tau=tau)
    d = pairs.gold_chosen - pairs.gold_rejected
    # |d| = g_hi - g_lo; the label is right with probability sigma(|d| / tau)
    decided = d != 0
    p_right = 1 / (1 + np.exp(-np.abs(d[decided]) / tau))
    right = d[decided] > 0
    se = math.sqrt(np.sum(p_right * (1 - p_right))) / decided.sum()
    assert abs(right.mean() - p_right.mean()) < 4 * se, (right.mean(), p_right.mean(), se)
    assert p_right.mean() < 0.95  # there is noise


def test_random_frac_mixes_in_random_responses_and_same_seed_same_pairs():
    task = make_task("reverse")
    a = make_preference_pairs(task, np.random.default_rng(2), 2000, random_frac=0.5)
    b = make_preference_pairs(task, np.random.default_rng(2), 2000, random_frac=0.5)
    for f in ("prompts", "chosen", "chosen_mask", "rejected", "rejected_mask", "gold_chosen"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    # the prior always says P = 4 tokens then EOS; a random response does so with
    # probability (6/7)^4 (1/7) = 0.0771, so about half of 0.9229 of responses differ
    # (chosen and rejected together: the labels prefer prior responses)
    n, stopped = response_lengths(np.concatenate([a.chosen, a.rejected]),
                                  np.concatenate([a.chosen_mask, a.rejected_mask]))
    not_prior = np.mean(~(stopped & (n == 4)))
    # binomial s.e. over 4000 responses ~ 0.008
    assert abs(not_prior - 0.5 * (1 - (6 / 7) ** 4 / 7)) < 0.035, not_prior
    first, rest = a.split(1500)
    assert len(first) == 1500 and len(rest) == 500
    assert np.array_equal(rest.prompts, a.prompts[1500:])


def test_preference_pairs_bad_input():
    task = make_task("length")
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n_pairs: must be an integer >= 1"):
        make_preference_pairs(task, rng, 0)
    with pytest.raises(ValueError, match="tau: must be >= 0"):
        make_preference_pairs(task, rng, 5, tau=-1.0)
    with pytest.raises(ValueError, match="random_frac: must be <= 1"):
        make_preference_pairs(task, rng, 5, random_frac=2.0)
    with pytest.raises(TypeError, match="rng"):
        make_preference_pairs(task, 0, 5)
    pairs = make_preference_pairs(task, rng, 5)
    with pytest.raises(ValueError, match="n_first: must be in 1 .. 4"):
        pairs.split(5)
    assert isinstance(pairs, PreferencePairs)


# ---------------------------------------------------------------- training


def test_training_beats_chance_on_held_out_pairs_and_is_deterministic():
    task = make_task("length")
    rng = np.random.default_rng(0)
    train, heldout = make_preference_pairs(task, rng, 700, tau=0.1).split(400)

    def fit():
        model = RewardModel(task.vocab_size, task.prompt_length, task.max_new_tokens, 8,
                            np.random.default_rng(1))
        return model, fit_reward_model(model, train, steps=150, heldout=heldout, log_every=50)

    model, history = fit()
    first, last = history[0], history[-1]
    assert [row["step"] for row in history] == [0, 50, 100, 150]
    assert last["bt_loss"] < first["bt_loss"] - 0.2
    # chance is 1/2; the labels themselves agree with the gold order ~99% of the time here
    assert last["heldout_gold_accuracy"] > 0.8, last
    assert last["heldout_accuracy"] > 0.6, last
    assert evaluate_reward_model(model, heldout)["gold_accuracy"] == \
        last["heldout_gold_accuracy"]
    again, history2 = fit()
    assert history2 == history
    assert all(np.array_equal(model.params[k], again.params[k]) for k in model.params)


class _FixedRewards:
    """A stand-in reward model whose forward pass returns given rewards (chosen, then rejected)."""

    def __init__(self, r_w, r_l):
        self.r = np.array(r_w + r_l, dtype=float)

    def forward(self, prompts, responses, mask, params=None):
        return self.r, None


def test_evaluation_by_hand_gold_ties_left_out_of_gold_accuracy():
    one = np.array([[1, 3]])
    y = np.array([[3, 2, 0, 0, 0, 0, 0]])
    m = np.array([[1.0, 1, 0, 0, 0, 0, 0]])
    pairs = PreferencePairs(prompts=np.repeat(one, 4, 0), chosen=np.repeat(y, 4, 0),
                            chosen_mask=np.repeat(m, 4, 0), rejected=np.repeat(y, 4, 0),
                            rejected_mask=np.repeat(m, 4, 0),
                            gold_chosen=np.array([1.0, 0.0, 0.5, 1.0]),
                            gold_rejected=np.array([0.0, 1.0, 0.5, 0.5]))
    # pair 1: label right, r right; pair 2: label wrong (gold prefers the rejected one),
    # r sides with the gold; pair 3: a gold tie; pair 4: label right, r ties
    model = _FixedRewards([2.0, 0.0, 5.0, 1.0], [1.0, 3.0, 4.0, 1.0])
    out = evaluate_reward_model(model, pairs)
    # against the labels: 1 + 0 + 1 + 1/2 of 4
    assert out["accuracy"] == 0.625
    # against the gold order, pairs 1, 2, 4 only: 1 + 1 + 1/2 of 3
    assert out["gold_accuracy"] == pytest.approx(5 / 6, rel=1e-15)
    # the labels agree with the gold order in pairs 1 and 4 of the 3 decided ones
    assert out["label_gold_accuracy"] == pytest.approx(2 / 3, rel=1e-15)
    # BT loss: (log(1 + e^-1) + log(1 + e^3) + log(1 + e^-1) + log 2) / 4
    expected = (2 * math.log1p(math.exp(-1)) + math.log1p(math.exp(3)) + math.log(2)) / 4
    assert out["bt_loss"] == pytest.approx(expected, rel=1e-14)


def test_numerical_grad_is_what_gradcheck_uses():
    # a guard on the test tool itself: d/dx log(1 + e^{-x}) at 0 is -1/2
    g = numerical_grad(lambda p: bradley_terry_loss(p["x"], [0.0]), {"x": np.array([0.0])}, "x")
    assert g[0] == pytest.approx(-0.5, rel=1e-9)
