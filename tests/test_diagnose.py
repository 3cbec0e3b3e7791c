"""The diagnosis names the convention that explains a wrong candidate (issue 14 items 1, 2, 4).

Two kinds of planted bugs:

* every switch registered for every preset, planted by running the preset with that switch
  flipped (the test asserts the *name* the diagnosis finds, not numbers);
* the four bugs of the issue, in a plain-NumPy transcription of verl's PPO written here
  (it does not import ppo_numpy's functions), which computes the Bessel factor and the clip
  fractions in float32 as verl does, so it also checks the verl preset's tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.oracle.cases import generate_cases
from ppo_numpy.oracle.compare import TOLERANCES, compare
from ppo_numpy.oracle.diagnose import diagnose
from ppo_numpy.oracle.group_cases import cases_for
from ppo_numpy.oracle.presets import PRESETS, get_preset
from ppo_numpy.oracle.switches import (
    PRESET_SWITCHES,
    SWITCHES,
    Switch,
    explain_switch,
    markdown_table,
    register_switches,
    switches_for,
)
from tests._helpers import CachedPreset


@pytest.fixture(scope="module")
def cases():
    return generate_cases(0)


CASES = {name: cases_for(preset, 0) for name, preset in PRESETS.items()}
# (with the cases: beta=0.0 is TRL's default and an alternative on the case that sets 0.04)
PLANTED = [(name, param, value) for name, preset in PRESETS.items()
           for param, (alts, _) in switches_for(preset, CASES[name]).items() for value in alts]


CACHED = {name: CachedPreset(preset) for name, preset in PRESETS.items()}


@pytest.mark.parametrize("name, param, value", PLANTED,
                         ids=[f"{n}-{p}={v!r}" for n, p, v in PLANTED])
def test_each_planted_switch_is_named(name, param, value):
    preset = CACHED[name]

    def planted(case):
        return preset(case, **{param: value})

    d = diagnose(planted, preset, CASES[name], probes=0)
    failing = [o for o in d.outputs.values() if not o.passed]
    # the case generator has a case on which this switch changes an output
    assert failing, f"{name}: {param}={value!r} changes no output on the generated cases"
    for o in failing:
        assert f"{param}={value!r}" in d.explained_by(o.output), (o.output, d.summary())
    assert f"{param}={value!r}" in d.summary()


def test_every_switch_of_the_issue_is_registered_somewhere():
    registered = {p for switches in PRESET_SWITCHES.values() for p in switches}
    issue = {"score_position", "whiten_ddof", "whiten_eps", "whiten_eps_mode", "whiten_mask",
             "shift_mean", "gae_holes", "log_ratio_clamp", "kl_clamp", "dual_clip",
             "epsilon_high", "loss_agg_mode", "value_clip_form", "kl_estimator", "kl_in",
             "use_kl_in_reward", "use_kl_loss"}
    assert issue <= registered, issue - registered
    for name, switches in PRESET_SWITCHES.items():
        preset = get_preset(name)
        for param in switches:
            assert param in preset.parameters, (name, param)


def test_a_pair_is_found_when_no_single_switch_explains(cases):
    verl = get_preset("verl")

    def two_bugs(case):
        return verl(case, whiten_ddof=0, dual_clip=None)

    d = diagnose(two_bugs, verl, cases, probes=0)
    assert d.explained_by("advantages")[0] == "whiten_ddof=0"
    assert d.explained_by("policy_loss")[0] in ("whiten_ddof=0, dual_clip=None",
                                                "dual_clip=None, whiten_ddof=0")
    assert d.explained_by("stat/actor/pg_clipfrac_lower")[0] == "dual_clip=None"


def test_nothing_fits_gives_the_first_differing_element(cases):
    seed = get_preset("seed")

    def scaled(case):
        out = seed(case)
        return {"advantages": 1.5 * out["advantages"], "rewards": out["rewards"]}

    d = diagnose(scaled, seed, cases[:3], probes=0)
    assert not d.outputs["advantages"].explanations
    first = d.outputs["advantages"].first_difference
    # random-0's first response token
    want = float(seed(cases[0])["advantages"][0, 0])
    assert first == f"random-0 at (0, 0): expected {want!r}, got {1.5 * want!r}"
    text = d.summary()
    assert "advantages: fails on 3 of 3 cases; no known convention explains this" in text
    assert "match the preset as it is: rewards" in text


def test_a_correct_candidate_is_diagnosed_as_matching(cases):
    d = diagnose(get_preset("trl"), "trl", cases[:4])
    assert d.passed and d.summary() == "diagnosis: every output matches preset 'trl'"


def test_bad_input_is_a_clear_error(cases):
    with pytest.raises(ValueError, match="unknown preset 'verll'"):
        diagnose(get_preset("verl"), "verll", cases[:1])
    with pytest.raises(TypeError, match="preset: expected a Preset or a preset name"):
        diagnose(get_preset("verl"), 3, cases[:1])
    with pytest.raises(ValueError, match="one name per case; two cases share 'random-0'"):
        diagnose(get_preset("verl"), "verl", [cases[0], cases[0]])
    with pytest.raises(ValueError, match="switch: 'no_such' is not in the table"):
        register_switches("verl", {"no_such": ((1,), "")})
    with pytest.raises(ValueError, match="expected \\(alternatives tuple, source\\)"):
        register_switches("verl", {"dual_clip": (None, "")})


def test_the_sentence_says_what_yours_and_the_framework_do():
    verl = get_preset("verl")
    assert explain_switch(verl, "whiten_ddof", 0) == (
        "the whitening's variance: yours is the population variance (divides by n, ddof 0); "
        "verl's has Bessel's correction (divides by n - 1, ddof 1) "
        "(verl/utils/torch_functional.py masked_var, unbiased=True)")
    assert SWITCHES["dual_clip"].phrase(None) == "is off"
    assert SWITCHES["dual_clip"].phrase(3.0) == "is on: the A < 0 term is bounded below by 3 A"
    assert SWITCHES["shift_mean"].phrase(False) != SWITCHES["shift_mean"].phrase(True)
    assert Switch("x", "x", {1: "one"}).phrase(True) == "is True"  # bool is not int here


def test_docs_table_is_the_switch_table():
    from pathlib import Path

    from ppo_numpy.oracle.switches import KINDS, third_policy_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "oracle.md").read_text()
    assert markdown_table() in doc
    assert markdown_table(("third policy",)) in doc
    assert third_policy_table() in doc
    # every switch is in one of the two tables
    assert {s.kind for s in SWITCHES.values()} <= set(KINDS)


# --------------------------------------------------------------------------------------
# The four bugs of the issue, in a NumPy transcription of verl's PPO


def verl_numpy(case, *, score_late=False, ddof=1, whiten_all=False, dual_clip=True):
    """verl 0.9.1's PPO step in plain NumPy (core_algos.py, torch_functional.py), with the
    four bugs of issue 14 as switches. Like verl, the Bessel factor is an integer division
    in float32 and the clip fraction a float32 mean of booleans."""
    x = case["inputs"]
    p = {**get_preset("verl").defaults, **case["params"]}
    m = x["mask"] == 1
    B, T = m.shape
    V = np.where(m, x["old_values"], 0.0)
    # NaiveRewardManager: reward_tensor[i, valid_response_length - 1] = score
    last = T - 1 - np.argmax(m[:, ::-1], axis=1)
    pos = np.minimum(last + 1, T - 1) if score_late else last
    r = np.zeros((B, T))
    r[np.arange(B), pos] += x["scores"]
    # compute_gae_advantage_return: masked positions skipped, V = 0 after the last token
    A = np.zeros((B, T))
    for i in range(B):
        nextv, gae = 0.0, 0.0
        for t in reversed(range(T)):
            if not m[i, t]:
                continue
            delta = r[i, t] + p["gamma"] * nextv - V[i, t]
            gae = delta + p["gamma"] * p["lam"] * gae
            A[i, t], nextv = gae, V[i, t]
    returns = np.where(m, A + V, 0.0)
    # masked_whiten: mean, var * n / (n - 1) in float32, (A - mean) * rsqrt(var + 1e-8)
    sel = np.ones_like(m) if whiten_all else m
    n = int(sel.sum())
    mean = A[sel].sum() / n
    var = ((A[sel] - mean) ** 2).sum() / n
    if ddof == 1:
        with np.errstate(divide="ignore", invalid="ignore"):  # n = 1: verl gives NaN
            var = var * float(np.float32(n) / np.float32(n - 1))
    white = np.where(m, (A - mean) / np.sqrt(var + 1e-8), 0.0)
    # compute_policy_loss_vanilla: clamp(log ratio, -20, 20), dual clip c = 3
    log_rho = np.clip(np.where(m, x["logp"] - x["logp_old"], 0.0), -20.0, 20.0)
    rho = np.exp(log_rho)
    pg1 = -white * rho
    pg2 = -white * np.clip(rho, 0.8, 1.2)
    clip1 = np.maximum(pg1, pg2)
    if dual_clip:
        pg3 = -white * 3.0
        loss = np.where(white < 0, np.minimum(pg3, clip1), clip1)
        lower = (clip1 > pg3) & (white < 0)
    else:
        loss, lower = clip1, np.zeros_like(m)
    k = np.float32(np.sum(lower & m))
    return {"rewards": np.where(m, r, 0.0), "advantages": white, "returns": returns,
            "policy_loss": float(np.where(m, loss, 0.0).sum() / m.sum()),
            "stat/actor/pg_clipfrac_lower": float(k / np.float32(m.sum()))}


ISSUE_BUGS = {
    "score one token late": ({"score_late": True}, "score_position='after-last'"),
    "population variance": ({"ddof": 0}, "whiten_ddof=0"),
    "whitening without the mask": ({"whiten_all": True}, "whiten_mask='all'"),
    "dual clip off": ({"dual_clip": False}, "dual_clip=None"),
}


def test_the_transcription_of_verl_passes_the_verl_preset_and_its_tolerance_is_needed(cases):
    # float32 Bessel factor and clip fraction: within 1e-9 + 2^-24, not within 1e-9
    returned = list(verl_numpy(cases[0]))
    report = compare(verl_numpy, "verl", cases)
    assert not report.passed and set(report.unchecked)  # it does not return every output
    report = compare(verl_numpy, "verl", cases, outputs=returned)
    assert report.passed, str(report)
    strict = compare(verl_numpy, "verl", cases, tolerance=TOLERANCES["float64"],
                     outputs=returned)
    assert not strict.passed
    assert {r.output for r in strict.failures} <= {"advantages", "policy_loss",
                                                   "stat/actor/pg_clipfrac_lower"}
    assert max(r.max_rel_err for r in strict.failures) <= 2.0**-24 + 1e-9


@pytest.mark.parametrize("bug", list(ISSUE_BUGS))
def test_the_four_bugs_of_the_issue_are_named(bug, cases):
    kwargs, label = ISSUE_BUGS[bug]

    def candidate(case):
        return verl_numpy(case, **kwargs)

    d = diagnose(candidate, "verl", cases)
    assert not d.passed
    for o in d.outputs.values():
        if not o.passed:
            assert label in d.explained_by(o.output), (bug, o.output, d.summary())
    assert label in d.summary()


def test_dual_clip_off_fails_on_most_cases_with_the_dual_clip_case(cases):
    # the issue's measurement: "the dual-clip bug was caught by a single case of 21"
    report = compare(lambda c: verl_numpy(c, dual_clip=False), "verl", cases)
    failing = {r.case for r in report.failures}
    assert "dual-clip" in failing
    dual = [c for c in cases if c["name"] == "dual-clip"][0]
    out = get_preset("verl")(dual)
    assert out["stat/actor/pg_clipfrac_lower"] > 0.25
    # the dual bound decides a term in most rows
    rho = np.exp(dual["inputs"]["logp"] - dual["inputs"]["logp_old"])
    rows = np.any((out["advantages"] < 0) & (rho > 3) & (dual["inputs"]["mask"] == 1), axis=1)
    assert rows.sum() >= 3 and rows.size == 4


# --------------------------------------------------------------------------------------
# python -m ppo_numpy oracle diagnose


def test_cli_diagnose_names_the_switch_and_exits_1(tmp_path, capsys):
    from ppo_numpy.programs.oracle import main

    (tmp_path / "mine.py").write_text(
        "from ppo_numpy.oracle.presets import get_preset\n\n\n"
        "def step(case):\n"
        "    return get_preset('verl')(case, dual_clip=None)\n")
    rc = main(["diagnose", f"{tmp_path / 'mine.py'}:step", "--preset", "verl",
               "--cases", "random-0", "dual-clip", "--probes", "0"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "match the verl preset with dual_clip=None on every case" in out
    assert "the dual clip: yours is off; verl's is on" in out


@pytest.mark.parametrize("planted, rc", [("norm_adv_by_std_in_grpo=False", 1), ("", 0)])
def test_cli_diagnose_of_a_critic_free_preset_runs_its_group_cases(planted, rc, tmp_path,
                                                                    capsys):
    # a regression: the command gave a critic-free preset the PPO cases, which it rejects
    # every one of, and reported "every output matches" having compared nothing
    from ppo_numpy.programs.oracle import main

    (tmp_path / "mine.py").write_text(
        "from ppo_numpy.oracle.presets import get_preset\n\n\n"
        "def step(case):\n"
        f"    return get_preset('verl-grpo')(case, {planted})\n")
    assert main(["diagnose", f"{tmp_path / 'mine.py'}:step", "--preset", "verl-grpo",
                 "--no-pairs"]) == rc
    out = capsys.readouterr().out
    assert "group-random-0" in out and ", 0 cases compared" not in out
    if planted:
        assert f"with {planted} on every case" in out
    else:
        assert "diagnosis: every output matches preset 'verl-grpo'" in out


def test_a_diagnosis_that_compared_nothing_does_not_pass():
    verl_grpo = get_preset("verl-grpo")
    d = diagnose(verl_grpo, verl_grpo, generate_cases(0, ["random-0", "length-1"]))
    assert set(d.report.rejected) == {"random-0", "length-1"} and not d.report.rows
    assert not d.passed
    assert "diagnosis: nothing compared (preset 'verl-grpo' rejected 2 of the cases)" in str(d)
    # a candidate that returns none of the outputs: not compared, so not a match either
    d = diagnose(lambda case: {}, "seed", generate_cases(0, ["random-0"]))
    assert not d.passed and not d.report.passed and "stat/score_mean" in d.report.unchecked
    assert "nothing compared (preset 'seed' rejected 0 of the cases; outputs not returned: " \
        "rewards, advantages," in d.summary()


@pytest.mark.parametrize("argv, message", [
    (["diagnose", "nofile.py:step"], "nofile.py: no such file"),
    (["diagnose", "justaname"], "expected FILE.py:FUNCTION"),
    (["diagnose", "ppo_numpy:no_such_function"], "has no function 'no_such_function'"),
    (["diagnose", "ppo_numpy.no_such_module:f"], "cannot import ppo_numpy.no_such_module"),
    (["diagnose", "ppo_numpy:gae", "--preset", "ppo"], "unknown preset 'ppo'"),
    (["diagnose", "ppo_numpy:gae", "--cases", "nope"], "unknown case 'nope'"),
])
def test_cli_diagnose_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    from ppo_numpy.programs.oracle import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("oracle diagnose: error: ") and message in err
    assert err.count("\n") == 1


def test_verls_whitening_in_torch_is_within_the_presets_tolerance(cases):
    # verl/utils/torch_functional.py (0.9.1) masked_mean / masked_var / masked_whiten, in
    # torch with float64 values and an integer mask, as a float64 run of verl holds them:
    # mask.sum() + 1e-8 is a float32 tensor equal to n; mask_sum / (mask_sum - 1) float32
    torch = pytest.importorskip("torch")

    def masked_mean(values, mask):
        return (values * mask).sum() / (mask.sum() + 1e-8)

    def masked_whiten(values, mask):
        mean = masked_mean(values, mask)
        variance = masked_mean((values - mean) ** 2, mask)
        mask_sum = mask.sum()
        variance = variance * (mask_sum / (mask_sum - 1))
        return (values - mean) * torch.rsqrt(variance + 1e-8)

    n = torch.tensor([[1, 1, 0]], dtype=torch.int64).sum()
    assert (n + 1e-8).dtype == torch.float32 and float(n + 1e-8) == 2.0
    assert (n / (n - 1)).dtype == torch.float32
    verl = get_preset("verl")
    tol = verl.tolerances["float64"][0]
    worst = 0.0
    for case in cases:
        try:
            out = verl(case)
        except ValueError:
            continue
        m = case["inputs"]["mask"] == 1
        # verl's advantages before whitening (no KL in its reward): the seed preset's, with
        # beta 0 and verl's gamma and lam
        p = {**verl.defaults, **case["params"]}
        raw = get_preset("seed")(case["inputs"], gamma=p["gamma"], lam=p["lam"],
                                 beta=0.0)["advantages"]
        white = masked_whiten(torch.tensor(raw), torch.tensor(m.astype(np.int64))).numpy()
        e = out["advantages"][m]
        rel = np.abs(white[m] - e) / np.maximum(np.abs(e), 1e-300)
        big = np.abs(e) > 1e-6
        if np.any(big):
            worst = max(worst, float(np.max(rel[big])))
    # measured: 2.8e-8 on the generated cases (seed 0)
    assert 1e-9 < worst <= tol, worst


def test_a_float32_candidate_is_diagnosed_with_the_float32_tolerance(cases):
    verl = get_preset("verl")

    def float32_ddof0(case):
        # the inputs arrive rounded to float32; the outputs are rounded to float32 too
        out = verl(case, whiten_ddof=0)
        return {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}

    d = diagnose(float32_ddof0, verl, cases, "float32", probes=0)
    assert d.report.dtype == "float32" and d.report.tolerance.rtol == 1e-4
    assert d.explained_by("advantages")[0] == "whiten_ddof=0"
    assert "(max rel err 6e-08)" in d.summary()


def test_every_pair_of_every_preset_is_tried():
    # the docs' claim: no preset has more pairs of settings than MAX_PAIRS (the largest,
    # verl-grpo with the third policy's switches, 1653)
    from ppo_numpy.oracle.diagnose import MAX_PAIRS

    for name, preset in PRESETS.items():
        settings = [(p, v) for p, (alts, _) in switches_for(preset, CASES[name]).items()
                    for v in alts]
        pairs = sum(a[0] != b[0] for i, a in enumerate(settings) for b in settings[i + 1:])
        assert pairs <= MAX_PAIRS, (name, pairs)
