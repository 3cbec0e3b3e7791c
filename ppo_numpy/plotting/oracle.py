"""Figures of notebook ``11`` (checking another implementation with the oracle).

=================  ==================================================  ========
function           draws                                               notebook
=================  ==================================================  ========
plot_comparison    error / allowed error of every case and output      11
=================  ==================================================  ========

The function takes a :class:`ppo_numpy.oracle.compare.ComparisonReport`
(computed in the notebook by ``compare`` or ``verify``), draws it with pyplot and
returns the :class:`matplotlib.figure.Figure`; it computes nothing of PPO.
``tests/test_plotting_policy.py`` runs it headless.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..oracle.compare import error_ratio
from .style import subplots, tight

__all__ = ["plot_comparison"]

REJECTED_GREY = (0.85, 0.85, 0.85, 1.0)
#: colour range of log10(error / allowed): from "exact" to far beyond the tolerance
LOG_RANGE = (-10.0, 4.0)


def plot_comparison(report, *, title=None):
    """Every case (rows) and output (columns) of a comparison, coloured by error / allowed.

    Parameters
    ----------
    report : ComparisonReport
        From :func:`ppo_numpy.oracle.compare.compare`, ``assert_matches`` or
        :func:`ppo_numpy.oracle.golden.verify`: its ``rows`` (one per case and
        output, with ``max_abs_err``, ``allowed`` and ``passed``) and ``rejected``.
    title : str, optional
        Default: the report's verdict.

    A cell is green when the comparison passed (darker: closer to its
    tolerance), red when it failed; it shows log10(error / allowed) ("exact" for an
    error of 0, "inf" for NaN or inf; 0.0 would be an error equal to its tolerance).
    Cases the reference rejected are grey rows.
    """
    rows = getattr(report, "rows", None)
    if rows is None or not hasattr(report, "rejected"):
        raise ValueError("report: expected a ComparisonReport (rows and rejected)")
    cases = list(dict.fromkeys([*(r.case for r in rows), *report.rejected]))
    outputs = list(dict.fromkeys(r.output for r in rows))
    if not cases or (not outputs and not report.rejected):
        raise ValueError("report: nothing was compared")
    outputs = outputs or ["(none)"]
    image = np.ones((len(cases), len(outputs), 4))
    fig, ax = subplots(width=1.6 + 1.25 * len(outputs), height=0.6 + 0.28 * len(cases))
    greens, reds = plt.get_cmap("Greens"), plt.get_cmap("Reds")
    lo, hi = LOG_RANGE
    for i, case in enumerate(cases):
        if case in report.rejected:
            image[i] = REJECTED_GREY
            ax.text((len(outputs) - 1) / 2, i, "rejected by the reference", ha="center",
                    va="center", fontsize=7, color="0.3")
    for r in rows:
        i, j = cases.index(r.case), outputs.index(r.output)
        ratio = error_ratio(r)
        level = np.clip((np.log10(ratio) - lo) / (hi - lo), 0, 1) if 0 < ratio < np.inf else (
            0.0 if ratio == 0 else 1.0)
        image[i, j] = greens(0.15 + 0.6 * level) if r.passed else reds(0.45 + 0.5 * level)
        label = "exact" if ratio == 0 else "inf" if ratio == np.inf else f"{np.log10(ratio):.1f}"
        ax.text(j, i, label, ha="center", va="center", fontsize=7,
                color="white" if not r.passed else "black")
    ax.imshow(image, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(outputs)), outputs, fontsize=8, rotation=20, ha="right")
    ax.set_yticks(range(len(cases)), cases, fontsize=7)
    ax.tick_params(length=0)
    n_fail = sum(not r.passed for r in rows)
    verdict = (f"{n_fail} of {len(rows)} comparisons failed" if n_fail
               else f"all {len(rows)} comparisons passed")
    ax.set_title(title or f"log10(error / allowed): {verdict}", fontsize=9)
    return tight(fig)
