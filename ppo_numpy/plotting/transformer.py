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
plot_accuracy_by_sum   which sums a model gets right: accuracy by the
                       units digits (a_1, b_1) per model, the carry line,
                       and accuracy with and without a units carry
=====================  ==================================================
"""

from __future__ import annotations

import numpy as np

from .style import figure, finish, vector

__all__ = ["plot_accuracy_by_sum", "plot_attention"]


def plot_attention(attn, tokens, *, title=None, layer_labels=None):
    """Attention weights of one sequence: a heatmap per (layer, head), rows = queries.

    Parameters
    ----------
    attn : array (n_layers, H, L, L) or (H, L, L)
        ``P[i, j]``: the weight query position i puts on key position j (rows sum to
        1, zero above the diagonal for a causal model), e.g.
        ``cache["blocks"][l]["P"][b]`` of :meth:`TransformerPolicy.forward`.
    tokens : sequence of str, length L
        The tokens of the sequence, for the axis labels.
    title : str, optional
        The figure's title.
    layer_labels : sequence of str, optional
        One label per layer (default ``layer 0``, ``layer 1``, ...).

    The colour scale is 0 .. 1 for every panel, so panels can be compared.
    """
    P = np.asarray(attn, dtype=np.float64)
    if P.ndim == 3:
        P = P[None]
    if P.ndim != 4 or P.shape[-1] != P.shape[-2] or 0 in P.shape:
        raise ValueError(f"attn: expected (n_layers, H, L, L) or (H, L, L), got shape "
                         f"{np.shape(attn)}")
    n_layers, H, L, _ = P.shape
    tokens = [str(t) for t in tokens]
    if len(tokens) != L:
        raise ValueError(f"tokens: expected {L} labels, got {len(tokens)}")
    labels = ([f"layer {k}" for k in range(n_layers)] if layer_labels is None
              else [str(s) for s in layer_labels])
    if len(labels) != n_layers:
        raise ValueError(f"layer_labels: expected {n_layers}, got {len(labels)}")
    side = min(3.0, 12.0 / H)
    fig, axes = figure(n_layers, H, width=side * H + 1.2,
                       height=side * n_layers + (0.5 if title else 0.2), squeeze=False)
    for layer in range(n_layers):
        for head in range(H):
            ax = axes[layer, head]
            image = ax.imshow(P[layer, head], vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_xticks(range(L), tokens, fontsize=8, rotation=90)
            ax.set_yticks(range(L), tokens, fontsize=8)
            ax.set_title(f"{labels[layer]}, head {head}", fontsize=9)
            if layer == n_layers - 1:
                ax.set_xlabel("key (attended to)", fontsize=8)
            if head == 0:
                ax.set_ylabel("query (attending)", fontsize=8)
    cbar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
    cbar.set_label("attention weight P", fontsize=8)
    cbar.ax.tick_params(labelsize=8)
    return finish(fig, axes, n_layers * H, title)


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
        Whether the sum carries from the units column, a_1 + b_1 >= 10.
    digits : int
        n, digits per operand (for the titles only).

    One heatmap per model: accuracy over the sums with units digits (a mod 10, b mod 10),
    blank where no sum has them, with the line a_1 + b_1 = 9.5 between the sums without
    a carry (below) and with one (above). Last panel: accuracy on each side of that line,
    per model, with the number of sums.
    """
    a = vector(a, "a", nonempty=True, dtype=None)  # integers stay integers
    N = a.shape[0]
    b = vector(b, "b", N, dtype=None)
    carry = vector(carry, "carry", N, dtype=bool)
    if not correct:
        raise ValueError("correct: no model to draw")
    models = {str(label): vector(ok, f"correct[{label!r}]", N, dtype=bool)
              for label, ok in correct.items()}
    # cell (b_1, a_1) of each sum in a row-major 10 x 10 grid
    cell = 10 * (b % 10) + a % 10
    count = np.bincount(cell, minlength=100).reshape(10, 10)
    n_panels = len(models) + 1
    fig, axes = figure(1, n_panels, width=min(13.0, 3.6 * n_panels + 0.8), height=3.6)
    for ax, (label, ok) in zip(axes, models.items()):
        hits = np.bincount(cell, weights=ok, minlength=100).reshape(10, 10)
        with np.errstate(invalid="ignore", divide="ignore"):
            grid = np.where(count > 0, hits / count, np.nan)  # rows b_1, columns a_1
        image = ax.imshow(grid, origin="lower", vmin=0.0, vmax=1.0, cmap="RdYlGn")
        ax.plot([-0.5, 9.5], [10.0, 0.0], color="k", lw=1.2, ls="--",
                label="a_1 + b_1 = 9.5")
        ax.set_xlim(-0.5, 9.5)
        ax.set_ylim(-0.5, 9.5)
        ax.set_xticks(range(10))
        ax.set_yticks(range(10))
        ax.tick_params(labelsize=8)
        ax.set_xlabel("units digit of a", fontsize=8)
        ax.set_ylabel("units digit of b", fontsize=8)
        ax.set_title(f"{label}: {ok.mean():.0%} right", fontsize=9)
    cbar = fig.colorbar(image, ax=list(axes[:-1]), shrink=0.85)
    cbar.set_label("accuracy", fontsize=8)
    cbar.ax.tick_params(labelsize=8)
    bars = axes[-1]
    width = 0.8 / len(models)
    groups = (("no carry", ~carry), ("units carry", carry))
    for j, (label, ok) in enumerate(models.items()):
        acc = [float(ok[sel].mean()) if sel.any() else 0.0 for _, sel in groups]
        xs = np.arange(2) + (j - (len(models) - 1) / 2) * width
        bars.bar(xs, acc, width, label=label, color=f"C{j}")
    bars.set_xticks(range(2), [f"{name}\n({int(sel.sum())} sums)" for name, sel in groups],
                    fontsize=8)
    bars.set_ylim(0.0, 1.0)
    bars.set_ylabel("exact-match accuracy", fontsize=8)
    bars.tick_params(labelsize=8)
    bars.set_title(f"{digits}-digit sums, by carry", fontsize=9)
    bars.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncols=2,
                frameon=False)
    return fig
