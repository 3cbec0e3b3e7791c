"""The figures of notebook 13 (``ppo_numpy.plotting.grpo``): what each one draws."""

from __future__ import annotations

import io

import numpy as np
import pytest

from ppo_numpy.plotting import grpo


def _render(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_std_scaling_draws_the_multiplier_and_both_advantages():
    p = np.array([0.25, 0.5, 0.75])
    fig = grpo.plot_std_scaling(p, [2.0, 1.5, 2.0], 1 - p, (1 - p) * [2.0, 1.5, 2.0],
                                group_size=4)
    left, right = fig.axes
    np.testing.assert_array_equal(left.lines[0].get_xdata(), p)
    np.testing.assert_array_equal(left.lines[0].get_ydata(), [2.0, 1.5, 2.0])
    assert list(left.lines[1].get_ydata()) == [1.0, 1.0]  # the no-scaling line
    np.testing.assert_array_equal(right.lines[0].get_ydata(), [1.5, 0.75, 0.5])
    np.testing.assert_array_equal(right.lines[1].get_ydata(), [0.75, 0.5, 0.25])
    assert [t.get_text() for t in right.get_legend().get_texts()] == [
        "GRPO: (1 - p) / std_g", "Dr. GRPO: 1 - p"]
    assert "G = 4" in left.get_title()
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel()
    assert _render(fig)


def test_length_bias_bars_are_advantage_times_weight():
    fig = grpo.plot_length_bias([2, 6], [1.0, -1.0],
                                {"token-mean": [1 / 8, 1 / 8],
                                 "seq-mean-token-mean": [1 / 4, 1 / 12]})
    (ax,) = fig.axes
    heights = [round(b.get_height(), 12) for b in ax.patches]
    assert heights == [0.125, -0.125, 0.25, round(-1 / 12, 12)]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["n = 2, A = +1", "n = 6, A = -1"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "token-mean", "seq-mean-token-mean"]
    assert ax.get_xlabel() and ax.get_ylabel()
    assert _render(fig)


def test_training_curves_draw_each_run_and_the_90_percent_line():
    a = [{"iteration": 1, "score": 0.2, "kl_ref": 0.0}, {"iteration": 2, "score": 0.5,
                                                          "kl_ref": 0.3}]
    b = [{"iteration": 1, "score": 0.1, "kl_ref": 0.0}, {"iteration": 2, "score": 0.95,
                                                          "kl_ref": 0.4}]
    fig = grpo.plot_training_curves({"ppo": a, "grpo": b}, optimum=1.0)
    score, kl = fig.axes
    assert [list(line.get_ydata()) for line in score.lines[:2]] == [[0.2, 0.5], [0.1, 0.95]]
    assert list(score.lines[2].get_ydata()) == [0.9, 0.9]
    assert [list(line.get_ydata()) for line in kl.lines] == [[0.0, 0.3], [0.0, 0.4]]
    assert [t.get_text() for t in score.get_legend().get_texts()] == [
        "ppo", "grpo", "90% of optimum"]
    # readable names with units, not the raw column names
    assert score.get_title() == "mean score of the responses"
    assert kl.get_title() == "KL(pi_theta || pi_ref)" and kl.get_ylabel() == "nats per response"
    assert kl.get_xlabel() == "iteration"
    assert _render(fig)


def test_training_curves_draw_every_seed_and_their_mean():
    def run(scores):
        return [{"iteration": k + 1, "score": s, "kl_ref": 0.1 * k} for k, s in enumerate(scores)]

    seeds = [run([0.2, 0.6]), run([0.4, 0.8]), run([0.0, 1.0])]
    fig = grpo.plot_training_curves({"ppo": seeds, "grpo": run([0.1, 0.3])}, optimum=1.0)
    score = fig.axes[0]
    ys = [list(line.get_ydata()) for line in score.lines]
    # three thin seed lines, then their mean (0.2, 0.8), then the single grpo run, then 90%
    assert ys[:3] == [[0.2, 0.6], [0.4, 0.8], [0.0, 1.0]]
    np.testing.assert_allclose(ys[3], [0.2, 0.8], rtol=1e-12)
    assert ys[4] == [0.1, 0.3] and ys[5] == [0.9, 0.9]
    assert [line.get_lw() for line in score.lines[:4]] == [0.7, 0.7, 0.7, 1.8]
    assert [t.get_text() for t in score.get_legend().get_texts()] == [
        "ppo (mean of 3 random seeds)", "grpo", "90% of optimum"]


@pytest.mark.parametrize("call, message", [
    (lambda: grpo.plot_std_scaling([0.5], [1.0, 2.0], [0.5], [0.5]), "multiplier"),
    (lambda: grpo.plot_length_bias([2, 6], [1.0], {"a": [1, 1]}), "advantages"),
    (lambda: grpo.plot_length_bias([2, 6], [1.0, 1.0], {}), "per_token"),
    (lambda: grpo.plot_length_bias([2], [1.0], {"a": [1, 1]}), r"per_token\['a'\]"),
    (lambda: grpo.plot_training_curves({}), "runs"),
    (lambda: grpo.plot_training_curves({"x": [{"iteration": 1}]}), "no column 'score'"),
])
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
