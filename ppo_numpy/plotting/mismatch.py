"""A sampler that is not the trainer: the corrections' weights and the training runs
(notebook 15, ``python -m ppo_numpy mismatch``).

Functions build a ``matplotlib.figure.Figure`` directly (no pyplot), at most the site's
width (``style.SITE_WIDTH_IN``).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .style import MIN_DPI, SITE_WIDTH_IN, figure, saved, vector


def _seed_curves(runs, key):
    """``(seeds, n)``: each run's list ``key``, one row per run."""
    curves = np.array([r[key] for r in runs], dtype=np.float64)
    if curves.ndim != 2 or curves.shape[1] == 0:
        raise ValueError(f"runs: {key!r} must be one non-empty list per run, all as long")
    return curves


def plot_mismatch_comparison(results, *, path=None) -> Figure:
    """Training with a mismatched sampler: each correction's spread over the seeds.

    Three parts, top to bottom:

    * the trainer's final score / optimum (its own float64, temperature-1 samples:
      ``trainer_score_frac`` at the last of ``eval_iterations``) per variant: one dot for
      each of the seeds, a tick at their mean, so a difference is read against their spread;
    * one small panel per variant: that score every ``eval_every`` iterations, the mean
      over the seeds as a line, a band from the lowest to the highest of the seeds, the first
      variant's mean (the run without mismatch) dashed for reference;
    * the mismatch of each rollout, the k1 estimate of KL(pi_rollout || pi_old) per token
      (``kl_k1``), mean over the seeds and their band, per variant. k1 is the sampled
      tokens' mean of log pi_rollout - log pi_old: unbiased, but not >= 0 token by token, so
      a batch's mean can dip below 0 where the true KL is within its noise.

    Parameters
    ----------
    results : dict
        The output of :func:`ppo_numpy.programs.mismatch.compare` (or its JSON):
        ``task``, ``precision``, ``rollout_temperature`` and ``variants``: label ->
        ``{"runs": [run, ...]}``, each run with ``eval_iterations``,
        ``trainer_score_frac`` and ``kl_k1``.
    path : str or Path, optional
        Save a PNG there.
    """
    variants = results.get("variants") or {}
    if not variants or not all(v.get("runs") for v in variants.values()):
        raise ValueError("results: no variant, or a variant without runs")
    n = len(variants)
    rows = (n + 1) // 2
    fig = Figure(figsize=(SITE_WIDTH_IN, 3.0 + 1.9 * rows + 3.0), dpi=MIN_DPI,
                 layout="constrained")
    grid = fig.add_gridspec(rows + 2, 2, height_ratios=[2.6] + [1.7] * rows + [2.6])
    final = fig.add_subplot(grid[0, :])
    small = [fig.add_subplot(grid[1 + k // 2, k % 2]) for k in range(n)]
    for ax in small[1:]:
        ax.sharey(small[0])
    low = fig.add_subplot(grid[rows + 1, :])
    seeds = {len(v["runs"]) for v in variants.values()}
    reference = None
    for k, (label, v) in enumerate(variants.items()):
        runs = v["runs"]
        at = np.asarray(runs[0]["eval_iterations"], dtype=np.float64)
        score = _seed_curves(runs, "trainer_score_frac")
        last = score[:, -1]
        final.plot(last, np.full(last.size, k), "o", color=f"C{k}", ms=5, alpha=0.8)
        final.plot([float(last.mean())], [k], "|", color=f"C{k}", ms=16, mew=2.5)
        ax = small[k]
        if reference is not None:
            ax.plot(*reference, color="0.45", ls="--", lw=1.0)
        ax.fill_between(at, score.min(axis=0), score.max(axis=0), color=f"C{k}", alpha=0.25,
                        lw=0)
        ax.plot(at, score.mean(axis=0), color=f"C{k}", lw=1.5)
        if reference is None:
            reference = (at, score.mean(axis=0))
        ax.set_title(label, fontsize=8)
        ax.tick_params(labelsize=8)
        if k % 2 == 0:
            ax.set_ylabel("score / optimum", fontsize=8)
        if k >= n - 2:
            ax.set_xlabel("PPO iteration", fontsize=8)
        kl = _seed_curves(runs, "kl_k1")
        it = np.arange(1, kl.shape[1] + 1)
        low.fill_between(it, kl.min(axis=0), kl.max(axis=0), color=f"C{k}", alpha=0.1, lw=0)
        low.plot(it, kl.mean(axis=0), color=f"C{k}", lw=1.0)
    counts = "/".join(str(c) for c in sorted(seeds))
    final.set_yticks(range(n), [_short(label) for label in variants], fontsize=8)
    final.invert_yaxis()
    final.margins(x=0.15)
    final.grid(axis="x", color="0.9")
    final.set_xlabel("the trainer's score / optimum at the last iteration", fontsize=9)
    final.set_title(f"{results.get('task', '')}: sampler {results.get('precision', '?')} logits "
                    f"at T = {results.get('rollout_temperature', '?')}, trainer float64 at T = 1"
                    f"\nfinal score: dots = the {counts} seeds, | = their mean\nbelow, during "
                    "training: line = mean, band = lowest to highest of the seeds,\ndashed = "
                    f"{_short(next(iter(variants)))} (mean)", fontsize=9)
    low.axhline(0.0, color="k", lw=0.6)
    low.set_title("mismatch of each rollout: KL(pi_rollout || pi_old) per token (k1; the "
                  "seeds' mean, band)\nk1 = the sampled tokens' mean of log pi_rollout - "
                  "log pi_old: unbiased, not >= 0;\nbelow 0 where the true KL is within the "
                  "batch's noise", fontsize=9)
    low.set_ylabel("nats per token", fontsize=9)
    low.set_xlabel("PPO iteration", fontsize=9)
    return saved(fig, path)


def _short(label: str) -> str:
    """A variant's label without its parenthesis (the framework's name for it)."""
    return label.split(" (")[0] if not label.startswith("no mismatch") else "no mismatch"


def plot_correction_weights(w, corrected, *, path=None) -> Figure:
    """What each correction does to a weight: corrected weight against the raw token weight.

    Parameters
    ----------
    w : array (N,)
        Raw weights w = pi_old / pi_rollout, increasing (the x axis, log scale).
    corrected : dict label -> array (N,)
        The weight each correction gives (e.g. ``rollout_importance_weights`` of one-token
        responses), drawn one panel each beside the identity line.
    path : str or Path, optional
    """
    x = vector(w, "w", nonempty=True)
    if np.any(x <= 0) or np.any(np.diff(x) <= 0):
        raise ValueError("w: must be positive and increasing")
    if not corrected:
        raise ValueError("corrected: no correction to draw")
    n = len(corrected)
    fig, axes = figure(1, n, width=SITE_WIDTH_IN, height=3.0, squeeze=False)
    for k, (ax, (label, y)) in enumerate(zip(axes[0], corrected.items())):
        y = vector(y, f"corrected[{label!r}]", len(x))
        ax.plot(x, x, color="0.7", lw=1.0, ls="--")
        ax.plot(x, y, color=f"C{k}", lw=1.6)
        ax.set_xscale("log")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("raw weight w_t")
        if k == 0:
            ax.set_ylabel("weight applied")
    return saved(fig, path)
