"""Input checks shared by every public function.

Each check names the argument it is looking at and says what was wrong, so a
user who passes a wrong shape or a NaN sees which of their arrays to fix.

Arrays are converted to float64 (integer, bool and float32 input accepted) and
always copied, so no public function can write into its caller's arrays.

Exact mode: when any array argument holds a ``fractions.Fraction``, the arrays
of the call become object arrays of Fractions and every rational step stays
exact. A float entry is then read as the decimal it prints as (0.6 is 3/5, not
the binary 5404319552844595/9007199254740992), the same rule as for float
hyperparameters (:func:`scalar_for`); NaN and inf are allowed only at padding,
as in float mode. Which functions stay exact: ``docs/hand-calculations.md``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Rational, Real

import numpy as np


def is_exact(x) -> bool:
    """True when ``x`` holds ``fractions.Fraction`` values (exact arithmetic)."""
    if type(x) is np.ndarray and x.dtype != object:
        return False  # the common case, without the abstract-base-class checks below
    if isinstance(x, Fraction):
        return True
    if isinstance(x, np.ndarray):
        return x.dtype == object and any(isinstance(v, Fraction) for v in x.flat)
    if isinstance(x, (list, tuple)):
        # any element, not only the first: [0, Fraction(1, 2)] is exact
        return any(is_exact(v) for v in x)
    return False


def as_array(x, name: str, *, exact: bool | None = None, copy: bool = True) -> np.ndarray:
    """Return a new float64 array (or an object array of Fractions) made from ``x``.

    Raises TypeError for values that are not real numbers (strings, complex,
    None) and names ``name`` in the message. ``copy=False``: a float64 ndarray
    may come back as itself (or a view of it); the caller must not write into it.
    """
    if exact is None:
        exact = is_exact(x)
    elif not exact and is_exact(x):
        # Fractions where the formula needs exp/log/sqrt: computed in float64
        arr = rectangular(x, name, dtype=object)
        return _convert(arr, lambda v: _exact_entry(v, name, keep_float=True), np.float64)
    if exact:
        arr = rectangular(x, name, dtype=object)
        return _convert(arr, lambda v: _exact_entry(v, name), object)
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise TypeError(
                f"{name}: expected an array of real numbers, got dtype {x.dtype}"
            )
        return np.array(x, dtype=np.float64, copy=True if copy else None)
    arr = rectangular(x, name)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected real numbers, got {arr.dtype} values")
    return arr.astype(np.float64)


def rectangular(x, name: str, dtype=None) -> np.ndarray:
    """``np.asarray(x, dtype)``, with a ValueError naming ``name`` for ragged lists."""
    try:
        return np.asarray(x, dtype=dtype)
    except ValueError as err:  # ragged lists
        raise ValueError(f"{name}: not a rectangular array ({err})") from None


def _convert(arr: np.ndarray, entry, dtype) -> np.ndarray:
    return np.vectorize(entry, otypes=[dtype])(arr) if arr.size else arr.astype(dtype)


def _exact_entry(v, name: str, keep_float: bool = False):
    """One entry of an exact array: a Fraction; a float read as the decimal it prints as.

    NaN and inf stay floats, so that :func:`check_finite` can allow them at padding.
    ``keep_float=True``: floats stay as they are (the array is going to float64).
    """
    if isinstance(v, Fraction):
        return v
    if isinstance(v, (float, np.floating)):
        if keep_float or not np.isfinite(v):
            return float(v)
        # str(0.6) is '0.6': Fraction('0.6') = 3/5, the rule of scalar_for
        return Fraction(str(v))
    if isinstance(v, (int, np.integer, np.bool_)):
        return Fraction(int(v))
    if isinstance(v, Rational):
        return Fraction(v)
    raise TypeError(f"{name}: expected real numbers, got {type(v).__name__} {v!r}")


def check_scalar(x, name: str, *, low=None, high=None, low_open=False,
                 allow_exact=True):
    """Check that ``x`` is a finite real number in ``[low, high]`` and return it.

    Floats come back as ``float``; ``Fraction`` is kept as it is.
    """
    if type(x) is float:
        value = x  # the common case, without the abstract-base-class checks below
    elif isinstance(x, (bool, np.bool_)) or not isinstance(x, Real):
        raise TypeError(f"{name}: expected a real number, got {type(x).__name__} {x!r}")
    elif isinstance(x, Fraction) and allow_exact:
        value = x
    else:
        value = float(x)
    if type(value) is float and not math.isfinite(value):
        raise ValueError(f"{name}: must be finite, got {value}")
    if low is not None and (value <= low if low_open else value < low):
        bound = f"> {low}" if low_open else f">= {low}"
        raise ValueError(f"{name}: must be {bound}, got {x}")
    if high is not None and value > high:
        raise ValueError(f"{name}: must be <= {high}, got {x}")
    return value


def check_choice(value, name: str, choices, what: str = "value"):
    """Return ``value`` after checking it is one of the strings ``choices``.

    The one checker for a choice of strings: the message names the argument, what it got
    and every valid value.

    >>> check_choice("k3", "estimator", ("k1", "k2", "k3"), "estimator")
    'k3'
    >>> check_choice("k4", "estimator", ("k1", "k2", "k3"), "estimator")
    Traceback (most recent call last):
    ...
    ValueError: estimator: unknown estimator 'k4'; valid ones are k1, k2, k3
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name}: unknown {what} {value!r}; valid ones are {', '.join(choices)}")
    return value


def check_bounds(bounds, name: str, *, allow_exact=True):
    """Return ``(low, high)`` from a bound c > 0 (meaning ``[-c, c]``) or a pair low < high.

    The one parser of a two-sided bound (a score clip): a pair whose ends are equal or
    reversed clips every value to one number, and is refused.

    >>> check_bounds(2.0, "score_clip"), check_bounds((-1, 3), "score_clip")
    ((-2.0, 2.0), (-1.0, 3.0))
    >>> check_bounds((1.0, 1.0), "score_clip")
    Traceback (most recent call last):
    ...
    ValueError: score_clip: low must be < high, got (1.0, 1.0)
    """
    if isinstance(bounds, (tuple, list)):
        if len(bounds) != 2:
            raise ValueError(f"{name}: expected c or (low, high), got {bounds!r}")
        low = check_scalar(bounds[0], f"{name}[0]", allow_exact=allow_exact)
        high = check_scalar(bounds[1], f"{name}[1]", allow_exact=allow_exact)
        if not low < high:
            raise ValueError(f"{name}: low must be < high, got {bounds!r}")
        return low, high
    c = check_scalar(bounds, name, low=0, low_open=True, allow_exact=allow_exact)
    return -c, c


def check_rank(arr: np.ndarray, name: str, ranks=(1, 2)) -> None:
    if arr.ndim not in ranks:
        want = " or ".join(("(T,)" if r == 1 else "(B, T)" if r == 2 else f"{r}-d")
                           for r in ranks)
        raise ValueError(f"{name}: expected shape {want}, got shape {arr.shape}")


def check_same_shape(ref: np.ndarray, ref_name: str, arr: np.ndarray, name: str) -> None:
    if arr.shape != ref.shape:
        raise ValueError(
            f"{name}: shape {arr.shape} does not match {ref_name} shape {ref.shape} "
            "(no broadcasting: pass arrays of the same shape)"
        )


def as_mask(mask, like: np.ndarray, like_name: str, *, copy: bool = True) -> np.ndarray:
    """Return a bool copy of ``mask`` (1 = response token, 0 = padding).

    ``None`` means every position is valid. Values other than 0 and 1 raise.
    ``copy=False``: a bool ndarray may come back as itself (never to be written into).
    """
    if mask is None:
        return np.ones(like.shape, dtype=bool)
    m = rectangular(mask, "mask")
    if m.dtype.kind not in "biuf" and m.dtype != object:
        raise TypeError(f"mask: expected 0/1 or bool values, got dtype {m.dtype}")
    if m.shape != like.shape:
        raise ValueError(
            f"mask: shape {m.shape} does not match {like_name} shape {like.shape}"
        )
    if m.dtype == bool:
        return m.copy() if copy else m
    # why: one comparison and one check: m != 0 is the bool mask, and it equals m exactly
    # where m is 0 or 1 (NaN, inf, 0.5, 2 differ from it)
    b = m != 0
    if not (m == b).all():
        ok = (m == 0) | (m == 1)
        bad = np.argwhere(~ok)[0]
        raise ValueError(
            f"mask: must contain only 0 and 1, found {m[tuple(bad)]!r} at index "
            f"{tuple(int(i) for i in bad)}"
        )
    return b


def finite_entries(arr: np.ndarray) -> np.ndarray:
    """Element-wise True where ``arr`` is not NaN or inf (exact arrays: a Fraction)."""
    if arr.dtype == object:
        # exact arrays hold Fractions, and NaN or inf as floats (see as_array)
        return np.array([isinstance(v, Fraction) for v in arr.flat],
                        dtype=bool).reshape(arr.shape)
    return np.isfinite(arr)


def check_finite(arr: np.ndarray, name: str, mask: np.ndarray, *, nonnegative=None) -> None:
    """Raise if ``arr`` has NaN or inf at a valid (mask = 1) position (``nonnegative``, what
    its values are, e.g. "ratios": or a value below 0 there)."""
    finite = finite_entries(arr)
    if not nonnegative and finite.all():
        return  # every entry finite, padding included: nothing to name
    bad = mask & ~finite
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}: non-finite value {arr[idx]} at valid position {idx} "
            "(NaN and inf are allowed only where mask is 0)"
        )
    if nonnegative:
        with np.errstate(invalid="ignore"):  # NaN at padding
            bad = mask & (arr < 0)
        if np.any(bad):
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name}: {nonnegative} must be >= 0, got {arr[idx]} at index {idx}")


def where_valid(mask: np.ndarray, arr: np.ndarray) -> np.ndarray:
    """``arr`` at valid positions and exactly 0 at padding (never ``0 * inf``): a new array."""
    if (type(arr) is np.ndarray and arr.dtype == np.float64 and type(mask) is np.ndarray
            and mask.dtype == bool and arr.shape == mask.shape):
        # why: the same array as np.where's, for half the time (a copy, then the padding
        # written over: np.where reads three inputs element by element)
        out = arr.copy()
        np.copyto(out, 0.0, where=~mask)
        return out
    return np.where(mask, arr, zero_like(arr))


def check_shapes(arrays: dict, mask, *, ranks=(1, 2), exact: bool | None = None):
    """Convert the named arrays and check their shapes and the mask, not their values.

    ``arrays`` maps argument names to values; the first one sets the shape. Returns
    ``(converted_arrays_in_order, mask_bool)``: float64 arrays (exact Fractions in exact
    mode), each possibly the caller's own (a float64 array comes back as given), never to be
    written into.
    """
    names, given = list(arrays), list(arrays.values())
    if exact is None:
        exact = any(map(is_exact, given))
    out = [as_array(v, n, exact=exact, copy=False) for n, v in zip(names, given)]
    first = out[0]
    check_rank(first, names[0], ranks)
    if first.shape[-1] == 0:
        raise ValueError(f"{names[0]}: no time steps, got shape {first.shape} (T must be >= 1)")
    for n, a in zip(names[1:], out[1:]):
        check_same_shape(first, names[0], a, n)
    return out, as_mask(mask, first, names[0], copy=False)


def prepare(arrays: dict, mask, *, ranks=(1, 2), exact: bool | None = None, nonnegative=None):
    """Convert the named arrays, check shapes, the mask and finiteness.

    ``arrays`` maps argument names to values; the first one sets the shape.
    Returns ``(converted_arrays_in_order, mask_bool)``: new arrays, exactly 0 at padding, so
    that nothing there can leak.

    ``nonnegative``: ``{name: what its values are}`` for arrays that must also be >= 0 at
    valid positions (``{"rho": "ratios"}``).
    """
    out, m = check_shapes(arrays, mask, ranks=ranks, exact=exact)
    nonnegative = nonnegative or {}
    for n, a in zip(arrays, out):
        check_finite(a, n, m, nonnegative=nonnegative.get(n))
    # where_valid returns a new array: the caller's is never written into
    return [where_valid(m, a) for a in out], m


def zero_like(arr: np.ndarray):
    return Fraction(0) if arr.dtype == object else 0.0


def scalar_for(value, arr: np.ndarray):
    """``value`` in the arithmetic of ``arr``: a Fraction for exact arrays.

    A float such as 0.95 becomes Fraction('0.95') = 19/20 (the number as
    written), not the binary approximation Fraction(0.95).
    """
    if arr.dtype != object:
        return float(value)
    return value if isinstance(value, Fraction) else Fraction(str(value))


def check_int(value, name: str, low: int = 1) -> int:
    """Return ``value`` as an int after checking it is an integer (not a bool) >= ``low``.

    >>> check_int(3, "n")
    3
    >>> check_int(0, "n")
    Traceback (most recent call last):
    ...
    ValueError: n: must be an integer >= 1, got 0
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: must be an integer >= {low}, got {type(value).__name__} "
                        f"{value!r}")
    if value < low:
        raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")
    return int(value)


def check_is_weights(is_weights, like: np.ndarray, like_name: str, m: np.ndarray):
    """``is_weights`` checked against the checked array ``like`` and its mask ``m``: ``None``,
    or a new float64 array of ``like``'s shape, finite and >= 0 at the response tokens, 0 at
    padding (whatever it held there)."""
    if is_weights is None:
        return None
    w = as_array(is_weights, "is_weights", exact=False)
    check_same_shape(like, like_name, w, "is_weights")
    check_finite(w, "is_weights", m, nonnegative="importance weights")
    return where_valid(m, w)
