"""The KL term's value and gradient: the enumeration table, a sequence's gradients and the
training runs of two gradient forms (notebook 17, ``ppo_numpy.grads.kl_exact``).

Functions build a ``matplotlib.figure.Figure`` directly (no pyplot), at most the site's
width (``style.SITE_WIDTH_IN``).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .style import SITE_WIDTH_IN, figure, legend_outside, matrix, saved, vector

__all__ = ["plot_kl_gradient_table", "plot_kl_runs", "plot_sequence_gradients"]

#: the short names of ``kl_gradient_table``'s verdicts drawn in the cells
VERDICTS = {"KL(pi||ref)": "rev", "KL(ref||pi)": "fwd", "both": "both"}


def _columns(rows):
    """The table's columns in order: the loss's forms, then the reward."""
    out = []
    for r in rows:
        name = "reward" if r["placement"] == "reward" else r["form"]
        if name not in out:
            out.append(name)
    return out


def plot_kl_gradient_table(rows, *, path=None) -> Figure:
    """The enumeration table as one grid per sampler: estimators down, the loss's gradient
    forms and the reward across; each cell coloured by the gap between the term's expected
    gradient and the reverse KL's (max-abs), and labelled ``rev`` (it is the gradient of
    KL(pi || pi_ref)), ``fwd`` (of KL(pi_ref || pi)) or the gap.

    Parameters
    ----------
    rows : list of dict
        :func:`ppo_numpy.grads.kl_exact.kl_gradient_table`'s rows (``estimator``, ``placement``,
        ``form``, ``sampler``, ``gradient_of``, ``gap_reverse``).
    path : str or Path, optional
        Save a PNG there.
    """
    if not rows:
        raise ValueError("rows: no row to draw")
    samplers = list(dict.fromkeys(r["sampler"] for r in rows))
    estimators = list(dict.fromkeys(r["estimator"] for r in rows))
    columns = _columns(rows)
    gaps = {s: np.full((len(estimators), len(columns)), np.nan) for s in samplers}
    labels = {s: np.full((len(estimators), len(columns)), "", dtype=object) for s in samplers}
    for r in rows:
        i = estimators.index(r["estimator"])
        j = columns.index("reward" if r["placement"] == "reward" else r["form"])
        gap = float(r["gap_reverse"])
        gaps[r["sampler"]][i, j] = gap
        labels[r["sampler"]][i, j] = VERDICTS.get(r["gradient_of"], f"{gap:.3f}")
    top = max(float(np.nanmax(g)) for g in gaps.values()) or 1.0
    fig, axes = figure(len(samplers), 1, width=SITE_WIDTH_IN, height=2.4 * len(samplers) + 0.6,
                       squeeze=False)
    for ax, sampler in zip(axes[:, 0], samplers):
        image = ax.imshow(gaps[sampler], cmap="Oranges", vmin=0.0, vmax=top, aspect="auto")
        for (i, j), text in np.ndenumerate(labels[sampler]):
            ax.text(j, i, text, ha="center", va="center", fontsize=8,
                    color="white" if gaps[sampler][i, j] > 0.6 * top else "black")
        ax.set_xticks(range(len(columns)), [c.replace("_", "\n") for c in columns], fontsize=8)
        ax.set_yticks(range(len(estimators)), estimators, fontsize=8)
        ax.set_title(f"sampled from {sampler}: the expected gradient's gap to grad "
                     "KL(pi || pi_ref)", fontsize=9)
        ax.set_ylabel("estimator")
        fig.colorbar(image, ax=ax, label="max-abs gap", shrink=0.9)
    axes[-1, 0].set_xlabel("in the loss: gradient form  |  in the reward")
    return saved(fig, path)


def plot_sequence_gradients(labels, grads, *, path=None) -> Figure:
    """Expected gradients with respect to every logit of a small autoregressive policy, as
    groups of bars: one group per logit, one bar per named gradient.

    Parameters
    ----------
    labels : list of str
        The logits' names (:func:`ppo_numpy.grads.kl_exact.logit_labels`).
    grads : dict label -> array (n_logits,)
        The gradients to compare (e.g. the sequence KL's, the k1 reward's, a loss term's).
    path : str or Path, optional
    """
    if not grads:
        raise ValueError("grads: no gradient to draw")
    n = len(labels)
    if n == 0:
        raise ValueError("labels: no logit to draw")
    values = {name: vector(np.asarray(g, dtype=np.float64), f"grads[{name!r}]", n)
              for name, g in grads.items()}
    fig, ax = figure(1, 1, width=SITE_WIDTH_IN, height=3.6)
    width = 0.8 / len(values)
    x = np.arange(n)
    for k, (name, g) in enumerate(values.items()):
        ax.bar(x - 0.4 + width * (k + 0.5), g, width, color=f"C{k}", label=name)
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_xlabel("logit of pi_theta (token | prefix)")
    ax.set_ylabel("expected gradient")
    ax.set_title("a two-token policy: each term's expected gradient, every logit", fontsize=9)
    legend_outside(ax, ncols=2)
    return saved(fig, path)


def plot_kl_runs(curves, *, path=None) -> Figure:
    """KL to the reference over PPO iterations, one line per setting: the mean over seeds,
    and the band between the smallest and the largest value over the seeds.

    Parameters
    ----------
    curves : dict label -> array (seeds, iterations)
        The per-iteration KL (``kl_ref`` of the training rows): one row per run (one run per
        seed).
    path : str or Path, optional
    """
    if not curves:
        raise ValueError("curves: no setting to draw")
    fig, ax = figure(1, 1, width=SITE_WIDTH_IN, height=3.4)
    seeds = set()
    for k, (label, runs) in enumerate(curves.items()):
        kl = matrix(np.asarray(runs, dtype=np.float64), f"curves[{label!r}]")
        if kl.shape[1] == 0:
            raise ValueError(f"curves[{label!r}]: no iteration")
        seeds.add(kl.shape[0])
        x = np.arange(1, kl.shape[1] + 1)
        ax.fill_between(x, kl.min(axis=0), kl.max(axis=0), color=f"C{k}", alpha=0.2, lw=0)
        ax.plot(x, kl.mean(axis=0), color=f"C{k}", lw=1.6, label=label)
    ax.set_xlabel("PPO iteration")
    ax.set_ylabel("KL(pi_theta || pi_ref) per response (nats)")
    shown = ", ".join(str(s) for s in sorted(seeds))
    ax.set_title(f"KL to the reference: mean of {shown} seeds, band from the smallest to the "
                 "largest", fontsize=9)
    legend_outside(ax, ncols=1)
    return saved(fig, path)
