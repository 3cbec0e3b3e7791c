"""Figures of the reward-model over-optimisation experiment (``docs/overoptimisation.md``,
notebook ``12_reward_model_overoptimisation``).

Functions build a ``matplotlib.figure.Figure`` directly (no pyplot), so they run
headless in tests and scripts and display in notebooks.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .._checks import check_int
from ..reward.overoptimisation import rows_by_beta
from .style import SITE_WIDTH_IN, figure, legend_outside, saved, two_over_one


def _moving_average(x, k):
    """Mean of each window of k consecutive values (len(x) - k + 1 of them)."""
    k = max(1, min(int(k), len(x)))
    return np.convolve(np.asarray(x, dtype=np.float64), np.ones(k) / k, mode="valid")


def plot_overoptimisation(rows, *, smooth=10, title=None, path=None) -> Figure:
    """Proxy and gold score against iteration and against sqrt(KL), and the KL, per beta.

    Parameters
    ----------
    rows : list of dicts
        ``OveroptimisationResult.rows`` or ``read_csv("overoptimisation.csv")``.
    smooth : int >= 1
        Curves are moving averages over this many iterations (the per-iteration means
        over one batch are noisy); 1 plots the raw values.
    title : str, optional
    path : str or Path, optional
        Save a PNG there.

    Returns
    -------
    matplotlib.figure.Figure
        ``SITE_WIDTH_IN`` wide (the site shows it at its own size). Its axes: above, side
        by side, proxy (dashed) and gold (solid) per iteration, and the same against
        sqrt(KL(pi_theta || pi_ref)); below, the full width, the KL per iteration. One
        colour per beta.
    """
    smooth = check_int(smooth, "smooth")
    runs = rows_by_beta(rows)
    if not runs:
        raise ValueError("rows: nothing to plot")
    fig, ax = two_over_one(height=7.4)
    for i, (beta, c) in enumerate(sorted(runs.items())):
        color = f"C{i}"
        it = _moving_average(c["iteration"], smooth)
        gold = _moving_average(c["gold_score"], smooth)
        proxy = _moving_average(c["proxy_score"], smooth)
        sqrt_kl = _moving_average(c["sqrt_kl"], smooth)
        for a, x in ((ax[0], it), (ax[1], sqrt_kl)):
            a.plot(x, gold, color=color, label=f"beta = {beta:g}: gold")
            a.plot(x, proxy, color=color, ls="--", label=f"beta = {beta:g}: proxy")
        ax[2].plot(it, _moving_average(c["kl_ref"], smooth), color=color,
                   label=f"beta = {beta:g}")
    ax[0].set_xlabel("PPO iteration")
    ax[0].set_ylabel("score (reward units)")
    ax[0].set_title("proxy (learned, dashed) keeps rising;\ngold (solid) may not", fontsize=10)
    ax[1].set_xlabel("sqrt(KL to the reference), sqrt nats")
    ax[1].set_ylabel("score (reward units)")
    ax[1].set_title("score against distance\nfrom pi_ref", fontsize=10)
    ax[2].set_xlabel("PPO iteration")
    ax[2].set_ylabel("nats per response")
    ax[2].set_title("KL(pi_theta || pi_ref)", fontsize=10)
    # colours name the betas (right panel), line styles the two scores (middle panel)
    legend_outside(ax[1], ncols=1, handles=[Line2D([], [], color="k", label="gold (task rule)"),
                                   Line2D([], [], color="k", ls="--",
                                          label="proxy (reward model)")])
    legend_outside(ax[2], ncols=4)
    note = f"moving average over {smooth} iterations" if smooth > 1 else "raw values"
    fig.suptitle(f"{title + ': ' if title else ''}PPO against a learned reward ({note})",
                 fontsize=10)
    return saved(fig, path)


def plot_reward_model_fit(history, *, path=None) -> Figure:
    """The reward model's training curve: Bradley-Terry loss and accuracies per step, one
    panel above the other at the site's width (``SITE_WIDTH_IN``).

    Parameters
    ----------
    history : list of dicts
        From :func:`ppo_numpy.reward.fit_reward_model` with ``heldout`` given.
    path : str or Path, optional
    """
    if not history:
        raise ValueError("history: nothing to plot")
    step = [h["step"] for h in history]
    fig, ax = figure(2, 1, width=SITE_WIDTH_IN, height=7.8)
    ax[0].plot(step, [h["bt_loss"] for h in history], label="training pairs")
    if "heldout_bt_loss" in history[0]:
        held = [h["heldout_bt_loss"] for h in history]
        best = int(np.argmin(held))
        ax[0].plot(step, held, label="held-out pairs")
        ax[0].axvline(step[best], color="C1", lw=0.8, ls="--",
                      label=f"held-out minimum {held[best]:.3f} (step {step[best]})")
    ax[0].axhline(np.log(2), color="k", lw=0.8, ls=":", label="log 2 (r constant)")
    overfit = "heldout_bt_loss" in history[0] and held[-1] > np.log(2)
    ax[0].set_title("Bradley-Terry loss" + (": held-out above log 2, overfitted "
                                            "(confident and wrong on new pairs)"
                                            if overfit else ""), fontsize=10)
    ax[0].set_ylabel("loss per pair (nats)")
    ax[1].plot(step, [h["accuracy"] for h in history], label="training, vs labels")
    if "heldout_accuracy" in history[0]:
        ax[1].plot(step, [h["heldout_accuracy"] for h in history], label="held-out, vs labels")
        ax[1].plot(step, [h["heldout_gold_accuracy"] for h in history],
                   label="held-out, vs gold order")
        ax[1].axhline(history[-1]["heldout_label_gold_accuracy"], color="C3", lw=0.8,
                      ls="--", label="the labels vs gold order")
    ax[1].axhline(0.5, color="k", lw=0.8, ls=":", label="chance")
    ax[1].set_title("preference accuracy", fontsize=10)
    ax[1].set_ylabel("fraction of pairs ordered right")
    for a in ax:
        a.set_xlabel("Adam step")
        legend_outside(a)
    return saved(fig, path)
