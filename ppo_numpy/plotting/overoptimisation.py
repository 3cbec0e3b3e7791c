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
    rows : list of dicts, or a list of such lists (one per random seed)
        ``OveroptimisationResult.rows`` or ``read_csv("overoptimisation.csv")``. Several
        runs (seeds) are drawn as their mean, the gold score and the KL with a band from
        the lowest to the highest of them (each run smoothed first); the middle panel
        draws the mean gold against the mean sqrt(KL).
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
    several = bool(rows) and all(isinstance(r, (list, tuple)) for r in rows)
    seeds = [rows_by_beta(r) for r in (rows if several else [rows])]
    if not seeds or not all(seeds):
        raise ValueError("rows: nothing to plot")
    if any(sorted(s) != sorted(seeds[0]) for s in seeds):
        raise ValueError("rows: the runs of every random seed must hold the same betas")
    fig, ax = two_over_one(height=7.4)

    def curves(beta, column):
        """(seeds, n): the column of beta, smoothed, one row per run (random seed)."""
        return np.array([_moving_average(s[beta][column], smooth) for s in seeds])

    for i, beta in enumerate(sorted(seeds[0])):
        color = f"C{i}"
        it = _moving_average(seeds[0][beta]["iteration"], smooth)
        gold, proxy = curves(beta, "gold_score"), curves(beta, "proxy_score")
        sqrt_kl, kl = curves(beta, "sqrt_kl"), curves(beta, "kl_ref")
        for a, x in ((ax[0], it), (ax[1], sqrt_kl.mean(axis=0))):
            a.plot(x, gold.mean(axis=0), color=color, label=f"beta = {beta:g}: gold")
            a.plot(x, proxy.mean(axis=0), color=color, ls="--", label=f"beta = {beta:g}: proxy")
        ax[2].plot(it, kl.mean(axis=0), color=color, label=f"beta = {beta:g}")
        if len(seeds) > 1:
            ax[0].fill_between(it, gold.min(axis=0), gold.max(axis=0), color=color, alpha=0.2,
                               lw=0)
            ax[2].fill_between(it, kl.min(axis=0), kl.max(axis=0), color=color, alpha=0.2,
                               lw=0)
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
    if len(seeds) > 1:
        note += (f";\nmean of {len(seeds)} seeds, band: lowest to highest gold score and KL "
                 "of the seeds")
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
