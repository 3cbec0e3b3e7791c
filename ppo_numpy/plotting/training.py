"""Training curves: a run's dashboard, runs side by side, the beta sweep (``docs/training.md``).

Functions build a ``matplotlib.figure.Figure`` directly (no pyplot, no global
backend), so they work headless in tests and scripts and display in notebooks.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .._checks import check_int
from ..training.metrics import (
    COLUMNS,
    critic_summary,
    critic_verdict,
    critic_vs_constant,
    history_to_columns,
)
from .style import SITE_WIDTH_IN, figure, finish, legend_outside, saved, two_over_one


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


def _runs_of(metrics):
    """One run or several (one per random seed) -> a list of :func:`_columns`, all on the
    same iterations. Several: a list of histories (lists of rows) or of column dicts."""
    several = (isinstance(metrics, (list, tuple)) and len(metrics) > 0
               and all(isinstance(m, (list, tuple)) or (isinstance(m, dict)
                                                        and np.ndim(m.get("iteration")) == 1)
                       for m in metrics))
    runs = [_columns(m) for m in metrics] if several else [_columns(metrics)]
    if any(not np.array_equal(r["iteration"], runs[0]["iteration"]) for r in runs):
        raise ValueError("metrics: the runs of one label must log the same iterations")
    return runs


def _mean_and_band(ax, runs, column, color=None, **kwargs):
    """The runs' mean of ``column`` as a line (``kwargs`` to ``plot``, e.g. a label) and,
    for several runs, a band from the lowest to the highest of them in the line's colour."""
    it = runs[0]["iteration"]
    y = np.array([r[column] for r in runs], dtype=np.float64)
    (line,) = ax.plot(it, y.mean(axis=0), color=color, **kwargs)
    if len(runs) > 1:
        ax.fill_between(it, y.min(axis=0), y.max(axis=0), color=line.get_color(), alpha=0.2,
                        lw=0)
    return line


#: the dashboard's panels per row: two panels side by side fit the site's column
DASHBOARD_COLUMNS = 2


def _lines(verdict):
    """A verdict of ``critic_verdict`` on three lines, to fit a panel half the site wide:
    the verdict, the numbers, the iterations.

    >>> print(_lines("V is predicting: median 0.70 (iterations 1-2)"))
    V is predicting:
    median 0.70
    (iterations 1-2)
    """
    return verdict.replace(": ", ":\n", 1).replace(" (", "\n(")


def plot_training(metrics, *, optimum=1.0, random_score=None, title=None, path=None) -> Figure:
    """The training dashboard: a 6 x 2 grid of the per-iteration statistics, one per panel,
    ``SITE_WIDTH_IN`` wide (the site shows it at its own size).

    Every panel has labelled axes with units and no second y axis; legends sit
    under their panel. The learning phase (up to the first iteration at 90% of
    the optimum) is shaded on the value head's two panels: explained variance
    is meaningful there, and ill-conditioned later, when nearly every response
    scores the optimum and Var(R) is tiny (its values below -1 are marked on
    the lower edge); the value loss, drawn on a log scale beside Var(R) / 2,
    says whether the critic tracks the returns (``docs/training.md``).

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
        Panels in reading order, two per row: score, KL to the reference; beta, clip
        fraction; approximate KL, entropy; policy loss, value loss; explained variance,
        response length; EOS fraction, gradient norm.
    """
    c = _columns(metrics)
    it = c["iteration"]
    critic = critic_summary(c | {"score_frac": c["score"] / optimum})
    n_learn = critic["learning_end"]
    reached = bool(np.any(c["score"] >= 0.9 * optimum))
    fig, ax = figure(12 // DASHBOARD_COLUMNS, DASHBOARD_COLUMNS, width=SITE_WIDTH_IN,
                     height=19)
    ax = ax.ravel()

    def curve(k, column, color, title, ylabel, **kwargs):
        """Panel ``k``: the column per iteration (``color`` None: the next of the cycle;
        ``kwargs`` to ``plot``, e.g. a label), with its title and y label."""
        ax[k].plot(it, c[column], color=color, **kwargs)
        ax[k].set_title(title, fontsize=9)
        ax[k].set_ylabel(ylabel, fontsize=9)

    curve(0, "score", None, "score of the responses (higher is better)", "score (reward units)",
          label="mean score")
    ax[0].axhline(optimum, color="k", lw=0.8, label="optimum")
    ax[0].axhline(0.9 * optimum, color="g", ls="--", lw=0.8, label="90% of optimum")
    if random_score is not None:
        ax[0].axhline(float(random_score), color="r", ls=":", lw=1, label="random policy")
    ax[0].plot(it, c["heldout_accuracy"], lw=0.8, label="greedy accuracy (held-out set)")

    curve(1, "kl_ref", "C1", "KL(pi_theta || pi_ref):\ndistance from the reference",
          "nats per response\n(k1, summed)")

    constant = bool(np.all(c["beta"] == c["beta"][0]))
    curve(2, "beta", "C2", "KL coefficient beta" + (" (fixed: constant)" if constant else ""),
          "beta (reward per nat)")
    ax[2].set_ylim(0, 1.25 * max(float(np.max(c["beta"])), 1e-3))

    curve(3, "clipfrac", "C3", "clip fraction (clipped branch active)", "fraction of tokens")

    curve(4, "approx_kl_k1", None, "step size: KL(pi_old || pi_theta)\nduring the update",
          "nats per token", label="k1 = -log rho")
    ax[4].plot(it, c["approx_kl_k3"], label="k3 = (rho - 1) - log rho")
    ax[4].axhline(0.0, color="k", lw=0.5)

    curve(5, "entropy", "C4", "entropy of the policy", "nats per token")

    curve(6, "policy_loss", "C0",
          "policy loss (small with whitened\nadvantages: not a learning curve)",
          "clipped surrogate loss")
    ax[6].axhline(0.0, color="k", lw=0.5)

    for a in ax[7:9]:
        a.axvspan(0.5, n_learn + 0.5, color="0.9", lw=0, label=f"learning phase (1-{n_learn})")
    ax[7].plot(it, c["value_loss"], color="C1", label="value loss 1/2 (V - R)^2")
    ax[7].plot(it, c["return_variance"] / 2, color="0.4", ls="--",
               label="Var(R) / 2: loss of a constant V")
    ax[7].set_yscale("log")
    ax[7].set_title(f"value loss fell {critic['value_loss_drop']:.0f}x, with Var(R)\n"
                    "(below the dashed line: V beats a constant)", fontsize=9)
    ax[7].set_ylabel("reward units^2\n(log scale)", fontsize=9)
    # the regime, in words (docs/training.md, "What the critic buys"), over the shaded
    # learning phase, the one window of both panels and of the demo's printed median; under
    # the panel, as the title of its legend, where it covers no curve. A critic-free run has
    # no value loss (NaN) and says so instead
    words_loss, words_ev = critic_verdict(critic_vs_constant(c, iterations=n_learn))

    ev = c["explained_variance"]
    ax[8].plot(it, ev, color="C5", label="explained variance")
    low = ev < -1
    ax[8].plot(it[low], np.full(int(low.sum()), -1.05), "v", color="C5", ms=4,
               label=f"below -1 ({int(low.sum())} it.)")
    ax[8].axhline(0.0, color="k", lw=0.5, label="a constant V (the mean of R): 0")
    ax[8].set_ylim(-1.1, 1.0)
    ax[8].set_title(f"explained variance (shaded: learning, 1-{n_learn})"
                    + ("\nafter it Var(R) ~ 0: noise" if reached else ""), fontsize=9)
    ax[8].set_ylabel("1 - Var(R - V) / Var(R)", fontsize=9)

    curve(9, "response_length", "C6", "response length", "tokens (EOS included)")

    curve(10, "eos_frac", "C7", "responses that end with EOS\n(rest truncated)",
          "fraction of responses")
    ax[10].set_ylim(-0.05, 1.05)

    curve(11, "grad_norm", "C8", "gradient norm (before clipping)", "global L2 norm")

    for a in ax:
        a.set_xlabel("PPO iteration", fontsize=9)
        a.tick_params(labelsize=8)
    for k in (0, 4):
        legend_outside(ax[k], ncols=1)
    for k, words in ((7, words_loss), (8, words_ev)):
        legend = legend_outside(ax[k], ncols=1, title=_lines(words), title_fontsize=8)
        legend.get_title().set_multialignment("center")
    exact = bool(np.all(c["ratio_first_min"] == 1.0) and np.all(c["ratio_first_max"] == 1.0))
    check = ("rho = 1 exactly on every first minibatch" if exact
             else "rho != 1 on some first minibatch: logp_old is stale")
    goal = (f"90% of the optimum at iteration {n_learn}" if reached
            else "90% of the optimum not reached")
    fig.suptitle(f"{title + ': ' if title else ''}{len(it)} iterations; {goal};\n{check}",
                 fontsize=10)
    return saved(fig, path)


def plot_beta_sweep(results, *, optimum=1.0, last=10, path=None) -> Figure:
    """Score and KL to the reference for several betas (the output of ``beta_sweep``).

    Above, side by side: score per iteration, and KL to the reference per iteration
    (a legend under each). Below, the full width: the
    trade-off, mean over the last ``last`` iterations of KL against score, one point
    per beta. The figure is ``SITE_WIDTH_IN`` wide (the site shows it at its own size).

    With several runs per beta (one per random seed) each curve is their mean with a band
    from the lowest to the highest, and the trade-off panel marks each run's point beside
    the mean's.

    Parameters
    ----------
    results : dict beta -> history (list of rows) or columns, or a list of them (seeds)
    optimum : float
    last : int >= 1
        Iterations averaged for the trade-off panel.
    path : str or Path, optional

    Returns
    -------
    matplotlib.figure.Figure
        Its axes: score, KL, trade-off.
    """
    if not results:
        raise ValueError("results: no run to plot")
    # x[-0:] is all of x: last = 0 would average every iteration under a "last 0" label
    last = check_int(last, "last")
    fig, ax = two_over_one(height=7.6)
    final, each, seeds = [], [], set()
    for beta, metrics in sorted(results.items()):
        runs = _runs_of(metrics)
        seeds.add(len(runs))
        line = _mean_and_band(ax[0], runs, "score", label=f"beta = {beta:g}")
        _mean_and_band(ax[1], runs, "kl_ref", color=line.get_color(), label=f"beta = {beta:g}")
        points = [(float(np.mean(r["kl_ref"][-last:])), float(np.mean(r["score"][-last:])))
                  for r in runs]
        final.append((beta, float(np.mean([k for k, _ in points])),
                      float(np.mean([s for _, s in points]))))
        each.append((line.get_color(), points))
    ax[0].axhline(optimum, color="k", lw=0.8, label="optimum")
    spread = ("" if seeds == {1} else f" (mean of {'/'.join(map(str, sorted(seeds)))} seeds; "
              "band: lowest to highest)")
    ax[0].set_title("score" + spread, fontsize=10)
    ax[0].set_ylabel("score (reward units)")
    ax[1].set_title("KL(pi_theta || pi_ref)" + ("" if seeds == {1} else " (mean, band)"),
                    fontsize=10)
    ax[1].set_ylabel("nats per response")
    for a in ax[:2]:
        a.set_xlabel("PPO iteration")
        legend_outside(a, ncols=2)
    betas, kls, scores = zip(*final)
    ax[2].plot(kls, scores, "o-")
    if seeds != {1}:
        for color, points in each:
            ax[2].plot(*zip(*points), "x", color=color, ms=6, label="one seed")
    for b, k, s in final:
        ax[2].annotate(f"{b:g}", (k, s), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax[2].set_xlabel(f"KL to reference (mean of last {last} iterations)")
    ax[2].set_ylabel(f"score (mean of last {last} iterations)")
    ax[2].set_title("larger beta: closer to pi_ref, lower score"
                    + ("" if seeds == {1} else "\n(o: mean of the seeds, x: each seed)"),
                    fontsize=10)
    return saved(fig, path)


#: what :func:`plot_runs` draws by default: the statistics that tell runs apart first
RUN_COLUMNS = ("score", "kl_ref", "clipfrac", "approx_kl_k3", "entropy", "explained_variance")

#: column -> (panel title, y label with units): what :func:`plot_runs` writes on a panel
LABELS = {
    "score": ("mean score of the responses", "reward units"),
    "score_frac": ("score / optimum", "fraction"),
    "kl_ref": ("KL(pi_theta || pi_ref)", "nats per response"),
    "beta": ("KL coefficient beta", "reward per nat"),
    "clipfrac": ("clip fraction", "fraction of tokens"),
    "approx_kl_k1": ("step size: KL(pi_old || pi_theta), k1", "nats per token"),
    "approx_kl_k3": ("step size: KL(pi_old || pi_theta), k3", "nats per token"),
    "entropy": ("entropy of the policy", "nats per token"),
    "policy_loss": ("policy loss", "clipped surrogate loss"),
    "value_loss": ("value loss 1/2 (V - R)^2", "reward units^2"),
    "explained_variance": ("explained variance of V", "1 - Var(R - V) / Var(R)"),
    "return_variance": ("variance of the returns Var(R)", "reward units^2"),
    "response_length": ("response length", "tokens (EOS included)"),
    "eos_frac": ("responses ending with EOS", "fraction of responses"),
    "grad_norm": ("gradient norm (before clipping)", "global L2 norm"),
    "ratio_first_min": ("min rho, first minibatch", "rho (must be 1)"),
    "ratio_first_max": ("max rho, first minibatch", "rho (must be 1)"),
    "ratio_first_mean": ("mean rho, first minibatch", "rho (must be 1)"),
}


def column_label(name: str) -> tuple[str, str]:
    """(title, y label) of a metrics column; a column without an entry shows its name."""
    return LABELS.get(name, (name.replace("_", " "), ""))


def plot_runs(runs, *, columns=RUN_COLUMNS, ncols=2, path=None) -> Figure:
    """Several runs on the same axes, one panel per logged column (notebook 10), in a
    figure ``SITE_WIDTH_IN`` wide (the site shows it at its own size).

    Parameters
    ----------
    runs : dict label -> history (list of rows) or columns, or a list of them
        E.g. ``{"healthy": train(config), "lr x 10": train(config.replace(lr=...))}``.
        A list (one run per random seed) is drawn as the runs' mean, with a band from the
        lowest to the highest of them.
    columns : sequence of str
        Columns of :data:`~ppo_numpy.training.metrics.COLUMNS` to draw, one panel each.
    ncols : int
        Panels per row (they share the site's width: 2 keep every title readable).
    path : str or Path, optional
        Save a PNG there.
    """
    if not runs:
        raise ValueError("runs: no run to plot")
    unknown = [c for c in columns if c not in COLUMNS or c == "iteration"]
    if unknown or not columns:
        raise ValueError(f"columns: unknown or empty {unknown or list(columns)}; choose from "
                         f"{', '.join(c for c in COLUMNS if c != 'iteration')}")
    data = {str(label): _runs_of(metrics) for label, metrics in runs.items()}
    ncols = max(1, min(int(ncols), len(columns)))
    nrows = -(-len(columns) // ncols)
    fig, axes = figure(nrows, ncols, width=SITE_WIDTH_IN, height=2.7 * nrows + 0.6)
    axes = np.atleast_1d(axes).ravel()
    seeds = {len(r) for r in data.values()}
    for ax, name in zip(axes, columns):
        for label, group in data.items():
            _mean_and_band(ax, group, name, label=label)
        title, unit = column_label(name)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(unit, fontsize=9)
        ax.set_xlabel("PPO iteration", fontsize=9)
        ax.tick_params(labelsize=8)
    finish(fig, axes, len(columns), None)
    # one legend for every panel, above them: the runs share colours; over seeds, its title
    # says what the line and the band are
    fig.legend(handles=axes[0].lines, loc="outside upper center",
               ncols=min(len(data), 3), fontsize=9, frameon=False, title_fontsize=9,
               title=None if seeds == {1} else f"mean of {'/'.join(map(str, sorted(seeds)))} "
                                               "seeds each; band: lowest to highest")
    return saved(fig, path)


def plot_critic_comparison(results, *, path=None) -> Figure:
    """PPO at several lambdas, PPO with V = 0, GRPO and RLOO, side by side (notebook 10).

    Two panels per task, one above the other. Above: the median over seeds of score /
    optimum per iteration, one line per variant, with the 90% line. Below: the iteration
    at which each run first reaches 90% (one dot per run, i.e. per random seed; a run that
    never does is drawn at the right edge as an open circle), the median as a bar.

    Parameters
    ----------
    results : dict task -> dict label -> list of runs
        The output of :func:`ppo_numpy.programs.critic.compare` (or its JSON): each run
        a dict with ``score_frac`` (one value per iteration) and ``iteration_90``
        (None when 90% is never reached).
    path : str or Path, optional
        Save a PNG there.
    """
    if not results or not all(results.values()):
        raise ValueError("results: no task or no variant to plot")
    tasks = list(results)
    n_var = max(len(v) for v in results.values())
    # per task two panels, one above the other at the full width: the curves (their
    # legend below them) and the iteration at 90% (one row per variant, labelled)
    heights = [ratio for _ in tasks for ratio in (3.0, 0.9 + 0.3 * n_var)]
    fig, axes = figure(2 * len(tasks), 1, width=SITE_WIDTH_IN,
                       height=sum(heights) + 1.3 * len(tasks),
                       gridspec_kw={"height_ratios": heights})
    axes = np.asarray(axes).reshape(len(tasks), 2)
    for row, task in zip(axes, tasks):
        left, right = row
        labels = list(results[task])
        for k, label in enumerate(labels):
            runs = results[task][label]
            if not runs:
                raise ValueError(f"results[{task!r}][{label!r}]: no run")
            curves = np.array([r["score_frac"] for r in runs], dtype=np.float64)
            left.plot(np.arange(1, curves.shape[1] + 1), np.median(curves, axis=0),
                      color=f"C{k}", label=label, lw=1.2)
            n_it = curves.shape[1]
            hits = [r["iteration_90"] for r in runs]
            got = [h for h in hits if h is not None]
            if got:
                right.barh(k, float(np.median(got)), color=f"C{k}", alpha=0.35)
            right.plot(got, [k] * len(got), "o", color=f"C{k}", ms=4)
            missed = len(hits) - len(got)
            if missed:
                right.plot([n_it] * missed, [k] * missed, "o", mfc="none", color=f"C{k}", ms=6)
        left.axhline(0.9, color="g", ls="--", lw=0.8, label="90% of the optimum")
        left.set_title(f"{task}: score / optimum, median over {len(runs)} seeds")
        left.set_xlabel("PPO iteration (64 sampled responses each)")
        left.set_ylabel("score / optimum")
        legend_outside(left, ncols=2)
        right.set_yticks(range(len(labels)), labels, fontsize=8)
        right.invert_yaxis()
        right.set_xlim(0, n_it + 2)
        right.set_title(f"{task}: first iteration at 90% (dots: seeds, bar: median;\n"
                        "open circle at the right edge: never reached)", fontsize=9)
        right.set_xlabel("iteration (x 64 = sampled responses)")
    return saved(fig, path)
