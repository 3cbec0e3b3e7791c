"""Figures of the concept notebooks ``00`` to ``07``, one named function per figure.

Each function takes the numbers to draw (computed in the notebook with the
library's functions, so the notebook can tabulate and check them), draws them
with pyplot and returns the :class:`matplotlib.figure.Figure`. Nothing here
computes a quantity of PPO. ``tests/test_plotting_concepts.py`` runs every one
headless (Agg backend). :func:`format_table` prints the notebooks' tables.

=================================  ==============================  ========
function                           draws                           notebook
=================================  ==============================  ========
plot_token_timeline                per-token rows as an image      00
plot_importance_sampling           running means, naive vs IS      01
plot_ratio_vs_log_ratio            rho = exp(logp - logp_old)      01
plot_clipped_objective             min(rho A, clip A), A > 0, < 0  02
plot_epochs_on_one_batch           rho per epoch, clip vs no clip  02
plot_kl_estimator_samples          histograms of k1, k2, k3        03
plot_kl_value_and_gradient         estimators and d/d logp         03
plot_td_errors                     r, V(s_t), V(s_t+1), delta      04
plot_gamma_sweep                   delta_t against gamma           04
plot_gae_weights                   (gamma lam)^(t' - t) heatmap    05
plot_lambda_sweep                  A_hat_t for several lambdas     05
plot_bias_variance                 mean and std of A_hat_1         05
plot_whitening                     advantages before / after       06
plot_value_loss                    clipped value loss, flat part   06
plot_token_weights                 weights against length          07
=================================  ==============================  ========
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .._checks import as_mask, check_int, check_same_shape
from .style import SITE_WIDTH_IN, legend_outside, matrix, subplots, tight, vector

__all__ = [
    "format_table",
    "plot_bias_variance",
    "plot_clipped_objective",
    "plot_epochs_on_one_batch",
    "plot_gae_weights",
    "plot_gamma_sweep",
    "plot_importance_sampling",
    "plot_kl_estimator_samples",
    "plot_kl_value_and_gradient",
    "plot_lambda_sweep",
    "plot_ratio_vs_log_ratio",
    "plot_td_errors",
    "plot_token_timeline",
    "plot_token_weights",
    "plot_value_loss",
    "plot_whitening",
]

PROMPT_GREY = (0.85, 0.85, 0.85, 1.0)
PAD_WHITE = (0.97, 0.97, 0.97, 1.0)


def masked_pair(x, y, mask, x_name, y_name):
    """``x`` and ``y`` as float64 arrays of one shape, and the mask of the tokens to draw
    (ValueError if there is none)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    check_same_shape(x, x_name, y, y_name)
    m = as_mask(mask, x, x_name)
    if not m.any():
        raise ValueError("mask: no response token to draw")
    return x, y, m


def format_table(columns, *, digits=6, index=None):
    """Plain-text table of named columns, numbers rounded to ``digits`` significant digits.

    Parameters
    ----------
    columns : dict of str -> sequence
        Column name -> values (numbers, Fractions or strings), all of one length.
    digits : int
        Significant digits for floats (Fractions and ints print exactly).
    index : str, optional
        Name of a leading column 1, 2, ... (e.g. ``"t"``).

    Returns
    -------
    str, one line per row, columns right-aligned.

    Examples
    --------
    >>> print(format_table({"r": [0, 0, 1], "delta": [0.1, 0.1, 0.30000000000000004]},
    ...                    index="t"))
    t  r  delta
    1  0    0.1
    2  0    0.1
    3  1    0.3
    """
    if not isinstance(columns, dict) or not columns:
        raise TypeError("columns: expected a non-empty dict of name -> sequence")
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"columns: all columns must have the same length, got {lengths}")
    n = next(iter(lengths.values()))
    if index is not None:
        columns = {index: list(range(1, n + 1)), **columns}

    def cell(v):
        if isinstance(v, str):
            return v
        if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            return str(int(v))
        if hasattr(v, "denominator") and not isinstance(v, (float, np.floating)):
            return str(v)
        return f"{float(v):.{digits}g}"

    # each column as text, its name first, right-aligned to its widest entry
    text = {name: [name] + [cell(v) for v in values] for name, values in columns.items()}
    widths = {name: max(len(s) for s in cells) for name, cells in text.items()}
    lines = ["  ".join(text[name][i].rjust(widths[name]) for name in text) for i in range(n + 1)]
    return "\n".join(lines)


def plot_token_timeline(rows, mask, *, prompt_len=0, tokens=None, title=None, last_label="EOS"):
    """One response on the token axis: prompt | response | EOS | padding, one row per quantity.

    Parameters
    ----------
    rows : dict of str -> array (T,)
        Per-token quantities over the response positions (e.g. ``logp``,
        ``logp_ref``, ``V``, ``r~``, ``delta``, ``A_hat``).
    mask : array (T,) of 0/1
        1 for response tokens; the last 1 is drawn as EOS, the 0s as padding.
    prompt_len : int
        Number of prompt positions drawn (grey, no values) before the response.
    tokens : list of str, optional
        Labels of all ``prompt_len + T`` positions.
    title : str, optional
    last_label : str
        Label of the last response token: ``"EOS"``, or e.g. ``"last (truncated)"``
        for a response cut at the length limit.

    Each row is coloured on its own symmetric scale (blue < 0 < red); every cell
    shows its value, so padding's exact 0 and a value leaking there are visible.
    """
    m = vector(mask, "mask")
    m = as_mask(m, m, "mask")
    T = m.shape[0]
    if not rows:
        raise ValueError("rows: expected at least one quantity")
    data = {name: vector(v, f"rows[{name!r}]", T) for name, v in rows.items()}
    prompt_len = check_int(prompt_len, "prompt_len", low=0)
    L = prompt_len + T
    if tokens is not None and len(tokens) != L:
        raise ValueError(f"tokens: expected {L} labels (prompt_len + T), got {len(tokens)}")
    eos = int(np.flatnonzero(m)[-1]) if m.any() else None
    cmap = plt.get_cmap("RdBu_r")
    image = np.zeros((len(data), L, 4))
    fig, ax = subplots(width=max(6.0, 0.75 * L + 1.5), height=0.45 * len(data) + 1.6)
    for i, values in enumerate(data.values()):
        scale = float(np.max(np.abs(values[m]))) if m.any() else 0.0
        scale = scale if scale > 0 else 1.0
        image[i, :prompt_len] = PROMPT_GREY
        for t in range(T):
            col = prompt_len + t
            strong = bool(m[t]) and abs(values[t]) > 0.6 * scale
            image[i, col] = cmap(0.5 + 0.4 * values[t] / scale) if m[t] else PAD_WHITE
            ax.text(col, i, f"{values[t]:.4g}", ha="center", va="center", fontsize=7,
                    color="white" if strong else "black" if m[t] else "0.45")
    ax.imshow(image, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(data)), list(data))
    if tokens is not None:
        ax.set_xticks(range(L), tokens, rotation=45, ha="right", fontsize=8)
    else:
        ax.set_xticks(range(L), [f"p{j + 1}" for j in range(prompt_len)]
                      + [f"t={t + 1}" for t in range(T)], fontsize=8)
    segments = [(0, prompt_len, "prompt x")]
    if eos is not None:
        segments += [(prompt_len, prompt_len + eos, "response y"),
                     (prompt_len + eos, prompt_len + eos + 1, last_label)]
    segments.append((prompt_len + (eos + 1 if eos is not None else 0), L, "padding"))
    for start, stop, label in segments:
        if stop > start:
            ax.text((start + stop - 1) / 2, -0.75, label, ha="center", va="bottom", fontsize=9,
                    fontweight="bold")
        if 0 < start < L:
            ax.axvline(start - 0.5, color="black", lw=1.5)
    ax.set_ylim(len(data) - 0.5, -1.3)
    ax.tick_params(length=0)
    if title:
        ax.set_title(title, fontsize=10, pad=4)
    return tight(fig)


def plot_importance_sampling(n, running_naive, running_is, *, target, naive_target=None):
    """Running means of f over samples from pi_old: plain, and weighted by rho.

    Parameters
    ----------
    n : array (N,)
        Sample counts 1, 2, ... (the x axis, drawn on a log scale).
    running_naive : array (N,)
        mean_{i <= n} f(y_i), y_i ~ pi_old: converges to E_old[f].
    running_is : array (N,)
        mean_{i <= n} rho(y_i) f(y_i): converges to E_pi[f].
    target : float
        E_pi[f], computed exactly.
    naive_target : float, optional
        E_old[f], drawn as a dotted line.
    """
    n = vector(n, "n")
    a = vector(running_naive, "running_naive", n.shape[0])
    b = vector(running_is, "running_is", n.shape[0])
    fig, ax = subplots(height=3.8)
    ax.plot(n, a, color="tab:grey", label="mean of f  (samples from pi_old)")
    ax.plot(n, b, color="tab:blue", label="mean of rho f  (importance weighted)")
    ax.axhline(target, color="tab:blue", ls="--", lw=1, label=f"E_pi[f] = {target:.4g}")
    if naive_target is not None:
        ax.axhline(naive_target, color="tab:grey", ls=":", lw=1,
                   label=f"E_old[f] = {naive_target:.4g}")
    ax.set_xscale("log")
    ax.set_xlabel("number of samples from pi_old")
    ax.set_ylabel("running mean")
    legend_outside(ax)
    return tight(fig)


def plot_ratio_vs_log_ratio(log_ratio, rho, *, epsilon=0.2):
    """rho = exp(logp - logp_old) against the log-prob difference, with the clip range.

    Parameters
    ----------
    log_ratio : array (N,)
        logp - logp_old, increasing.
    rho : array (N,)
        The ratios (from :func:`ppo_numpy.probability_ratio`).
    epsilon : float
        The clip range [1 - eps, 1 + eps] is shaded, and its image in log space,
        [log(1 - eps), log(1 + eps)], which is not symmetric.
    """
    d = vector(log_ratio, "log_ratio")
    rho = vector(rho, "rho", d.shape[0])
    lo, hi = 1 - epsilon, 1 + epsilon
    fig, ax = subplots(width=5.6, height=3.4)
    ax.plot(d, rho, color="tab:blue", label="rho = exp(logp - logp_old)")
    ax.plot(d, 1 + d, color="tab:grey", ls="--", lw=1, label="1 + (logp - logp_old)")
    ax.axhspan(lo, hi, color="tab:green", alpha=0.15, label=f"[1 - eps, 1 + eps], eps = {epsilon}")
    for bound, sign, ha in ((lo, "-", "right"), (hi, "+", "left")):
        ax.axvline(np.log(bound), color="tab:green", lw=1, ls=":")
        ax.text(np.log(bound), ax.get_ylim()[1], f"log(1{sign}eps)\n= {np.log(bound):.3f}",
                fontsize=7, ha=ha, va="top")
    ax.set_xlabel("logp - logp_old")
    ax.set_ylabel("rho")
    ax.legend(fontsize=8, loc="lower right")
    return tight(fig)


def plot_clipped_objective(rho, term_pos, term_neg, *, epsilon, adv_pos=1.0, adv_neg=-1.0):
    """The two-panel picture of min(rho A, clip(rho, 1-eps, 1+eps) A) for A > 0 and A < 0.

    Parameters
    ----------
    rho : array (N,)
        Ratios on the x axis, increasing, covering both sides of [1 - eps, 1 + eps].
    term_pos, term_neg : array (N,)
        The clipped surrogate at ``adv_pos`` (> 0) and ``adv_neg`` (< 0)
        (from :func:`ppo_numpy.clipped_surrogate`).
    epsilon : float
    adv_pos, adv_neg : float
        The two advantages.

    Each region is labelled with the term the min picks and its gradient
    d term / d rho; the unclipped rho A is dashed.
    """
    rho = vector(rho, "rho")
    term_pos = vector(term_pos, "term_pos", rho.shape[0])
    term_neg = vector(term_neg, "term_neg", rho.shape[0])
    if not adv_pos > 0 or not adv_neg < 0:
        raise ValueError(f"adv_pos must be > 0 and adv_neg < 0, got {adv_pos}, {adv_neg}")
    lo, hi = 1 - epsilon, 1 + epsilon
    fig, axes = subplots(1, 2, width=SITE_WIDTH_IN, height=4.2)
    panels = [
        (axes[0], adv_pos, term_pos,
         [(rho[0], lo, "rho A\nnot clipped\ngrad A"), (lo, hi, "rho A\ngrad A"),
          (hi, rho[-1], "(1+eps) A\nclipped\ngrad 0")]),
        (axes[1], adv_neg, term_neg,
         [(rho[0], lo, "(1-eps) A\nclipped\ngrad 0"), (lo, hi, "rho A\ngrad A"),
          (hi, rho[-1], "rho A\nnot clipped,\nunbounded\ngrad A")]),
    ]
    for ax, adv, term, regions in panels:
        ax.plot(rho, rho * adv, color="tab:grey", ls="--", lw=1, label="rho A (unclipped)")
        ax.plot(rho, term, color="tab:blue", lw=2, label="min(rho A, clip(rho) A)")
        ax.axvspan(lo, hi, color="tab:green", alpha=0.12)
        ax.axvline(1.0, color="black", lw=0.5, ls=":")
        ymin, ymax = ax.get_ylim()
        for a, b, label in regions:
            if b > a:
                ax.text((a + b) / 2, ymax - 0.03 * (ymax - ymin), label, ha="center", va="top",
                        fontsize=7)
        ax.set_xlabel("rho")
        ax.set_title(f"A = {adv:g} {'> 0' if adv > 0 else '< 0'}", fontsize=10)
        legend_outside(ax, ncols=1, fontsize=7)
    axes[0].set_ylabel("surrogate term (maximised)")
    return tight(fig)


def plot_epochs_on_one_batch(rho_clipped, rho_unclipped, *, epsilon, advantages):
    """rho of each sample after each epoch on one batch, with and without clipping.

    Parameters
    ----------
    rho_clipped, rho_unclipped : array (E + 1, N)
        Row e: the N ratios after e gradient steps (row 0 is all ones).
    epsilon : float
        The clip range [1 - eps, 1 + eps] is shaded.
    advantages : array (N,)
        A_hat of each sample; the sign is shown in the legend.
    """
    rc = matrix(rho_clipped, "rho_clipped")
    ru = matrix(rho_unclipped, "rho_unclipped", rc.shape)
    adv = vector(advantages, "advantages", rc.shape[1])
    epochs = np.arange(rc.shape[0])
    fig, axes = subplots(1, 2, width=SITE_WIDTH_IN, height=3.4, sharey=True)
    panels = ((axes[0], ru, "no clipping"), (axes[1], rc, f"clipping, eps = {epsilon}"))
    for ax, rho, title in panels:
        ax.axhspan(1 - epsilon, 1 + epsilon, color="tab:green", alpha=0.12)
        for j in range(rho.shape[1]):
            ax.plot(epochs, rho[:, j], marker="o", ms=3, label=f"sample {j + 1}, A = {adv[j]:+g}")
        ax.set_xlabel("epoch (gradient steps on the same batch)")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("rho = pi_theta / pi_old")
    axes[1].legend(fontsize=7)
    return tight(fig)


def plot_kl_estimator_samples(samples, *, true_kl, bins=60):
    """Histograms of per-sample KL estimates, one panel per estimator.

    Parameters
    ----------
    samples : dict of str -> array (N,)
        Estimator name -> per-sample values (from :func:`ppo_numpy.kl_estimate`).
    true_kl : float
        The exact KL, drawn as a vertical line next to each sample mean.
    bins : int
    """
    if not samples:
        raise ValueError("samples: expected at least one estimator")
    data = {k: vector(v, f"samples[{k!r}]") for k, v in samples.items()}
    # one x scale and the same bins for every panel: the spreads compare by eye
    lo = min(min(float(x.min()) for x in data.values()), true_kl)
    hi = max(max(float(x.max()) for x in data.values()), true_kl)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, check_int(bins, "bins") + 1)
    fig, axes = subplots(1, len(data), width=min(3.4 * len(data), SITE_WIDTH_IN), height=3.6,
                         squeeze=False, sharex=True)
    for ax, (name, x) in zip(axes[0], data.items()):
        ax.hist(x, bins=edges, color="tab:blue", alpha=0.7)
        ax.axvline(true_kl, color="black", lw=1.5, label=f"true KL {true_kl:.4g}")
        ax.axvline(float(x.mean()), color="tab:red", lw=1.5, ls="--",
                   label=f"mean {x.mean():.4g}")
        ax.set_title(f"{name}: {100 * np.mean(x < 0):.0f}% negative", fontsize=10)
        ax.set_xlabel("per-sample estimate (nats)")
        legend_outside(ax, ncols=1)
    axes[0][0].set_ylabel("count of samples")
    return tight(fig)


def plot_kl_value_and_gradient(log_ratio, values, grads):
    """Each estimator's value and its derivative d/d logp against d = logp - logp_ref.

    Parameters
    ----------
    log_ratio : array (N,)
        d = logp - logp_ref (so log r = -d), increasing.
    values : dict of str -> array (N,)
        Estimator name -> value at each d.
    grads : dict of str -> array (N,)
        Estimator name -> d value / d logp at each d (same keys as ``values``).
    """
    d = vector(log_ratio, "log_ratio")
    if set(values) != set(grads):
        raise ValueError(f"grads: keys {sorted(grads)} differ from values keys {sorted(values)}")
    fig, axes = subplots(1, 2, width=SITE_WIDTH_IN, height=3.4)
    for name in values:
        line, = axes[0].plot(d, vector(values[name], f"values[{name!r}]", d.shape[0]),
                             label=name)
        axes[1].plot(d, vector(grads[name], f"grads[{name!r}]", d.shape[0]),
                     color=line.get_color(), label=name)
    for ax in axes:
        ax.axhline(0, color="black", lw=0.5)
        ax.axvline(0, color="black", lw=0.5)
        ax.set_xlabel("d = logp - logp_ref")
        ax.legend(fontsize=8)
    axes[0].set_title("value of the estimator", fontsize=10)
    axes[1].set_title("derivative d/d logp (what autograd sees)", fontsize=10)
    return tight(fig)


def plot_td_errors(rewards, values, next_values, delta, *, gamma):
    """For each token: r~_t, V(s_t), gamma V(s_t+1) and delta_t side by side.

    Parameters
    ----------
    rewards, values, next_values, delta : array (T,)
        r~_t, V(s_t), V(s_{t+1}) (0 after the last token) and
        delta_t = r~_t + gamma V(s_{t+1}) - V(s_t).
    gamma : float
    """
    r = vector(rewards, "rewards")
    T = r.shape[0]
    v = vector(values, "values", T)
    vn = vector(next_values, "next_values", T)
    d = vector(delta, "delta", T)
    t = np.arange(1, T + 1)
    w = 0.2
    fig, ax = subplots(width=max(5.0, 1.1 * T + 2), height=3.2)
    ax.bar(t - 1.5 * w, r, w, label="r~_t")
    ax.bar(t - 0.5 * w, gamma * vn, w, label="gamma V(s_t+1)")
    ax.bar(t + 0.5 * w, -v, w, label="- V(s_t)")
    ax.bar(t + 1.5 * w, d, w, color="black", label="delta_t (sum of the three)")
    for ti, di in zip(t, d):
        ax.text(ti + 1.5 * w, di, f"{di:.3g}", ha="center", va="bottom" if di >= 0 else "top",
                fontsize=7)
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xticks(t, [f"t={ti}" for ti in t])
    ax.set_title(f"delta_t = r~_t + gamma V(s_t+1) - V(s_t),  gamma = {gamma:g}", fontsize=10)
    legend_outside(ax, ncols=4)
    return tight(fig)


def plot_gamma_sweep(gammas, deltas):
    """delta_t against gamma, one line per token t.

    Parameters
    ----------
    gammas : array (G,)
    deltas : array (G, T)
        Row g: the TD errors at gammas[g].
    """
    g = vector(gammas, "gammas")
    D = matrix(deltas, "deltas", rows=g.shape[0], per="gamma")
    fig, ax = subplots(width=5.6, height=3.2)
    for t in range(D.shape[1]):
        ax.plot(g, D[:, t], marker="o", ms=3, label=f"delta_{t + 1}")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xlabel("gamma")
    ax.set_ylabel("delta_t")
    ax.legend(fontsize=8)
    return tight(fig)


def plot_gae_weights(weights, *, gamma, lam):
    """Heatmap of the weight of delta_{t'} in A_hat_t: (gamma lam)^(t' - t) for t' >= t.

    Parameters
    ----------
    weights : array (T, T)
        weights[t, t'] (0 below the diagonal).
    gamma, lam : float
        For the title.
    """
    W = matrix(weights, "weights")
    T = W.shape[0]
    if W.shape[1] != T:
        raise ValueError(f"weights: expected a square (T, T) array, got shape {W.shape}")
    fig, ax = subplots(width=min(2.0 + 0.45 * T, 8.0), height=min(1.6 + 0.4 * T, 7.0))
    im = ax.imshow(W, cmap="viridis", vmin=0, vmax=1)
    if T <= 12:
        for i in range(T):
            for j in range(i, T):
                ax.text(j, i, f"{W[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if W[i, j] < 0.6 else "black")
    labels = [str(k + 1) for k in range(T)]
    ax.set_xticks(range(T), labels, fontsize=7)
    ax.set_yticks(range(T), labels, fontsize=7)
    ax.set_xlabel("t' (which delta)")
    ax.set_ylabel("t (which A_hat)")
    ax.set_title(f"weight of delta_t' in A_hat_t,  gamma lam = {gamma * lam:.4g}", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return tight(fig)


def plot_lambda_sweep(lams, advantages):
    """A_hat_t against t, one line per lambda.

    Parameters
    ----------
    lams : array (L,)
    advantages : array (L, T)
        Row k: the advantages at lams[k].
    """
    lams = vector(lams, "lams")
    A = matrix(advantages, "advantages", rows=lams.shape[0], per="lambda")
    t = np.arange(1, A.shape[1] + 1)
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, lams.shape[0]))
    fig, ax = subplots(width=6.0, height=3.4)
    for k, lam in enumerate(lams):
        ax.plot(t, A[k], marker="o", ms=3, color=colors[k], label=f"lam = {lam:g}")
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xlabel("t")
    ax.set_ylabel("A_hat_t")
    ax.legend(fontsize=7)
    return tight(fig)


def plot_bias_variance(lams, mean_mc, mean_exact, std_mc, std_exact):
    """Mean and standard deviation of A_hat_1 over rollouts against lambda.

    Parameters
    ----------
    lams : array (L,)
    mean_mc, std_mc : array (L,)
        Monte Carlo estimates over many rollouts.
    mean_exact, std_exact : array (L,)
        The closed forms, drawn as lines.
    """
    lams = vector(lams, "lams")
    L = lams.shape[0]
    arrays = [vector(a, n, L) for a, n in ((mean_mc, "mean_mc"), (mean_exact, "mean_exact"),
                                             (std_mc, "std_mc"), (std_exact, "std_exact"))]
    fig, axes = subplots(1, 2, width=SITE_WIDTH_IN, height=3.2)
    for ax, mc, exact, title in ((axes[0], arrays[0], arrays[1], "mean of A_hat_1 (bias)"),
                                 (axes[1], arrays[2], arrays[3], "std of A_hat_1")):
        ax.plot(lams, exact, color="black", lw=1, label="closed form")
        ax.plot(lams, mc, "o", color="tab:red", ms=4, label="Monte Carlo")
        ax.set_xlabel("lambda")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    return tight(fig)


def plot_whitening(before, after, mask=None):
    """Valid advantages before and after whitening, token by token.

    Parameters
    ----------
    before, after : array (T,) or (B, T)
        Advantages and their whitened version.
    mask : array of 0/1, same shape, optional
        Only positions with mask 1 are drawn.
    """
    b, a, m = masked_pair(before, after, mask, "before", "after")
    fig, axes = subplots(1, 2, width=SITE_WIDTH_IN, height=3.0)
    for ax, x, title in ((axes[0], b, "before"), (axes[1], a, "after whitening")):
        x2 = x.reshape(-1, x.shape[-1]) if x.ndim > 1 else x[None]
        m2 = m.reshape(x2.shape)
        for i in range(x2.shape[0]):
            t = np.flatnonzero(m2[i])
            ax.plot(t + 1, x2[i, t], marker="o", ms=3, label=f"row {i + 1}")
        vals = x[m]
        mean, std = float(vals.mean()), float(vals.std(ddof=1))
        ax.axhline(mean, color="black", lw=1, ls="--", label=f"mean {round(mean, 10) + 0.0:.3g}")
        ax.axhspan(mean - std, mean + std, color="grey", alpha=0.15,
                   label=f"+- std (ddof 1) {std:.3g}")
        ax.set_xlabel("token position t")
        ax.set_ylabel("advantage")
        ax.set_title(title, fontsize=10)
        legend_outside(ax)
    return tight(fig)


def plot_value_loss(values, loss_unclipped, loss_clipped, *, old_value, ret, clip_range,
                    grad_clipped=None):
    """The value loss against V for fixed V_old and R: where value clipping goes flat.

    Parameters
    ----------
    values : array (N,)
        V on the x axis, increasing.
    loss_unclipped, loss_clipped : array (N,)
        1/2 (V - R)^2 and 1/2 max((V - R)^2, (V_clip - R)^2)
        (from :func:`ppo_numpy.value_loss`).
    old_value, ret, clip_range : float
        V_old, R and c.
    grad_clipped : array (N,), optional
        dL/dV of the clipped loss, drawn on a second panel.
    """
    v = vector(values, "values")
    lu = vector(loss_unclipped, "loss_unclipped", v.shape[0])
    lc = vector(loss_clipped, "loss_clipped", v.shape[0])
    ncols = 1 if grad_clipped is None else 2
    fig, axes = subplots(1, ncols, width=min(4.8 * ncols, SITE_WIDTH_IN), height=3.2,
                         squeeze=False)
    ax = axes[0][0]
    ax.plot(v, lu, color="tab:grey", ls="--", lw=1, label="1/2 (V - R)^2")
    ax.plot(v, lc, color="tab:blue", lw=2, label="clipped: 1/2 max(...)")
    flat = (lc > lu) & (np.abs(v - old_value) > clip_range)
    if flat.any():
        ax.fill_between(v, 0, lc.max(), where=flat, color="tab:orange", alpha=0.15,
                        label="flat (grad 0)")
    ax.axvspan(old_value - clip_range, old_value + clip_range, color="tab:green", alpha=0.12,
               label="V_old +- c")
    ax.axvline(ret, color="black", lw=1, ls=":", label="R")
    ax.set_xlabel("V")
    ax.set_ylabel("value loss")
    legend_outside(ax)
    if grad_clipped is not None:
        g = vector(grad_clipped, "grad_clipped", v.shape[0])
        ax2 = axes[0][1]
        ax2.plot(v, v - ret, color="tab:grey", ls="--", lw=1, label="V - R (unclipped)")
        ax2.plot(v, g, color="tab:blue", lw=2, label="dL/dV (clipped)")
        ax2.axhline(0, color="black", lw=0.5)
        ax2.set_xlabel("V")
        ax2.set_ylabel("dL/dV")
        legend_outside(ax2)
    return tight(fig)


def plot_token_weights(lengths, per_token, per_sequence):
    """Weight of each token and of each whole sequence in the loss, against response length.

    Parameters
    ----------
    lengths : array (B,)
        Response lengths n_i.
    per_token : dict of str -> array (B,)
        Mode -> weight of one token of row i, d loss / d l_{i,t}.
    per_sequence : dict of str -> array (B,)
        Mode -> total weight of row i, n_i times its token weight.
    """
    n = vector(lengths, "lengths")
    if set(per_token) != set(per_sequence):
        raise ValueError("per_sequence: must have the same modes as per_token")
    fig, axes = subplots(1, 2, width=SITE_WIDTH_IN, height=3.4)
    order = np.argsort(n)
    for mode in per_token:
        wt = vector(per_token[mode], f"per_token[{mode!r}]", n.shape[0])
        ws = vector(per_sequence[mode], f"per_sequence[{mode!r}]", n.shape[0])
        line, = axes[0].plot(n[order], wt[order], marker="o", ms=4, label=mode)
        axes[1].plot(n[order], ws[order], marker="o", ms=4, color=line.get_color(), label=mode)
    axes[0].set_title("weight of one token", fontsize=10)
    axes[1].set_title("weight of the whole response", fontsize=10)
    for ax in axes:
        ax.set_xlabel("response length n_i")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.legend(fontsize=7)
    return tight(fig)

