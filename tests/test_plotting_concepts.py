"""The figures of notebooks 00-07 (``ppo_numpy.plotting.concepts``), drawn headless.

Each plot function runs on the Agg backend with small inputs, returns a Figure,
renders to PNG without error, and draws the data it was given. Bad inputs raise
ValueError naming the argument. Every public function has a case here.
"""

from __future__ import annotations

import io
import subprocess
import sys
from fractions import Fraction

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from ppo_numpy.plotting import concepts

T = 5
RHO = np.linspace(0.0, 2.0, 41)
MASK = np.array([1, 1, 1, 0, 0])

CASES = {
    "plot_token_timeline": lambda: concepts.plot_token_timeline(
        {"logp": [-1.0, -2.0, -0.5, 0.0, 0.0], "r~": [-0.05, 0.02, 0.99, 0.0, 0.0]}, MASK,
        prompt_len=2, tokens=["a", "b", "y1", "y2", "<eos>", "<pad>", "<pad>"], title="t"),
    "plot_importance_sampling": lambda: concepts.plot_importance_sampling(
        np.arange(1, 11), np.linspace(1, 1.7, 10), np.linspace(2, 2.3, 10), target=2.3,
        naive_target=1.7),
    "plot_ratio_vs_log_ratio": lambda: concepts.plot_ratio_vs_log_ratio(
        np.linspace(-1, 1, 21), np.exp(np.linspace(-1, 1, 21)), epsilon=0.2),
    "plot_clipped_objective": lambda: concepts.plot_clipped_objective(
        RHO, np.minimum(RHO, 1.2), -np.maximum(RHO, 0.8), epsilon=0.2),
    "plot_epochs_on_one_batch": lambda: concepts.plot_epochs_on_one_batch(
        np.ones((4, 3)), np.linspace(1, 2, 12).reshape(4, 3), epsilon=0.2,
        advantages=[1.0, -1.0, 0.5]),
    "plot_kl_estimator_samples": lambda: concepts.plot_kl_estimator_samples(
        {"k1": np.linspace(-1, 1, 50), "k3": np.linspace(0, 1, 50)}, true_kl=0.005, bins=10),
    "plot_kl_value_and_gradient": lambda: concepts.plot_kl_value_and_gradient(
        np.linspace(-2, 2, 9), {"k1": np.linspace(-2, 2, 9)}, {"k1": np.ones(9)}),
    "plot_td_errors": lambda: concepts.plot_td_errors(
        [0, 0, 1], [0.5, 0.6, 0.7], [0.6, 0.7, 0.0], [0.1, 0.1, 0.3], gamma=1.0),
    "plot_gamma_sweep": lambda: concepts.plot_gamma_sweep(
        [0.0, 0.5, 1.0], [[-0.5, -0.6, 0.3], [-0.2, -0.25, 0.3], [0.1, 0.1, 0.3]]),
    "plot_gae_weights": lambda: concepts.plot_gae_weights(
        np.triu(0.9 ** np.subtract.outer(np.arange(4), np.arange(4)).T), gamma=1.0, lam=0.9),
    "plot_lambda_sweep": lambda: concepts.plot_lambda_sweep(
        [0.0, 1.0], [[0.1, 0.1, 0.3], [0.5, 0.4, 0.3]]),
    "plot_bias_variance": lambda: concepts.plot_bias_variance(
        [0.0, 0.5, 1.0], [0.2, 0.19, 0.0], [0.2, 0.2, 0.0], [0.1, 0.11, 0.3], [0.1, 0.12, 0.3]),
    "plot_whitening": lambda: concepts.plot_whitening(
        [[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], [[-1.0, -0.3, 0.3], [1.0, 0.0, 0.0]],
        [[1, 1, 1], [1, 0, 0]]),
    "plot_value_loss": lambda: concepts.plot_value_loss(
        np.linspace(-1, 4, 11), 0.5 * (np.linspace(-1, 4, 11) - 2) ** 2,
        np.maximum(0.5 * (np.linspace(-1, 4, 11) - 2) ** 2, 0.845), old_value=0.5, ret=2.0,
        clip_range=0.2, grad_clipped=np.zeros(11)),
    "plot_token_weights": lambda: concepts.plot_token_weights(
        [1, 2, 4], {"token-mean": [1 / 7] * 3}, {"token-mean": [1 / 7, 2 / 7, 4 / 7]}),
}


@pytest.fixture(autouse=True)
def agg_backend():
    plt.switch_backend("Agg")
    yield
    plt.close("all")


def test_every_public_function_has_a_case():
    plotted = {name for name in concepts.__all__ if name.startswith("plot_")}
    assert plotted == set(CASES)
    assert set(concepts.__all__) == plotted | {"format_table"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_plot_returns_a_figure_that_renders(name):
    fig = CASES[name]()
    assert isinstance(fig, Figure)
    assert matplotlib.get_backend().lower() == "agg"
    assert fig.axes, f"{name}: no axes drawn"
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"


def test_clipped_objective_draws_the_given_curves():
    term_pos, term_neg = np.minimum(RHO, 1.2), -np.maximum(RHO, 0.8)
    fig = concepts.plot_clipped_objective(RHO, term_pos, term_neg, epsilon=0.2)
    left, right = fig.axes
    np.testing.assert_array_equal(left.lines[1].get_ydata(), term_pos)
    np.testing.assert_array_equal(right.lines[1].get_ydata(), term_neg)
    np.testing.assert_array_equal(left.lines[0].get_ydata(), RHO * 1.0)  # unclipped rho A
    labels = " ".join(t.get_text() for t in left.texts)
    assert "grad 0" in labels and "(1+eps) A" in labels


def test_token_timeline_shows_every_value_and_the_segments():
    fig = CASES["plot_token_timeline"]()
    texts = [t.get_text() for t in fig.axes[0].texts]
    for value in ("-1", "-2", "-0.5", "-0.05", "0.02", "0.99"):
        assert value in texts
    for label in ("prompt x", "response y", "EOS", "padding"):
        assert label in texts


def test_token_timeline_last_label_for_truncated_responses():
    fig = concepts.plot_token_timeline({"r~": [0.0, 0.5]}, [1, 1], last_label="last (truncated)")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "last (truncated)" in texts and "EOS" not in texts and "padding" not in texts


def test_gae_weights_heatmap_holds_the_matrix():
    W = np.triu(np.full((3, 3), 0.5))
    fig = concepts.plot_gae_weights(W, gamma=1.0, lam=0.5)
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), W)


@pytest.mark.parametrize("call, argument", [
    (lambda: concepts.plot_token_timeline({"logp": [0.0, 0.0]}, [1, 1, 0]), "rows['logp']"),
    (lambda: concepts.plot_token_timeline({"logp": [0.0]}, [1], tokens=["a", "b"]), "tokens"),
    (lambda: concepts.plot_token_timeline({}, [1]), "rows"),
    (lambda: concepts.plot_clipped_objective(RHO, RHO[:-1], RHO, epsilon=0.2), "term_pos"),
    (lambda: concepts.plot_clipped_objective(RHO, RHO, RHO, epsilon=0.2, adv_neg=1.0),
     "adv_neg"),
    (lambda: concepts.plot_epochs_on_one_batch(np.ones((3, 2)), np.ones((3, 3)), epsilon=0.2,
                                               advantages=[1, 1]), "rho_unclipped"),
    (lambda: concepts.plot_gamma_sweep([0.0, 1.0], [[0.1, 0.2]]), "deltas"),
    (lambda: concepts.plot_gae_weights(np.ones((2, 3)), gamma=1, lam=1), "weights"),
    (lambda: concepts.plot_lambda_sweep([0.0], np.ones(3)), "advantages"),
    (lambda: concepts.plot_whitening([1.0, 2.0], [1.0]), "after"),
    (lambda: concepts.plot_kl_value_and_gradient([0.0], {"k1": [0.0]}, {"k2": [0.0]}), "grads"),
    (lambda: concepts.plot_token_weights([1, 2], {"a": [1, 1]}, {"b": [1, 1]}), "per_sequence"),
])
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_format_table_prints_fractions_exactly_and_rounds_floats():
    text = concepts.format_table({"A": [Fraction(1863, 4000), 0.1 + 0.2], "name": ["x", "y"]},
                                 digits=4)
    assert text.splitlines() == ["        A  name", "1863/4000     x", "      0.3     y"]


def test_format_table_rejects_ragged_columns():
    with pytest.raises(ValueError, match="same length"):
        concepts.format_table({"a": [1, 2], "b": [1]})
    with pytest.raises(TypeError, match="columns"):
        concepts.format_table([1, 2])


def _y(line):
    return np.asarray(line.get_ydata(), dtype=float)


def test_line_plots_draw_the_given_arrays_in_their_panels():
    # distinct inputs everywhere, so a swapped or dropped array fails
    n = np.arange(1, 6)
    a, b = np.array([1.0, 1.5, 1.6, 1.7, 1.7]), np.array([3.0, 2.5, 2.4, 2.3, 2.3])
    ax = concepts.plot_importance_sampling(n, a, b, target=2.3, naive_target=1.7).axes[0]
    np.testing.assert_array_equal(_y(ax.lines[0]), a)
    np.testing.assert_array_equal(_y(ax.lines[1]), b)
    np.testing.assert_array_equal(_y(ax.lines[2]), [2.3, 2.3])   # the target E_pi[f]

    d = np.linspace(-1, 1, 5)
    ax = concepts.plot_ratio_vs_log_ratio(d, np.exp(d), epsilon=0.2).axes[0]
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), d)
    np.testing.assert_array_equal(_y(ax.lines[0]), np.exp(d))

    rc = np.array([[1.0, 1.0], [1.1, 0.9], [1.2, 0.8]])
    ru = np.array([[1.0, 1.0], [1.3, 0.7], [1.9, 0.4]])
    left, right = concepts.plot_epochs_on_one_batch(rc, ru, epsilon=0.2,
                                                    advantages=[1.0, -1.0]).axes
    for ax, rho in ((left, ru), (right, rc)):   # left: no clipping
        np.testing.assert_array_equal(_y(ax.lines[0]), rho[:, 0])
        np.testing.assert_array_equal(_y(ax.lines[1]), rho[:, 1])
    assert left.get_title() == "no clipping"

    values, grads = {"k1": d, "k3": d ** 2}, {"k1": np.ones(5), "k3": 2 * d}
    left, right = concepts.plot_kl_value_and_gradient(d, values, grads).axes
    for name, k in (("k1", 0), ("k3", 1)):
        np.testing.assert_array_equal(_y(left.lines[k]), values[name])
        np.testing.assert_array_equal(_y(right.lines[k]), grads[name])

    D = np.array([[-0.5, -0.6, 0.3], [0.1, 0.1, 0.3]])
    ax = concepts.plot_gamma_sweep([0.0, 1.0], D).axes[0]
    for t in range(3):   # one line per token t, against gamma
        np.testing.assert_array_equal(_y(ax.lines[t]), D[:, t])

    A = np.array([[0.1, 0.1, 0.3], [0.5, 0.4, 0.3]])
    ax = concepts.plot_lambda_sweep([0.0, 1.0], A).axes[0]
    np.testing.assert_array_equal(_y(ax.lines[0]), A[0])
    np.testing.assert_array_equal(_y(ax.lines[1]), A[1])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lam = 0", "lam = 1"]

    m_mc, m_ex, s_mc, s_ex = [0.2, 0.19], [0.21, 0.2], [0.1, 0.11], [0.12, 0.13]
    left, right = concepts.plot_bias_variance([0.0, 1.0], m_mc, m_ex, s_mc, s_ex).axes
    np.testing.assert_array_equal(_y(left.lines[0]), m_ex)    # closed form, a line
    np.testing.assert_array_equal(_y(left.lines[1]), m_mc)    # Monte Carlo, points
    np.testing.assert_array_equal(_y(right.lines[0]), s_ex)
    np.testing.assert_array_equal(_y(right.lines[1]), s_mc)

    v = np.linspace(-1, 4, 6)
    lu, lc, g = 0.5 * (v - 2) ** 2, 0.5 * (v - 2) ** 2 + 1, v - 3
    left, right = concepts.plot_value_loss(v, lu, lc, old_value=0.5, ret=2.0, clip_range=0.2,
                                           grad_clipped=g).axes
    np.testing.assert_array_equal(_y(left.lines[0]), lu)
    np.testing.assert_array_equal(_y(left.lines[1]), lc)
    np.testing.assert_array_equal(_y(right.lines[1]), g)


def test_td_errors_bars_are_the_three_terms_and_delta():
    r, v, vn, delta = [0.0, 0.0, 1.0], [0.5, 0.6, 0.7], [0.6, 0.7, 0.0], [0.1, 0.1, 0.3]
    ax = concepts.plot_td_errors(r, v, vn, delta, gamma=0.5).axes[0]
    heights = [[bar.get_height() for bar in c] for c in ax.containers]
    # r~_t, gamma V(s_t+1) = 0.5 * [0.6, 0.7, 0], -V(s_t), delta_t
    assert heights == [r, [0.3, 0.35, 0.0], [-0.5, -0.6, -0.7], delta]


def test_kl_estimator_samples_histogram_counts_every_sample_and_marks_the_mean():
    x = np.array([-1.0, 0.0, 0.5, 2.5])
    ax = concepts.plot_kl_estimator_samples({"k1": x}, true_kl=0.3, bins=4).axes[0]
    assert sum(p.get_height() for p in ax.patches) == 4
    assert ax.lines[0].get_xdata()[0] == 0.3 and ax.lines[1].get_xdata()[0] == 0.5  # mean 2/4
    assert ax.get_title() == "k1: 25% negative"


def test_whitening_draws_only_valid_tokens_and_their_mean():
    before = np.array([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    after = np.array([[-1.0, -0.5, 0.0], [1.5, 7.0, 7.0]])
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    left, right = concepts.plot_whitening(before, after, mask).axes
    np.testing.assert_array_equal(_y(left.lines[0]), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(_y(left.lines[1]), [4.0])    # the 9s are padding
    np.testing.assert_array_equal(_y(right.lines[1]), [1.5])
    np.testing.assert_array_equal(_y(left.lines[2]), [2.5, 2.5])   # mean of 1, 2, 3, 4
    np.testing.assert_array_equal(_y(right.lines[2]), [0.0, 0.0])


def test_token_weights_sorted_by_length():
    lengths, wt, ws = [4, 1, 2], {"m": [0.25, 1.0, 0.5]}, {"m": [1.0, 1.0, 1.0]}
    left, right = concepts.plot_token_weights(lengths, wt, ws).axes
    np.testing.assert_array_equal(left.lines[0].get_xdata(), [1, 2, 4])
    np.testing.assert_array_equal(_y(left.lines[0]), [1.0, 0.5, 0.25])
    np.testing.assert_array_equal(_y(right.lines[0]), [1.0, 1.0, 1.0])


@pytest.mark.parametrize("call, message", [
    (lambda: concepts.plot_token_timeline({"r": [0.0, 1.0]}, [1, 2]), "mask: must contain only"),
    (lambda: concepts.plot_token_timeline({"r": [0.0]}, [1], prompt_len=-1), "prompt_len"),
    (lambda: concepts.plot_token_timeline({"r": [0.0]}, [1], prompt_len=1.5), "prompt_len"),
    (lambda: concepts.plot_whitening([1.0, 2.0], [1.0, 2.0], [1, 2]), "mask: must contain only"),
    (lambda: concepts.plot_whitening([1.0, 2.0], [1.0, 2.0], [1, 1, 0]), "mask: shape"),
    (lambda: concepts.plot_whitening([1.0, 2.0], [1.0, 2.0], [0, 0]), "mask: no response"),
])
def test_bad_mask_or_count_names_the_argument(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_plot_functions_leave_their_inputs_unchanged():
    before = np.array([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    after, mask = before - 2.5, np.array([[1, 1, 1], [1, 0, 0]])
    rows = {"r": np.array([0.5, -1.0, 0.0])}
    copies = [x.copy() for x in (before, after, mask, rows["r"])]
    concepts.plot_whitening(before, after, mask)
    concepts.plot_token_timeline(rows, mask[1])
    for x, c in zip((before, after, mask, rows["r"]), copies):
        np.testing.assert_array_equal(x, c)


@pytest.mark.parametrize("module", ["ppo_numpy", "ppo_numpy.training", "ppo_numpy.oracle",
                                    "ppo_numpy.models", "ppo_numpy.reward", "ppo_numpy.explain",
                                    "ppo_numpy.plotting"])
def test_importing_a_subpackage_does_not_import_matplotlib(module):
    code = f"import sys, {module}; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", module


def test_kl_estimator_histograms_share_one_x_scale_and_the_same_bins():
    # k1 spreads over [-1, 1], k3 over [0, 0.2]: both panels show [-1, 1] with one set of bins
    fig = concepts.plot_kl_estimator_samples(
        {"k1": np.linspace(-1, 1, 50), "k3": np.linspace(0, 0.2, 50)}, true_kl=0.005, bins=10)
    k1, k3 = fig.axes
    assert k1.get_xlim() == k3.get_xlim()
    edges = [sorted({round(p.get_x(), 12) for p in ax.patches}) for ax in (k1, k3)]
    assert edges[0] == edges[1] and len(edges[0]) == 10
    assert edges[0][0] == -1.0
    assert sum(p.get_height() for p in k3.patches) == 50


def test_whitening_legend_does_not_cover_the_std_band():
    fig = concepts.plot_whitening([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]],
                                  [[-1.0, -0.3, 0.3], [1.0, 0.0, 0.0]], [[1, 1, 1], [1, 0, 0]])
    fig.canvas.draw()
    for ax in fig.axes:
        (band,) = [p for p in ax.patches if p.get_label().startswith("+- std")]
        a, b = ax.get_legend().get_window_extent(), band.get_window_extent()
        assert not (a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)
        # the legend is under the axes, below the x label
        assert a.y1 < ax.get_window_extent().y0
