"""A sampler that is not the trainer: the corrections' weights and the training runs
(notebook 15, ``python -m ppo_numpy mismatch``).

Functions build a ``matplotlib.figure.Figure`` directly (no pyplot), at most the site's
width (``style.SITE_WIDTH_IN``).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .style import SITE_WIDTH_IN, figure, legend_outside, saved, vector


def _mean_curve(runs, key):
    curves = np.array([r[key] for r in runs], dtype=np.float64)
    if curves.ndim != 2 or curves.shape[1] == 0:
        raise ValueError(f"runs: {key!r} must be one non-empty list per run, all as long")
    return curves.mean(axis=0)


def plot_mismatch_comparison(results, *, path=None) -> Figure:
    """Training with a mismatched sampler, one line per correction, means over the seeds.

    Three panels, one above the other: the trainer's own score / optimum (its float64,
    temperature-1 samples, every ``eval_every`` iterations: ``trainer_score_frac`` at
    ``eval_iterations``); the sampler's score / optimum per iteration (``score_frac``, of
    the responses the update was computed from); the k1 estimate of KL(pi_rollout ||
    pi_old) per token of each iteration's rollout (``kl_k1``).

    Parameters
    ----------
    results : dict
        The output of :func:`ppo_numpy.programs.mismatch.compare` (or its JSON):
        ``task``, ``precision``, ``rollout_temperature`` and ``variants``: label ->
        ``{"runs": [run, ...]}``, each run with the four lists above.
    path : str or Path, optional
        Save a PNG there.
    """
    variants = results.get("variants") or {}
    if not variants or not all(v.get("runs") for v in variants.values()):
        raise ValueError("results: no variant, or a variant without runs")
    fig, (top, mid, low) = figure(3, 1, width=SITE_WIDTH_IN, height=10.5,
                                  gridspec_kw={"height_ratios": [3.2, 2.4, 2.4]})
    seeds = len(next(iter(variants.values()))["runs"])
    for k, (label, v) in enumerate(variants.items()):
        runs = v["runs"]
        at = np.asarray(runs[0]["eval_iterations"], dtype=np.float64)
        top.plot(at, _mean_curve(runs, "trainer_score_frac"), "o-", ms=3, lw=1.2,
                 color=f"C{k}", label=label)
        sampler = _mean_curve(runs, "score_frac")
        mid.plot(np.arange(1, sampler.size + 1), sampler, lw=1.0, color=f"C{k}")
        kl = _mean_curve(runs, "kl_k1")
        low.plot(np.arange(1, kl.size + 1), kl, lw=1.0, color=f"C{k}")
    setting = (f"sampler: {results.get('precision', '?')} logits at T = "
               f"{results.get('rollout_temperature', '?')}, trainer: float64 at T = 1")
    top.set_title(f"{results.get('task', '')}: the trainer's score / optimum (mean of "
                  f"{seeds} seeds)\n{setting}", fontsize=9)
    top.set_ylabel("score / optimum")
    top.set_xlabel("PPO iteration")
    legend_outside(top, ncols=2)
    mid.set_title("the sampler's score / optimum (the responses each update used)",
                  fontsize=9)
    mid.set_ylabel("score / optimum")
    mid.set_xlabel("PPO iteration")
    low.set_title("mismatch of each rollout: KL(pi_rollout || pi_old) per token (k1)",
                  fontsize=9)
    low.set_ylabel("nats per token")
    low.set_xlabel("PPO iteration")
    return saved(fig, path)


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
