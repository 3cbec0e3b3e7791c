"""What the figures of notebook 14 draw: the arrays, the labels, the colour bars."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402

from ppo_numpy.plotting.transformer import plot_accuracy_by_sum, plot_attention  # noqa: E402


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
        assert [t.get_text() for t in ax.get_yticklabels()] == tokens
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
    # the carry line a_1 + b_1 = 9.5 on each heatmap
    for im in heat:
        (line,) = im.axes.get_lines()
        x, y = line.get_data()
        np.testing.assert_allclose(np.asarray(x) + np.asarray(y), [9.5, 9.5])
        assert im.axes.get_xlim() == (-0.5, 9.5) and im.axes.get_ylim() == (-0.5, 9.5)
    bars_ax = fig.axes[2]
    heights = [p.get_height() for p in bars_ax.patches]
    # before: no carry 2/2, carry 0/2; after: no carry 1/2, carry 1/2
    assert heights == [1.0, 0.0, 0.5, 0.5]
    assert [t.get_text() for t in bars_ax.get_xticklabels()] == ["no carry\n(2 sums)",
                                                                 "units carry\n(2 sums)"]
    assert [t.get_text() for t in bars_ax.get_legend().get_texts()] == ["before", "after"]
    assert any(ax.get_ylabel() == "accuracy" for ax in fig.axes)  # the colour bar


def test_accuracy_by_sum_rejects_mismatched_inputs():
    a = np.array([1, 2])
    with pytest.raises(ValueError, match="correct"):
        plot_accuracy_by_sum(a, a, {"m": np.array([True])}, np.array([False, False]))
    with pytest.raises(ValueError, match="carry"):
        plot_accuracy_by_sum(a, a, {"m": np.array([True, True])}, np.array([False]))
    with pytest.raises(ValueError, match="no model"):
        plot_accuracy_by_sum(a, a, {}, np.array([False, False]))
