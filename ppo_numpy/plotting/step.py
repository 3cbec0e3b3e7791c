"""One optimizer step across ranks and micro-batches: each response's share of the gradient
under each normaliser, and a training run's drift from the one-pass run (notebook 16).

Functions build a ``matplotlib.figure.Figure`` directly (no pyplot), at most the site's
width (``style.SITE_WIDTH_IN``).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .style import SITE_WIDTH_IN, figure, legend_outside, saved, vector

__all__ = ["plot_accumulation_drift", "plot_response_shares"]


def plot_response_shares(shares, responses, *, full_batch=None, full_batch_label="full batch",
                         path=None) -> Figure:
    """Each response's share of the step's gradient, one group of bars per normaliser.

    Parameters
    ----------
    shares : dict of str -> array (R,)
        Label (a normaliser and a split) -> the total weight of each response's tokens in
        the gradient the step applies, n_i w_i.
    responses : list of str
        The R responses' names (e.g. ``"10 tokens"``).
    full_batch : array (R,), optional
        The full-batch shares, drawn as a dashed line across every group.
    full_batch_label : str
        What the dashed lines are, in the legend (after each response's name).
    path : str or Path, optional
        Save a PNG there.
    """
    if not shares:
        raise ValueError("shares: no normaliser to draw")
    R = len(responses)
    if R == 0:
        raise ValueError("responses: no response to draw")
    values = {label: vector(v, f"shares[{label!r}]", R) for label, v in shares.items()}
    fig, ax = figure(width=SITE_WIDTH_IN, height=3.9)
    x = np.arange(len(values))
    width = 0.8 / R
    for j, name in enumerate(responses):
        bars = ax.bar(x + (j - (R - 1) / 2) * width, [v[j] for v in values.values()], width,
                      color=f"C{j}", label=name)
        ax.bar_label(bars, fmt="%.3g", fontsize=7)
    if full_batch is not None:
        ref = vector(full_batch, "full_batch", R)
        for j in range(R):
            ax.axhline(ref[j], color=f"C{j}", ls="--", lw=1.0,
                       label=f"{responses[j]}: {full_batch_label}")
    ax.set_xticks(x, list(values), fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("share of the gradient, n_i w_i")
    ax.set_title("each response's share of the step's gradient", fontsize=10)
    legend_outside(ax, ncols=2)
    return saved(fig, path)


def plot_accumulation_drift(drift, *, path=None) -> Figure:
    """A training run's parameters against the one-pass run's, per iteration.

    Parameters
    ----------
    drift : dict of str -> array (I,)
        Label -> per iteration, the largest difference of a parameter from the one-pass
        run's relative to the largest entry of its array
        (:func:`ppo_numpy.training.compare_accumulation.compare_accumulation`'s ``drift``). A 0
        (the same parameters) is not drawn on the log scale.
    path : str or Path, optional
        Save a PNG there.
    """
    if not drift:
        raise ValueError("drift: no run to draw")
    fig, ax = figure(width=SITE_WIDTH_IN, height=3.6)
    for k, (label, values) in enumerate(drift.items()):
        d = vector(values, f"drift[{label!r}]", nonempty=True)
        if np.any(d < 0):
            raise ValueError(f"drift[{label!r}]: must be >= 0")
        ax.plot(np.arange(1, d.size + 1), np.where(d > 0, d, np.nan), "o-", ms=3, lw=1.2,
                color=f"C{k}", label=label)
    ax.axhline(2.0**-52, color="0.5", ls=":", lw=1.0, label="2^-52 (float64 epsilon)")
    ax.set_yscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel("max |theta - theta_one pass|\n/ max |theta_one pass|")
    ax.set_title("parameters against the one-pass run", fontsize=10)
    legend_outside(ax, ncols=2)
    return saved(fig, path)
