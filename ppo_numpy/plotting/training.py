"""Training curves: a run's dashboard, runs side by side, the beta sweep (``docs/training.md``).

Functions build a ``matplotlib.figure.Figure`` directly (no pyplot, no global
backend), so they work headless in tests and scripts and display in notebooks.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .._validation import check_int
from ..training.metrics import COLUMNS, history_to_columns


def _columns(metrics):
    """Accept ``{column: array}`` (read_metrics) or a list of rows (train's history)."""
    if isinstance(metrics, dict):
        cols = {k: np.asarray(v) for k, v in metrics.items()}
    else:
        cols = history_to_columns(list(metrics))
    missing = [c for c in COLUMNS if c not in cols]
    if missing:
        raise ValueError(f"metrics: missing columns {missing}")
    if len(cols["iteration"]) == 0:
        raise ValueError("metrics: no iteration to plot")
    return cols


def plot_training(metrics, *, optimum=1.0, random_score=None, title=None, path=None) -> Figure:
    """The training dashboard: a 3 x 3 grid of the per-iteration statistics.

    Parameters
    ----------
    metrics : dict of column -> array, or list of per-iteration dicts
        ``read_metrics(".../metrics.csv")`` or the history returned by ``train``.
    optimum : float
        The task's optimal score (the 90% line is drawn at 0.9 * optimum).
    random_score : float, optional
        The random policy's expected score, drawn as a baseline.
    title : str, optional
    path : str or Path, optional
        Save a PNG there.

    Returns
    -------
    matplotlib.figure.Figure
    """
    c = _columns(metrics)
    it = c["iteration"]
    fig = Figure(figsize=(13, 10), layout="constrained")
    ax = fig.subplots(3, 3).ravel()

    ax[0].plot(it, c["score"], label="mean score")
    ax[0].axhline(optimum, color="k", lw=0.8, label="optimum")
    ax[0].axhline(0.9 * optimum, color="g", ls="--", lw=0.8, label="90% of optimum")
    if random_score is not None:
        ax[0].axhline(float(random_score), color="r", ls=":", lw=1, label="random policy")
    ax[0].plot(it, c["heldout_accuracy"], lw=0.8, label="greedy accuracy (held-out set)")
    ax[0].set_title("score (reward model)")
    ax[0].legend(fontsize=7)

    ax[1].plot(it, c["kl_ref"], color="C1", label="KL to reference (k1, per seq.)")
    ax[1].set_title("KL(pi_theta || pi_ref) and beta")
    twin = ax[1].twinx()
    twin.plot(it, c["beta"], color="C2", ls="--", label="beta")
    twin.set_ylim(0, 1.25 * max(float(np.max(c["beta"])), 1e-3))
    twin.set_ylabel("beta")
    ax[1].legend(handles=ax[1].get_lines() + twin.get_lines(), fontsize=7)

    ax[2].plot(it, c["clipfrac"], color="C3")
    ax[2].set_title("clip fraction (clipped branch active)")

    ax[3].plot(it, c["approx_kl_k1"], label="k1")
    ax[3].plot(it, c["approx_kl_k3"], label="k3")
    ax[3].set_title("approx. KL(pi_old || pi_theta) per token")
    ax[3].legend(fontsize=7)

    ax[4].plot(it, c["entropy"], color="C4")
    ax[4].set_title("entropy per token (nats)")

    ax[5].plot(it, c["policy_loss"], label="policy loss")
    ax[5].plot(it, c["value_loss"], label="value loss")
    ax[5].set_title("losses")
    ax[5].legend(fontsize=7)

    ax[6].plot(it, c["explained_variance"], color="C5")
    ax[6].set_title("explained variance of the value head")

    ax[7].plot(it, c["response_length"], color="C6", label="mean response length")
    ax[7].set_title("response length (tokens, EOS included)")
    twin = ax[7].twinx()
    twin.plot(it, c["eos_frac"], color="C7", ls="--", label="fraction ending in EOS")
    twin.set_ylim(-0.05, 1.05)
    ax[7].legend(handles=ax[7].get_lines() + twin.get_lines(), fontsize=7)

    ax[8].plot(it, c["grad_norm"], color="C8")
    ax[8].set_title("gradient norm (before clipping)")

    for a in ax:
        a.set_xlabel("iteration")
    exact = bool(np.all(c["ratio_first_min"] == 1.0) and np.all(c["ratio_first_max"] == 1.0))
    check = ("rho = 1 exactly on every first minibatch" if exact
             else "rho != 1 on some first minibatch: logp_old is stale")
    fig.suptitle(f"{title + ': ' if title else ''}{len(it)} iterations; {check}")
    if path is not None:
        fig.savefig(path, dpi=90)
    return fig


def plot_beta_sweep(results, *, optimum=1.0, last=10, path=None) -> Figure:
    """Score and KL to the reference for several betas (the output of ``beta_sweep``).

    Left: score per iteration; middle: KL to the reference per iteration;
    right: the trade-off, mean over the last ``last`` iterations of KL
    against score, one point per beta.

    Parameters
    ----------
    results : dict beta -> history (list of rows) or columns
    optimum : float
    last : int >= 1
        Iterations averaged for the trade-off panel.
    path : str or Path, optional
    """
    if not results:
        raise ValueError("results: no run to plot")
    # x[-0:] is all of x: last = 0 would average every iteration under a "last 0" label
    last = check_int(last, "last")
    fig = Figure(figsize=(14, 4.2), layout="constrained")
    ax = fig.subplots(1, 3)
    final = []
    for beta, metrics in sorted(results.items()):
        c = _columns(metrics)
        ax[0].plot(c["iteration"], c["score"], label=f"beta = {beta:g}")
        ax[1].plot(c["iteration"], c["kl_ref"], label=f"beta = {beta:g}")
        final.append((beta, float(np.mean(c["kl_ref"][-last:])),
                      float(np.mean(c["score"][-last:]))))
    ax[0].axhline(optimum, color="k", lw=0.8)
    ax[0].set_title("score")
    ax[1].set_title("KL(pi_theta || pi_ref) per sequence")
    for a in ax[:2]:
        a.set_xlabel("iteration")
        a.legend(fontsize=7)
    betas, kls, scores = zip(*final)
    ax[2].plot(kls, scores, "o-")
    for b, k, s in final:
        ax[2].annotate(f"{b:g}", (k, s), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax[2].set_xlabel(f"KL to reference (mean of last {last} iterations)")
    ax[2].set_ylabel(f"score (mean of last {last} iterations)")
    ax[2].set_title("larger beta: closer to pi_ref, lower score")
    if path is not None:
        fig.savefig(path, dpi=90)
    return fig


#: what :func:`plot_runs` draws by default: the statistics that tell runs apart first
RUN_COLUMNS = ("score", "kl_ref", "clipfrac", "approx_kl_k3", "entropy", "explained_variance")


def plot_runs(runs, *, columns=RUN_COLUMNS, ncols=3, path=None) -> Figure:
    """Several runs on the same axes, one panel per logged column (notebook 10).

    Parameters
    ----------
    runs : dict label -> history (list of rows) or columns
        E.g. ``{"healthy": train(config), "lr x 10": train(config.replace(lr=...))}``.
    columns : sequence of str
        Columns of :data:`~ppo_numpy.training.metrics.COLUMNS` to draw, one panel each.
    ncols : int
        Panels per row.
    path : str or Path, optional
        Save a PNG there.
    """
    if not runs:
        raise ValueError("runs: no run to plot")
    unknown = [c for c in columns if c not in COLUMNS or c == "iteration"]
    if unknown or not columns:
        raise ValueError(f"columns: unknown or empty {unknown or list(columns)}; choose from "
                         f"{', '.join(c for c in COLUMNS if c != 'iteration')}")
    data = {str(label): _columns(metrics) for label, metrics in runs.items()}
    ncols = max(1, min(int(ncols), len(columns)))
    nrows = -(-len(columns) // ncols)
    fig = Figure(figsize=(4.3 * ncols, 3.0 * nrows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    for ax, name in zip(axes, columns):
        for label, c in data.items():
            ax.plot(c["iteration"], c[name], label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("iteration")
    for ax in axes[len(columns):]:
        ax.axis("off")
    axes[0].legend(fontsize=7)
    if path is not None:
        fig.savefig(path, dpi=90)
    return fig
