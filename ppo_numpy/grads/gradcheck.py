"""Checking hand-written gradients against centered finite differences.

    df/dx_j ~ (f(x + h e_j) - f(x - h e_j)) / (2 h)

in float64: the error is O(h^2) from truncation plus about ``eps_64 |f| / h`` from
rounding, so h = 1e-5 balances the two at roughly 1e-10 relative error for
smooth functions of size 1. Inputs must sit more than h away from every kink
(clip, min, max, abs), or the difference quotient straddles it.

A :class:`Comparison` (the report of :func:`cmp`) says, per tensor, whether
the two arrays are bit-for-bit equal, whether they are close, the largest
absolute difference with its index, and the relative error

    rel = max_j |a_j - n_j| / max(max_j |a_j|, max_j |n_j|)

(0 when both are all zero). This norm-wise error is the one we hold below 1e-6:
an element-wise ratio is meaningless where the true gradient is 0 (clipped
tokens, padding), which is where a wrong backward often hides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_int, check_scalar

__all__ = ["Comparison", "cmp", "gradcheck", "numerical_grad"]


@dataclass(frozen=True)
class Comparison:
    """Report of :func:`cmp`: analytic vs numeric values of one tensor."""

    name: str
    exact: bool
    close: bool
    max_abs_diff: float
    rel_error: float
    worst_index: tuple
    analytic_at_worst: float
    numeric_at_worst: float
    n_checked: int

    def __str__(self) -> str:
        return (f"{self.name:<14s} | exact: {str(self.exact):5s} | close: {str(self.close):5s} | "
                f"max abs diff: {self.max_abs_diff:.3e} | rel error: {self.rel_error:.3e} | "
                f"worst at {self.worst_index}: analytic {self.analytic_at_worst:.10g} vs "
                f"numeric {self.numeric_at_worst:.10g} ({self.n_checked} checked)")


def cmp(name, analytic, numeric, *, rtol=1e-6) -> Comparison:
    """Compare two arrays of the same shape; ``str()`` of the result is a one-line report.

    Parameters
    ----------
    name : str
        Label of the tensor (a parameter name).
    analytic, numeric : arrays of the same shape
        E.g. a hand-written gradient and its finite-difference estimate. NaN
        entries of ``numeric`` mean "not checked" and are skipped (see
        :func:`gradcheck` with ``n_coords``).
    rtol : float
        ``close`` is ``rel_error <= rtol``. Default 1e-6 (float64 finite differences).

    Returns
    -------
    Comparison

    Examples
    --------
    The worst element differs by 1e-6, relative to the largest magnitude 4.000001:

    >>> r = cmp("W", [1.0, -2.0, 4.0], [1.0, -2.0, 4.000001])
    >>> r.exact, r.close, r.worst_index, round(r.rel_error, 9)
    (False, True, (2,), 2.5e-07)
    >>> cmp("W", [1.0, -2.0, 4.0], [1.0, -2.0, 4.000001], rtol=1e-8).close
    False
    >>> print(cmp("b", [0.0, 1.0], [0.0, 1.0]))  # doctest: +NORMALIZE_WHITESPACE
    b              | exact: True  | close: True  | max abs diff: 0.000e+00 | rel error: 0.000e+00 |
    worst at (0,): analytic 0 vs numeric 0 (2 checked)
    """
    a = np.asarray(analytic, dtype=np.float64)
    n = np.asarray(numeric, dtype=np.float64)
    if a.shape != n.shape:
        raise ValueError(f"{name}: analytic shape {a.shape} differs from numeric shape {n.shape}")
    checked = ~np.isnan(n)
    if not np.any(checked):
        raise ValueError(f"{name}: nothing to compare (numeric is all NaN)")
    diff = np.where(checked, np.abs(a - n), -1.0)
    flat = int(np.argmax(diff))
    worst = tuple(int(i) for i in np.unravel_index(flat, a.shape))
    max_abs = float(diff.flat[flat])
    scale = max(float(np.abs(a[checked]).max()), float(np.abs(n[checked]).max()))
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    exact = bool(np.array_equal(a[checked], n[checked]))
    if not np.isfinite(rel):
        rel = float("inf")
    return Comparison(name=name, exact=exact, close=bool(rel <= rtol), max_abs_diff=max_abs,
                      rel_error=rel, worst_index=worst, analytic_at_worst=float(a[worst]),
                      numeric_at_worst=float(n[worst]), n_checked=int(checked.sum()))


def numerical_grad(f, params, name, *, h=1e-5, coords=None) -> np.ndarray:
    """Centered finite differences of ``f(params)`` w.r.t. ``params[name]``.

    Parameters
    ----------
    f : callable(dict) -> float
        The scalar function. It receives a new dict in which only ``params[name]``
        is replaced by a perturbed copy; ``params`` itself is never modified.
    params : dict[str, np.ndarray]
    name : str
        Which entry to differentiate.
    h : float > 0
        Step. Default 1e-5.
    coords : sequence of index tuples, optional
        Which coordinates to estimate; ``None``: all. Others are NaN.

    Returns
    -------
    float64 array shaped like ``params[name]``.

    Examples
    --------
    d/dx of sum x^3 is 3 x^2:

    >>> g = numerical_grad(lambda p: float((p["x"] ** 3).sum()), {"x": np.array([1.0, -2.0])}, "x")
    >>> [round(float(v), 8) for v in g]
    [3.0, 12.0]
    """
    if name not in params:
        raise KeyError(f"name: {name!r} is not in params (keys: {sorted(params)})")
    h = check_scalar(h, "h", low=0, low_open=True, allow_exact=False)
    x0 = np.asarray(params[name], dtype=np.float64)
    if coords is None:
        coords = list(np.ndindex(x0.shape))
    out = np.full(x0.shape, np.nan)

    def f_at(idx, step):  # f with x_idx moved by step (a copy: params untouched)
        x = x0.copy()
        x[idx] += step
        return float(f({**params, name: x}))

    for idx in coords:
        # (f(x + h e_j) - f(x - h e_j)) / (2 h)
        out[idx] = (f_at(idx, h) - f_at(idx, -h)) / (2 * h)
    return out


def gradcheck(f, params, grads, *, h=1e-5, n_coords=None, rng=None, rtol=1e-6,
              names=None) -> dict:
    """Check every tensor of ``grads`` against finite differences of ``f``.

    Parameters
    ----------
    f : callable(dict) -> float
        The loss as a function of a params dict (see :func:`numerical_grad`).
    params : dict[str, np.ndarray]
        The point at which to check. Not modified.
    grads : dict[str, np.ndarray]
        The hand-written gradient, same keys and shapes as ``params``.
    h : float
        Finite-difference step. Default 1e-5.
    n_coords : int, optional
        Check this many coordinates per tensor, drawn without replacement by
        ``rng`` (all of them if the tensor is smaller). ``None``: every coordinate.
    rng : np.random.Generator
        Required when ``n_coords`` is given.
    rtol : float
        Passed to :func:`cmp`. Default 1e-6.
    names : sequence of str, optional
        Only these tensors. Default: all keys of ``params``.

    Returns
    -------
    dict name -> :class:`Comparison`. ``all(c.close for c in result.values())``
    is the verdict; print the values for the report.

    Examples
    --------
    f(W, b) = sum (W x + b)^2 / 2 with W x + b = [1, 2]: dW = [[1], [2]] x^T, db = [1, 2].

    >>> p = {"W": np.array([[1.0], [1.0]]), "b": np.array([0.0, 1.0])}
    >>> f = lambda q: float(((q["W"] @ np.array([1.0]) + q["b"]) ** 2).sum() / 2)
    >>> g = {"W": np.array([[1.0], [2.0]]), "b": np.array([1.0, 2.0])}
    >>> [(k, c.close) for k, c in gradcheck(f, p, g).items()]
    [('W', True), ('b', True)]
    """
    names = list(params) if names is None else list(names)
    if n_coords is not None:
        n_coords = check_int(n_coords, "n_coords")
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng: pass an np.random.Generator to choose the n_coords coordinates")
    report = {}
    for name in names:
        if name not in grads:
            raise KeyError(f"grads: missing gradient for {name!r}")
        shape = np.shape(params[name])
        if np.shape(grads[name]) != shape:
            raise ValueError(f"grads[{name!r}]: shape {np.shape(grads[name])} does not match "
                             f"params[{name!r}] shape {shape}")
        coords = None
        size = int(np.prod(shape))
        if n_coords is not None and n_coords < size:
            flat = rng.choice(size, size=n_coords, replace=False)
            coords = [tuple(int(i) for i in np.unravel_index(j, shape)) for j in flat]
        numeric = numerical_grad(f, params, name, h=h, coords=coords)
        report[name] = cmp(name, grads[name], numeric, rtol=rtol)
    return report
