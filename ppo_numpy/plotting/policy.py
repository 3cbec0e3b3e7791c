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

from .._checks import as_mask, check_int, check_same_shape
from .concepts import masked_pair
from .style import MIN_DPI, SITE_WIDTH_IN, finish, legend_outside, subplots, tight

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


#: a forward-pass panel's width, in columns of its heatmap: its own columns (at least
#: ``MIN_PANEL_COLUMNS``) and ``PANEL_MARGIN_COLUMNS`` for its colour bar and spacing
MIN_PANEL_COLUMNS = 4
PANEL_MARGIN_COLUMNS = 4
#: heatmap columns (margins included) a row of forward-pass panels holds at the site's width
ROW_COLUMNS = 28


def panel_rows(widths, capacity=ROW_COLUMNS):
    """The panels, as lists of indices, in rows of at most ``capacity`` columns each: a
    panel of ``w`` heatmap columns takes ``w + PANEL_MARGIN_COLUMNS``, in order, a new row
    when the next one does not fit (a panel wider than a row has a row to itself).

    >>> panel_rows([12, 6, 7, 4])     # 16 + 10 = 26; 11 + 8 = 19
    [[0, 1], [2, 3]]
    >>> panel_rows([30, 4])
    [[0], [1]]
    """
    rows, used = [], capacity + 1
    for k, w in enumerate(widths):
        cost = w + PANEL_MARGIN_COLUMNS
        if used + cost > capacity:
            rows.append([])
            used = 0
        rows[-1].append(k)
        used += cost
    return rows


def plot_forward_pass(steps, *, tokens=None, title=None):
    """The named intermediates of one sequence's forward pass, in forward order, in rows of
    panels ``SITE_WIDTH_IN`` wide (:func:`panel_rows`; the site shows it at its own size).

    Parameters
    ----------
    steps : dict of str -> array (L, n) or (L,)
        Name -> the intermediate at every position of one sequence (e.g.
        ``x``, ``h``, ``softmax(z)``, ``V``), in forward order. Every array
        has the same L.
    tokens : list of str, optional
        The L input tokens, used as row labels of the first panel of each row.
    title : str, optional

    Each panel is coloured on its own scale (blue-red if the values take both
    signs, white-blue if they are all >= 0); its title gives the name, the
    shape and the largest absolute value. A heatmap column is equally wide in
    every row (a row that is not full leaves room on the right).
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
    widths = [max(a.shape[1], MIN_PANEL_COLUMNS) for a in data.values()]
    rows = panel_rows(widths)
    fig = plt.figure(figsize=(SITE_WIDTH_IN, (0.3 * L + 1.4) * len(rows) + 0.5),
                     dpi=MIN_DPI, layout="constrained")
    grid = fig.add_gridspec(len(rows), 1)
    axes, first = [], set()
    for r, row in enumerate(rows):
        # the row's panels, as wide as their heatmaps (the colour bar takes a fixed share of
        # a panel, its labels a fixed margin), then what is left of the row's columns, empty
        ratios = [widths[k] for k in row]
        spare = max(0, ROW_COLUMNS - sum(w + PANEL_MARGIN_COLUMNS for w in ratios))
        cells = grid[r].subgridspec(1, len(row) + (spare > 0), width_ratios=ratios
                                    + ([spare] if spare > 0 else []))
        first.add(len(axes))
        axes += [fig.add_subplot(cells[0, j]) for j in range(len(row))]
    for k, (ax, (name, a)) in enumerate(zip(axes, data.items())):
        size = f"{a.shape[0]} x {a.shape[1]}, max |.| {np.max(np.abs(a)):.2g}"
        scale = _heatmap(ax, a, title=f"{name}\n{size}", ylabels=tokens if k in first else None)
        _colorbar(fig, scale, ax)
    return finish(fig, np.array(axes), len(data), title)


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
        The result of :func:`ppo_numpy.grads.gradcheck.gradcheck` (or any objects with
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


def plot_minibatch(quantities, mask, *, title=None, ncols=2, annotate=None):
    """Per-token quantities of a (B, T) minibatch, one heatmap each, padding in grey, in a
    figure ``SITE_WIDTH_IN`` wide (the site shows it at its own size).

    Parameters
    ----------
    quantities : dict of str -> array (B, T)
        Name -> values (e.g. ``logp_old``, ``r~``, ``delta``, ``A_hat``, ``dlogp``).
    mask : array (B, T) of 0/1
        1 for response tokens; padding cells are grey whatever they hold.
    title : str, optional
    ncols : int
        Panels per row: with 2, a minibatch of T = 7 keeps its cells wide enough for an
        8-point number such as -0.0139.
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
    fig, axes = subplots(nrows, ncols, width=SITE_WIDTH_IN, height=(0.34 * B + 0.8) * nrows,
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
