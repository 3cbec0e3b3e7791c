"""What the figures of notebook 14 draw: the arrays, the labels, the colour bars."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402

from ppo_numpy.plotting.transformer import (  # noqa: E402
    plot_accuracy_by_sum,
    plot_attention,
    plot_attention_change,
)


def _causal_attention(n_layers, H, L, rng):
    S = rng.normal(size=(n_layers, H, L, L))
    S = np.where(np.tril(np.ones((L, L), dtype=bool)), S, -np.inf)
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


def _images(fig):
    return [im for ax in fig.axes for im in ax.get_images()]


def test_attention_draws_every_head_of_every_layer_with_token_labels():
    P = _causal_attention(2, 3, 4, np.random.default_rng(0))
    tokens = ["<bos>", "1", "+", "="]
    fig = plot_attention(P, tokens, title="one prompt")
    images = _images(fig)
    heat = [im for im in images if isinstance(im, AxesImage)]
    assert len(heat) == 6  # 2 layers x 3 heads
    for k, im in enumerate(heat):
        layer, head = divmod(k, 3)
        np.testing.assert_array_equal(im.get_array(), P[layer, head])
        assert im.get_clim() == (0.0, 1.0)
        ax = im.axes
        assert [t.get_text() for t in ax.get_xticklabels()] == tokens
        # the query labels on the first panel of a row (the row's panels share them)
        assert [t.get_text() for t in ax.get_yticklabels()] == (tokens if head == 0
                                                                 else [""] * 4)
        assert ax.get_title() == f"layer {layer}, head {head}"
    # one colour bar: an extra axes whose label names the weights
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "attention weight P"]
    assert len(bars) == 1
    assert fig._suptitle.get_text() == "one prompt"


def test_attention_accepts_one_layer_and_names_layers():
    P = _causal_attention(1, 2, 3, np.random.default_rng(1))[0]  # (H, L, L)
    fig = plot_attention(P, list("abc"), layer_labels=["after PPO"])
    titles = [im.axes.get_title() for im in _images(fig)]
    assert titles == ["after PPO, head 0", "after PPO, head 1"]


@pytest.mark.parametrize("bad, tokens, match", [
    (np.zeros((2, 3, 4)), list("abc"), "attn"),
    (np.zeros((1, 3, 3)), list("ab"), "tokens"),
])
def test_attention_rejects_bad_shapes(bad, tokens, match):
    with pytest.raises(ValueError, match=match):
        plot_attention(bad, tokens)


def test_attention_change_is_after_minus_before_on_a_symmetric_scale():
    rng = np.random.default_rng(2)
    before, after = _causal_attention(2, 2, 3, rng), _causal_attention(2, 2, 3, rng)
    fig = plot_attention_change(before, after, list("abc"), layer_labels=["L0", "L1"])
    heat = _images(fig)
    assert len(heat) == 4
    bound = np.abs(after - before).max()
    for k, im in enumerate(heat):
        layer, head = divmod(k, 2)
        np.testing.assert_allclose(im.get_array(), after[layer, head] - before[layer, head],
                                   rtol=0, atol=1e-15)
        np.testing.assert_allclose(im.get_clim(), (-bound, bound), rtol=1e-15)
        d = np.abs(after[layer, head] - before[layer, head]).max()
        assert im.axes.get_title() == f"L{layer}, head {head}\nmax |change| {d:.2f}"
    assert any(ax.get_ylabel() == "change of P (after - before)" for ax in fig.axes)
    with pytest.raises(ValueError, match="after"):
        plot_attention_change(before, after[:1], list("abc"))


def test_accuracy_by_sum_draws_cells_line_and_bars():
    # four sums: 12 + 03 (no carry), 15 + 07 and 19 + 91 (carry), 22 + 13 twice as 12 + 03's
    a = np.array([12, 15, 19, 32])
    b = np.array([3, 7, 91, 13])
    carry = (a % 10 + b % 10) >= 10  # [F, T, T, F]
    before = np.array([True, False, False, True])
    after = np.array([True, True, False, False])
    fig = plot_accuracy_by_sum(a, b, {"before": before, "after": after}, carry)
    heat = _images(fig)
    assert len(heat) == 2
    grid_before, grid_after = (np.ma.filled(im.get_array(), np.nan) for im in heat)
    # rows are b's units digit, columns a's; 12 + 03 and 32 + 13 share the cell (3, 2)
    assert grid_before[3, 2] == 1.0 and grid_after[3, 2] == 0.5
    assert grid_before[7, 5] == 0.0 and grid_after[7, 5] == 1.0
    assert grid_before[1, 9] == 0.0 and grid_after[1, 9] == 0.0
    assert np.isnan(grid_before).sum() == 100 - 3  # only three cells hold a sum
    assert heat[0].axes.get_title() == "before: 50% right"
    assert heat[1].axes.get_title() == "after: 50% right"
    # the carry line a_2 + b_2 = 9.5 on each heatmap (a_2, b_2: the units digits)
    for im in heat:
        (line,) = im.axes.get_lines()
        x, y = line.get_data()
        np.testing.assert_allclose(np.asarray(x) + np.asarray(y), [9.5, 9.5])
        assert line.get_label() == "a_2 + b_2 = 9.5 (carry above)"
        assert im.axes.get_xlim() == (-0.5, 9.5) and im.axes.get_ylim() == (-0.5, 9.5)
        # the 97 cells without a sum are hatched grey, at their (column a, row b) places
        empty = [p for p in im.axes.patches if p.get_label() == "no held-out sum"]
        assert len(empty) == 97 and all(p.get_hatch() == "////" for p in empty)
        corners = {(p.get_x() + 0.5, p.get_y() + 0.5) for p in empty}
        assert (2, 3) not in corners and (5, 7) not in corners and (9, 1) not in corners
        assert (0, 0) in corners
        # each cell with sums says how many: 2 in (a 2, b 3), 1 in the two others
        texts = {(t.get_position(), t.get_text()) for t in im.axes.texts}
        assert texts == {((2, 3), "2"), ((5, 7), "1"), ((9, 1), "1")}
    legend = [t.get_text() for t in heat[0].axes.get_legend().get_texts()]
    assert legend == ["no held-out sum", "a_2 + b_2 = 9.5 (carry above)"]
    bars_ax = fig.axes[2]
    heights = [p.get_height() for p in bars_ax.patches]
    # before: no carry 2/2, carry 0/2; after: no carry 1/2, carry 1/2
    assert heights == [1.0, 0.0, 0.5, 0.5]
    assert [t.get_text() for t in bars_ax.get_xticklabels()] == ["no carry\n(2 sums)",
                                                                 "units carry\n(2 sums)"]
    assert [t.get_text() for t in bars_ax.get_legend().get_texts()] == ["before", "after"]
    assert any(ax.get_ylabel() == "accuracy (number: sums in the cell)"
               for ax in fig.axes)  # the colour bar


def test_accuracy_by_sum_rejects_mismatched_inputs():
    a = np.array([1, 2])
    with pytest.raises(ValueError, match="correct"):
        plot_accuracy_by_sum(a, a, {"m": np.array([True])}, np.array([False, False]))
    with pytest.raises(ValueError, match="carry"):
        plot_accuracy_by_sum(a, a, {"m": np.array([True, True])}, np.array([False]))
    with pytest.raises(ValueError, match="no model"):
        plot_accuracy_by_sum(a, a, {}, np.array([False, False]))
