"""The figures of notebook 17 (``ppo_numpy.plotting.kl_gradient``): what each one draws."""

from __future__ import annotations

import io
from fractions import Fraction as F

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from ppo_numpy.grads.kl_exact import kl_gradient_table
from ppo_numpy.plotting import kl_gradient


def _render(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def test_table_draws_the_gaps_and_the_verdicts_per_sampler():
    rows = kl_gradient_table([F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)], [F(1, 3), F(2, 3)])
    fig = kl_gradient.plot_kl_gradient_table(rows)
    on, off = [ax for ax in fig.axes if ax.images]
    assert "pi_theta" in on.get_title() and "pi_old" in off.get_title()
    assert [t.get_text() for t in on.get_yticklabels()] == ["k1", "k2", "k3", "abs"]
    assert [t.get_text() for t in on.get_xticklabels()] == [
        "plain", "ratio", "straight\nthrough", "importance", "reward"]
    gaps = on.images[0].get_array()
    # k3 plain: its gap to the reverse KL's gradient is |-1/4 - (-0.2059898041)|
    assert gaps[2, 0] == pytest.approx(0.25 - 0.2059898041, rel=1e-9)
    assert gaps[2, 1] == pytest.approx(0.0, abs=1e-15)
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
             for t in on.texts}
    assert texts[(2, 0)] == "fwd" and texts[(2, 1)] == "rev" and texts[(0, 4)] == "rev"
    assert texts[(0, 0)] == "0.206"  # k1 plain: expectation 0, the whole gradient missing
    off_texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
                 for t in off.texts}
    assert off_texts[(2, 0)] == f"{0.09956575143:.3f}" and off_texts[(2, 1)] == "rev"
    assert _render(fig)


def test_sequence_gradients_are_grouped_bars():
    labels = ["z[1]", "z[2]", "z[1 | 1]"]
    fig = kl_gradient.plot_sequence_gradients(labels, {"a": [1.0, -1.0, 0.0],
                                                       "b": [0.5, -0.5, 0.25]})
    (ax,) = fig.axes
    heights = [b.get_height() for b in ax.patches]
    assert heights == [1.0, -1.0, 0.0, 0.5, -0.5, 0.25]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert ax.get_xlabel() and ax.get_ylabel()
    with pytest.raises(ValueError, match=r"grads\['a'\]: expected length 3"):
        kl_gradient.plot_sequence_gradients(labels, {"a": [1.0, 2.0]})
    assert _render(fig)


def test_runs_draw_the_mean_and_the_band_of_the_seeds():
    runs = {"plain": [[0.0, 1.0, 2.0], [0.0, 3.0, 4.0]], "ratio": [[0.0, 0.5, 1.0],
                                                                   [0.0, 0.5, 2.0]]}
    fig = kl_gradient.plot_kl_runs(runs)
    (ax,) = fig.axes
    assert [list(line.get_ydata()) for line in ax.lines] == [[0.0, 2.0, 3.0], [0.0, 0.5, 1.5]]
    assert list(ax.lines[0].get_xdata()) == [1, 2, 3]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    top = bands[0].get_paths()[0].vertices[:, 1]
    assert top.max() == 4.0 and top.min() == 0.0
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["plain", "ratio"]
    assert "2 seeds" in ax.get_title()
    with pytest.raises(ValueError, match=r"curves\['x'\]: expected a 2-d array"):
        kl_gradient.plot_kl_runs({"x": [1.0, 2.0]})
    assert _render(fig)


def test_empty_inputs_name_the_argument():
    with pytest.raises(ValueError, match="rows: no row"):
        kl_gradient.plot_kl_gradient_table([])
    with pytest.raises(ValueError, match="curves: no setting"):
        kl_gradient.plot_kl_runs({})
    with pytest.raises(ValueError, match="grads: no gradient"):
        kl_gradient.plot_sequence_gradients(["z[1]"], {})
    assert np.isfinite(0.0)
