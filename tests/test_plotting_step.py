"""The figures of notebook 16 (ppo_numpy.plotting.step) draw the arrays and labels given."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from ppo_numpy.plotting import step  # noqa: E402


def test_response_shares_draws_one_bar_per_response_and_normaliser():
    shares = {"global": [10 / 1010, 1000 / 1010], "micro-batch mean": [0.5, 0.5],
              "trl grpo": [0.5, 0.5]}
    fig = step.plot_response_shares(shares, ["10 tokens", "1000 tokens"],
                                    full_batch=[10 / 1010, 1000 / 1010])
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(bars) == 6
    # matplotlib draws the first response's bars (one per label), then the second's
    heights = [b.get_height() for b in bars]
    assert heights == [10 / 1010, 0.5, 0.5, 1000 / 1010, 0.5, 0.5]
    centres = [b.get_x() + b.get_width() / 2 for b in bars]
    np.testing.assert_allclose(centres, [-0.2, 0.8, 1.8, 0.2, 1.2, 2.2])
    assert [t.get_text() for t in ax.get_xticklabels()] == list(shares)
    dashed = [line.get_ydata()[0] for line in ax.get_lines()]
    assert dashed == [10 / 1010, 1000 / 1010]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "10 tokens: full batch", "1000 tokens: full batch", "10 tokens", "1000 tokens"]
    assert ax.get_yscale() == "log"
    # each bar's value written on it, three digits
    assert [t.get_text() for t in ax.texts] == ["0.0099", "0.5", "0.5", "0.99", "0.5", "0.5"]


def test_accumulation_drift_draws_each_run_and_leaves_zeros_out():
    drift = {"global": [3e-16, 0.0, 1e-15], "micro-batch mean": [0.1, 0.3, 0.5]}
    fig = step.plot_accumulation_drift(drift)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["global", "micro-batch mean",
                                                    "2^-52 (float64 epsilon)"]
    np.testing.assert_array_equal(lines[0].get_xdata(), [1, 2, 3])
    np.testing.assert_array_equal(lines[0].get_ydata(), [3e-16, np.nan, 1e-15])
    np.testing.assert_array_equal(lines[1].get_ydata(), [0.1, 0.3, 0.5])
    assert lines[2].get_ydata()[0] == 2.0**-52
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "iteration"


@pytest.mark.parametrize("call, match", [
    (lambda: step.plot_response_shares({}, ["a"]), "shares: no normaliser"),
    (lambda: step.plot_response_shares({"g": [1.0]}, []), "responses: no response"),
    (lambda: step.plot_response_shares({"g": [1.0, 2.0, 3.0]}, ["a", "b"]),
     r"shares\['g'\]: expected length 2"),
    (lambda: step.plot_response_shares({"g": [1.0, 2.0]}, ["a", "b"], full_batch=[1.0]),
     "full_batch: expected length 2"),
    (lambda: step.plot_accumulation_drift({}), "drift: no run"),
    (lambda: step.plot_accumulation_drift({"g": []}), r"drift\['g'\]: expected a non-empty"),
    (lambda: step.plot_accumulation_drift({"g": [-1.0]}), r"drift\['g'\]: must be >= 0"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
