"""Strict outputs (issue 23): a candidate that returns the wrong names, misses an output or
returns something other than a dict of numbers never passes, in the API and the CLI; the
failure lines are honest; a candidate off by rounding gets the precision hint."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.oracle.compare import (
    TOLERANCES,
    assert_matches,
    compare,
    compare_output,
    compare_outputs,
)
from ppo_numpy.oracle.diagnose import diagnose
from ppo_numpy.oracle.group_cases import generate_group_cases
from ppo_numpy.oracle.presets import get_preset
from ppo_numpy.programs.oracle import main

PRESET = get_preset("trl-grpo")
CASES = generate_group_cases(0, ["group-random-0", "clip-bounds", "kl-in-loss"],
                             preset="trl-grpo")


def _misspelled(case):
    out = PRESET(case)
    return {"advantage": out["advantages"], "pg_loss": out["policy_loss"]}


def _extra(case):
    return {**PRESET(case), "entropy": 0.5}


def _missing(case):
    out = dict(PRESET(case))
    del out["dlogp"]
    return out


def _wrong_shape(case):
    out = dict(PRESET(case))
    out["advantages"] = out["advantages"][:, :-1]
    return out


def _nan(case):
    return {**PRESET(case), "policy_loss": float("nan")}


def _bfloat16(case):
    torch = pytest.importorskip("torch")
    return {k: torch.tensor(np.asarray(v)).to(torch.bfloat16) for k, v in PRESET(case).items()}


# name -> (candidate, what the comparison must say)
FAILURES = {
    "misspelled names": (_misspelled, ["'advantage' is not an output of the reference; "
                                       "closest known: 'advantages'",
                                       "'pg_loss' is not an output", "FAIL: not returned by "
                                       "the candidate: advantages"]),
    "an extra name": (_extra, ["'entropy' is not an output of the reference"]),
    "a missing output": (_missing, ["FAIL: not returned by the candidate: dlogp (3 cases)"]),
    "a wrong shape": (_wrong_shape, ["does not match the expected shape"]),
    "NaN": (_nan, ["policy_loss", "got nan"]),
    "bfloat16 tensors at float64": (_bfloat16, ["FAILED"]),
}

ERRORS = {
    "a list": (lambda case: [1.0, 2.0], "returned a list on case 'group-random-0'"),
    "None": (lambda case: None, "returned a NoneType on case 'group-random-0'"),
    "a tuple": (lambda case: (PRESET(case),), "returned a tuple"),
    "a number": (lambda case: 0.1, "returned a float"),
    "a string value": (lambda case: {**PRESET(case), "policy_loss": "0.1"},
                       "output 'policy_loss' on case 'group-random-0' is a str, not a number"),
    "a bool value": (lambda case: {**PRESET(case), "policy_loss": True}, "is a bool"),
    "an object array": (lambda case: {**PRESET(case), "dlogp": np.array([None, 1.0])},
                        "is a ndarray of object"),
}


@pytest.mark.parametrize("what", list(FAILURES))
def test_a_bad_candidate_fails_everywhere_it_is_compared(what):
    candidate, says = FAILURES[what]
    report = compare(candidate, PRESET, CASES)
    assert not report.passed
    text = str(report)
    for s in says:
        assert s in text, (s, text)
    d = diagnose(candidate, PRESET, CASES, probes=0, pairs=False)
    assert not d.passed
    with pytest.raises(AssertionError):
        assert_matches(candidate(CASES[0]), PRESET(CASES[0]), case=CASES[0])


@pytest.mark.parametrize("what", list(ERRORS))
def test_a_return_that_is_not_a_dict_of_numbers_is_a_clear_error(what):
    candidate, says = ERRORS[what]
    candidate.__name__ = "mine"
    for run in (lambda: compare(candidate, PRESET, CASES),
                lambda: diagnose(candidate, PRESET, CASES, probes=0, pairs=False),
                lambda: assert_matches(candidate(CASES[0]), PRESET(CASES[0]),
                                       case=CASES[0])):
        with pytest.raises(TypeError, match=says.replace("(", r"\(").replace(")", r"\)")):
            run()
    with pytest.raises(TypeError, match="^mine"):
        compare(candidate, PRESET, CASES)


def test_bfloat16_tensors_are_numbers_and_pass_at_bfloat16():
    torch = pytest.importorskip("torch")
    assert compare(_bfloat16, PRESET, CASES, "bfloat16").passed
    # one dtype too strict: the hint; two: none (the next looser dtype only)
    assert compare(_bfloat16, PRESET, CASES, "float32").precision_hint().startswith(
        "matches at bfloat16 tolerance: pass dtype='bfloat16' (the candidate returned bfloat16")
    assert compare(_bfloat16, PRESET, CASES, "float64").precision_hint() == ""
    out = {"policy_loss": torch.tensor(0.5, dtype=torch.bfloat16),
           "dlogp": torch.zeros(2, dtype=torch.int64)}
    assert assert_matches(out, {"policy_loss": 0.5, "dlogp": np.zeros(2)}).passed
    with pytest.raises(TypeError, match="torch tensor of bool"):
        assert_matches({"dlogp": torch.zeros(2, dtype=torch.bool)}, {"dlogp": np.zeros(2)})


def test_restricting_outputs_passes_a_candidate_that_returns_only_those():
    def partial(case):
        out = PRESET(case)
        return {"advantages": out["advantages"], "policy_loss": out["policy_loss"]}

    assert not compare(partial, PRESET, CASES).passed
    assert compare(partial, PRESET, CASES, outputs=["advantages", "policy_loss"]).passed
    # a misspelled name fails even when the outputs are restricted
    report = compare(_misspelled, PRESET, CASES, outputs=["advantages"])
    assert not report.passed and "closest known: 'advantages'" in str(report)


def test_an_output_the_preset_produces_on_other_cases_only_is_listed_not_failed():
    # stat/kl exists with beta != 0 only (the kl-in-loss case)
    def always_kl(case):
        return {**PRESET(case), "stat/kl": PRESET(case, beta=0.04)["stat/kl"]}

    report = compare(always_kl, PRESET, CASES)
    assert report.not_produced == {"stat/kl": ["group-random-0", "clip-bounds"]}
    assert report.passed, str(report)


def test_the_failure_line_gives_the_worst_elements_own_errors():
    # element 0 has the largest absolute error (0.01), element 1 the largest error over its
    # allowance (1e-4 against ~1e-12): the line is element 1's, with its own errors
    row = compare_output("x", np.array([1000.01, 0.0011]), np.array([1000.0, 0.001]),
                         tolerance=TOLERANCES["float64"])
    assert row.worst_index == (1,)
    assert row.max_abs_err == pytest.approx(0.01)
    assert row.worst_abs_err == pytest.approx(1e-4) and row.worst_rel_err == pytest.approx(0.1)
    line = row.describe()
    assert "expected 0.001, got 0.0011 (abs err 0.0001, rel err 0.1, allowed" in line


def test_a_float32_rounding_gets_the_precision_hint():
    seed = get_preset("seed")
    from ppo_numpy.oracle.cases import generate_cases

    cases = generate_cases(0, ["random-0", "random-1"])

    def in_float32(case):
        return {k: np.asarray(v, dtype=np.float32) for k, v in seed(case).items()}

    report = compare(in_float32, seed, cases, probes=0)
    assert not report.passed
    assert report.precision_hint().startswith(
        "matches at float32 tolerance: pass dtype='float32' (the candidate returned float32")
    assert "matches at float32 tolerance: pass dtype='float32'" in str(report)
    d = diagnose(in_float32, seed, cases, probes=0)
    assert "matches at float32 tolerance: pass dtype='float32'" in d.summary()
    # a real difference gets no hint
    e = {"policy_loss": 1.0}
    assert compare_outputs({"policy_loss": 1.5}, e).precision_hint() == ""


CANDIDATE_FILE = '''
from ppo_numpy.oracle.presets import get_preset

P = get_preset("trl-grpo")

def good(case):
    return P(case)

def late_eps(case):
    return P(case, epsilon_high=0.28)

def listy(case):
    return [1.0]

def misspelled(case):
    return {"advantage": P(case)["advantages"]}
'''


@pytest.fixture
def candidate_file(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(CANDIDATE_FILE)
    return path


def _cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_compare_exit_codes(candidate_file, capsys):
    base = ["--preset", "trl-grpo", "--cases", "group-random-0", "clip-bounds", "--probes", "0"]
    code, out, _ = _cli(capsys, "compare", f"{candidate_file}:good", *base)
    assert code == 0 and "passed:" in out
    code, out, _ = _cli(capsys, "compare", f"{candidate_file}:late_eps", *base)
    assert code == 1 and "FAILED" in out
    code, out, _ = _cli(capsys, "compare", f"{candidate_file}:misspelled", *base)
    assert code == 1 and "closest known: 'advantages'" in out
    code, out, err = _cli(capsys, "compare", f"{candidate_file}:listy", *base)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert err.startswith("oracle compare: error: listy returned a list on case")
    code, _, err = _cli(capsys, "compare", f"{candidate_file}:good", *base, "--param", "betaa=1")
    assert code == 2 and "has no parameter 'betaa'; closest: beta" in err
    code, _, err = _cli(capsys, "compare", f"{candidate_file}:good", *base,
                        "--param", "loss_type='ppo'")
    assert code == 2 and "rejected every case" in err and "unknown option 'ppo'" in err


def test_cli_param_reaches_the_preset_and_the_candidate(candidate_file, capsys):
    base = ["--preset", "trl-grpo", "--cases", "group-random-0", "clip-bounds", "--probes", "0"]
    # the candidate sets epsilon_high itself: with the same --param both agree
    code, _, _ = _cli(capsys, "compare", f"{candidate_file}:late_eps", *base,
                      "--param", "epsilon_high=0.28")
    assert code == 0
    code, out, _ = _cli(capsys, "diagnose", f"{candidate_file}:late_eps", *base)
    assert code == 1 and "epsilon_high=0.28" in out
    code, out, _ = _cli(capsys, "diagnose", f"{candidate_file}:good", *base,
                        "--param", "beta=0.04")
    assert code == 0, out


def test_golden_verify_is_strict_on_names(tmp_path):
    import json

    from ppo_numpy.oracle.golden import export, verify

    path = export(tmp_path, PRESET, CASES[:1])
    manifest = json.loads(path.read_text())
    scalars = manifest["cases"][0]["expected_scalars"]
    scalars["policy_los"] = scalars.pop("policy_loss")  # a stored name the preset lacks
    path.write_text(json.dumps(manifest))
    report, problems = verify(tmp_path)
    assert not report.passed
    text = str(report)
    assert "'policy_loss' is not an output of the reference; closest known: 'policy_los'" in text
    assert "policy_los: not returned by the candidate" in text
    assert any("no expected value for policy_loss" in p for p in problems)
