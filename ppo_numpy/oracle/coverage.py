"""What a candidate implements, and what a comparison covered (``docs/oracle.md``, "Check an
implementation that covers part of a framework").

A candidate that implements part of a framework says so **by raising NotImplementedError** on
a case it does not implement, with the option and its value as the message::

    def mine(case):
        p = {**get_preset("trl-grpo").parameters, **case["params"]}
        implements(p, loss_type=("dapo",))                      # raises for another
        if "logp_rollout" in case["inputs"]:
            implements(p, vllm_importance_sampling_mode=("token_truncate",))
        ...

:func:`~ppo_numpy.oracle.compare.compare` (and so ``diagnose``) lists such a case as "not
implemented by the candidate: loss_type='cispo'" and does not compare it: it is not a
failure, and not a pass either (a comparison that compared nothing does not pass). The
report ends with the :class:`Coverage`: for each option that the candidate named, or that
the cases set, the values compared and on how many cases, and the values not implemented.

(One design, chosen over declaring the supported values up front: only the candidate knows
which options are in effect on a case, e.g. a correction of the sampler's log-probs on a
case that has none.)
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Coverage", "coverage_of", "implements", "not_implemented_option"]

#: a numeric option with more values compared than this is given as its range
MAX_LISTED = 4
_OPTION = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(.+?)\s*$", re.DOTALL)


def implements(params: Mapping, **supported) -> None:
    """Raise NotImplementedError("option=value") for the first option of ``supported`` whose
    value in ``params`` is not one of its supported values; nothing when all are.

    ``params``: the case's resolved parameters (a preset's ``parameters`` updated by
    ``case["params"]``). A bool and a number are different values here (True is not 1).

    >>> implements({"loss_type": "dapo", "beta": 0.0}, loss_type=("dapo", "grpo"))
    >>> implements({"loss_type": "cispo"}, loss_type=("dapo",))
    Traceback (most recent call last):
    ...
    NotImplementedError: loss_type='cispo'
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"params: expected a mapping of parameters, got "
                        f"{type(params).__name__}")
    for option, values in supported.items():
        if option not in params:
            raise TypeError(f"implements: {option!r} is not a parameter of the case; known "
                            f"ones are {', '.join(map(str, params))}")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(f"implements: {option}: expected a tuple of supported values, got "
                            f"{values!r}")
        value = params[option]
        if not any(_same(value, v) for v in values):
            raise NotImplementedError(f"{option}={value!r}")


def _same(a, b) -> bool:
    return isinstance(a, bool) == isinstance(b, bool) and _key(a) == _key(b)


def _key(value):
    """A hashable stand-in for a parameter value (lists become tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_key(v) for v in value)
    return value


def not_implemented_option(message: str, options) -> tuple | None:
    """``(option, value)`` when ``message`` reads "option=value" with ``option`` one of
    ``options`` (the value read as a Python literal where it is one), else None.

    >>> not_implemented_option("loss_type='cispo'", ["loss_type"])
    ('loss_type', 'cispo')
    >>> not_implemented_option("no GSPO yet", ["loss_type"]) is None
    True
    """
    match = _OPTION.match(message or "")
    if not match or match.group(1) not in options:
        return None
    text = match.group(2)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    return match.group(1), _key(value)


@dataclass
class Coverage:
    """Which option values a comparison compared, on how many cases, and which the candidate
    does not implement. ``options``: option -> ``{"compared": {value: n}, "not implemented":
    {value: n}, "needs": input or None}``; the counts are of cases."""

    n_cases: int
    n_compared: int
    n_not_implemented: int
    n_rejected: int
    options: dict = field(default_factory=dict)

    def lines(self) -> list:
        out = [f"coverage: {self.n_compared} of {self.n_cases} cases compared; "
               f"{self.n_not_implemented} not implemented by the candidate, "
               f"{self.n_rejected} rejected by the reference"]
        for option, entry in self.options.items():
            where = (f", on the {entry['n_with']} cases with {entry['needs']}"
                     if entry["needs"] else "")
            parts = []
            compared = entry["compared"]
            numbers = all(isinstance(v, int | float) and not isinstance(v, bool)
                          for v in compared)
            if len(compared) > MAX_LISTED and numbers:
                # (a hyperparameter the random cases draw: its range, not every value)
                n = sum(compared.values())
                parts.append(f"compared {len(compared)} values from {min(compared)!r} to "
                             f"{max(compared)!r} ({n} cases)")
            elif compared:
                parts.append("compared " + ", ".join(
                    f"{v!r} ({n} {'case' if n == 1 else 'cases'})"
                    for v, n in compared.items()))
            else:
                parts.append("compared on no case")
            if entry["not implemented"]:
                parts.append("not implemented " + ", ".join(
                    f"{v!r} ({n})" for v, n in entry["not implemented"].items()))
            out.append(f"  {option}{where}: " + "; ".join(parts))
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def coverage_of(reference, cases, compared, not_implemented: dict, rejected) -> Coverage:
    """The :class:`Coverage` of a comparison of ``cases`` against ``reference``: ``compared``
    the names of the cases compared, ``not_implemented`` case name -> the candidate's message,
    ``rejected`` the names the reference rejected.

    The options listed are those the candidate named in a NotImplementedError and those some
    case sets (its ``params``, the comparison's ``params=`` included), each with its value on
    every case (the reference's ``parameters`` updated by the case's). A switch that needs an
    input (``ppo_numpy.oracle.switches``, e.g. the corrections of ``logp_rollout``) counts the
    cases that carry it only."""
    from .switches import SWITCHES

    defaults = dict(getattr(reference, "parameters", None) or {})
    named = {}
    for name, message in not_implemented.items():
        parsed = not_implemented_option(message, defaults)
        if parsed:
            named[name] = parsed
    options = list(dict.fromkeys([o for o, _ in named.values()] + [
        o for c in cases for o in (c.get("params") or {}) if o in defaults]))
    cov = Coverage(len(cases), len(set(compared)), len(not_implemented), len(rejected))
    compared = set(compared)
    for option in options:
        needs = getattr(SWITCHES.get(option), "needs", None)
        with_input = [c for c in cases if needs is None or
                      c.get("inputs", {}).get(needs) is not None]
        entry = {"compared": {}, "not implemented": {}, "needs": needs,
                 "n_with": len(with_input)}
        for c in with_input:
            if c["name"] in compared:
                value = _key({**defaults, **(c.get("params") or {})}.get(option))
                entry["compared"][value] = entry["compared"].get(value, 0) + 1
        for named_option, value in named.values():
            if named_option == option:
                entry["not implemented"][value] = entry["not implemented"].get(value, 0) + 1
        cov.options[option] = entry
    return cov
