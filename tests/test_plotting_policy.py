"""The figures of notebooks 08 to 11 draw headless, show what they claim, refuse bad input."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ppo_numpy.grads.gradcheck import cmp  # noqa: E402
from ppo_numpy.plotting.policy import (  # noqa: E402
    plot_forward_pass,
    plot_gradcheck,
    plot_gradients,
    plot_minibatch,
    plot_ratio_after_step,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _image_axes(fig):
    return [ax for ax in fig.axes if ax.images]


def test_forward_pass_one_panel_per_step_labelled_by_token():
    rng = np.random.default_rng(0)
    steps = {"x": rng.normal(size=(4, 6)), "h": np.tanh(rng.normal(size=(4, 3))),
             "probs": np.full((4, 5), 0.2), "V": rng.normal(size=4)}
    fig = plot_forward_pass(steps, tokens=["<bos>", "a", "b", "c"], title="t")
    assert isinstance(fig, Figure)
    axes = _image_axes(fig)
    assert len(axes) == 4
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["<bos>", "a", "b", "c"]
    # the shapes are in the titles; a vector is drawn as one column
    assert "4 x 6" in axes[0].get_title() and "4 x 1" in axes[3].get_title()
    assert axes[3].images[0].get_array().shape[:2] == (4, 1)


def test_forward_pass_bad_input():
    with pytest.raises(ValueError, match="same length"):
        plot_forward_pass({"x": np.zeros((4, 2)), "h": np.zeros((3, 2))})
    with pytest.raises(ValueError, match="tokens"):
        plot_forward_pass({"x": np.zeros((4, 2))}, tokens=["a"])
    with pytest.raises(ValueError, match=r"steps\['x'\]"):
        plot_forward_pass({"x": np.zeros((4, 2, 2))})
    with pytest.raises(ValueError, match="steps"):
        plot_forward_pass({})


def test_gradients_every_tensor_including_scalars():
    grads = {"W": np.arange(6.0).reshape(2, 3) - 2, "b": np.array([1.0, -1.0]),
             "c": np.array(0.5)}
    fig = plot_gradients(grads, ncols=2)
    axes = _image_axes(fig)
    assert len(axes) == 3
    assert axes[2].images[0].get_array().shape[:2] == (1, 1)
    assert "dW (2, 3)" in axes[0].get_title()
    with pytest.raises(ValueError, match="grads"):
        plot_gradients({"T": np.zeros((2, 2, 2))})
    with pytest.raises(ValueError, match="ncols"):
        plot_gradients(grads, ncols=0)


def test_gradients_have_colour_bars_and_a_scalar_prints_its_value():
    grads = {"W": np.arange(6.0).reshape(2, 3) - 2, "c": np.array(0.5)}
    fig = plot_gradients(grads)
    heat = _image_axes(fig)
    bars = [ax for ax in fig.axes if ax not in heat and ax.get_visible() and ax.axison]
    # one colour bar per tensor, spanning its scale: symmetric for W (both signs), 0..0.5
    assert len(bars) == 2
    np.testing.assert_allclose(sorted(bars[0].get_ylim()), [-3.0, 3.0])
    np.testing.assert_allclose(sorted(bars[1].get_ylim()), [0.0, 0.5])
    assert [t.get_text() for t in heat[1].texts] == ["0.5"]
    assert len(heat[0].texts) == 0                       # 6 cells: the colour bar reads them


def test_forward_pass_rows_fit_the_site_width_and_label_each_row():
    from ppo_numpy.plotting.policy import panel_rows
    from ppo_numpy.plotting.style import SITE_WIDTH_IN

    # notebook 08: x (6 x 12), h (6 x 6), softmax(z) (6 x 7), V (6): 16 + 10 columns, then
    # 11 + 8 (a vector is drawn 4 columns wide), of 28 a row
    assert panel_rows([12, 6, 7, 4]) == [[0, 1], [2, 3]]
    assert panel_rows([24, 1]) == [[0], [1]] and panel_rows([40]) == [[0]]
    tokens = ["<bos>", "c", "b", "a", "d", "c"]
    fig = plot_forward_pass({"x": np.ones((6, 12)), "h": np.ones((6, 6)),
                             "softmax(z)": np.ones((6, 7)), "V": np.ones(6)}, tokens=tokens)
    assert fig.get_size_inches()[0] == SITE_WIDTH_IN
    fig.canvas.draw()
    x, h, probs, v = _image_axes(fig)
    # two rows: x and h side by side, softmax(z) and V under them; tokens on each row's first
    assert x.get_position().y0 > probs.get_position().y1
    assert h.get_position().x0 > x.get_position().x1 and abs(x.get_position().x0
                                                               - probs.get_position().x0) < 0.02
    for ax, labelled in ((x, True), (h, False), (probs, True), (v, False)):
        assert [t.get_text() for t in ax.get_yticklabels()] == (tokens if labelled else [])
    # a heatmap column is as wide in the second row as in the first (to 10%)
    col = [ax.get_position().width / n for ax, n in ((x, 12), (probs, 7))]
    assert abs(col[0] / col[1] - 1) < 0.1


def test_forward_pass_panels_have_colour_bars():
    fig = plot_forward_pass({"x": np.ones((3, 2)), "V": np.array([1.0, -2.0, 0.5])})
    assert len(fig.axes) == 4                            # two heatmaps, two colour bars
    np.testing.assert_allclose(sorted(fig.axes[3].get_ylim()), [-2.0, 2.0])


def test_minibatch_numbers_are_readable():
    from ppo_numpy.plotting.style import SITE_WIDTH_IN

    # notebook 09's minibatch: 12 quantities of B = 6 responses, T = 7 tokens
    mask = np.ones((6, 7))
    fig = plot_minibatch({f"q{k}": np.full((6, 7), -0.0139) for k in range(12)}, mask)
    sizes = {t.get_fontsize() for ax in fig.axes for t in ax.texts}
    assert sizes == {8.0}
    # at the site's width (shown at its own size there), every number inside its cell
    assert fig.get_size_inches()[0] <= SITE_WIDTH_IN and fig.dpi >= 90
    assert len(_image_axes(fig)) == 12
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in _image_axes(fig):
        cell = ax.get_window_extent().width / 7
        widths = [t.get_window_extent(renderer).width for t in ax.texts]
        assert len(widths) == 42 and max(widths) < 0.95 * cell, (ax.get_title(), cell)


def test_gradients_all_zero_tensor_draws():
    fig = plot_gradients({"W": np.zeros((2, 2))})
    assert len(_image_axes(fig)) == 1


def test_gradcheck_bars_coloured_by_verdict_and_exact_at_the_floor():
    report = {"ok": cmp("ok", [1.0, 2.0], [1.0, 2.0 + 1e-9]),
              "bad": cmp("bad", [1.0, 2.0], [1.0, 2.5]),
              "exact": cmp("exact", [0.0, 3.0], [0.0, 3.0])}
    fig = plot_gradcheck(report)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 3
    heights = [b.get_height() for b in bars]
    assert heights[0] == pytest.approx(report["ok"].rel_error)
    assert heights[1] == pytest.approx(0.2)
    assert heights[2] == 1e-18
    green, red = matplotlib.colors.to_rgba("tab:green"), matplotlib.colors.to_rgba("tab:red")
    assert [b.get_facecolor() for b in bars] == [green, red, green]
    assert "exact" in [t.get_text() for t in ax.texts]
    with pytest.raises(ValueError, match="Comparison"):
        plot_gradcheck({"x": 1.0})


def test_minibatch_greys_padding_and_annotates_valid_cells_only():
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    q = {"a": np.array([[1.0, -2.0, np.nan], [3.0, np.inf, 0.0]]), "b": np.ones((2, 3))}
    fig = plot_minibatch(q, mask)
    axes = _image_axes(fig)
    assert len(axes) == 2
    img = axes[0].images[0].get_array()
    pad = np.array([0.9, 0.9, 0.9, 1.0])
    np.testing.assert_allclose(img[0, 2], pad)
    np.testing.assert_allclose(img[1, 1], pad)
    assert not np.allclose(img[0, 0], pad)
    # three valid tokens, three numbers, none for padding
    assert sorted(t.get_text() for t in axes[0].texts) == ["-2", "1", "3"]


def test_minibatch_bad_input():
    m = np.ones((2, 3))
    with pytest.raises(ValueError, match="does not match mask"):
        plot_minibatch({"a": np.ones((2, 2))}, m)
    with pytest.raises(ValueError, match="NaN or inf at a response token"):
        plot_minibatch({"a": np.full((2, 3), np.nan)}, m)
    with pytest.raises(ValueError, match="only 0 and 1"):
        plot_minibatch({"a": np.ones((2, 3))}, 2 * m)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        plot_minibatch({"a": np.ones(3)}, np.ones(3))
    with pytest.raises(ValueError, match="ncols"):
        plot_minibatch({"a": np.ones((2, 3))}, m, ncols=0)


def test_ratio_after_step_counts_tokens_that_moved_with_their_advantage():
    rho = np.array([[1.1, 0.9, 1.05], [0.95, 1.0, 7.0]])
    A = np.array([[1.0, -1.0, -0.5], [-2.0, 0.3, 0.0]])
    mask = np.array([[1, 1, 1], [1, 1, 0]])
    fig = plot_ratio_after_step(rho, A, mask, epsilon=0.2)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # with A_hat: (1.1, +1), (0.9, -1), (0.95, -2); against: (1.05, -0.5); not at all: (1.0, 0.3)
    assert "moved with A_hat (3 of 5)" in labels
    assert "against or not at all (2)" in labels
    with pytest.raises(ValueError, match="advantages"):
        plot_ratio_after_step(rho, A[:, :2])
    with pytest.raises(ValueError, match="no response token"):
        plot_ratio_after_step(rho, A, np.zeros((2, 3)))
    with pytest.raises(ValueError, match="mask: must contain only 0 and 1"):
        plot_ratio_after_step(rho, A, 2 * mask)


def _history(n, **const):
    from ppo_numpy.training.metrics import COLUMNS

    return [{c: float(const.get(c, k)) if c != "iteration" else k + 1 for c in COLUMNS}
            for k in range(n)]


def test_plot_runs_one_panel_per_column_one_line_per_run():
    from ppo_numpy.plotting.style import MIN_DPI
    from ppo_numpy.plotting.training import LABELS, RUN_COLUMNS, plot_runs

    runs = {"a": _history(5), "b": _history(3, score=0.5)}
    fig = plot_runs(runs)
    panels = [ax for ax in fig.axes if ax.lines]
    # human-readable titles and units, never the raw column names (kl_ref, approx_kl_k3)
    assert [ax.get_title() for ax in panels] == [LABELS[c][0] for c in RUN_COLUMNS]
    assert [ax.get_ylabel() for ax in panels] == [LABELS[c][1] for c in RUN_COLUMNS]
    assert panels[1].get_title() == "KL(pi_theta || pi_ref)"
    assert panels[3].get_title() == "step size: KL(pi_old || pi_theta), k3"
    from ppo_numpy.training.metrics import COLUMNS

    assert not {ax.get_title() for ax in panels} & set(COLUMNS)
    assert fig.dpi >= MIN_DPI
    assert all(len(ax.lines) == 2 for ax in panels)
    score = panels[0].lines[1]
    np.testing.assert_array_equal(score.get_xdata(), [1, 2, 3])
    np.testing.assert_array_equal(score.get_ydata(), [0.5, 0.5, 0.5])
    # one legend for the figure, outside every panel
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a", "b"]
    fig = plot_runs(runs, columns=("entropy",), ncols=3)
    assert len([ax for ax in fig.axes if ax.lines]) == 1
    with pytest.raises(ValueError, match="columns"):
        plot_runs(runs, columns=("nonsense",))
    with pytest.raises(ValueError, match="runs"):
        plot_runs({})


def _report():
    from ppo_numpy.oracle.compare import compare_outputs

    mask = np.array([[1.0, 1.0, 0.0]])
    case = {"name": "c1", "inputs": {"mask": mask}}
    expected = {"advantages": np.array([[0.5, 0.25, 0.0]]), "policy_loss": -0.375}
    good = compare_outputs({"advantages": np.array([[0.5, 0.25, np.nan]]),
                            "policy_loss": -0.375 + 1e-13}, expected, case=case)
    bad = compare_outputs({"advantages": np.array([[0.5, np.nan, 0.0]]), "policy_loss": -0.3},
                          expected, case={**case, "name": "c2"})
    good.extend(bad)
    good.rejected["c3"] = "ValueError: no"
    return good


def test_plot_comparison_cells_coloured_by_verdict_rejected_rows_grey():
    from ppo_numpy.plotting.oracle import plot_comparison

    report = _report()
    fig = plot_comparison(report)
    ax = fig.axes[0]
    img = ax.images[0].get_array()
    assert img.shape[:2] == (3, 2)                           # cases c1, c2, c3 x 2 outputs
    assert [t.get_text() for t in ax.get_yticklabels()] == ["c1", "c2", "c3"]
    np.testing.assert_allclose(img[2, 0], (0.85, 0.85, 0.85, 1.0))
    green, red = img[0, 0], img[1, 0]
    assert green[1] > green[0] and red[0] > red[1]           # c1 passed, c2 failed
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
             for t in ax.texts}
    assert texts[(0, 0)] == "exact" and texts[(1, 0)] == "inf"   # NaN at a response token
    assert float(texts[(1, 1)]) > 0 > float(texts[(0, 1)])   # 0.075 fails, 1e-13 passes
    assert "2 of 4 comparisons failed" in ax.get_title()
    with pytest.raises(ValueError, match="ComparisonReport"):
        plot_comparison({"rows": []})
