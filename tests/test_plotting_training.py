"""The training and over-optimisation figures (``ppo_numpy.plotting.training``,
``ppo_numpy.plotting.overoptimisation``) draw the columns they are given, headless,
and refuse bad counts by name."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.plotting.overoptimisation import plot_overoptimisation
from ppo_numpy.plotting.training import plot_beta_sweep, plot_training
from ppo_numpy.reward import overoptimisation as oo
from ppo_numpy.training.metrics import COLUMNS


def _history(n, **columns):
    """n rows; column c of row k is columns[c][k] if given, else k + 1 (distinct per column
    only where given)."""
    return [{c: float(columns[c][k]) if c in columns else float(k + 1) for c in COLUMNS}
            for k in range(n)]


def test_training_dashboard_draws_each_column_in_its_panel():
    score, kl, grad = [0.1, 0.4, 0.9], [0.0, 0.5, 2.0], [3.0, 2.0, 1.5]
    fig = plot_training(_history(3, score=score, kl_ref=kl, grad_norm=grad), optimum=2.0)
    ax = fig.axes
    np.testing.assert_array_equal(ax[0].lines[0].get_ydata(), score)
    # optimum and its 90 % line
    assert [line.get_ydata()[0] for line in ax[0].lines[1:3]] == [2.0, 1.8]
    np.testing.assert_array_equal(ax[1].lines[0].get_ydata(), kl)
    np.testing.assert_array_equal(ax[11].lines[0].get_ydata(), grad)
    np.testing.assert_array_equal(ax[11].lines[0].get_xdata(), [1, 2, 3])
    # ratio_first_min/max are 1, 2, 3 here (not all 1): the title says logp_old is stale
    assert "stale" in fig.get_suptitle()


def _covers(legend, ax):
    """Whether the legend's box overlaps the axes' box (in pixels, after a draw)."""
    a, b = legend.get_window_extent(), ax.get_window_extent()
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_dashboard_panels_have_units_no_twin_axis_and_legends_outside_the_data():
    fig = plot_training(_history(6), random_score=0.2)
    fig.draw_without_rendering()
    # one y axis per panel: beta has its own panel instead of a second axis over the KL
    assert len(fig.axes) == 12
    for ax in fig.axes:
        assert ax.get_xlabel() == "PPO iteration" and ax.get_ylabel(), ax.get_title()
        legend = ax.get_legend()
        if legend is not None:
            assert not _covers(legend, ax), ax.get_title()
    assert fig.axes[1].get_ylabel().startswith("nats per response")
    assert "beta" in fig.axes[2].get_title() and "beta" not in fig.axes[1].get_title()
    units = [ax.get_ylabel() for ax in fig.axes]
    assert units.count("nats per token") == 2       # approximate KL and entropy


def test_dashboard_value_head_panels_say_what_they_show():
    # 6 iterations: 90% of the optimum first at iteration 3; explained variance -5 at 5
    score = [0.2, 0.5, 0.95, 1.0, 1.0, 1.0]
    ev = [-0.3, 0.1, 0.2, -0.4, -5.0, 0.0]
    vl = [0.08, 0.06, 0.04, 0.01, 0.005, 0.004]
    var_R = [0.2, 0.1, 0.08, 0.02, 0.001, 0.01]
    fig = plot_training(_history(6, score=score, explained_variance=ev, value_loss=vl,
                                 return_variance=var_R))
    loss, ev_ax = fig.axes[7], fig.axes[8]
    assert loss.get_yscale() == "log"
    np.testing.assert_array_equal(loss.lines[0].get_ydata(), vl)
    np.testing.assert_array_equal(loss.lines[1].get_ydata(), np.array(var_R) / 2)
    # the value loss's drop: mean of the first 5 over mean of the last 5 (all 6 iterations)
    drop = np.mean(vl[:5]) / np.mean(vl[-10:])
    assert f"fell {drop:.0f}x" in loss.get_title()
    # explained variance drawn as it is, clipped only by the axis, with -5 marked at the edge
    np.testing.assert_array_equal(ev_ax.lines[0].get_ydata(), ev)
    assert ev_ax.get_ylim() == (-1.1, 1.0)
    np.testing.assert_array_equal(ev_ax.lines[1].get_xdata(), [5])
    np.testing.assert_array_equal(ev_ax.lines[1].get_ydata(), [-1.05])
    # one window for every median the panel shows: the learning phase, 1-3
    assert "learning, 1-3" in ev_ax.get_title()
    assert "median 0.10\n(iterations 1-3)" in ev_ax.get_legend().get_title().get_text()
    # median of -0.3, 0.1, 0.2
    # the learning phase is shaded on both panels: iterations 1 to 3
    for ax in (loss, ev_ax):
        (span,) = ax.patches
        assert (span.get_x(), span.get_x() + span.get_width()) == (0.5, 3.5)
    assert "90% of the optimum at iteration 3" in fig.get_suptitle()


def test_beta_sweep_tradeoff_point_is_the_mean_of_the_last_iterations():
    runs = {0.1: _history(4, kl_ref=[1.0, 2.0, 3.0, 5.0], score=[0.0, 0.2, 0.4, 0.8]),
            0.0: _history(4, kl_ref=[1.0, 1.0, 7.0, 9.0], score=[0.0, 0.5, 0.9, 1.0])}
    fig = plot_beta_sweep(runs, last=2)
    tradeoff = fig.axes[2].lines[0]
    # betas sorted: 0.0 -> (mean(7, 9), mean(0.9, 1.0)), 0.1 -> (mean(3, 5), mean(0.4, 0.8))
    np.testing.assert_allclose(tradeoff.get_xdata(), [8.0, 4.0])
    np.testing.assert_allclose(tradeoff.get_ydata(), [0.95, 0.6])
    for bad in (0, -1):
        with pytest.raises(ValueError, match="last"):
            plot_beta_sweep(runs, last=bad)
    with pytest.raises(TypeError, match="last"):
        plot_beta_sweep(runs, last=1.5)


def _oo_rows():
    rows = []
    for beta, gold in ((0.0, [0.0, 0.3, 0.6, 0.3]), (0.5, [0.0, 0.1, 0.2, 0.3])):
        for k, g in enumerate(gold):
            rows.append({c: 0.0 for c in oo.COLUMNS} | {
                "beta": beta, "iteration": k + 1, "gold_score": g, "proxy_score": 2 * g + 1,
                "kl_ref": float(k * k), "sqrt_kl": float(k)})
    return rows


def test_overoptimisation_curves_are_moving_averages_per_beta():
    fig = plot_overoptimisation(_oo_rows(), smooth=2)
    left, middle, right = fig.axes
    # beta 0: gold, then proxy, as means of two consecutive iterations
    np.testing.assert_allclose(left.lines[0].get_xdata(), [1.5, 2.5, 3.5])
    np.testing.assert_allclose(left.lines[0].get_ydata(), [0.15, 0.45, 0.45])
    np.testing.assert_allclose(left.lines[1].get_ydata(), [1.3, 1.9, 1.9])
    np.testing.assert_allclose(left.lines[2].get_ydata(), [0.05, 0.15, 0.25])   # beta 0.5
    np.testing.assert_allclose(middle.lines[0].get_xdata(), [0.5, 1.5, 2.5])    # sqrt KL
    np.testing.assert_allclose(right.lines[0].get_ydata(), [0.5, 2.5, 6.5])     # KL
    raw = plot_overoptimisation(_oo_rows(), smooth=1).axes[0]
    np.testing.assert_array_equal(raw.lines[0].get_ydata(), [0.0, 0.3, 0.6, 0.3])
    with pytest.raises(ValueError, match="smooth"):
        plot_overoptimisation(_oo_rows(), smooth=0)
    with pytest.raises(ValueError, match="rows"):
        plot_overoptimisation([])
    # three seeds: the mean of the smoothed curves, a band for gold and for the KL
    other = [r | {"gold_score": r["gold_score"] + 0.2, "kl_ref": r["kl_ref"] + 1.0}
             for r in _oo_rows()]
    fig = plot_overoptimisation([_oo_rows(), other, _oo_rows()], smooth=2)
    left, middle, right = fig.axes
    np.testing.assert_allclose(left.lines[0].get_ydata(),
                               np.array([0.15, 0.45, 0.45]) + 0.2 / 3, rtol=1e-12)
    np.testing.assert_allclose(right.lines[0].get_ydata(),
                               np.array([0.5, 2.5, 6.5]) + 1 / 3, rtol=1e-12)
    assert len(left.collections) == len(right.collections) == 2 and not middle.collections
    band = left.collections[0].get_paths()[0].vertices[:, 1]   # beta 0's gold: 0.15 .. 0.65
    assert np.isclose(band.min(), 0.15) and np.isclose(band.max(), 0.65)
    assert "mean of 3 seeds" in fig.get_suptitle()
    with pytest.raises(ValueError, match="same betas"):
        plot_overoptimisation([_oo_rows(), [r for r in _oo_rows() if r["beta"] == 0.0]])


def test_runs_and_beta_sweep_over_seeds_draw_the_mean_and_the_spread():
    from ppo_numpy.plotting.training import plot_runs

    # three seeds of one label, scores by hand: the mean 0.2, 0.5, 0.8; lowest / highest
    a = _history(3, score=[0.1, 0.4, 0.9], kl_ref=[0.0, 1.0, 2.0])
    b = _history(3, score=[0.2, 0.5, 0.7], kl_ref=[0.0, 2.0, 4.0])
    c = _history(3, score=[0.3, 0.6, 0.8], kl_ref=[0.0, 3.0, 6.0])
    fig = plot_runs({"three seeds": [a, b, c], "one run": a}, columns=("score",))
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [0.2, 0.5, 0.8], rtol=1e-12)
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), [0.1, 0.4, 0.9])   # as it is
    (band,) = ax.collections                     # a band for the seeds only, none for one run
    low_high = band.get_paths()[0].vertices[:, 1]
    assert np.isclose(low_high.min(), 0.1) and np.isclose(low_high.max(), 0.9)
    assert (fig.legends[0].get_title().get_text()
            == "mean of 1/3 seeds each; band: lowest to highest")
    # the beta sweep: per beta the mean curve with its band, the trade-off's mean points
    # (mean of the last 2 iterations of each seed, then over the seeds) and each seed's
    fig = plot_beta_sweep({0.1: [a, b, c], 0.0: [c, b, a]}, last=2)
    score, kl, tradeoff = fig.axes
    np.testing.assert_allclose(score.lines[0].get_ydata(), [0.2, 0.5, 0.8], rtol=1e-12)
    np.testing.assert_allclose(kl.lines[0].get_ydata(), [0.0, 2.0, 4.0], rtol=1e-12)
    assert len(score.collections) == len(kl.collections) == 2
    # seeds' (KL, score) of the last 2: a (1.5, 0.65), b (3, 0.6), c (4.5, 0.7)
    np.testing.assert_allclose(tradeoff.lines[0].get_xdata(), [3.0, 3.0], rtol=1e-12)
    np.testing.assert_allclose(tradeoff.lines[0].get_ydata(), [0.65, 0.65], rtol=1e-12)
    np.testing.assert_allclose(tradeoff.lines[1].get_xdata(), [4.5, 3.0, 1.5], rtol=1e-12)
    np.testing.assert_allclose(tradeoff.lines[1].get_ydata(), [0.7, 0.6, 0.65], rtol=1e-12)
    assert "3 seeds" in score.get_title() and "each seed" in tradeoff.get_title()
    with pytest.raises(ValueError, match="same iterations"):
        plot_runs({"x": [a, _history(2)]})
