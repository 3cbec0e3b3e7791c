"""The planted-convention matrix of the critic-free presets (issue 23).

Into an independent NumPy transcription of each framework's loss (``tests/
critic_free_numpy.py``: loops over groups, hand-derived gradients, no ppo_numpy call),
every registered switch is planted alone and at least 20 pairs of them: the diagnosis on
the preset's default cases must name the planted setting (or a part of it) on every output
it breaks. Two bugs that are no convention must be reported as unexplained. The table of
``docs/oracle.md`` ("Measured: the planted-convention matrix") is what
``planted_matrix()`` prints.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ppo_numpy.oracle.compare import compare
from ppo_numpy.oracle.diagnose import diagnose
from ppo_numpy.oracle.group_cases import cases_for
from ppo_numpy.oracle.presets import get_preset
from ppo_numpy.oracle.switches import SWITCHES, switches_for
from tests._helpers import CachedPreset
from tests.critic_free_numpy import CANDIDATES, DTYPES, OUTPUTS

NAMES = list(CANDIDATES)
#: the transcription has no rollout correction and no SAPO yet: the cases with logp_rollout
#: or SAPO and their switches are left out here (make conformance checks the corrections
#: against the released frameworks, tests/test_third_policy_conventions.py by hand)
ROLLOUT_SWITCHES = tuple(p for p, s in SWITCHES.items() if s.kind == "third policy") + (
    "sequence_gradient", "sapo_temperature_neg", "tau_neg")
CASES = {name: [c for c in cases_for(get_preset(name), 0) if "logp_rollout" not in c["inputs"]
                and c["name"] != "sapo-loss"] for name in NAMES}
SETTINGS = {name: [(p, v) for p, (alts, _) in switches_for(get_preset(name), CASES[name]).items()
                   if p not in ROLLOUT_SWITCHES for v in alts
                   if (p, v) not in (("loss_type", "sapo"), ("loss_mode", "sapo"),
                                     ("loss_mode", "geo_mean"), ("loss_mode", "gpg"))]
            for name in NAMES}
N_PAIRS = 24
CACHED = {name: CachedPreset(get_preset(name)) for name in NAMES}  # (test speed only)


def pairs_of(name) -> list:
    """``N_PAIRS`` pairs of settings of two different switches, spread over all of them."""
    pairs = [(a, b) for a, b in itertools.combinations(SETTINGS[name], 2) if a[0] != b[0]]
    step = max(1, len(pairs) // N_PAIRS)
    return pairs[::step][:N_PAIRS]


PLANTS = [(name, (s,)) for name in NAMES for s in SETTINGS[name]] + \
         [(name, pair) for name in NAMES for pair in pairs_of(name)]


def run(name, plant):
    candidate = CANDIDATES[name]

    def planted(case):
        return candidate(case, **dict(plant))

    planted.__name__ = f"{name} numpy with {dict(plant)}"
    return diagnose(planted, CACHED[name], CASES[name], DTYPES[name], outputs=OUTPUTS[name],
                    probes=0)


def named_on_every_output(d, plant) -> dict:
    """``{output: its explanations}`` for each failing output whose explanations do not
    include the planted setting or a part of it (empty: every one is named)."""
    wrong = {}
    for o in d.outputs.values():
        if not o.passed and not any(set(e.settings) <= set(plant) for e in o.explanations):
            wrong[o.output] = d.explained_by(o.output)
    return wrong


@pytest.mark.parametrize("name", NAMES)
def test_the_independent_transcription_matches_its_preset(name):
    report = compare(CANDIDATES[name], name, CASES[name], DTYPES[name], outputs=OUTPUTS[name])
    assert report.passed, str(report)
    assert not report.rejected or name == "openrlhf-grpo"  # (it refuses a group of one)


def test_the_matrix_has_every_switch_and_20_pairs_per_preset():
    for name in NAMES:
        assert len(pairs_of(name)) >= 20, name
        assert {p for p, _ in SETTINGS[name]} == set(switches_for(get_preset(name),
                                                                  CASES[name])) - set(
            ROLLOUT_SWITCHES), name


@pytest.mark.parametrize("name, plant", PLANTS,
                         ids=[f"{n}-" + "+".join(f"{p}={v!r}" for p, v in plant)
                              for n, plant in PLANTS])
def test_a_planted_convention_is_named_on_every_output_it_breaks(name, plant):
    d = run(name, plant)
    assert not d.passed, f"{name}: {plant} changes no output on the default cases"
    assert named_on_every_output(d, plant) == {}, d.summary()
    label = ", ".join(f"{k}={v!r}" for k, v in plant)
    assert any(label in d.explained_by(o) for o in d.outputs) or len(plant) == 2, d.summary()


def _bug_gradient_without_the_ratio(name):
    """dlogp as -A w_t, the ratio left out of the gradient (a common autograd slip)."""
    def bug(case):
        out = CANDIDATES[name](case)
        x = case["inputs"]
        rho = np.exp(np.where(x["mask"] == 1, x["logp"] - x["logp_old"], 0.0))
        out["dlogp"] = np.where(x["mask"] == 1, out["dlogp"] / rho, 0.0)
        return out
    return bug


def _bug_advantages_scaled(name):
    """Advantages 1.1 times too large (and the loss and gradient that follow)."""
    def bug(case):
        out = CANDIDATES[name](case)
        return {**out, "advantages": out["advantages"] * 1.1}
    return bug


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("make_bug, output", [(_bug_gradient_without_the_ratio, "dlogp"),
                                              (_bug_advantages_scaled, "advantages")])
def test_a_bug_that_is_no_convention_is_unexplained(name, make_bug, output):
    d = diagnose(make_bug(name), CACHED[name], CASES[name], DTYPES[name],
                 outputs=OUTPUTS[name], probes=0)
    assert not d.outputs[output].passed
    assert d.explained_by(output) == []
    assert f"{output}: fails on" in d.summary() and "no known convention explains this" in \
        d.summary()
    assert "settings of its switches tried" in d.summary() and d.tried > len(SETTINGS[name])


def planted_matrix() -> str:
    """The table of docs/oracle.md: per preset, plantings, named, unexplained bugs named."""
    lines = ["| preset | dtype | switch settings planted alone | named | pairs planted | named |",
             "|---|---|---|---|---|---|"]
    for name in NAMES:
        singles = [run(name, (s,)) for s in SETTINGS[name]]
        pairs = [(pair, run(name, pair)) for pair in pairs_of(name)]
        ok1 = sum(not d.passed and not named_on_every_output(d, (s,))
                  for s, d in zip(SETTINGS[name], singles))
        ok2 = sum(not d.passed and not named_on_every_output(d, pair) for pair, d in pairs)
        lines.append(f"| {name} | {DTYPES[name]} | {len(singles)} | {ok1} | {len(pairs)} | "
                     f"{ok2} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(planted_matrix())
