"""Figures of notebook ``13`` (from PPO to GRPO), one named function per figure.

Each function takes the numbers to draw (computed in the notebook with the library's
functions, so the notebook can tabulate and check them) and returns a
:class:`matplotlib.figure.Figure` (no pyplot state). Nothing here computes a quantity
of the objective. ``tests/test_plotting_grpo.py`` checks what each one draws.

=====================  ==================================================
function               draws
=====================  ==================================================
plot_std_scaling       1 / std of a group against its fraction solved, and
                       a correct response's advantage with and without it
plot_length_bias       per-token push A_i x weight of each response, by
                       aggregation mode (per-sequence vs token mean)
plot_training_curves   score and KL to the reference of several runs, each
                       one line per random seed and their mean
=====================  ==================================================
"""

from __future__ import annotations

import numpy as np

from .style import SITE_WIDTH_IN, figure, legend_outside, vector
from .training import column_label

__all__ = ["plot_length_bias", "plot_std_scaling", "plot_training_curves"]



def plot_std_scaling(fraction_solved, multiplier, centred, scaled, *, group_size=None):
    """Dr. GRPO's difficulty bias: what dividing by the group's std does per prompt.

    Parameters
    ----------
    fraction_solved : array (K,)
        p = k / G, the fraction of the group's G responses that score 1.
    multiplier : array (K,)
        1 / (std_g + eps): the factor std scaling puts on the centred advantages.
    centred : array (K,)
        A correct response's advantage without scaling, 1 - p (Dr. GRPO).
    scaled : array (K,)
        The same with scaling, (1 - p) / (std_g + eps) (GRPO).
    group_size : int, optional
        G, for the titles.
    """
    p = vector(fraction_solved, "fraction_solved", nonempty=True)
    K = p.shape[0]
    mult = vector(multiplier, "multiplier", K)
    a0, a1 = vector(centred, "centred", K), vector(scaled, "scaled", K)
    fig, (left, right) = figure(1, 2, width=SITE_WIDTH_IN, height=3.6)
    g = f" (G = {group_size})" if group_size else ""
    left.plot(p, mult, marker="o", color="C3", label="1 / (std_g + eps)")
    left.axhline(1.0, color="k", lw=0.8, ls=":", label="no scaling (Dr. GRPO)")
    left.set_title(f"the factor std scaling applies{g}", fontsize=10)
    left.set_ylabel("multiplier of s_i - mean_g")
    right.plot(p, a1, marker="o", color="C3", label="GRPO: (1 - p) / std_g")
    right.plot(p, a0, marker="s", color="C0", label="Dr. GRPO: 1 - p")
    right.set_title(f"advantage of a correct response{g}", fontsize=10)
    right.set_ylabel("A_i")
    for ax in (left, right):
        ax.set_xlabel("fraction of the group solved, p = k / G")
        ax.legend(fontsize=8, loc="upper center")
    return fig


def plot_length_bias(lengths, advantages, per_token):
    """The per-token push A_i * w_i of each response under each aggregation mode.

    Parameters
    ----------
    lengths : array (B,)
        Response lengths n_i.
    advantages : array (B,)
        Sequence-level advantages A_i (the same on every token of response i).
    per_token : dict of str -> array (B,)
        Mode -> weight w_i of one token of response i in the loss
        (``token-mean``: 1 / N; ``seq-mean-token-mean``: 1 / (B n_i)).
    """
    n = vector(lengths, "lengths", nonempty=True)
    B = n.shape[0]
    A = vector(advantages, "advantages", B)
    if not per_token:
        raise ValueError("per_token: no mode to draw")
    modes = {str(k): vector(v, f"per_token[{k!r}]", B) for k, v in per_token.items()}
    fig, ax = figure(width=SITE_WIDTH_IN, height=3.6)
    x = np.arange(B)
    width = 0.8 / len(modes)
    for j, (mode, w) in enumerate(modes.items()):
        ax.bar(x + (j - (len(modes) - 1) / 2) * width, A * w, width, label=mode)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"n = {int(k)}, A = {a:+.3g}" for k, a in zip(n, A)], fontsize=8)
    ax.set_xlabel("response (length n_i, advantage A_i)")
    ax.set_ylabel("push on each token, A_i w_i")
    ax.set_title("length bias: per-sequence normalisation weighs short responses' tokens more",
                 fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    return fig


def plot_training_curves(runs, *, optimum=1.0, columns=("score", "kl_ref")):
    """Several runs' score (with the 90% line) and other logged columns per iteration.

    Parameters
    ----------
    runs : dict label -> history, or label -> list of histories (one per random seed)
        A history is the list of per-iteration rows ``train`` returns. With several
        random seeds each is drawn thin and their mean over the seeds thick, in one colour.
    optimum : float
        The task's optimum; the score panel draws 0.9 * optimum.
    columns : sequence of str
        Row keys to draw, one panel each; the first should be ``"score"``. Titles and
        y labels with units are those of ``ppo_numpy.plotting.training.column_label``
        (``kl_ref``: "KL(pi_theta || pi_ref)", nats per response).
    """
    if not runs:
        raise ValueError("runs: no run to plot")
    columns = tuple(columns)
    if not columns:
        raise ValueError("columns: nothing to draw")
    fig, axes = figure(1, len(columns), width=min(SITE_WIDTH_IN, 4.05 * len(columns)),
                       height=3.9)
    axes = np.atleast_1d(axes)
    for k, (label, histories) in enumerate(runs.items()):
        if histories and isinstance(histories[0], dict):
            histories = [histories]
        if not histories or not all(histories):
            raise ValueError(f"runs[{label!r}]: no iteration")
        for history in histories:
            missing = [c for c in columns if c not in history[0]]
            if missing:
                raise ValueError(f"runs[{label!r}]: no column {missing[0]!r}")
        n = min(len(h) for h in histories)
        it = [row["iteration"] for row in histories[0][:n]]
        seeds = f" (mean of {len(histories)} random seeds)" if len(histories) > 1 else ""
        for ax, name in zip(axes, columns):
            ys = np.array([[row[name] for row in h[:n]] for h in histories], dtype=float)
            if len(histories) > 1:
                for y in ys:
                    ax.plot(it, y, color=f"C{k}", lw=0.7, alpha=0.35)
            ax.plot(it, ys.mean(axis=0), color=f"C{k}", lw=1.8, label=f"{label}{seeds}")
    for ax, name in zip(axes, columns):
        title, unit = column_label(name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("iteration", fontsize=8)
        ax.set_ylabel(unit or name, fontsize=8)
        ax.tick_params(labelsize=7)
    if columns[0] == "score":
        axes[0].axhline(0.9 * optimum, color="g", ls="--", lw=0.8, label="90% of optimum")
    legend_outside(axes[0], ncols=1, fontsize=7)
    return fig
