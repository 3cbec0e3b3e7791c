"""Advantage whitening (notebook ``06_advantages_in_practice``).

    whiten(x) = (x - mean(x)) / sqrt(var(x) + std_eps)

mean and var over every response token of the whole batch (not per row).
Conventions, each a parameter: the variance's ddof (1, Bessel-corrected, by
default, as TRL's ``masked_whiten``/``masked_var`` and verl's
``masked_whiten`` do), ``std_eps`` *inside* the square root (1e-8 by default, as in
both), and ``shift_mean=False`` adding the mean back (TRL and verl whiten
advantages with ``shift_mean=True`` and rewards with ``shift_mean=False``).
"""

from __future__ import annotations

import numpy as np

from .._checks import check_scalar, prepare, where_valid
from .._renames import renamed_keyword

__all__ = ["masked_mean", "masked_mean_kernel", "whiten", "whiten_kernel"]


def masked_mean(x, mask=None):
    """Mean of ``x`` over the positions where ``mask`` is 1 (all positions if None).

    >>> masked_mean([1.0, 2.0, 3.0, 99.0], [1, 1, 1, 0])
    2.0
    """
    (x,), m = prepare({"x": x}, mask, ranks=(1, 2), exact=False)
    if not m.any():
        raise ValueError("mask: no valid element to average")
    return masked_mean_kernel(x, m)


def masked_mean_kernel(x: np.ndarray, m: np.ndarray) -> float:
    """:func:`masked_mean` of a checked array, 0 at padding, ``m`` with a 1 (kernel)."""
    return float(x.sum() / int(m.sum()))


def whiten(x, mask=None, shift_mean=True, *, ddof=1, std_eps=1e-8, eps_mode="add", **renamed):
    """Masked whitening (x - mean) / sqrt(var + std_eps) over all valid elements of the batch.

    Parameters
    ----------
    x : array (T,) or (B, T)
        Values to whiten, typically advantages.
    mask : array of 0/1, optional
        1 for response tokens; statistics use only these, the output is 0 at padding.
    shift_mean : bool
        ``True`` (default): the output has mean 0. ``False``: the mean is added
        back, ``(x - mean) / sqrt(var + std_eps) + mean``.
    ddof : {1, 0}
        Variance divisor n - ddof. Default 1 (Bessel-corrected).
    std_eps : float >= 0
        Added to the variance inside the square root. Default 1e-8. (``eps=``, its old
        spelling, still works with a DeprecationWarning.)
    eps_mode : {"add", "floor"}
        ``"add"`` (default; TRL, verl): divide by sqrt(var + std_eps).
        ``"floor"``: divide by sqrt(max(var, std_eps)), std_eps a lower bound on the
        variance (OpenRLHF's advantage normalisation, ``docs/frameworks.md``).

    Returns
    -------
    float64 array, same shape; exactly 0 at padding. Fraction input is computed in
    float64 (the square root).

    Examples
    --------
    x = [1, 2, 3, 4]: mean 2.5; with ddof=1 var = (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3,
    with ddof=0 var = 5/4 (std_eps=0 for round numbers):

    >>> [round(float(v), 6) for v in whiten([1, 2, 3, 4], std_eps=0)]
    [-1.161895, -0.387298, 0.387298, 1.161895]
    >>> [round(float(v), 6) for v in whiten([1, 2, 3, 4], ddof=0, std_eps=0)]
    [-1.341641, -0.447214, 0.447214, 1.341641]
    >>> [round(float(v), 6) for v in whiten([1, 2, 3, 4], shift_mean=False, ddof=0, std_eps=0)]
    [1.158359, 2.052786, 2.947214, 3.841641]

    With ddof=0, var([0, 2]) = 1: std_eps = 3 added gives sqrt(4) = 2, as a floor sqrt(3):

    >>> [float(v) for v in whiten([0, 2], ddof=0, std_eps=3.0)]
    [-0.5, 0.5]
    >>> [round(float(v), 12) for v in whiten([0, 2], ddof=0, std_eps=3.0, eps_mode="floor")]
    [-0.57735026919, 0.57735026919]
    """
    if ddof not in (0, 1) or isinstance(ddof, bool):
        raise ValueError(f"ddof: must be 0 or 1, got {ddof!r}")
    std_eps = renamed_keyword("whiten", renamed, "eps", "std_eps", std_eps, 1e-8)
    std_eps = check_scalar(std_eps, "std_eps", low=0, allow_exact=False)
    if eps_mode not in ("add", "floor"):
        raise ValueError(f"eps_mode: expected 'add' or 'floor', got {eps_mode!r}")
    if not isinstance(shift_mean, (bool, np.bool_)):
        raise TypeError(f"shift_mean: expected a bool, got {type(shift_mean).__name__}")
    (x,), m = prepare({"x": x}, mask, exact=False)
    n = int(np.count_nonzero(m))
    if n < 2:
        name, what = ("x", "elements") if mask is None else ("mask", "valid elements")
        raise ValueError(f"{name}: whitening needs at least 2 {what}, got {n} "
                         "(the variance of fewer is undefined)")
    return whiten_kernel(x, m, shift_mean, ddof, std_eps, eps_mode, n=n)


def whiten_kernel(x, m, shift_mean=True, ddof=1, std_eps=1e-8, eps_mode="add", *, n=None):
    """:func:`whiten` on a checked array (unchecked kernel): ``x`` float64 0 at padding,
    ``m`` bool with at least 2 valid elements, the options checked. ``n``: ``m.sum()`` if
    known."""
    n = int(np.count_nonzero(m)) if n is None else n
    if n < 2:
        raise ValueError(f"mask: whitening needs at least 2 valid elements, got {n} "
                         "(the variance of fewer is undefined)")
    mean = x.sum() / n
    centred = x - mean
    np.copyto(centred, 0.0, where=~m)  # = where_valid(m, x - mean), in place
    var = (centred**2).sum() / (n - ddof)
    # sqrt(var + std_eps), or sqrt(max(var, std_eps)) with eps_mode="floor"
    scale = np.sqrt(var + std_eps if eps_mode == "add" else max(var, std_eps))
    if scale == 0:
        raise ValueError("x: every valid element is the same (variance 0) and std_eps is 0, "
                         "so whitening divides by 0; pass std_eps > 0")
    if shift_mean and np.isfinite(scale):
        # centred is 0.0 at padding, and so is 0.0 / scale: no where_valid needed
        return np.divide(centred, scale, out=centred)
    out = centred / scale
    if not shift_mean:
        out = out + mean
    return where_valid(m, out)
