"""Shared helpers for the tests of the core PPO maths.

* comparisons that, on failure, print what was expected, what came out, and the inputs;
* hypothesis strategies for padded batches: rows of different lengths placed in a (B, T)
  array with right, left or arbitrary (contiguous) placement, padding filled with garbage
  including NaN and inf;
* ``CachedPreset``, a preset that remembers its outputs, for the diagnosis tests.

Import as ``from tests._helpers import ...`` (pytest is run from the repository root).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Property tests stay small: the whole core suite must run in a few seconds.
FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Values that must never leak out of padding positions.
GARBAGE = (np.nan, np.inf, -np.inf, 1e300, -1e300, -7.5, 0.0, 3.0)


def show(**inputs) -> str:
    """The inputs of a failing check, one per line, at full precision."""
    lines = []
    for name, value in inputs.items():
        if isinstance(value, np.ndarray) and value.dtype != object:
            text = np.array2string(value, precision=17, separator=", ", max_line_width=100)
        else:
            text = repr(value)
        lines.append(f"  {name} = {text}")
    return "inputs:\n" + "\n".join(lines)


def assert_close(actual, expected, /, *, rtol=1e-12, atol=1e-12, **inputs):
    """Element-wise closeness in float64; the message shows expected, actual and inputs."""
    actual_f = np.asarray(actual, dtype=np.float64)
    expected_f = np.asarray(expected, dtype=np.float64)
    np.testing.assert_allclose(actual_f, expected_f, rtol=rtol, atol=atol,
                               err_msg=show(**inputs))


def assert_same(actual, expected, /, **inputs):
    """Bit-identical float arrays (NaN == NaN), same shape."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (
        f"shape: expected {expected.shape}, got {actual.shape}\n{show(**inputs)}")
    np.testing.assert_array_equal(actual, expected, err_msg=show(**inputs))


def assert_exact(actual, expected, /, **inputs):
    """Every element is a ``Fraction`` equal to the expected rational."""
    actual_l = np.asarray(actual, dtype=object).ravel().tolist()
    expected_l = [Fraction(e) for e in np.asarray(expected, dtype=object).ravel().tolist()]
    assert np.shape(actual) == np.shape(expected), (
        f"shape: expected {np.shape(expected)}, got {np.shape(actual)}\n{show(**inputs)}")
    for i, (a, e) in enumerate(zip(actual_l, expected_l)):
        assert isinstance(a, Fraction), (
            f"element {i}: expected the exact Fraction {e}, got {type(a).__name__} {a!r}\n"
            f"{show(**inputs)}")
        assert a == e, (
            f"element {i}: expected {e} ({float(e)!r}), got {a} ({float(a)!r})\n"
            f"  expected all: {[str(x) for x in expected_l]}\n"
            f"  actual all:   {[str(x) for x in actual_l]}\n{show(**inputs)}")


def assert_zero_at_padding(out, mask, name="output", /, **inputs):
    """``out`` is exactly 0 wherever ``mask`` is 0."""
    out = np.asarray(out)
    pad = ~np.asarray(mask, dtype=bool)
    bad = pad & (out != 0)
    assert not np.any(bad), (
        f"{name}: expected exactly 0 at padding, got {out[bad]!r} at "
        f"{[tuple(int(i) for i in ix) for ix in np.argwhere(bad)]}\n{show(**inputs)}")


def rand_fractions(rng, shape, *, num=9, den=9):
    """Random rationals p / q with |p| <= num, 1 <= q <= den, as an object array."""
    p = rng.integers(-num, num + 1, size=shape)
    q = rng.integers(1, den + 1, size=shape)
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = Fraction(int(p[idx]), int(q[idx]))
    return out


def finite(lo=-5.0, hi=5.0):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


@dataclass
class PaddedBatch:
    """Rows of different lengths and the padded (B, T) arrays built from them.

    ``rows[i][k]`` is the i-th row of the k-th array (a float64 (n_i,) array);
    ``arrays[k]`` is the (B, T) array with the row at ``starts[i]`` and garbage elsewhere.
    """

    rows: list
    arrays: list
    mask: np.ndarray
    starts: list
    lengths: list
    placement: str

    def valid(self, out, i):
        """The slice of row ``i`` of a batch output that holds the row's own result."""
        s, n = self.starts[i], self.lengths[i]
        return np.asarray(out)[i, s:s + n]


@st.composite
def padded_batches(draw, elements, *, max_rows=4, min_len=1, max_len=6, placement=None,
                   garbage=GARBAGE):
    """A :class:`PaddedBatch` with one array per strategy in ``elements``.

    ``placement``: "right" (response then padding), "left" (padding then response),
    "any" (one contiguous run anywhere), or None to let hypothesis choose.
    """
    B = draw(st.integers(1, max_rows))
    lengths = draw(st.lists(st.integers(min_len, max_len), min_size=B, max_size=B))
    T = max(max(lengths), 1) + draw(st.integers(0, 3))
    if placement is None:
        placement = draw(st.sampled_from(["right", "left", "any"]))
    starts = []
    for n in lengths:
        if placement == "right":
            starts.append(0)
        elif placement == "left":
            starts.append(T - n)
        else:
            starts.append(draw(st.integers(0, T - n)))
    mask = np.zeros((B, T), dtype=np.int64)
    for i, (s, n) in enumerate(zip(starts, lengths)):
        mask[i, s:s + n] = 1
    rows = [[np.array(draw(st.lists(el, min_size=n, max_size=n)), dtype=np.float64)
             for el in elements] for n in lengths]
    arrays = []
    for k in range(len(elements)):
        a = np.array(draw(st.lists(st.sampled_from(garbage), min_size=B * T, max_size=B * T)),
                     dtype=np.float64).reshape(B, T)
        for i, (s, n) in enumerate(zip(starts, lengths)):
            a[i, s:s + n] = rows[i][k]
        arrays.append(a)
    return PaddedBatch(rows, arrays, mask, starts, lengths, placement)


@st.composite
def masks_with_holes(draw, T_max=8, B_max=3):
    """A (B, T) 0/1 mask whose rows may have several runs of ones (each row has >= 1 one)."""
    B = draw(st.integers(1, B_max))
    T = draw(st.integers(1, T_max))
    rows = []
    for _ in range(B):
        row = draw(st.lists(st.integers(0, 1), min_size=T, max_size=T))
        if not any(row):
            row[draw(st.integers(0, T - 1))] = 1
        rows.append(row)
    return np.array(rows, dtype=np.int64)


class CachedPreset:
    """A preset whose outputs are remembered per (case, overrides): the plantings of one
    preset re-run the same settings on the same cases (a test-speed device only)."""

    def __init__(self, preset):
        self.preset, self.name, self.cache = preset, preset.name, {}
        self.parameters, self.tolerances = preset.parameters, preset.tolerances
        self.input_names = preset.input_names

    def __call__(self, case, **overrides):
        key = (case["name"], case["inputs"]["logp"].tobytes(),
               repr(sorted(case.get("params", {}).items())), repr(sorted(overrides.items())))
        if key not in self.cache:
            try:
                self.cache[key] = self.preset(case, **overrides)
            except ValueError as err:
                self.cache[key] = err
        out = self.cache[key]
        if isinstance(out, ValueError):
            raise out
        return out


#: How far a rerun of a stored long run (``docs/data/*_exercises.json``: training and
#: reward-model fits of several iterations) may drift from it on another CPU kind, relative to
#: each number. Not a bound derived from the arithmetic: a run feeds every rounding difference
#: of exp, log, tanh and of BLAS's products back through its updates and the reward model's
#: 300 fitting steps, and the difference grows with the iterations. Measured with
#: ``python -m tests.cpu_kinds --drift`` (docs/testing.md, "Stored results"): at most 3.3e-8
#: (the reward model fitted on 3000 pairs, then 5 iterations), 1e-13 or less for the other
#: runs, over the three kinds this machine can act as; 1e-6 leaves a factor of 30. What it
#: still catches: a changed setting, default or code path moves these rows by 1e-3 or more
#: from the first iteration on (a learning rate 0.1 % off: 8e-3;
#: ``tests/test_training_exercises.py::test_a_planted_change_fails_the_comparison``).
RERUN_RTOL = 1e-6
#: the absolute floor under it, for numbers that are 0 in one run (a KL at iteration 1)
RERUN_ATOL = 1e-12


def row_drift(fresh: dict, old: dict) -> float:
    """The worst difference between two rows' numbers, over ``RERUN_ATOL + RERUN_RTOL |old|``
    (so a row within the allowance gives at most 1; ``inf`` if the keys differ, or a
    non-number differs)."""
    if fresh.keys() != old.keys():
        return float("inf")
    worst = 0.0
    for k, b in old.items():
        a = fresh[k]
        if isinstance(b, (int, float)) and isinstance(a, (int, float)):
            if math.isnan(a) or math.isnan(b):
                if not (math.isnan(a) and math.isnan(b)):
                    return float("inf")
            elif a != b:  # equal infinities and signed zeros count as equal
                worst = max(worst, abs(a - b) / (RERUN_ATOL + RERUN_RTOL * abs(b)))
        elif isinstance(b, dict) and isinstance(a, dict):
            worst = max(worst, row_drift(a, b))
        elif a != b:
            return float("inf")
    return worst


def same_row(fresh: dict, old: dict, exact: bool) -> bool:
    """A rerun's row against a stored one (``docs/data/*_exercises.json``): equal, or with
    ``exact=False`` (stored on another CPU kind) the same keys and each number within
    ``RERUN_RTOL`` of it (``row_drift <= 1``)."""
    if exact:
        return fresh == old
    return row_drift(fresh, old) <= 1.0


_PRINTED = __import__("re").compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def last_digit(text: str) -> float:
    """One unit of the last digit a printed float shows: ``0.4657`` 1e-4, ``1.5e-12``
    1e-13; 0 for an integer (``42``, the parts of ``1863/4000``), which must be equal."""
    if not any(c in text for c in ".eE"):
        return 0.0
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** (int(exponent or 0) - decimals)


def same_printout(fresh: str, stored: str) -> bool:
    """Two printouts of numbers (a generated page, a table): the same text once the numbers
    are cut out, and each number within one unit of the last digit it shows.

    A number printed to n digits moves its last digit on another CPU kind only when it sits
    within the last bits of a rounding boundary; it then moves by one unit (``0.4657`` for
    ``0.4658``). A changed formula or setting moves a printed number by more (or moves many).
    """
    if _PRINTED.split(fresh) != _PRINTED.split(stored):
        return False
    return all(abs(float(a) - float(b)) <= 1.0000001 * max(last_digit(a), last_digit(b))
               for a, b in zip(_PRINTED.findall(fresh), _PRINTED.findall(stored)))
