"""Diagnose a failing comparison: which known convention explains the candidate's numbers.

:func:`diagnose` compares a candidate with a preset (as :func:`~ppo_numpy.oracle.compare.compare`
does), then, for every output that fails, re-runs the preset with each alternative value
of each convention switch registered for it (:mod:`ppo_numpy.oracle.switches`) and keeps
the switches under which that output matches the candidate's on every case. Single
switches first; for an output no single switch explains, every pair of settings of two
switches (the most plausible first, at most ``MAX_PAIRS``); the report says how many
settings it tried.
The report says, per output, e.g.::

    advantages, policy_loss, dlogp match the verl preset with whiten_ddof=0 on every case
    (max rel err 2e-14): the whitening's variance: yours is the population variance
    (divides by n, ddof 0); verl's has Bessel's correction (divides by n - 1, ddof 1)
    (verl/utils/torch_functional.py masked_var, unbiased=True)

or "no known convention explains this" with the first element that differs.

Matching means the comparison's pass rule with the preset's tolerance, on every case
that the preset with the switch accepts (and at least on every case where the output
failed). The alternatives are compared without probes (``probes`` of the baseline
comparison only): a float32 candidate whose clip fraction sits on a kink may be
explained for its other outputs only.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .compare import (
    ComparisonReport,
    _as_output,
    cast_case,
    compare,
    compare_output,
    compared,
    tolerance_for,
    with_params,
)
from .switches import SWITCHES, explain_switch, switches_for

__all__ = ["Diagnosis", "Explanation", "diagnose"]

MAX_PAIRS = 2000
"""At most this many pairs of switch settings are tried (the most plausible first: those
whose single settings make the failing outputs match on the most cases). Every registered
preset has fewer (``tests/test_diagnose.py``: verl-grpo, the largest, 1653), so every pair
is tried."""


@dataclass(frozen=True)
class Explanation:
    """A setting of one or two switches under which an output matches on every case."""

    settings: tuple  # ((param, value), ...)
    max_abs_err: float
    max_rel_err: float
    sentences: tuple

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.settings)


@dataclass
class OutputDiagnosis:
    """One output: the cases it fails on, what explains it, or the first difference."""

    output: str
    n_cases: int
    failed_cases: list = field(default_factory=list)
    kink_only: bool = False
    explanations: list = field(default_factory=list)
    first_difference: str = ""

    @property
    def passed(self) -> bool:
        return not self.failed_cases


@dataclass
class Diagnosis:
    """The comparison report and, per failing output, the switches that explain it."""

    preset: str
    report: ComparisonReport
    outputs: dict = field(default_factory=dict)
    tried: int = 0
    pairs_left: int = 0

    @property
    def passed(self) -> bool:
        """The comparison passed and compared something: a diagnosis that compared no output
        (every case rejected, or none of the outputs returned) cannot say they match."""
        return bool(self.outputs) and self.report.passed

    def explained_by(self, output: str) -> list:
        """Labels (``"whiten_ddof=0"``, ``"dual_clip=None, epsilon_high=0.28"``) explaining
        ``output``, best first; empty when it passes or nothing explains it."""
        return [e.label for e in self.outputs[output].explanations]

    def summary(self) -> str:
        """The diagnosis lines alone (``str()`` prepends the comparison report)."""
        failing = [d for d in self.outputs.values() if not d.passed]
        missing = self._missing()
        if not self.outputs:
            r = self.report
            if r.rows:  # only the "(candidate)" rows of its exceptions
                why = "the candidate raised on every case the preset accepts"
            elif r.not_implemented:
                why = (f"the candidate implements none of the {len(r.not_implemented)} cases "
                       f"the preset accepts")
            else:
                why = f"preset {self.preset!r} rejected {len(r.rejected)} of the cases"
                if r.unchecked:
                    why += f"; outputs not returned: {', '.join(r.unchecked)}"
            return f"diagnosis: nothing compared ({why})"
        if not failing and not missing:
            return f"diagnosis: every output matches preset {self.preset!r}"
        if not failing:
            return f"diagnosis: every output returned matches preset {self.preset!r}; {missing}"
        left = f"; {self.pairs_left} pairs not tried" if self.pairs_left else ""
        lines = [f"diagnosis against preset {self.preset!r} ({self.tried} settings of its "
                 f"switches tried: single switches and pairs{left}):"]
        groups = {}
        for d in failing:
            key = tuple(e.settings for e in d.explanations[:1])
            groups.setdefault(key, []).append(d)
        for ds in groups.values():
            if not ds[0].explanations:
                for d in ds:
                    how = "differs at kinks" if d.kink_only else "fails"
                    lines.append(f"{d.output}: {how} on {len(d.failed_cases)} of {d.n_cases} "
                                 f"cases; no known convention explains this; first "
                                 f"difference: {d.first_difference}")
                continue
            e = ds[0].explanations[0]  # (the best: the same for every output of the group)
            names = ", ".join(d.output for d in ds)
            verb = "matches" if len(ds) == 1 else "match"
            lines.append(f"{names} {verb} the {self.preset} preset with {e.label} on every "
                         f"case (max rel err {e.max_rel_err:.1g}):")
            if any(d.kink_only for d in ds):
                lines.append("    (the comparison passes it within the range its kinks allow; "
                             "without probes it differs from the preset, and matches this)")
            lines += [f"    {s}" for s in e.sentences]
            others = {x.label for d in ds for x in d.explanations[1:]}
            if others:
                lines.append(f"    (also explained by: {'; '.join(sorted(others))})")
        passing = [d.output for d in self.outputs.values() if d.passed]
        if passing:
            lines.append(f"match the preset as it is: {', '.join(passing)}")
        hint = self.report.precision_hint()
        # (a looser dtype only where no convention explains any failing output: a named
        # convention is a real difference, which that tolerance would hide)
        if hint and not any(d.explanations for d in failing):
            lines.append(hint)
        if missing:
            lines.append(missing)
        return "\n".join(lines)

    def _missing(self) -> str:
        """The outputs the candidate did not return, in one sentence ("" for none)."""
        if not self.report.unchecked:
            return ""
        return (f"not returned by the candidate (the comparison does not pass; pass "
                f"outputs=[...] to compare only those it returns): "
                f"{', '.join(self.report.unchecked)}")

    def __str__(self) -> str:
        # the verdict and the named conventions first, the comparison's table after them
        return f"{self.summary()}\n\n{self.report}"


def _matches(name, actual, expected, case, tol):
    return compare_output(name, actual, expected, mask=case["inputs"]["mask"],
                          inputs=case["inputs"], case_name=case["name"], tolerance=tol)


def _agreement(actual, expected, case, tol):
    """``(passes, max abs err)`` of one output against the expected one: the pass rule of
    :func:`~ppo_numpy.oracle.compare.compare_output` without probes (an element passes when
    it equals the expected one, NaN for NaN included, or lies within atol + rtol |e|, |e|
    read as 0 where e is not finite), on the elements the comparison reads.

    why: the diagnosis asks this question of every output under every setting on every
    case; the comparison's row (worst element, inputs at it, the looser dtypes) is built
    only for the reports."""
    a, e = _as_output(actual), _as_output(expected)
    if a.shape != e.shape:
        return False, float("nan")
    valid = compared(e.shape, case["inputs"]["mask"])
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        err = np.where(same, 0.0, np.abs(a - e))
        err = np.where(np.isnan(err), np.inf, err)[valid]
        allowed = (tol.atol + tol.rtol * np.where(np.isfinite(e), np.abs(e), 0.0))[valid]
    if err.size == 0:
        return True, 0.0
    return bool(np.all(err <= allowed)), float(np.max(err))


def _rel_err(actual, expected, case, tol) -> float:
    """Largest |a - e| / |e| over the compared elements with |e| > atol, for an output that
    matches (so of the expected shape).

    why: the relative error of an element that is 0 up to rounding (a loss of -5e-17
    against -3e-17) says nothing about the arithmetic."""
    a, e = _as_output(actual), _as_output(expected)
    valid = compared(e.shape, case["inputs"]["mask"]) & np.isfinite(e) & (np.abs(e) > tol.atol)
    if not np.any(valid):
        return 0.0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        rel = np.where(a == e, 0.0, np.abs(a - e) / np.abs(e))
    return float(np.nanmax(np.where(valid, rel, 0.0)))


def _first_difference(name, actual, expected, case, tol) -> str:
    """The first element (row-major) outside the tolerance, in words."""
    a, e = _as_output(actual), _as_output(expected)
    if a.shape != e.shape:
        return f"{case['name']}: shape {a.shape}, expected {e.shape}"
    valid = compared(e.shape, case["inputs"]["mask"])
    with np.errstate(invalid="ignore", over="ignore"):
        bad = valid & ~((a == e) | (np.abs(a - e) <= tol.atol + tol.rtol * np.abs(e)))
    if not np.any(bad):
        # the comparison failed on a kink's range only: name its worst element
        row = _matches(name, actual, expected, case, tol)
        return (f"{case['name']} at {row.worst_index}: expected {row.expected!r}, "
                f"got {row.actual!r}")
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if e.ndim else ()
    where = f" at {idx}" if idx else ""
    return f"{case['name']}{where}: expected {float(e[idx])!r}, got {float(a[idx])!r}"


def diagnose(candidate, preset, cases=None, dtype="float64", *, outputs=None, tolerance=None,
             probes: int = 8, pairs: bool = True, params: dict | None = None,
             omit=None) -> Diagnosis:
    """Compare ``candidate`` with ``preset`` and name the conventions that explain each
    failing output.

    Parameters
    ----------
    candidate : callable ``case -> dict``
        As for :func:`~ppo_numpy.oracle.compare.compare`; it is run once per case (on the
        cases the preset accepts, as in the comparison).
    preset : Preset or str
        The preset to compare with; its switches are those registered in
        :mod:`ppo_numpy.oracle.switches`.
    cases, dtype, outputs, tolerance, probes, omit
        As for :func:`~ppo_numpy.oracle.compare.compare` (``cases`` default: the
        preset's, :func:`~ppo_numpy.oracle.group_cases.cases_for`; ``tolerance`` default:
        the preset's own for ``dtype``; ``probes`` for the first comparison only).
    pairs : bool
        Also try pairs of switch settings (among every registered switch, not only those
        that fix a case alone: Dr. GRPO's normalisation with its constant changes nothing
        alone) for outputs no single switch explains. Default True.
    params : dict, optional
        Parameter overrides added to every case (:func:`~ppo_numpy.oracle.compare.compare`).

    Returns
    -------
    Diagnosis: ``print(diagnosis)`` shows the comparison report and the diagnosis;
    ``diagnosis.explained_by("advantages")`` lists the settings that explain an output.
    """
    from .group_cases import cases_for
    from .presets import as_preset

    preset = as_preset(preset)
    if not hasattr(preset, "parameters"):
        raise TypeError(f"preset: expected a Preset or a preset name, got "
                        f"{type(preset).__name__}")
    if cases is None:
        cases = cases_for(preset, 0)
    cases = with_params(cases, params)
    names = [c.get("name") for c in cases]
    if len(set(names)) != len(names):
        raise ValueError("cases: the diagnosis needs one name per case; two cases share "
                         f"{next(n for n in names if names.count(n) > 1)!r}")
    tol = tolerance or tolerance_for(preset, dtype)  # (it and compare check dtype)

    # the candidate runs once per case, in the comparison (which reports an exception as a
    # failure of the case) and on the cases the preset accepts: those it returns outputs
    # for are kept, in float64, with its outputs
    usable = []

    def recording(case):
        actual = candidate(case)
        if isinstance(actual, dict):
            usable.append((cast_case(case, "float64"), actual))
        return actual

    recording.__name__ = getattr(candidate, "__name__", type(candidate).__name__)
    report = compare(recording, preset, cases, dtype, outputs=outputs, tolerance=tolerance,
                     probes=probes, omit=omit)

    diagnosis = Diagnosis(preset.name, report)
    by_output = diagnosis.outputs
    for row in report.rows:
        if row.output == "(candidate)":
            continue
        d = by_output.setdefault(row.output, OutputDiagnosis(row.output, 0))
        d.n_cases += 1
        if not row.passed:
            d.failed_cases.append(row.case)

    # the preset as it is, per usable case (the expected outputs of a setting that does not
    # apply to a case)
    as_is = {}
    for ref, _ in usable:
        try:
            as_is[ref["name"]] = preset(ref)
        except ValueError:
            as_is[ref["name"]] = {}

    def run(ref, overrides):
        """The preset's outputs on ``ref`` under the ``overrides`` that apply to it (a switch
        whose ``needs`` input the case lacks is left out: the frameworks skip the sampler's
        correction on a batch without its log-probs); {} where the preset rejects it."""
        applied = {k: v for k, v in overrides.items()
                   if SWITCHES[k].needs is None or ref["inputs"].get(SWITCHES[k].needs)
                   is not None} if overrides else {}
        if not applied:
            return as_is[ref["name"]]
        try:
            return preset(ref, **applied)
        except ValueError:
            return {}

    baseline = {d.output: [(ref, actual[d.output], as_is[ref["name"]].get(d.output))
                           for ref, actual in usable if d.output in actual]
                for d in by_output.values()}
    # an output that passes only within its kinks' ranges (probes) but differs from the
    # preset without them: a convention decided at a tie (e.g. the value clip's form)
    for d in by_output.values():
        if not d.passed:
            continue
        for ref, a, e in baseline[d.output]:
            if e is not None and not _matches(d.output, a, e, ref, tol).passed:
                d.failed_cases.append(ref["name"])
                d.kink_only = True
    failing = [d for d in by_output.values() if not d.passed]
    if not failing:
        return diagnosis

    def attempt(overrides, ds, *, stop_early):
        """Run the preset with ``overrides``; it explains each output of ``ds`` that it makes
        match on every case it is compared on, among them every case where the output
        failed. ``stop_early``: the cases where the most outputs of ``ds`` failed first, and
        stop at the first case where every output of ``ds`` has differed (the pairs); else
        every case (the single settings, whose counts rank them for the pairs). Returns
        ``{output: number of cases on which it matches}`` (of the cases run)."""
        diagnosis.tried += 1
        order = usable
        if stop_early:
            # the cases where the most outputs of ds failed first: where a setting that
            # explains nothing makes them all differ at once
            failed = Counter(c for d in ds for c in set(d.failed_cases))
            order = sorted(usable, key=lambda u: -failed[u[0]["name"]])
        alive = {d.output for d in ds}
        matched = {d.output: 0 for d in ds}
        rows = {d.output: [] for d in ds}
        for ref, actual in order:
            if stop_early and not alive:
                break
            expected = run(ref, overrides)
            for d in ds:
                out = d.output
                if out not in actual or (stop_early and out not in alive):
                    continue
                if out not in expected:  # rejected, or not produced under the overrides
                    if ref["name"] in d.failed_cases:
                        alive.discard(out)
                    continue
                passes, abs_err = _agreement(actual[out], expected[out], ref, tol)
                if passes:
                    matched[out] += 1
                    rows[out].append((abs_err, ref, actual[out], expected[out]))
                else:
                    alive.discard(out)
        for d in ds:
            if d.output in alive and rows[d.output]:
                d.explanations.append(Explanation(
                    tuple(overrides.items()), max(r for r, *_ in rows[d.output]),
                    max(_rel_err(a, e, ref, tol) for _, ref, a, e in rows[d.output]),
                    tuple(explain_switch(preset, k, v, cases) for k, v in overrides.items())))
        return matched

    singles = []
    for param, (alts, _) in switches_for(preset, cases).items():
        for value in alts:
            result = attempt({param: value}, failing, stop_early=False)
            # the most cases on which it makes a failing output match that the preset did not
            gained = max(result[d.output] - (d.n_cases - len(d.failed_cases)) for d in failing)
            singles.append((gained, param, value))

    unexplained = [d for d in failing if not d.explanations]
    if pairs and unexplained:
        # every pair of settings of two different switches, the most plausible first
        combos = [(g1 + g2, (p1, v1), (p2, v2))
                  for (g1, p1, v1), (g2, p2, v2) in itertools.combinations(singles, 2)
                  if p1 != p2]
        combos.sort(key=lambda c: -c[0])  # (stable: the registration order among equals)
        for _, (p1, v1), (p2, v2) in combos[:MAX_PAIRS]:
            attempt({p1: v1, p2: v2}, unexplained, stop_early=True)
        diagnosis.pairs_left = max(len(combos) - MAX_PAIRS, 0)

    # best first: fewer switches, then the setting that explains the most outputs (one
    # cause for many symptoms), then the smaller error
    shared = Counter(e.settings for d in failing for e in d.explanations)
    for d in failing:
        d.explanations.sort(key=lambda e: (len(e.settings), -shared[e.settings],
                                           e.max_rel_err))
        if not d.explanations:
            for ref, a, e in baseline[d.output]:
                if e is not None and ref["name"] in d.failed_cases:
                    d.first_difference = _first_difference(d.output, a, e, ref, tol)
                    break
            else:
                d.first_difference = f"case {d.failed_cases[0]}"
    return diagnosis
