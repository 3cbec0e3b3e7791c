"""The report never misleads (issue 34): a comparison that compared nothing never passes
(compare, assert_matches, diagnose, golden verify, the CLI); the looser-dtype hint only for a
candidate whose outputs are of that dtype and whose differences no convention explains; each
row's worst error over its own allowance and the verdict first; an ambiguous --param value is
an error naming both readings."""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.oracle.compare import (
    TOLERANCES,
    assert_matches,
    compare,
    compare_output,
    compare_outputs,
    returned_dtype,
)
from ppo_numpy.oracle.diagnose import diagnose
from ppo_numpy.oracle.golden import export, verify
from ppo_numpy.oracle.group_cases import generate_group_cases
from ppo_numpy.oracle.presets import get_preset
from ppo_numpy.programs.oracle import main, parse_params

VERL = get_preset("verl-grpo")
TRL = get_preset("trl-grpo")
#: group cases without logp_rollout: verl-grpo's rollout_is='token' rejects every one
NO_ROLLOUT = generate_group_cases(0, ["group-random-0", "clip-bounds"], preset="verl-grpo")
REJECT_ALL = {"rollout_is": "token"}


def _preset_itself(case):
    return VERL(case)


def test_every_case_rejected_passes_nowhere(tmp_path, capsys):
    # the reference rejects every case: nothing is compared
    report = compare(_preset_itself, VERL, NO_ROLLOUT, params=REJECT_ALL)
    assert report.rows == [] and len(report.rejected) == 2
    assert not report.passed
    assert str(report).splitlines()[0].startswith("NOT passed: nothing compared (the "
                                                  "reference rejected all 2 case(s)")
    d = diagnose(_preset_itself, VERL, NO_ROLLOUT, params=REJECT_ALL, probes=0, pairs=False)
    assert not d.passed and "nothing compared" in str(d).splitlines()[0]
    # assert_matches on two empty output dicts: nothing compared, an AssertionError
    with pytest.raises(AssertionError, match="NOT passed: nothing compared"):
        assert_matches({}, {})
    assert not compare_outputs({}, {}).passed
    # golden files whose every case the preset rejects: verify does not verify
    cases = [{**c, "params": dict(REJECT_ALL)} for c in NO_ROLLOUT]
    export(tmp_path / "g", VERL, cases)
    report, problems = verify(tmp_path / "g")
    assert problems == [] and report.rows == [] and not report.passed
    assert main(["oracle", "verify", str(tmp_path / "g")][1:]) == 1
    assert "NOT verified" in capsys.readouterr().out
    # the CLI: an error (exit 2), never 0
    for command in ("compare", "diagnose"):
        code = main([command, "tests.test_oracle_report:_preset_itself", "--preset",
                     "verl-grpo", "--cases", "group-random-0", "clip-bounds", "--param",
                     "rollout_is='token'", "--probes", "0"])
        assert code == 2
        assert "rejected every case" in capsys.readouterr().err


def test_no_case_given_is_not_a_pass():
    report = compare(_preset_itself, VERL, [])
    assert not report.passed and report.verdict == "NOT passed: nothing compared (no case " \
                                                   "was run)"


# -- the looser-dtype hint


def _ddof_0(case):
    """A float64 candidate with a convention wrong: the group std without Bessel's correction."""
    return TRL(case, std_ddof=0)


PLANTED_CASES = generate_group_cases(0, ["group-random-0", "group-random-1"], preset="trl-grpo")
LOSS = ["policy_loss", "dlogp"]


def test_a_convention_bug_in_float64_gets_no_bfloat16_hint():
    # a planted mistake of the kind: at dtype float32 every failure of std ddof 0 vs
    # 1 on the loss passes at bfloat16's 5%, yet the candidate returns float64 numbers
    report = compare(_ddof_0, TRL, PLANTED_CASES, "float32", probes=0, outputs=LOSS)
    assert not report.passed
    assert {r.passes_at for r in report.failures} == {"bfloat16"}  # the old hint's condition
    assert report.precision_hint() == ""
    assert "pass dtype=" not in str(report)
    d = diagnose(_ddof_0, TRL, PLANTED_CASES, "float32", probes=0, pairs=False, outputs=LOSS)
    assert "pass dtype=" not in str(d)
    assert "std_ddof=0" in d.summary()


def test_the_hint_names_the_returned_dtype_and_what_the_tolerance_hides():
    # a candidate that computes in float32 (the seed preset's numbers rounded to float32),
    # compared at float64: the hint, saying what float32's tolerance would hide
    from ppo_numpy.oracle.cases import generate_cases

    seed = get_preset("seed")

    def in_float32(case):
        return {k: np.asarray(v, np.float32) for k, v in seed(case).items()}

    hint = compare(in_float32, seed, generate_cases(0, ["random-0"]), probes=0).precision_hint()
    assert hint == ("matches at float32 tolerance: pass dtype='float32' (the candidate "
                    "returned float32 outputs; that tolerance lets through any difference up "
                    "to 1e-05 + 0.0001 |value|: a convention that changes an output by less "
                    "is not seen)")


def test_a_bfloat16_candidate_with_a_convention_bug_gets_the_convention_not_the_hint():
    torch = pytest.importorskip("torch")

    def ddof_0_bf16(case):
        return {k: torch.tensor(np.asarray(v)).to(torch.bfloat16)
                for k, v in _ddof_0(case).items()}

    report = compare(ddof_0_bf16, TRL, PLANTED_CASES, "float32", probes=0, outputs=LOSS)
    assert report.precision_hint().startswith("matches at bfloat16 tolerance")
    d = diagnose(ddof_0_bf16, TRL, PLANTED_CASES, "float32", probes=0, pairs=False,
                 outputs=LOSS)
    assert "std_ddof=0" in d.summary() and "pass dtype=" not in d.summary()


def test_returned_dtype():
    assert returned_dtype(np.zeros(2, np.float32)) == "float32"
    assert returned_dtype(np.zeros(2)) == "float64"
    assert returned_dtype(1.5) == returned_dtype(3) == "float64"
    assert returned_dtype(np.float16(1)) == "float16"


# -- each row's worst error over its allowance, the verdict first


def test_rows_give_the_worst_error_over_its_allowance():
    # an extreme value passes with a large absolute error (its allowance scales with it) and
    # a zero expected value fails with an infinite relative error: the table's number is
    # the error over the allowance, <= 1 exactly when the row passes
    case = {"name": "toy", "inputs": {"mask": np.ones((1, 2))}}
    expected = {"big": np.array([[1e30, 1.0]]), "zero": 0.0}
    actual = {"big": np.array([[1e30 + 1e15, 1.0]]), "zero": 1e-13}
    report = compare_outputs(actual, expected, case=case)
    lines = str(report).splitlines()
    assert lines[0] == "passed: 2 output comparisons"
    row = {line.split()[0]: line.split() for line in lines if line.startswith(("big", "zero"))}
    # ~1e15 (the float64 difference of the two stored values) over 1e-12 + 1e-9 * 1e30:
    # a ratio of ~1e-6; 1e-13 over 1e-12: 0.1
    err = float(actual["big"][0, 0] - expected["big"][0, 0])
    assert float(row["big"][1]) == pytest.approx(err / (1e-12 + 1e-9 * 1e30), rel=1e-2)
    assert float(row["zero"][1]) == pytest.approx(0.1, rel=1e-2)
    assert row["big"][-1] == row["zero"][-1] == "ok"
    bad = compare_outputs({"big": actual["big"], "zero": 2e-12}, expected, case=case)
    first = str(bad).splitlines()[0]
    assert first == "FAILED: 1 of 2 output comparisons (zero)"
    assert compare_output("zero", 2e-12, 0.0, tolerance=TOLERANCES["float64"]).worst_ratio \
        == pytest.approx(2.0)


def test_the_diagnosis_names_its_conventions_before_the_table():
    text = str(diagnose(_ddof_0, TRL, PLANTED_CASES, probes=0, pairs=False)).splitlines()
    at = next(i for i, line in enumerate(text) if "std_ddof=0" in line)
    table = next(i for i, line in enumerate(text) if line.startswith("oracle comparison"))
    assert at < table and at <= 2


# -- --param values


def test_an_ambiguous_param_value_is_an_error_naming_both_readings():
    with pytest.raises(ValueError) as err:
        parse_params(["rollout_is_threshold=0.5_5"], VERL)
    msg = str(err.value)
    assert "rollout_is_threshold" in msg and "0.55" in msg and "'0.5_5'" in msg
    # quoted: the string (IcePop's bounds); without an underscore: the number
    assert parse_params(["rollout_is_threshold='0.5_5'"], VERL) == {
        "rollout_is_threshold": "0.5_5"}
    assert parse_params(["rollout_is_threshold=0.55"], VERL) == {"rollout_is_threshold": 0.55}
    assert parse_params(["loss_mode=gspo"], VERL) == {"loss_mode": "gspo"}
