"""Figures of notebook ``14`` (a tiny transformer learns to add), one named function each.

Each function takes the numbers to draw (computed in the notebook with the library's
functions, so the notebook can tabulate and check them) and returns a
:class:`matplotlib.figure.Figure` (no pyplot state). Nothing here computes a quantity
of the objective. ``tests/test_plotting_transformer.py`` checks what each one draws.

=====================  ==================================================
function               draws
=====================  ==================================================
plot_attention         the attention weights P of one sequence, one heatmap
                       per layer and head, query rows x key columns,
                       labelled with the tokens, one colour bar
plot_attention_change  after - before of two models' attention weights on
                       the same tokens, per layer and head, on a diverging
                       scale centred on 0
plot_accuracy_by_sum   which sums a model gets right: accuracy by the
                       units digits (a_2, b_2) per model, the carry line,
                       cells without a sum hatched, the number of sums in
                       each cell, and accuracy with and without a units carry
=====================  ==================================================
"""

from __future__ import annotations

import numpy as np

from .style import SITE_WIDTH_IN, figure, finish, legend_outside, vector

__all__ = ["plot_accuracy_by_sum", "plot_attention", "plot_attention_change"]



def _attention(attn, name):
    P = np.asarray(attn, dtype=np.float64)
    if P.ndim == 3:
        P = P[None]
    if P.ndim != 4 or P.shape[-1] != P.shape[-2] or 0 in P.shape:
        raise ValueError(f"{name}: expected (n_layers, H, L, L) or (H, L, L), got shape "
                         f"{np.shape(attn)}")
    return P


def _heatmaps(P, tokens, layer_labels, title, *, cmap, vmin, vmax, bar_label, panel_title):
    """One heatmap per (layer, head) of P (n_layers, H, L, L), token labels, one colour bar."""
    n_layers, H, L, _ = P.shape
    tokens = [str(t) for t in tokens]
    if len(tokens) != L:
        raise ValueError(f"tokens: expected {L} labels, got {len(tokens)}")
    labels = ([f"layer {k}" for k in range(n_layers)] if layer_labels is None
              else [str(s) for s in layer_labels])
    if len(labels) != n_layers:
        raise ValueError(f"layer_labels: expected {n_layers}, got {len(labels)}")
    side = min(2.2, (SITE_WIDTH_IN - 1.3) / H)
    fig, axes = figure(n_layers, H, width=min(SITE_WIDTH_IN, side * H + 1.3),
                       height=(side + 0.35) * n_layers + 0.5 + (0.3 if title else 0.0),
                       squeeze=False)
    for layer in range(n_layers):
        for head in range(H):
            ax = axes[layer, head]
            image = ax.imshow(P[layer, head], vmin=vmin, vmax=vmax, cmap=cmap)
            ax.set_xticks(range(L), tokens, fontsize=7, rotation=90)
            ax.set_yticks(range(L), tokens if head == 0 else [""] * L, fontsize=7)
            ax.tick_params(length=2, pad=1)
            ax.set_title(panel_title(labels[layer], head, P[layer, head]), fontsize=8)
            if layer == n_layers - 1:
                ax.set_xlabel("key (attended to)", fontsize=7)
            if head == 0:
                ax.set_ylabel("query (attending)", fontsize=7)
    cbar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, fraction=0.04)
    cbar.set_label(bar_label, fontsize=8)
    cbar.ax.tick_params(labelsize=7)
    fig = finish(fig, axes, n_layers * H, None)
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def plot_attention(attn, tokens, *, title=None, layer_labels=None):
    """Attention weights of one sequence: a heatmap per (layer, head), rows = queries.

    Parameters
    ----------
    attn : array (n_layers, H, L, L) or (H, L, L)
        ``P[i, j]``: the weight query position i puts on key position j (rows sum to
        1, zero above the diagonal for a causal model), e.g.
        ``cache["blocks"][l]["P"][b]`` of :meth:`TransformerPolicy.forward`.
    tokens : sequence of str, length L
        The tokens of the sequence, for the axis labels (the query labels on the first
        panel of each row only: the rows of a layer share them).
    title : str, optional
        The figure's title.
    layer_labels : sequence of str, optional
        One label per layer (default ``layer 0``, ``layer 1``, ...).

    The colour scale is 0 .. 1 for every panel, so panels can be compared. The figure is
    at most ``SITE_WIDTH_IN`` wide, so the site shows it at its own size.
    """
    P = _attention(attn, "attn")
    return _heatmaps(P, tokens, layer_labels, title, cmap="viridis", vmin=0.0, vmax=1.0,
                     bar_label="attention weight P",
                     panel_title=lambda layer, head, _: f"{layer}, head {head}")


def plot_attention_change(before, after, tokens, *, title=None, layer_labels=None):
    """What changed in the attention: ``after - before`` per (layer, head), same tokens.

    Parameters
    ----------
    before, after : arrays (n_layers, H, L, L) or (H, L, L), the same shape
        Two models' attention weights on the same sequence (see :func:`plot_attention`).
    tokens : sequence of str, length L
    title : str, optional
    layer_labels : sequence of str, optional

    Red: weight gained, blue: weight lost, on one scale symmetric about 0 whose bound
    is the largest change of any weight (each panel's title gives its own largest
    ``|after - before|``). A row of P sums to 1, so each row's changes sum to 0.
    """
    P0, P1 = _attention(before, "before"), _attention(after, "after")
    if P0.shape != P1.shape:
        raise ValueError(f"after: expected the shape of before {P0.shape}, got {P1.shape}")
    change = P1 - P0
    bound = max(float(np.abs(change).max()), 1e-12)
    return _heatmaps(change, tokens, layer_labels, title, cmap="RdBu_r", vmin=-bound,
                     vmax=bound, bar_label="change of P (after - before)",
                     panel_title=lambda layer, head, d: (f"{layer}, head {head}\n"
                                                         f"max |change| {np.abs(d).max():.2f}"))


def plot_accuracy_by_sum(a, b, correct, carry, *, digits=2):
    """Which sums each model gets right, by units digits, and with or without a carry.

    Parameters
    ----------
    a, b : int arrays (N,)
        The operands of the evaluated sums.
    correct : dict label -> bool array (N,)
        Per model (e.g. ``"after warm-up"``, ``"after PPO"``): whether its greedy
        answer to a + b is exactly right.
    carry : bool array (N,)
        Whether the sum carries from the units column. The prompt writes the digits
        most significant first, ``a_1 a_2 + b_1 b_2`` for two digits, so that is
        a_2 + b_2 >= 10.
    digits : int
        n, digits per operand (for the titles only).

    One heatmap per model: accuracy over the sums with units digits (a mod 10, b mod 10);
    a grey hatched cell has no sum among the evaluated ones (legend), and the number in
    each cell is how many sums it averages (a cell of 1 is right or wrong, nothing in
    between). The dashed line a_2 + b_2 = 9.5 separates the sums without a carry (below)
    from those with one (above). Last panel: accuracy on each side of that line, per
    model, with the number of sums.
    """
    from matplotlib.patches import Rectangle

    a = vector(a, "a", nonempty=True, dtype=None)  # integers stay integers
    N = a.shape[0]
    b = vector(b, "b", N, dtype=None)
    carry = vector(carry, "carry", N, dtype=bool)
    if not correct:
        raise ValueError("correct: no model to draw")
    models = {str(label): vector(ok, f"correct[{label!r}]", N, dtype=bool)
              for label, ok in correct.items()}
    # cell (b_2, a_2) of each sum in a row-major 10 x 10 grid: rows b mod 10, columns a mod 10
    cell = 10 * (b % 10) + a % 10
    count = np.bincount(cell, minlength=100).reshape(10, 10)
    n_panels = len(models) + 1
    fig, axes = figure(1, n_panels, width=min(SITE_WIDTH_IN, 2.6 * n_panels + 0.5), height=3.7)
    for ax, (label, ok) in zip(axes, models.items()):
        hits = np.bincount(cell, weights=ok, minlength=100).reshape(10, 10)
        with np.errstate(invalid="ignore", divide="ignore"):
            grid = np.where(count > 0, hits / count, np.nan)  # rows b_2, columns a_2
        image = ax.imshow(grid, origin="lower", vmin=0.0, vmax=1.0, cmap="RdYlGn")
        for row, col in zip(*np.nonzero(count == 0)):
            ax.add_patch(Rectangle((col - 0.5, row - 0.5), 1.0, 1.0, facecolor="0.85",
                                   edgecolor="0.45", hatch="////", lw=0.0,
                                   label="no held-out sum"))
        for row, col in zip(*np.nonzero(count)):
            ax.text(col, row, str(count[row, col]), ha="center", va="center", fontsize=7,
                    color="k")
        ax.plot([-0.5, 9.5], [10.0, 0.0], color="k", lw=1.2, ls="--",
                label="a_2 + b_2 = 9.5 (carry above)")
        ax.set_xlim(-0.5, 9.5)
        ax.set_ylim(-0.5, 9.5)
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
        ax.tick_params(labelsize=7, length=2, pad=1)
        ax.set_xlabel("units digit of a", fontsize=8)
        ax.set_ylabel("units digit of b", fontsize=8)
        ax.set_title(f"{label}: {ok.mean():.0%} right", fontsize=8)
    handles, names = axes[0].get_legend_handles_labels()
    unique = dict(zip(names, handles))
    legend_outside(axes[0], ncols=1, fontsize=7, handles=list(unique.values()),
                   labels=list(unique))
    cbar = fig.colorbar(image, ax=list(axes[:-1]), shrink=0.7, fraction=0.04)
    cbar.set_label("accuracy (number: sums in the cell)", fontsize=7)
    cbar.ax.tick_params(labelsize=7)
    bars = axes[-1]
    width = 0.8 / len(models)
    groups = (("no carry", ~carry), ("units carry", carry))
    for j, (label, ok) in enumerate(models.items()):
        acc = [float(ok[sel].mean()) if sel.any() else 0.0 for _, sel in groups]
        xs = np.arange(2) + (j - (len(models) - 1) / 2) * width
        bars.bar(xs, acc, width, label=label, color=f"C{j}")
    bars.set_xticks(range(2), [f"{name}\n({int(sel.sum())} sums)" for name, sel in groups],
                    fontsize=7)
    bars.set_ylim(0.0, 1.0)
    bars.set_ylabel("exact-match accuracy", fontsize=8)
    bars.tick_params(labelsize=7)
    bars.set_title(f"{digits}-digit sums, by carry", fontsize=8)
    legend_outside(bars, ncols=1, fontsize=7)
    return fig
