"""What every figure of ``ppo_numpy.plotting`` keeps to, so a learner can read it.

``tests/test_plotting_readable.py`` draws every plotting function and checks
each figure against these numbers: its resolution, its width (a notebook shows
a wider image scaled down, and its text with it), the size of every piece of
text, in the figure and as the documentation site shows it (``SITE_IMAGE_WIDTH_PX``),
and that no legend sits on the data (lines, bands) of its panel.

It also holds what the modules share to get there: the figure set-up
(:func:`figure`, :func:`two_over_one`, or :func:`subplots` for a figure that
pyplot keeps) and finish
(:func:`tight`, :func:`saved`; :func:`finish` blanks unused panels and sets the title),
the legend under a panel (:func:`legend_outside`), and the checks of the arrays a
figure draws (:func:`vector`, :func:`matrix`), which raise a ValueError naming the
argument.
"""

from __future__ import annotations

import numpy as np

#: dots per inch of every figure (notebooks show them at this resolution)
MIN_DPI = 90
#: widest figure, in inches: 13.5 in x 90 dpi = 1215 pixels, about a notebook's width
MAX_WIDTH_IN = 13.5
#: smallest text, in points: 7 pt at 90 dpi is about 9 pixels
MIN_FONT_PT = 7
#: width, in CSS pixels, at which the documentation site shows a notebook's figure: the
#: article column of the site's theme (furo) at the browser check's 1280-pixel window
#: (``tests/site_check.py`` measures it in Chromium and fails if it is not this). A wider
#: image is scaled down to it, its text with it: text of ``f`` pt in a figure ``w`` pixels
#: wide is read at ``f * min(1, SITE_IMAGE_WIDTH_PX / w)`` pt, which must stay at least
#: ``MIN_FONT_PT``; a figure at most ``SITE_WIDTH_IN`` wide is shown at its own size.
SITE_IMAGE_WIDTH_PX = 736
#: widest figure, in inches, that the site shows at its own size: 720 pixels at MIN_DPI,
#: and the few pixels of margin the notebooks' inline backend adds stay under 736
SITE_WIDTH_IN = 8.0


#: how far below the axes a legend starts: below the tick labels and the x label
LEGEND_DROP_PT = 38


def legend_outside(ax, *, ncols=2, fontsize=8, **kwargs):
    """A legend under the axes, below the x label, where it cannot cover any data."""
    from matplotlib.transforms import offset_copy

    below = offset_copy(ax.transAxes, fig=ax.figure, y=-LEGEND_DROP_PT, units="points")
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below,
                     ncols=ncols, fontsize=fontsize, frameon=False, **kwargs)


def rendered_pt(fontsize, fig):
    """Size in points at which text of ``fontsize`` pt in ``fig`` is read on the site: the
    figure is scaled to at most ``SITE_IMAGE_WIDTH_PX`` pixels wide, its text with it.

    >>> from matplotlib.figure import Figure
    >>> rendered_pt(8, Figure(figsize=(8, 3), dpi=90))    # 720 px: shown at its own size
    8.0
    >>> rendered_pt(8, Figure(figsize=(16, 3), dpi=92))   # 1472 px: shown at half size
    4.0
    """
    width_px = fig.get_size_inches()[0] * fig.dpi
    return float(fontsize) * min(1.0, SITE_IMAGE_WIDTH_PX / float(width_px))


def saved(fig, path):
    """``fig``, after writing it as a PNG at ``MIN_DPI`` to ``path`` (nothing for ``None``)."""
    if path is not None:
        fig.savefig(path, dpi=MIN_DPI)
    return fig


def figure(nrows=1, ncols=1, *, width, height, **kwargs):
    """A ``Figure`` of ``width`` x ``height`` inches at ``MIN_DPI`` in constrained layout
    (no pyplot), and its ``nrows`` x ``ncols`` panels (``kwargs`` go to ``fig.subplots``)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=MIN_DPI, layout="constrained")
    return fig, fig.subplots(nrows, ncols, **kwargs)


def two_over_one(*, height):
    """A ``Figure`` ``SITE_WIDTH_IN`` wide and ``height`` inches high (as :func:`figure`)
    and its three panels: two side by side above, one under them at the full width."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(SITE_WIDTH_IN, height), dpi=MIN_DPI, layout="constrained")
    grid = fig.add_gridspec(2, 2)
    return fig, [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]),
                 fig.add_subplot(grid[1, :])]


def subplots(nrows=1, ncols=1, *, width=6.4, height=3.2, **kwargs):
    """``plt.subplots`` of a ``width`` x ``height`` inch figure at ``MIN_DPI``: the figure
    (pyplot keeps it, so a notebook shows it) and its panels."""
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(width, height), dpi=MIN_DPI, **kwargs)


def finish(fig, axes, n_panels, title):
    """``fig``, its panels after the first ``n_panels`` blanked and ``title`` on top."""
    for ax in axes.ravel()[n_panels:]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def tight(fig):
    """``fig``, after ``fig.tight_layout()`` has spaced its panels so no text overlaps."""
    fig.tight_layout()
    return fig


def vector(x, name, length=None, *, nonempty=False, dtype=np.float64):
    """``x`` as a 1-d array of ``dtype`` (float64 by default; ``None`` keeps ``x``'s own),
    of ``length`` entries if given, at least one if ``nonempty``."""
    arr = np.asarray(x, dtype=dtype)
    if arr.ndim != 1 or (nonempty and arr.shape[0] == 0):
        raise ValueError(f"{name}: expected a {'non-empty ' if nonempty else ''}1-d array, "
                         f"got shape {arr.shape}")
    if length is not None and arr.shape[0] != length:
        raise ValueError(f"{name}: expected length {length}, got length {arr.shape[0]}")
    return arr


def matrix(x, name, shape=None, *, rows=None, per=None):
    """``x`` as a float64 2-d array (of ``shape`` if given; of ``rows`` rows, one per
    ``per``, if given)."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-d array, got shape {arr.shape}")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got shape {arr.shape}")
    if rows is not None and arr.shape[0] != rows:
        raise ValueError(f"{name}: expected {rows} rows (one per {per}), got {arr.shape[0]}")
    return arr
