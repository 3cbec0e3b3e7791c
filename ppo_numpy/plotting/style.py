"""What every figure of ``ppo_numpy.plotting`` keeps to, so a learner can read it.

``tests/test_plotting_readable.py`` draws every plotting function and checks
each figure against these numbers: its resolution, its width (a notebook shows
a wider image scaled down, and its text with it), the size of every piece of
text, and that no legend sits on the data (lines, bands) of its panel.
"""

from __future__ import annotations

#: dots per inch of every figure (notebooks show them at this resolution)
MIN_DPI = 90
#: widest figure, in inches: 13.5 in x 90 dpi = 1215 pixels, about a notebook's width
MAX_WIDTH_IN = 13.5
#: smallest text, in points: 7 pt at 90 dpi is about 9 pixels
MIN_FONT_PT = 7


#: how far below the axes a legend starts: below the tick labels and the x label
LEGEND_DROP_PT = 38


def legend_outside(ax, *, ncols=2, fontsize=8, **kwargs):
    """A legend under the axes, below the x label, where it cannot cover any data."""
    from matplotlib.transforms import offset_copy

    below = offset_copy(ax.transAxes, fig=ax.figure, y=-LEGEND_DROP_PT, units="points")
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below,
                     ncols=ncols, fontsize=fontsize, frameon=False, **kwargs)


def saved(fig, path):
    """``fig``, after writing it as a PNG at ``MIN_DPI`` to ``path`` (nothing for ``None``)."""
    if path is not None:
        fig.savefig(path, dpi=MIN_DPI)
    return fig
