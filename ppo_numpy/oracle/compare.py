"""Compare a candidate implementation with the oracle, output by output (``docs/oracle.md``).

:func:`compare` runs a candidate and a reference (a preset, or any callable
``case -> outputs``) on the same cases; :func:`assert_matches` compares two
output dicts inside a test. Both return a :class:`ComparisonReport` that
gives, per output, the largest absolute and relative error, the index of
the worst element, the inputs at that index, and pass or fail.

An element passes when

    |actual - expected| <= atol + rtol |expected|

with (rtol, atol) from :data:`TOLERANCES`, by the dtype the candidate
computes in; u is the dtype's unit roundoff (half its machine epsilon):

=========  =======  =======  =======  ============================================
dtype      u        rtol     atol     why
=========  =======  =======  =======  ============================================
float64    1.1e-16  1e-9     1e-12    two float64 codes that sum in another order
                                      (a reverse loop vs a matrix product, a mean
                                      over N tokens) differ by up to ~N u; atol =
                                      1e4 u covers O(1) outputs of batches of up
                                      to ~1e4 tokens; rtol covers large elements
                                      (rho = e^50) whose error is ``|log rho| u``
float32    6.0e-8   1e-4     1e-5     the same growth on u_32: 1e4 u_32 = 6e-4
                                      would be the bound for 1e4 tokens; errors on
                                      the generated cases (<= 96 tokens) stay below
                                      1.2e-6, so atol 1e-5 keeps a margin of ~10
bfloat16   3.9e-3   5e-2     5e-2     8 significant bits: one rounding is 4e-3; a
                                      16-step GAE loop in bf16 reaches 3e-2 on
                                      outputs of size 1 to 3
=========  =======  =======  =======  ============================================

The float32 and bfloat16 figures were measured with ``examples/torch_ppo.py``
computing in those dtypes (``docs/oracle.md``). They assume inputs of
order 1 and responses of at most a few dozen tokens, as
:mod:`ppo_numpy.oracle.cases` draws them; pass ``tolerance=`` for others. In
bfloat16 the log-ratio of ``extreme-log-ratios`` (50, stored to +-0.125)
gives rho to +-13%: no tolerance of this table applies there.

Conventions of the comparison:

* Strict names and types. The candidate returns a dict of numbers, arrays or torch
  tensors (:func:`check_candidate_outputs`: anything else is a TypeError naming it, the
  case and the type). A name the reference never produces fails, naming the closest known
  names; an output the reference produces that the candidate lacks is listed in
  ``unchecked`` and the report does not pass, unless ``outputs=`` restricts the
  comparison to the outputs the candidate returns.
* A failure line gives the worst element (the largest error over its allowance) with its
  own expected and returned values and its own absolute and relative error; a failing
  report whose failures all pass at a looser dtype's tolerance says so
  (:meth:`ComparisonReport.precision_hint`).
* The candidate gets the case's inputs rounded to its dtype (bfloat16:
  float32 arrays whose values are rounded to 8 significant bits by
  :func:`to_bfloat16`), and the reference gets *the same rounded values* in
  float64: the comparison measures the candidate's arithmetic, not the
  rounding of its inputs.
* Per-token outputs (arrays shaped like ``mask``) are compared where mask
  is 1 only; NaN or garbage at padding never fails a comparison.
* Kinks. clip, min and max make gradients and clip fractions jump: a
  token whose rho sits within rounding of 1 + eps is clipped in one
  precision and not in the other. The reference is therefore also run on
  ``probes`` copies of the inputs, each element (not of the mask or the
  prompt ids) moved by ``+-4 u max(|x|, 1)`` with random signs. Where the
  reference's values over the probes spread wider than the tolerance (a
  kink, or an ill-conditioned point such as whitening a zero-variance
  batch), the element's error is its distance to the range of those
  values; such elements are counted in ``n_kinks``.
  Elsewhere the probes change nothing.
* Ties in low precision. ``torch.maximum``/``torch.minimum`` split the
  gradient in half when both arguments are equal; in bfloat16 two different
  squared errors often round to the same number, so a bf16 backward pass
  returns halved gradients that no input perturbation explains. Compare
  gradients and clip fractions of a bf16 pipeline whose loss runs in
  float32, or expect such elements to fail.
* A case the reference rejects with ValueError (e.g. ``one-valid-token``
  under a preset that whitens) is listed as rejected and not compared.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .coverage import coverage_of

PROBE_SCALE = 4.0
"""Probe perturbations are ``+-PROBE_SCALE * u * max(|x|, 1)``."""

LABELS = ("mask", "groups")
"""Inputs that are labels, not measured values (the mask, the prompt ids of a critic-free
preset): a probe leaves them as they are."""


@dataclass(frozen=True)
class Tolerance:
    """Pass rule ``|actual - expected| <= atol + rtol |expected|`` for one dtype."""

    rtol: float
    atol: float
    unit_roundoff: float


TOLERANCES = {
    "float64": Tolerance(rtol=1e-9, atol=1e-12, unit_roundoff=2.0**-53),
    "float32": Tolerance(rtol=1e-4, atol=1e-5, unit_roundoff=2.0**-24),
    "bfloat16": Tolerance(rtol=5e-2, atol=5e-2, unit_roundoff=2.0**-9),
}
"""Tolerance by the dtype the candidate computes in (see the module docstring)."""

DTYPES = tuple(TOLERANCES)

PRECISION_RANK = {"float64": 0, "float32": 1, "float16": 1, "bfloat16": 2}
"""How coarse a returned dtype is (float16 counts as float32: its 11 significant bits are
within float32's tolerance, not bfloat16's); integers and Python floats are float64."""


def tolerance_for(reference, dtype) -> Tolerance:
    """The tolerance to compare with ``reference`` in ``dtype``: the preset's own
    (``Preset.tolerances``, derived from its framework's arithmetic) where it has one for
    ``dtype``, else :data:`TOLERANCES`.

    >>> from ppo_numpy.oracle.presets import get_preset
    >>> tolerance_for(get_preset("verl"), "float64").rtol == 1e-9 + 2**-24
    True
    >>> tolerance_for(get_preset("seed"), "float64") == TOLERANCES["float64"]
    True
    """
    dtype = check_dtype(dtype)
    base = TOLERANCES[dtype]
    own = getattr(reference, "tolerances", None) or {}
    if dtype not in own:
        return base
    return Tolerance(*own[dtype], unit_roundoff=base.unit_roundoff)  # own[dtype]: (rtol, atol)


def check_dtype(dtype) -> str:
    name = (getattr(dtype, "__name__", None) or str(dtype)).removeprefix("torch.")
    name = {"float": "float64", "double": "float64", "bf16": "bfloat16"}.get(name, name)
    if name not in TOLERANCES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    return name


def to_bfloat16(x) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even); a float32 array holding those values.

    bfloat16 keeps float32's 8 exponent bits and the top 7 of its 23 stored
    mantissa bits (8 significant bits): round the float32 bit pattern at bit
    16 and zero the lower 16 bits. NaN stays NaN; values beyond bfloat16's
    largest (~3.39e38) become inf. float64 input is rounded to float32 first,
    as PyTorch's float64 -> bfloat16 conversion does (the two roundings can
    differ from one rounding at a tie; ``tests/test_torch_example.py`` checks
    the agreement with PyTorch).

    >>> to_bfloat16([1.0, 1.00390625, 1.01171875, 3.14159265]).tolist()
    [1.0, 1.0, 1.015625, 3.140625]

    (1 + 2^-8 is halfway between 1 and 1 + 2^-7: the tie goes to the even 1.0.)
    """
    f = np.array(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    # round half to even on the 16 bits that are dropped
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return np.where(np.isnan(f), np.float32(np.nan), bits.astype(np.uint32).view(np.float32))


def round_to_dtype(x, dtype) -> np.ndarray:
    """``x`` stored as the candidate would hold it: float64, float32, or bf16 values in float32."""
    dtype = check_dtype(dtype)
    # float64 and float32 are numpy's own; bfloat16 is float32 holding its values
    return to_bfloat16(x) if dtype == "bfloat16" else np.array(x, dtype=dtype)


def cast_case(case: dict, dtype) -> dict:
    """A copy of ``case`` whose inputs are rounded to ``dtype`` (see :func:`round_to_dtype`),
    but for the prompt ids ``groups``, labels copied as float64 (bfloat16 would make 256 and
    257 one group; the mask's 0 and 1 are exact in every dtype)."""
    def cast(name, x):
        return np.array(x, dtype=np.float64) if name == "groups" else round_to_dtype(x, dtype)

    return {**case, "inputs": {n: cast(n, v) for n, v in case["inputs"].items()},
            "params": dict(case.get("params", {}))}


def probe_cases(case: dict, dtype, n: int, *, seed: int = 0) -> list:
    """``n`` float64 copies of ``case`` with each valid input moved by ``+-4 u max(|x|, 1)``
    (not the :data:`LABELS`)."""
    u = TOLERANCES[check_dtype(dtype)].unit_roundoff
    rng = np.random.default_rng([seed, n])
    mask = case["inputs"]["mask"]

    def probe(name, x):
        x = np.array(x, dtype=np.float64)
        if name in LABELS:
            return x
        sign = rng.choice([-1.0, 1.0], size=x.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            moved = x + sign * PROBE_SCALE * u * np.maximum(np.abs(x), 1.0)
        return np.where(compared(x.shape, mask), moved, x)

    return [{**case, "inputs": {name: probe(name, x) for name, x in case["inputs"].items()}}
            for _ in range(n)]


@dataclass
class OutputComparison:
    """One output of one case: errors, the worst element and pass/fail."""

    case: str
    output: str
    passed: bool
    max_abs_err: float = float("nan")
    max_rel_err: float = float("nan")
    worst_index: tuple = ()
    expected: float = float("nan")
    actual: float = float("nan")
    allowed: float = float("nan")
    inputs: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    n_compared: int = 0
    n_kinks: int = 0
    note: str = ""
    worst_abs_err: float = float("nan")
    worst_rel_err: float = float("nan")
    passes_at: str = ""
    #: the largest error over the error allowed at the same element (<= 1: passed)
    worst_ratio: float = float("nan")
    #: the dtype the candidate returned this output in (float64 for Python numbers)
    returned_dtype: str = "float64"

    def describe(self) -> str:
        """Several lines: what was expected, what came out (the worst element's own values and
        its own absolute and relative error), and the inputs that produced it."""
        where = f" at {self.worst_index}" if self.worst_index else ""
        lines = [f"{self.case} / {self.output}{where}: " + (
            self.note if self.note and np.isnan(self.max_abs_err) else
            f"expected {self.expected!r}, got {self.actual!r} "
            f"(abs err {self.worst_abs_err:.3g}, rel err {self.worst_rel_err:.3g}, "
            f"allowed {self.allowed:.3g})")]
        if self.inputs:
            lines.append("    inputs" + where + ": " + ", ".join(
                f"{k}={v!r}" for k, v in self.inputs.items()))
        if self.params:
            lines.append("    params: " + ", ".join(f"{k}={v!r}" for k, v in self.params.items()))
        if self.note and not np.isnan(self.max_abs_err):
            lines.append("    " + self.note)
        if self.passes_at:
            lines.append(f"    matches at {self.passes_at} tolerance")
        return "\n".join(lines)


@dataclass
class ComparisonReport:
    """Rows of :class:`OutputComparison`; ``str()`` is a table per output plus every failure."""

    dtype: str
    tolerance: Tolerance
    rows: list = field(default_factory=list)
    rejected: dict = field(default_factory=dict)
    unchecked: dict = field(default_factory=dict)
    title: str = "candidate vs reference"
    not_produced: dict = field(default_factory=dict)
    #: case -> what the candidate does not implement there (its NotImplementedError's
    #: message, "option=value"): not compared
    not_implemented: dict = field(default_factory=dict)
    #: the outputs left out by request (``omit=``): not compared
    omitted: tuple = ()
    #: which option values were compared on how many cases
    #: (:class:`~ppo_numpy.oracle.coverage.Coverage`),
    #: printed at the end; None for a report of one case
    coverage: object = None

    @property
    def passed(self) -> bool:
        """Something was compared, every comparison passed, and the candidate returned every
        output the reference produces (``unchecked`` is empty: with ``outputs=`` it lists
        none). A report that compared nothing (every case rejected by the reference, no
        case given) does not pass: it cannot say that anything matches."""
        return bool(self.rows) and all(r.passed for r in self.rows) and not self.unchecked

    @property
    def verdict(self) -> str:
        """One line: ``passed: N output comparisons``, ``FAILED: k of N output comparisons``
        (and the outputs not returned), or ``NOT passed: nothing compared (...)``."""
        if not self.rows:
            why = (f"the reference rejected all {len(self.rejected)} case(s)" if self.rejected
                   else "no case was run")
            if self.not_implemented:
                why = (f"the candidate implements none of the {len(self.not_implemented)} "
                       f"case(s) the reference accepts")
                if self.rejected:
                    why += f", the reference rejected {len(self.rejected)}"
            if self.unchecked:
                why += f"; not returned by the candidate: {', '.join(self.unchecked)}"
            return f"NOT passed: nothing compared ({why})"
        n_fail = len(self.failures)
        if not n_fail and not self.unchecked:
            return f"passed: {len(self.rows)} output comparisons" + self._partly()
        parts = []
        if n_fail:
            outputs = ", ".join(dict.fromkeys(r.output for r in self.failures))
            parts.append(f"{n_fail} of {len(self.rows)} output comparisons ({outputs})")
        if self.unchecked:
            parts.append(f"not returned by the candidate: {', '.join(self.unchecked)}")
        return "FAILED: " + "; ".join(parts) + self._partly()

    def _partly(self) -> str:
        """`` (k cases not implemented by the candidate)`` when it said so on some."""
        k = len(self.not_implemented)
        return f" ({k} case{'s' if k != 1 else ''} not implemented by the candidate)" if k \
            else ""

    def precision_hint(self) -> str:
        """``"matches at float32 tolerance: pass dtype='float32' (...)"`` when the candidate
        really computes in a looser dtype and that explains every failure: every failing
        comparison passes at that dtype's tolerance *and* the candidate returned that output
        in that dtype or a coarser one (float32 arrays, bfloat16 tensors). Else ``""``: a
        float64 candidate whose numbers differ has a convention wrong, and a looser
        tolerance would hide it. The hint says how large a difference that tolerance lets
        through."""
        fails = self.failures
        looser = {r.passes_at for r in fails}
        if not fails or self.unchecked or "" in looser:
            return ""
        dtype = max(looser, key=DTYPES.index)  # the loosest any of them needs
        if any(PRECISION_RANK.get(r.returned_dtype, 0) < PRECISION_RANK[dtype] for r in fails):
            return ""
        tol = TOLERANCES[dtype]
        returned = ", ".join(sorted({r.returned_dtype for r in fails}))
        return (f"matches at {dtype} tolerance: pass dtype={dtype!r} (the candidate returned "
                f"{returned} outputs; that tolerance lets through any difference up to "
                f"{tol.atol:g} + {tol.rtol:g} |value|: a convention that changes an output "
                f"by less is not seen)")

    @property
    def failures(self) -> list:
        return [r for r in self.rows if not r.passed]

    @property
    def cases(self) -> list:
        return list(dict.fromkeys(r.case for r in self.rows))

    def max_errors(self) -> dict:
        """``{output: (max abs err, max rel err)}`` over every case."""
        out = {}
        for r in self.rows:
            a, b = out.get(r.output, (0.0, 0.0))
            # (fmax: the larger, NaN only where both are NaN)
            out[r.output] = (float(np.fmax(a, r.max_abs_err)), float(np.fmax(b, r.max_rel_err)))
        return out

    def worst(self, output: str) -> OutputComparison:
        """The row of ``output`` closest to (or furthest beyond) its tolerance."""
        rows = [r for r in self.rows if r.output == output]
        if not rows:
            raise KeyError(f"output: {output!r} was not compared")
        return max(rows, key=error_ratio)

    def extend(self, other: ComparisonReport) -> None:
        self.rows += other.rows
        self.rejected.update(other.rejected)
        self.not_implemented.update(other.not_implemented)
        for k, v in other.unchecked.items():
            self.unchecked.setdefault(k, []).extend(v)
        for k, v in other.not_produced.items():
            self.not_produced.setdefault(k, []).extend(v)

    def __str__(self) -> str:
        t = self.tolerance
        n_fail = len(self.failures)
        hint = self.precision_hint() if n_fail else ""
        # the verdict first, then the table: per output its worst error over its own
        # allowance (<= 1 passes), where that is, and the worst element's own values
        lines = [self.verdict] + ([hint] if hint else []) + [
                 f"oracle comparison, {self.title}: dtype {self.dtype} (rtol {t.rtol:g}, "
                 f"atol {t.atol:g}), {len(self.cases)} cases compared, "
                 f"{len(self.rejected)} rejected by the reference",
                 f"{'output':<24} {'err/allowed':>11}  {'expected':>11} {'got':>11}  "
                 f"{'worst case':<20} {'worst index':<12} {'kinks':>5}  result"]
        for output in dict.fromkeys(r.output for r in self.rows):
            w = self.worst(output)
            n_kinks = sum(r.n_kinks for r in self.rows if r.output == output)
            ok = all(r.passed for r in self.rows if r.output == output)
            lines.append(f"{output:<24} {error_ratio(w):>11.3g}  {w.expected:>11.4g} "
                         f"{w.actual:>11.4g}  {w.case:<20} {str(w.worst_index):<12} "
                         f"{n_kinks:>5}  {'ok' if ok else 'FAIL'}")
        rejected = {}
        for name, reason in self.rejected.items():
            rejected.setdefault(reason, []).append(name)
        for reason, names in rejected.items():
            # (one line per reason: a correction switched on rejects every case without the
            # sampler's log-probs, for one reason)
            hint = ("; --cases rollout (cases=...) selects the cases with logp_rollout"
                    if "needs logp_rollout" in reason and len(names) > 1 else "")
            lines.append(f"rejected by the reference, not compared: {', '.join(names)}: "
                         f"{reason}{hint}")
        for output, names in self.not_produced.items():
            lines.append(f"returned by the candidate, not produced by the reference on "
                         f"{len(names)} case(s), not compared: {output}")
        if self.omitted:
            lines.append(f"left out by request (omit=), not compared: "
                         f"{', '.join(self.omitted)}")
        by_reason = {}
        for name, reason in self.not_implemented.items():
            by_reason.setdefault(reason or "(no reason given)", []).append(name)
        for reason, names in by_reason.items():
            lines.append(f"not implemented by the candidate: {reason} (not compared: "
                         f"{', '.join(names)})")
        for output, names in self.unchecked.items():
            lines.append(f"FAIL: not returned by the candidate: {output} ({len(names)} cases)")
        if self.unchecked:
            lines.append("FAILED: the candidate did not return every output the reference "
                         "produces; pass outputs=[...] (--outputs) to compare only those it "
                         "returns")
        if n_fail:
            lines.append(f"FAILED: {n_fail} of {len(self.rows)} output comparisons")
            lines += [r.describe() for r in sorted(self.failures, key=error_ratio, reverse=True)]
            if hint:
                lines.append(hint)
        elif not self.rows:
            lines.append(self.verdict)
        elif not self.unchecked:
            lines.append(f"passed: {len(self.rows)} output comparisons")
        if self.coverage is not None:
            lines += self.coverage.lines()
        return "\n".join(lines)


def error_ratio(row: OutputComparison) -> float:
    """Largest error of a row's elements over the error allowed at that element (<= 1:
    passed): 0 for no error; inf for an inf error, a NaN one in a failed row, or any where
    none is allowed. (The largest error over the output may sit at another element, with
    another allowance: ``max_abs_err / allowed`` is not this ratio.)"""
    if not np.isnan(row.worst_ratio):
        return float(row.worst_ratio)
    err = float(row.max_abs_err)
    if np.isnan(err):
        return np.inf if not row.passed else 0.0
    if err == 0.0:
        return 0.0
    if not np.isfinite(err) or row.allowed <= 0:
        return np.inf
    return err / float(row.allowed)


def returned_dtype(x) -> str:
    """The floating dtype a candidate returned an output in: ``"float32"`` for a float32
    array or tensor, ``"bfloat16"`` for a bfloat16 tensor, ``"float16"``; ``"float64"`` for
    float64, Python numbers and integers (which carry no rounding of their own).

    >>> returned_dtype(np.zeros(2, np.float32)), returned_dtype(0.5)
    ('float32', 'float64')
    """
    dt = getattr(x, "dtype", None)
    name = str(dt).removeprefix("torch.") if dt is not None else "float64"
    return name if name in PRECISION_RANK else "float64"


def _as_output(x) -> np.ndarray:
    if hasattr(x, "detach"):
        # a torch tensor: float64 holds every torch float (bfloat16 too, which NumPy lacks)
        x = x.detach().cpu().double().numpy()
    return np.array(x, dtype=np.float64)


def _numeric_kind(x) -> str:
    """``""`` for an output value that is numeric (a real number, an array of them, a torch
    tensor of them), else the name of what it is."""
    if hasattr(x, "detach") and hasattr(x, "dtype"):
        # a torch tensor: its dtype's name, e.g. torch.bool, torch.complex64
        dt = str(x.dtype).removeprefix("torch.")
        return "" if x.dtype.is_floating_point or dt.startswith(("int", "uint")) else \
            f"torch tensor of {dt}"
    if x is None or isinstance(x, (str, bytes, bool, np.bool_)):
        return type(x).__name__
    if isinstance(x, (int, float, np.integer, np.floating)):
        return ""
    try:
        arr = np.asarray(x)
    except Exception:  # an object NumPy cannot read at all
        return type(x).__name__
    if arr.dtype.kind in "iuf":
        return ""
    return f"{type(x).__name__} of {arr.dtype}"


def check_candidate_outputs(actual, candidate: str = "candidate", case: str = "case") -> Mapping:
    """``actual`` after checking that it is a mapping of output names to numbers or arrays.

    TypeError naming ``candidate``, ``case`` and the type otherwise: a list, a tuple, None
    or a number instead of a dict; a name that is not a string; a value that is a string,
    a bool, None or an array of objects or bools. Nothing is converted: ``"0.1"`` is not
    the number 0.1.

    >>> check_candidate_outputs([1.0], "mine", "toy")
    Traceback (most recent call last):
    ...
    TypeError: mine returned a list on case 'toy'; expected a dict of output name -> array or float
    >>> check_candidate_outputs({"policy_loss": "0.1"}, "mine", "toy")
    Traceback (most recent call last):
    ...
    TypeError: mine: output 'policy_loss' on case 'toy' is a str, not a number or array of numbers
    """
    if not isinstance(actual, Mapping):
        kind = type(actual).__name__
        article = "an" if kind[0] in "aeiou" else "a"
        raise TypeError(f"{candidate} returned {article} {kind} on case {case!r}; expected a "
                        "dict of output name -> array or float")
    for name, value in actual.items():
        if not isinstance(name, str):
            raise TypeError(f"{candidate}: output name {name!r} on case {case!r} is a "
                            f"{type(name).__name__}, not a string")
        kind = _numeric_kind(value)
        if kind:
            raise TypeError(f"{candidate}: output {name!r} on case {case!r} is a {kind}, not "
                            "a number or array of numbers")
    return actual


def closest_names(name: str, known) -> str:
    """``"; closest known: 'a', 'b'"`` (difflib) or ``"; known: ..."`` for no close one."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    if close:
        return "; closest known: " + ", ".join(map(repr, close))
    return "; known: " + ", ".join(map(repr, sorted(known)))


def looser_dtypes(dtype: str) -> list:
    """The next looser dtype of ``DTYPES`` (float64 -> float32 -> bfloat16), as a list
    (empty for bfloat16): the one the precision hint tries. (Not two steps: a candidate
    within bfloat16's 5% of a float64 reference has more than a rounding wrong.)"""
    return list(DTYPES[DTYPES.index(check_dtype(dtype)) + 1:][:1])


def _inputs_at(inputs: dict, index: tuple, mask_shape: tuple) -> dict:
    if not inputs or not index:
        return {}
    out = {}
    for name in inputs:
        x = np.asarray(inputs[name])
        if x.shape == mask_shape and len(index) == len(mask_shape):
            out[name] = float(x[index])
        elif x.ndim == 1 and len(index) >= 1 and index[0] < x.shape[0]:
            out[f"{name}[{index[0]}]"] = float(x[index[0]])
    return out


def compared(shape, mask) -> np.ndarray:
    """Where an output of ``shape`` is compared: where ``mask`` is 1 for a per-token output
    (shaped like ``mask``), everywhere for the others (and for ``mask=None``)."""
    if mask is not None and shape == np.shape(mask):
        return np.asarray(mask) == 1
    return np.ones(shape, dtype=bool)


def compare_output(name: str, actual, expected, *, alternatives=(), mask=None, inputs=None,
                   params=None, case_name: str = "", tolerance: Tolerance,
                   looser=()) -> OutputComparison:
    """Compare one output (array or scalar) with the expected one and its probe alternatives.

    ``looser``: ``(dtype, Tolerance)`` pairs, loosest last; a failing row records in
    ``passes_at`` the first under whose tolerance it would pass."""
    row = OutputComparison(case=case_name, output=name, passed=False, params=dict(params or {}),
                           returned_dtype=returned_dtype(actual))
    e = _as_output(expected)
    try:
        a = _as_output(actual)
    except (TypeError, ValueError) as err:
        row.note = f"candidate output cannot be read as float64: {err}"
        return row
    if a.shape != e.shape:
        row.note = f"shape {a.shape} does not match the expected shape {e.shape}"
        return row
    alts = [x for x in map(_as_output, alternatives) if x.shape == e.shape]
    valid = compared(e.shape, mask)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same = (e == a) | (np.isnan(e) & np.isnan(a))
        err = np.where(same, 0.0, np.abs(a - e))
        err = np.where(np.isnan(err), np.inf, err)
        allowed = tolerance.atol + tolerance.rtol * np.where(np.isfinite(e), np.abs(e), 0.0)
        kink = np.zeros(e.shape, dtype=bool)
        if alts:
            # a kink: the reference itself jumps by more than the tolerance between probes;
            # there the candidate may take any value in the range of the one-sided values
            refs = np.stack([e] + alts)  # (1 + n_probes, *shape)
            lo, hi = refs.min(axis=0), refs.max(axis=0)
            kink = (hi - lo) > allowed
            # why: lo - a is NaN when both are -inf; a value inside [lo, hi] has distance 0
            inside = same | ((a >= lo) & (a <= hi))
            hull = np.where(inside, 0.0, np.maximum(lo - a, a - hi))
            err = np.where(kink, np.where(np.isnan(hull), np.inf, hull), err)
        ratio = err / allowed
        rel = np.where(err == 0, 0.0, err / np.abs(e))
    row.n_compared = int(valid.sum())
    if row.n_compared == 0:
        row.passed, row.max_abs_err, row.max_rel_err, row.allowed = True, 0.0, 0.0, 0.0
        row.worst_ratio = 0.0
        return row
    flat = int(np.argmax(np.where(valid, ratio, -1.0)))
    idx = np.unravel_index(flat, e.shape) if e.ndim else ()
    row.worst_index = tuple(int(i) for i in idx)
    row.max_abs_err = float(np.max(err[valid]))
    row.max_rel_err = float(np.max(rel[valid]))
    row.expected = float(e[idx]) if e.ndim else float(e)
    row.actual = float(a[idx]) if a.ndim else float(a)
    row.allowed = float(allowed[idx]) if e.ndim else float(allowed)
    # the worst element's own errors (not the largest over the output, which the table gives)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        own = 0.0 if row.expected == row.actual else abs(row.actual - row.expected)
        row.worst_abs_err = float(own)
        row.worst_rel_err = 0.0 if own == 0 else float(own / abs(row.expected)) \
            if row.expected != 0 else float("inf")
    with np.errstate(invalid="ignore"):
        worst = float(ratio[idx]) if e.ndim else float(ratio)
    row.worst_ratio = np.inf if np.isnan(worst) else worst
    row.passed = bool(np.all(ratio[valid] <= 1.0))
    if not row.passed:
        for dtype, tol in looser:
            if compare_output(name, a, e, alternatives=alts, mask=mask,
                              tolerance=tol).passed:
                row.passes_at = dtype
                break
    row.n_kinks = int(np.sum(valid & kink))
    if mask is not None:
        row.inputs = _inputs_at(inputs or {}, row.worst_index, np.shape(mask))
    if row.n_kinks:
        row.note = (f"{row.n_kinks} element(s) at a kink: the reference jumps under probes; "
                    "compared with the range of its values there")
    return row


def _output_names(outputs) -> list:
    if isinstance(outputs, str):
        raise TypeError("outputs: expected a list of output names, got a single string")
    return list(outputs)


def compare_outputs(actual: dict, expected: dict, *, dtype="float64", case=None, outputs=None,
                    tolerance: Tolerance | None = None, alternatives=(), known=None,
                    looser=None, candidate: str = "candidate") -> ComparisonReport:
    """Compare two output dicts of one case; the report of :func:`assert_matches`.

    Strict on names: a name of ``actual`` that is not in ``known`` (default: the names of
    ``expected``) is a failing row naming the closest known names; one in ``known`` but
    not in ``expected`` (an output the reference produces on other cases only) is listed
    in ``not_produced``. An expected output that ``actual`` lacks is listed in
    ``unchecked`` (the report then does not pass) unless ``outputs`` restricts the
    comparison, in which case each name of ``outputs`` must be returned and match.
    ``actual`` must be a mapping of numbers (:func:`check_candidate_outputs`).
    ``looser``: ``(dtype, Tolerance)`` pairs for the precision hint (default: those of
    :data:`TOLERANCES` looser than ``dtype``, when ``tolerance`` is not given).
    """
    dtype = check_dtype(dtype)
    tol = tolerance or TOLERANCES[dtype]
    if looser is None:
        looser = [] if tolerance else [(d, TOLERANCES[d]) for d in looser_dtypes(dtype)]
    report = ComparisonReport(dtype, tol)
    case = case or {}
    name = case.get("name", "case")
    check_candidate_outputs(actual, candidate, name)
    inputs = case.get("inputs", {})
    mask = inputs.get("mask")
    known = set(expected) if known is None else set(known) | set(expected)
    names = list(expected) if outputs is None else _output_names(outputs)
    for out in actual:
        if out not in known:
            report.rows.append(OutputComparison(
                name, out, False, note=f"{out!r} is not an output of the reference"
                + closest_names(out, known)))
        elif out not in expected and out not in names:
            report.not_produced.setdefault(out, []).append(name)
    for out in names:
        if out not in actual and outputs is None:  # (out is an expected output)
            report.unchecked.setdefault(out, []).append(name)
            continue
        if out in known and out not in expected:
            # a named output the reference produces on other cases only: listed, not failed
            if out in actual:
                report.not_produced.setdefault(out, []).append(name)
            continue
        missing = ((f"{out!r} is not an output of the reference" + closest_names(out, known))
                   if out not in known else
                   "not returned by the candidate" if out not in actual else "")
        if missing:
            report.rows.append(OutputComparison(name, out, False, note=missing))
            continue
        alts = [alt[out] for alt in alternatives if out in alt]
        report.rows.append(compare_output(out, actual[out], expected[out], alternatives=alts,
                                          mask=mask, inputs=inputs, params=case.get("params"),
                                          case_name=name, tolerance=tol, looser=looser))
    return report


def assert_matches(actual: dict, expected: dict, dtype="float64", case=None, *, outputs=None,
                   tolerance: Tolerance | None = None) -> ComparisonReport:
    """Raise AssertionError with the full report unless every output matches; else return it.

    Parameters
    ----------
    actual, expected : dict
        Output name -> array or float (numpy arrays, floats, or CPU torch tensors).
    dtype : {"float64", "float32", "bfloat16"}
        Chooses the tolerance of :data:`TOLERANCES`.
    case : dict, optional
        The case both came from: its mask restricts per-token comparisons to
        response tokens, and its inputs are printed for the worst element.
    outputs : list of str, optional
        Outputs that must be present and match. ``None``: every expected
        output, which the candidate must return (one it lacks is listed and
        the report does not pass).
    tolerance : Tolerance, optional
        Overrides the dtype's tolerance.

    A name of ``actual`` that ``expected`` lacks fails, naming the closest expected
    names; ``actual`` must be a dict of numbers or arrays (TypeError otherwise, see
    :func:`check_candidate_outputs`).

    Examples
    --------
    >>> m = np.array([[1.0, 1.0, 0.0]])
    >>> case = {"name": "toy", "inputs": {"mask": m}}
    >>> expected = {"advantages": np.array([[0.5, 0.25, 0.0]]), "policy_loss": -0.375}
    >>> actual = {"advantages": np.array([[0.5, 0.25, np.nan]]), "policy_loss": -0.375}
    >>> assert_matches(actual, expected, case=case).passed
    True
    >>> assert_matches({"advantages": np.array([[0.5, 0.3, 0.0]]), "policy_loss": -0.375},
    ...                expected, case=case)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: FAILED: 1 of 2 output comparisons (advantages)...
    """
    report = compare_outputs(actual, expected, dtype=dtype, case=case, outputs=outputs,
                             tolerance=tolerance)
    if not report.passed:
        raise AssertionError(str(report))
    return report


def compare(candidate, reference, cases=None, dtype="float64", *, outputs=None,
            tolerance: Tolerance | None = None, probes: int = 8,
            params: dict | None = None, omit=None) -> ComparisonReport:
    """Run ``candidate`` and ``reference`` on every case and compare their outputs.

    Parameters
    ----------
    candidate : callable ``case -> dict``
        The implementation under test. It receives the case with inputs
        rounded to ``dtype`` (NumPy arrays: float64, float32, or float32 holding
        bfloat16 values) and ``case["params"]``, and returns a dict of outputs named
        as the presets name them (``"advantages"``, ``"dlogp"``, ``"stat/..."``):
        numbers, arrays or torch tensors (bfloat16 too). Anything else (None, a list,
        a string value) is a TypeError naming the candidate, the case and the type.
    reference : callable ``case -> dict``, or a preset name
        Usually a preset of :mod:`ppo_numpy.oracle.presets`. It receives the
        same rounded inputs in float64.
    cases : list of case dicts, optional
        Default: the reference's cases with seed 0
        (:func:`~ppo_numpy.oracle.group_cases.cases_for`: the group cases for a critic-free
        preset, else :func:`ppo_numpy.oracle.cases.generate_cases`).
    dtype : {"float64", "float32", "bfloat16"}
        The precision the candidate computes in; chooses the input rounding
        and the tolerance.
    outputs : list of str, optional
        Outputs that must be returned and match, on every case where the reference
        produces them (one it produces on other cases only is listed there, not failed).
        ``None``: every output the reference produces, which the candidate must return:
        one it does not is listed and the report does not pass. A name the candidate
        returns that the reference never produces fails, naming the closest known names.
    tolerance : Tolerance, optional
        Default: the preset's own tolerance for ``dtype`` where it has one
        (:func:`tolerance_for`: e.g. verl's float64 rtol 1e-9 + 2^-24, from the
        float32 Bessel factor in its ``masked_var``), else :data:`TOLERANCES`.
    probes : int >= 0
        Number of perturbed reference runs per case used to recognise kinks
        (module docstring). 0 turns the check off.
    params : dict, optional
        Parameter overrides added to every case's ``params`` (the candidate sees them
        there too): e.g. ``{"beta": 0.04}``.
    omit : list of str, optional
        Outputs of the reference left out: not compared and not required, whether the
        candidate returns them or not; the report says which (a name the reference never
        produces is a ValueError naming the closest known names).

    A case on which the candidate raises NotImplementedError is listed as "not implemented
    by the candidate: <its message>" (by convention "option=value",
    :func:`ppo_numpy.oracle.coverage.implements`) and not compared: neither a failure nor a
    pass; a report that compared no case does not pass. The report ends with the coverage
    (:func:`ppo_numpy.oracle.coverage.coverage_of`): the option values compared, on how many
    cases, and those not implemented.

    Returns
    -------
    ComparisonReport; ``report.passed`` and ``print(report)``. A failing report says
    when the candidate matches at a looser dtype's tolerance
    (:meth:`ComparisonReport.precision_hint`).
    """
    from .group_cases import cases_for
    from .presets import as_preset

    dtype = check_dtype(dtype)
    reference = as_preset(reference)
    if isinstance(probes, bool) or not isinstance(probes, int) or probes < 0:
        raise ValueError(f"probes: must be a non-negative integer, got {probes!r}")
    if outputs is not None:
        outputs = _output_names(outputs)
    if cases is None:
        cases = cases_for(reference, 0)
    cases = with_params(cases, params)
    tol = tolerance or tolerance_for(reference, dtype)
    looser = [] if tolerance else [(d, tolerance_for(reference, d))
                                   for d in looser_dtypes(dtype)]
    label = _label(candidate)
    report = ComparisonReport(dtype, tol, title=f"{label} vs {_label(reference)}")
    # the reference first, on every case: the names it produces on any of them are known
    runs = []
    for case in cases:
        cast = cast_case(case, dtype)
        ref_case = cast_case(cast, "float64")
        try:
            runs.append((case, cast, ref_case, reference(ref_case)))
        except ValueError as err:
            report.rejected[case["name"]] = f"{type(err).__name__}: {err}"
    known = set().union(*(expected for *_, expected in runs))
    omitted = tuple(_output_names(omit or ()))
    for out in omitted:
        if out not in known:
            raise ValueError(f"omit: {out!r} is not an output of the reference"
                             + closest_names(out, known))
    report.omitted = omitted
    for case, cast, ref_case, expected in runs:
        try:
            actual = candidate(cast)
        except NotImplementedError as err:  # the candidate says it does not implement it
            report.not_implemented[case["name"]] = str(err)
            continue
        except Exception as err:  # reported as a failure with the case, not raised
            report.rows.append(OutputComparison(
                case["name"], "(candidate)", False, params=dict(case.get("params", {})),
                note=f"candidate raised {type(err).__name__}: {err}"))
            continue
        check_candidate_outputs(actual, label, case["name"])
        if omitted:
            expected = {k: v for k, v in expected.items() if k not in omitted}
            actual = {k: v for k, v in actual.items() if k not in omitted}
        alternatives = []
        for probe in probe_cases(ref_case, dtype, probes) if probes else ():
            try:
                alternatives.append(reference(probe))
            except ValueError:
                continue
        report.extend(compare_outputs(actual, expected, dtype=dtype, case=ref_case,
                                      outputs=outputs, tolerance=tol, alternatives=alternatives,
                                      known=known, looser=looser, candidate=label))
    # an output that is an exception to the comparison's rules says so where it fails
    notes = getattr(reference, "output_notes", None) or {}
    for row in report.failures:
        if row.output in notes and notes[row.output] not in row.note:
            row.note = f"{row.note}; {notes[row.output]}" if row.note else notes[row.output]
    compared_cases = {r.case for r in report.rows if r.output != "(candidate)"}
    report.coverage = coverage_of(reference, cases, compared_cases, report.not_implemented,
                                  report.rejected)
    return report


def with_params(cases, params) -> list:
    """``cases`` with ``params`` added to each case's ``params`` (new dicts; ``cases`` as they
    are for ``None``)."""
    if not params:
        return list(cases)
    if not isinstance(params, Mapping):
        raise TypeError(f"params: expected a dict of parameter overrides, got "
                        f"{type(params).__name__}")
    return [{**c, "params": {**dict(c.get("params") or {}), **params}} for c in cases]


def _label(fn) -> str:
    name = getattr(fn, "name", None)
    if isinstance(name, str):
        return f"preset {name!r}"
    return getattr(fn, "__name__", type(fn).__name__)
