"""The planted-convention matrix of the critic-free presets (issues 23 and 36).

Into an independent NumPy transcription of each framework's loss and of its sampler/trainer
correction (``tests/critic_free_numpy.py``: loops over groups, hand-derived gradients, no
ppo_numpy call), every registered switch is planted alone, 24 pairs spread over all of them,
and 15 pairs of the third policy's switches (the correction's options and the conventions no
framework names); the diagnosis on the preset's default cases must name the planted setting
(or a part of it) on every output it breaks. Plain bugs that are no convention must be
caught and reported as unexplained. The table of ``docs/oracle.md`` ("Measured: the
planted-convention matrix") is what ``planted_matrix()`` prints.
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
CASES = {name: cases_for(get_preset(name), 0) for name in NAMES}
SETTINGS = {name: [(p, v) for p, (alts, _) in switches_for(get_preset(name), CASES[name]).items()
                   for v in alts] for name in NAMES}
#: the third policy's settings: the correction's options and the conventions the issue names
#: (GSPO's gradient form among them, a loss-family switch that shows with token weights)
THIRD = {name: [(p, v) for p, v in SETTINGS[name]
                if SWITCHES[p].kind == "third policy" or p == "sequence_gradient"]
         for name in NAMES}
N_PAIRS, N_THIRD_PAIRS = 24, 15
CACHED = {name: CachedPreset(get_preset(name)) for name in NAMES}  # (test speed only)


def spread(settings, n) -> list:
    """``n`` pairs of settings of two different switches, spread over all such pairs."""
    pairs = [(a, b) for a, b in itertools.combinations(settings, 2) if a[0] != b[0]]
    step = max(1, len(pairs) // n)
    return pairs[::step][:n]


def pairs_of(name) -> list:
    return spread(SETTINGS[name], N_PAIRS)


def third_pairs_of(name) -> list:
    return spread(THIRD[name], N_THIRD_PAIRS)


PLANTS = [(name, (s,)) for name in NAMES for s in SETTINGS[name]] + \
         [(name, pair) for name in NAMES for pair in pairs_of(name) + third_pairs_of(name)]


def run(name, plant, **bug):
    candidate = CANDIDATES[name]

    def planted(case):
        return candidate(case, **dict(plant), **bug)

    planted.__name__ = f"{name} numpy with {dict(plant)}{bug or ''}"
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
    # every case that carries logp_rollout is compared (the third policy is transcribed)
    assert {r.case for r in report.rows} >= {c["name"] for c in CASES[name]
                                              if "logp_rollout" in c["inputs"]}


def test_the_matrix_has_every_switch_and_its_pairs():
    for name in NAMES:
        assert len(pairs_of(name)) >= 20, name
        assert len(third_pairs_of(name)) >= 15, name
        assert all(a in THIRD[name] and b in THIRD[name] for a, b in third_pairs_of(name))
        assert {p for p, _ in SETTINGS[name]} == set(switches_for(get_preset(name),
                                                                  CASES[name])), name
    # every option of the list, registered where the framework has it
    assert {p for p, _ in THIRD["trl-grpo"]} >= {
        "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
        "vllm_importance_sampling_clip_max", "off_policy_mask_threshold",
        "off_policy_mask_logps", "use_bias_correction_kl", "is_sequence_weight", "rejection",
        "masked_weights", "is_weights_on_kl"}
    assert {p for p, _ in THIRD["verl-grpo"]} >= {
        "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs",
        "rollout_rs_threshold", "bypass_mode", "rollout_loss_type", "is_sequence_weight",
        "rejection", "masked_weights", "is_weights_on_kl", "is_weights_detach",
        "gmpo_weight_mean", "sequence_gradient"}
    assert {p for p, _ in THIRD["openrlhf-grpo"]} >= {
        "is_correction_level", "is_correction_mode", "is_correction_gating",
        "is_correction_threshold", "is_sequence_weight", "masked_weights", "is_weights_on_kl",
        "sequence_gradient"}


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


def _shifted(name):
    """logp_rollout read one token late (logp_rollout[t + 1] at token t; the last token reads
    the first padding slot): an off-by-one in aligning the sampler's log-probs."""
    def bug(case):
        x = case["inputs"]
        shifted = np.roll(np.asarray(x["logp_rollout"]), -1, axis=1) if \
            "logp_rollout" in x else None
        inputs = {**x} if shifted is None else {**x, "logp_rollout": shifted}
        with np.errstate(over="ignore", invalid="ignore"):  # (the padding's +-1e30 read)
            return CANDIDATES[name]({**case, "inputs": inputs})
    bug.__name__ = "logp_rollout shifted by one token"
    return bug


def _planted_bug(name, which):
    def bug(case):
        with np.errstate(over="ignore", invalid="ignore"):  # (the padding's +-1e30 read)
            return CANDIDATES[name](case, bug=which)
    bug.__name__ = which
    return bug


#: the plain bugs of the correction: name -> (preset name -> the candidate)
ROLLOUT_BUGS = {
    "shifted": _shifted,
    # the mask forgotten in the log-ratio: NaN from logp_rollout's padding leaks
    "unmasked": lambda name: _planted_bug(name, "unmasked"),
    # the weight upside down: pi_rollout / pi_old
    "inverted": lambda name: _planted_bug(name, "inverted"),
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bug", list(ROLLOUT_BUGS))
def test_a_plain_bug_of_the_correction_is_caught_and_explained_by_nothing(name, bug):
    d = diagnose(ROLLOUT_BUGS[bug](name), CACHED[name], CASES[name], DTYPES[name],
                 outputs=OUTPUTS[name], probes=0)
    failing = [o for o in d.outputs.values() if not o.passed]
    assert failing and not d.passed, d.summary()
    for o in failing:
        assert d.explained_by(o.output) == [], d.summary()
        # only the cases with the sampler's log-probs break
        assert all(c.startswith("rollout-") for c in o.failed_cases), (o.output, o.failed_cases)
    if bug == "unmasked":  # NaN at logp_rollout's padding reaches the loss
        (row,) = [r for r in d.report.rows
                  if r.case == "rollout-nan-padding" and r.output == "policy_loss"]
        assert not row.passed and np.isnan(row.actual), row.describe()


def planted_matrix() -> str:
    """The table of docs/oracle.md: per preset, plantings and how many are named on every
    output they break; the plain bugs of the correction, caught and unexplained."""
    lines = ["| preset | dtype | switch settings planted alone (of the third policy) | named | "
             "pairs planted (of the third policy) | named | plain bugs of the correction "
             "caught, explained by nothing |", "|---|---|---|---|---|---|---|"]
    for name in NAMES:
        singles = [(s, run(name, (s,))) for s in SETTINGS[name]]
        pairs = [(pair, run(name, pair)) for pair in pairs_of(name) + third_pairs_of(name)]
        ok1 = sum(not d.passed and not named_on_every_output(d, (s,)) for s, d in singles)
        ok2 = sum(not d.passed and not named_on_every_output(d, pair) for pair, d in pairs)
        bugs = [diagnose(ROLLOUT_BUGS[b](name), CACHED[name], CASES[name], DTYPES[name],
                         outputs=OUTPUTS[name], probes=0) for b in ROLLOUT_BUGS]
        caught = sum(not d.passed and all(not o.explanations for o in d.outputs.values())
                     for d in bugs)
        lines.append(f"| {name} | {DTYPES[name]} | {len(singles)} ({len(THIRD[name])}) | "
                     f"{ok1} | {len(pairs)} ({len(third_pairs_of(name))}) | {ok2} | "
                     f"{caught} of {len(bugs)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(planted_matrix())
