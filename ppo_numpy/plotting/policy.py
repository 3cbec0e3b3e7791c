"""Figures of notebooks ``08`` (the toy policy, manual backprop) and ``09`` (one PPO update).

Each function takes numbers computed in the notebook with the library (so the
notebook can tabulate and check them), draws them with pyplot and returns the
:class:`matplotlib.figure.Figure`. Nothing here computes a quantity of PPO.
``tests/test_plotting_policy.py`` runs every one headless (Agg backend).

=========================  ==============================================  ========
function                   draws                                           notebook
=========================  ==============================================  ========
plot_forward_pass          named intermediates of one sequence, heatmaps   08
plot_gradients             every parameter's gradient, heatmaps            08
plot_gradcheck             relative error per tensor against its bound     08
plot_minibatch             (B, T) per-token quantities, padding greyed     09
plot_ratio_after_step      rho after one update against A_hat              09
=========================  ==============================================  ========
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, Normalize

from .._validation import as_mask, check_int, check_same_shape
from .concepts import masked_pair
from .style import SITE_WIDTH_IN, finish, legend_outside, subplots, tight

__all__ = [
    "plot_forward_pass",
    "plot_gradcheck",
    "plot_gradients",
    "plot_minibatch",
    "plot_ratio_after_step",
]

PAD_GREY = (0.9, 0.9, 0.9, 1.0)
#: relative errors of exactly 0 are drawn at this height on the log axis
EXACT_FLOOR = 1e-18


def _as_2d(x, name) -> np.ndarray:
    """Scalars as (1, 1), vectors as one row (1, n), matrices as they are."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim > 2:
        raise ValueError(f"{name}: expected at most 2 dimensions, got shape {arr.shape}")
    return arr.reshape(1, -1) if arr.ndim < 2 else arr


def _check_named(arrays, name) -> dict:
    if not isinstance(arrays, dict) or not arrays:
        raise ValueError(f"{name}: expected a non-empty dict of name -> array")
    return arrays


def _heatmap(ax, data, *, title, ylabels=None, annotate=False, valid=None):
    """One heatmap: a symmetric blue-red scale if data has both signs, else white-blue.

    Returns the scale as a ``ScalarMappable`` (for a colour bar that reads the colours).
    """
    finite = data[valid] if valid is not None else data
    lo = float(finite.min()) if finite.size else 0.0
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    scale = scale if scale > 0 else 1.0
    if lo >= 0:
        cmap = ListedColormap(plt.get_cmap("Blues")(np.linspace(0.05, 0.9, 256)))
        norm = Normalize(0.0, scale)
    else:
        cmap = ListedColormap(plt.get_cmap("RdBu_r")(np.linspace(0.05, 0.95, 256)))
        norm = Normalize(-scale, scale)
    image = cmap(norm(data))
    if valid is not None:
        image[~valid] = PAD_GREY
    ax.imshow(image, aspect="auto", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    if annotate:
        for (i, j), v in np.ndenumerate(data):
            if valid is None or valid[i, j]:
                strong = abs(v) > 0.6 * scale
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=8,
                        color="white" if strong else "black")
    if ylabels is not None:
        ax.set_yticks(range(len(ylabels)), ylabels, fontsize=8)
    else:
        ax.set_yticks([])
    ax.set_xticks([])
    return ScalarMappable(norm=norm, cmap=cmap)


def plot_forward_pass(steps, *, tokens=None, title=None):
    """The named intermediates of one sequence's forward pass, side by side.

    Parameters
    ----------
    steps : dict of str -> array (L, n) or (L,)
        Name -> the intermediate at every position of one sequence (e.g.
        ``x``, ``h``, ``softmax(z)``, ``V``), in forward order. Every array
        has the same L.
    tokens : list of str, optional
        The L input tokens, used as row labels of the first panel.
    title : str, optional

    Each panel is coloured on its own scale (blue-red if the values take both
    signs, white-blue if they are all >= 0); its title gives the name, the
    shape and the largest absolute value.
    """
    steps = _check_named(steps, "steps")
    data = {}
    for name, x in steps.items():
        arr = np.asarray(x, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2:
            raise ValueError(f"steps[{name!r}]: expected shape (L, n) or (L,), got {arr.shape}")
        data[name] = arr
    lengths = {name: a.shape[0] for name, a in data.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"steps: every intermediate needs the same length L, got {lengths}")
    L = next(iter(lengths.values()))
    if tokens is not None and len(tokens) != L:
        raise ValueError(f"tokens: expected {L} labels, got {len(tokens)}")
    widths = [max(a.shape[1], 4) for a in data.values()]
    fig, axes = subplots(1, len(data), width=min(1.5 + 0.34 * sum(widths) + 0.5 * len(data), 13),
                         height=0.3 * L + 1.9, squeeze=False,
                         gridspec_kw={"width_ratios": widths}, layout="constrained")
    for k, (ax, (name, a)) in enumerate(zip(axes[0], data.items())):
        size = f"{a.shape[0]} x {a.shape[1]}, max |.| {np.max(np.abs(a)):.2g}"
        scale = _heatmap(ax, a, title=f"{name}\n{size}", ylabels=tokens if k == 0 else None)
        _colorbar(fig, scale, ax)
    return finish(fig, axes, len(data), title)


def _colorbar(fig, scale, ax):
    """A colour bar of ``scale`` beside ``ax``, its tick labels at 7 pt."""
    bar = fig.colorbar(scale, ax=ax, fraction=0.08, pad=0.03, aspect=15)
    bar.ax.tick_params(labelsize=7)


def plot_gradients(grads, *, title=None, ncols=4):
    """Every gradient tensor as a heatmap (vectors as one row, scalars as one cell).

    Parameters
    ----------
    grads : dict of str -> array with at most 2 dimensions
        Name -> gradient (e.g. the dict returned by a policy's ``backward``).
    title : str, optional
    ncols : int
        Panels per row.

    Exact zeros show white (white-blue scale) or the middle of the blue-red
    scale: rows of an embedding table that no token used stay empty.
    """
    grads = _check_named(grads, "grads")
    data = {name: _as_2d(g, f"grads[{name!r}]") for name, g in grads.items()}
    ncols = min(check_int(ncols, "ncols"), len(data))
    nrows = -(-len(data) // ncols)
    fig, axes = subplots(nrows, ncols, width=min(3.1 * ncols, SITE_WIDTH_IN),
                         height=2.5 * nrows,
                         squeeze=False, layout="constrained")
    for ax, (name, g) in zip(axes.ravel(), data.items()):
        # a scalar or a short vector also prints its values: a colour alone is hard to read
        scale = _heatmap(ax, g, annotate=g.size <= 3,
                         title=f"d{name} {np.shape(grads[name])}\nmax |.| {np.max(np.abs(g)):.2g}")
        _colorbar(fig, scale, ax)
    return finish(fig, axes, len(data), title)


def plot_gradcheck(report, *, rtol=1e-6):
    """Relative error of each hand-written gradient against finite differences.

    Parameters
    ----------
    report : dict of str -> Comparison
        The result of :func:`ppo_numpy.gradcheck.gradcheck` (or any objects with
        ``rel_error``, ``exact`` and ``close`` attributes).
    rtol : float
        The bound, drawn as a dashed line.

    Bars are green when ``close``, red otherwise, on a log scale; an exact
    match (relative error 0) is drawn at 1e-18 and labelled "exact".
    """
    report = _check_named(report, "report")
    names = list(report)
    for name in names:
        if not all(hasattr(report[name], a) for a in ("rel_error", "exact", "close")):
            raise ValueError(f"report[{name!r}]: expected a Comparison (rel_error, exact, close)")
    rel = np.array([report[n].rel_error for n in names], dtype=np.float64)
    height = np.where(rel > 0, rel, EXACT_FLOOR)
    colours = ["tab:green" if report[n].close else "tab:red" for n in names]
    fig, ax = subplots(width=max(4.0, 0.7 * len(names) + 1.5), height=3.0)
    ax.bar(range(len(names)), height, color=colours)
    for k, (r, n) in enumerate(zip(rel, names)):
        ax.text(k, height[k] * 1.6, "exact" if report[n].exact or r == 0 else f"{r:.0e}",
                ha="center", va="bottom", fontsize=7)
    ax.axhline(rtol, color="black", ls="--", lw=1, label=f"bound {rtol:g}")
    ax.set_yscale("log")
    ax.set_ylim(EXACT_FLOOR / 3, max(1.0, float(height.max()) * 30))
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("relative error")
    ax.set_title("analytic vs centred finite differences", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return tight(fig)


def plot_minibatch(quantities, mask, *, title=None, ncols=3, annotate=None):
    """Per-token quantities of a (B, T) minibatch, one heatmap each, padding in grey.

    Parameters
    ----------
    quantities : dict of str -> array (B, T)
        Name -> values (e.g. ``logp_old``, ``r~``, ``delta``, ``A_hat``, ``dlogp``).
    mask : array (B, T) of 0/1
        1 for response tokens; padding cells are grey whatever they hold.
    title : str, optional
    ncols : int
        Panels per row.
    annotate : bool, optional
        Print every valid value in its cell. Default: when B * T <= 64.

    Rows are responses i = 1 .. B, columns positions t = 1 .. T. Each panel is
    coloured on its own scale over the valid tokens.
    """
    quantities = _check_named(quantities, "quantities")
    m = np.asarray(mask)
    if m.ndim != 2:
        raise ValueError(f"mask: expected shape (B, T), got {m.shape}")
    valid = as_mask(m, m, "mask")
    data = {}
    for name, x in quantities.items():
        arr = np.asarray(x, dtype=np.float64)
        check_same_shape(m, "mask", arr, f"quantities[{name!r}]")
        if not np.all(np.isfinite(arr[valid])):
            raise ValueError(f"quantities[{name!r}]: NaN or inf at a response token")
        data[name] = np.where(valid, arr, 0.0)
    B, T = m.shape
    annotate = B * T <= 64 if annotate is None else bool(annotate)
    ncols = min(check_int(ncols, "ncols"), len(data))
    nrows = -(-len(data) // ncols)
    # cells wide enough for an 8-point number such as -0.0139
    width = min(0.6 * T * ncols + 1.2 + (0 if annotate else 0.6 * ncols), 13.5)
    fig, axes = subplots(nrows, ncols, width=width, height=(0.36 * B + 0.9) * nrows,
                         squeeze=False, layout="constrained")
    for k, (ax, (name, a)) in enumerate(zip(axes.ravel(), data.items())):
        scale = _heatmap(ax, a, title=name, valid=valid, annotate=annotate,
                         ylabels=[f"i={i + 1}" for i in range(B)] if k % ncols == 0 else None)
        ax.set_xticks(range(T), [str(t + 1) for t in range(T)], fontsize=8)
        if not annotate:
            _colorbar(fig, scale, ax)
    return finish(fig, axes, len(data), title)


def plot_ratio_after_step(rho, advantages, mask=None, *, epsilon=0.2):
    """rho = pi_theta / pi_old of every response token after an update, against A_hat.

    Parameters
    ----------
    rho : array (B, T) or (N,)
        Ratios after the update (all 1 before it).
    advantages : array, same shape
        The advantages the update used.
    mask : array of 0/1, same shape, optional
        Only response tokens are drawn.
    epsilon : float
        The clip range [1 - eps, 1 + eps] is shaded.

    The legend counts the tokens that moved the way their advantage asks
    (rho > 1 where A_hat > 0, rho < 1 where A_hat < 0).
    """
    r, a, m = masked_pair(rho, advantages, mask, "rho", "advantages")
    r, a = r[m], a[m]
    agree = (a != 0) & (np.sign(r - 1.0) == np.sign(a))
    fig, ax = subplots(width=5.2, height=4.2)
    ax.axhspan(1 - epsilon, 1 + epsilon, color="tab:green", alpha=0.12,
               label=f"[1 - eps, 1 + eps], eps = {epsilon:g}")
    ax.axhline(1.0, color="black", lw=0.6)
    ax.axvline(0.0, color="black", lw=0.6)
    ax.scatter(a[agree], r[agree], s=14, color="tab:blue",
               label=f"moved with A_hat ({int(agree.sum())} of {a.size})")
    ax.scatter(a[~agree], r[~agree], s=14, color="tab:red", marker="x",
               label=f"against or not at all ({int((~agree).sum())})")
    ax.set_xlabel("A_hat (whitened)")
    ax.set_ylabel("rho after the update")
    legend_outside(ax, ncols=1)
    return tight(fig)
