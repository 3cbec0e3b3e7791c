"""The oracle's comparison: pass rule, worst element and its inputs, masks, dtypes, kinks."""

from pathlib import Path

import numpy as np
import pytest

from ppo_numpy.oracle import compare as C
from ppo_numpy.oracle.cases import generate_cases
from ppo_numpy.oracle.compare import (
    TOLERANCES,
    Tolerance,
    assert_matches,
    cast_case,
    compare,
    compare_output,
    compare_outputs,
    error_ratio,
    to_bfloat16,
)
from ppo_numpy.oracle.group_cases import generate_group_cases
from ppo_numpy.oracle.presets import get_preset

TOL = Tolerance(rtol=0.25, atol=0.5, unit_roundoff=2.0**-53)


def toy_case():
    mask = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    inputs = {n: np.arange(6.0).reshape(2, 3) + k for k, n in
              enumerate(("logp", "logp_old", "logp_ref", "values", "old_values"))}
    inputs.update(scores=np.array([10.0, 20.0]), mask=mask)
    return {"name": "toy", "inputs": inputs, "params": {"gamma": 0.5}}


# --- bfloat16 rounding ------------------------------------------------------------------------

def bf16_by_frexp(x):
    """Round to 8 significant bits with float64 arithmetic (np.round is half to even)."""
    m, e = np.frexp(np.asarray(x, dtype=np.float64))  # x = m 2^e, 0.5 <= |m| < 1
    return np.ldexp(np.round(m * 256) / 256, e)


def test_to_bfloat16_matches_rounding_to_8_significant_bits():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 1, 2000), rng.normal(0, 1e6, 500), rng.normal(0, 1e-6, 500)])
    x = x.astype(np.float32)
    got = to_bfloat16(x)
    assert got.dtype == np.float32
    assert np.all(got.view(np.uint32) & 0xFFFF == 0)
    assert np.array_equal(got.astype(np.float64), bf16_by_frexp(x))


def test_to_bfloat16_ties_specials_and_overflow():
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even (1); 1 + 3 2^-8: to 1 + 2^-6
    assert to_bfloat16([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 3 * 2**-8)]).tolist() == [
        1.0, 1 + 2**-6, -(1 + 2**-6)]
    out = to_bfloat16([np.nan, np.inf, -np.inf, 3.4e38, 0.0])
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == -np.inf
    assert out[3] == np.inf and out[4] == 0.0


def test_cast_case_rounds_inputs_and_keeps_the_original():
    case = generate_cases(0, ["garbage-in-padding"])[0]
    before = {k: v.copy() for k, v in case["inputs"].items()}
    f32 = cast_case(case, "float32")
    bf = cast_case(case, "bfloat16")
    for k in before:
        assert np.array_equal(case["inputs"][k], before[k], equal_nan=True)
        assert f32["inputs"][k].dtype == np.float32 and bf["inputs"][k].dtype == np.float32
        assert np.array_equal(bf["inputs"][k], bf16_by_frexp(before[k]).astype(np.float32),
                              equal_nan=True)


@pytest.mark.parametrize("bad", ["float16", "int32", None])
def test_unknown_dtype(bad):
    with pytest.raises(ValueError, match="dtype"):
        C.check_dtype(bad)


def test_dtype_aliases():
    assert C.check_dtype(np.float32) == "float32" and C.check_dtype("bf16") == "bfloat16"
    assert C.check_dtype(np.dtype("float64")) == "float64"


# --- the pass rule, the worst element, the inputs at it ----------------------------------------

def test_pass_rule_at_the_boundary():
    # allowed = atol + rtol |e| = 0.5 + 0.25 * 2 = 1
    assert compare_output("y", 3.0, 2.0, tolerance=TOL).passed
    assert not compare_output("y", 3.0 + 2**-40, 2.0, tolerance=TOL).passed
    assert compare_output("y", 0.5, 0.0, tolerance=TOL).passed


def test_worst_element_errors_and_inputs():
    case = toy_case()
    e = np.array([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]])
    a = np.array([[1.5, 2.0, 9.0], [2.0, 0.0, 0.0]])
    row = compare_output("advantages", a, e, mask=case["inputs"]["mask"],
                         inputs=case["inputs"], params=case["params"], case_name="toy",
                         tolerance=TOL)
    # (0, 2) is padding; errors at valid places: 0.5 (allowed 0.75), 0, 2.0 (allowed 1.5)
    assert not row.passed
    assert row.worst_index == (1, 0)
    assert row.max_abs_err == 2.0 and row.max_rel_err == 0.5
    assert (row.expected, row.actual, row.allowed) == (4.0, 2.0, 1.5)
    assert row.n_compared == 3
    # inputs at (1, 0): logp = arange(6)[3] + 0 = 3, logp_old = 4, ..., scores[1] = 20
    assert row.inputs == {"logp": 3.0, "logp_old": 4.0, "logp_ref": 5.0, "values": 6.0,
                          "old_values": 7.0, "scores[1]": 20.0, "mask": 1.0}
    text = row.describe()
    assert "toy / advantages at (1, 0): expected 4.0, got 2.0" in text
    assert "scores[1]=20.0" in text and "gamma=0.5" in text


def test_nan_at_padding_never_fails_nan_at_a_valid_place_does():
    mask = np.array([[1.0, 0.0]])
    e = np.array([[1.0, np.nan]])
    ok = compare_output("r", np.array([[1.0, np.inf]]), e, mask=mask, tolerance=TOL)
    assert ok.passed and ok.max_abs_err == 0.0
    bad = compare_output("r", np.array([[np.nan, 0.0]]), np.array([[1.0, 0.0]]), mask=mask,
                         tolerance=TOL)
    assert not bad.passed and bad.max_abs_err == np.inf and bad.worst_index == (0, 0)


def test_shape_mismatch_and_unreadable_output_fail():
    row = compare_output("r", np.zeros(3), np.zeros(4), tolerance=TOL)
    assert not row.passed and "shape (3,)" in row.note
    row = compare_output("r", "abc", np.zeros(4), tolerance=TOL)
    assert not row.passed and "cannot be read" in row.note


def test_missing_outputs_listed_or_failed():
    case = toy_case()
    expected = {"policy_loss": 1.0, "value_loss": 2.0}
    report = compare_outputs({"policy_loss": 1.0}, expected, case=case)
    assert report.unchecked == {"value_loss": ["toy"]} and not report.passed
    assert "FAIL: not returned by the candidate: value_loss" in str(report)
    with pytest.raises(AssertionError, match="did not return every output"):
        assert_matches({"policy_loss": 1.0}, expected, case=case)
    # restricted to what it returns, it passes
    assert assert_matches({"policy_loss": 1.0}, expected, case=case, outputs=["policy_loss"])
    with pytest.raises(AssertionError, match="value_loss: not returned by the candidate"):
        assert_matches({"policy_loss": 1.0}, expected, case=case, outputs=["value_loss"])


def test_assert_matches_message_names_case_output_index_and_inputs():
    case = toy_case()
    e = {"dlogp": np.array([[0.1, 0.2, 0.0], [0.3, 0.0, 0.0]])}
    a = {"dlogp": np.array([[0.1, 0.2, 7.0], [0.3 + 1e-6, 0.0, 0.0]])}
    assert_matches(a, e, "float32", case=case)
    with pytest.raises(AssertionError) as info:
        assert_matches(a, e, "float64", case=case)
    msg = str(info.value)
    assert "FAILED: 1 of 1" in msg and "toy / dlogp at (1, 0)" in msg
    assert f"expected 0.3, got {0.3 + 1e-6!r}" in msg and "logp_old=4.0" in msg


# --- kinks -------------------------------------------------------------------------------------

def test_kink_range_accepts_values_between_the_one_sided_ones():
    e = np.array([1.0, 1.0])
    alts = [np.array([1.0, 0.0]), np.array([1.0 + 1e-17, 0.0])]
    tol = TOLERANCES["float64"]
    half = compare_output("g", np.array([1.0, 0.5]), e, alternatives=alts, tolerance=tol)
    assert half.passed and half.n_kinks == 1 and "at a kink" in half.note
    out = compare_output("g", np.array([1.0, 1.5]), e, alternatives=alts, tolerance=tol)
    assert not out.passed and out.max_abs_err == 0.5
    without = compare_output("g", np.array([1.0, 0.5]), e, tolerance=tol)
    assert not without.passed and without.n_kinks == 0


def test_kink_reaching_an_infinity_accepts_that_infinity():
    # 1 - error / var with var = 0 is -inf; a probe that makes var > 0 gives -1e20 instead
    e = np.array([-np.inf, 2.0])
    alts = [np.array([-1e20, 2.0])]
    tol = TOLERANCES["float64"]
    same = compare_output("v", np.array([-np.inf, 2.0]), e, alternatives=alts, tolerance=tol)
    assert same.passed and same.n_kinks == 1 and same.max_abs_err == 0.0
    between = compare_output("v", np.array([-3e20, 2.0]), e, alternatives=alts, tolerance=tol)
    assert between.passed
    # 0 lies 1e20 above the range [-inf, -1e20]
    outside = compare_output("v", np.array([0.0, 2.0]), e, alternatives=alts, tolerance=tol)
    assert not outside.passed and outside.max_abs_err == 1e20
    wrong_sign = compare_output("v", np.array([np.inf, 2.0]), e, alternatives=alts,
                                tolerance=tol)
    assert not wrong_sign.passed and wrong_sign.max_abs_err == np.inf


def float32_kink_input():
    """logp, logp_old (float32-exact) with float64 rho > 1.2 but float32 rho <= float32(1.2)."""
    for logp_old in np.linspace(-3.0, -0.5, 11, dtype=np.float32):
        x = np.float32(logp_old + np.log(1.2))
        for _ in range(40):
            rho64 = np.exp(np.float64(x) - np.float64(logp_old))
            rho32 = np.exp(x - logp_old)
            if rho64 > 1.2 and rho32 <= np.float32(1.2):
                return float(x), float(logp_old)
            x = np.nextafter(x, np.float32(0))
    raise AssertionError("no float32 kink input found")


def test_compare_recognises_a_clip_kink_crossed_by_float32_rounding():
    logp, logp_old = float32_kink_input()
    mask = np.ones((1, 2))
    case = {"name": "kink", "params": {}, "inputs": {
        "logp": np.array([[logp, -0.5]]), "logp_old": np.array([[logp_old, -0.5]]),
        "mask": mask}}

    def reference(c):
        rho = np.exp(c["inputs"]["logp"] - c["inputs"]["logp_old"])
        return {"inside": (rho <= 1.2).astype(np.float64)}

    def candidate(c):
        x = c["inputs"]
        assert x["logp"].dtype == np.float32
        rho = np.exp(x["logp"] - x["logp_old"])
        return {"inside": (rho <= np.float32(1.2)).astype(np.float64)}

    assert reference(case)["inside"][0, 0] == 0.0 and candidate(cast_case(case, "float32"))[
        "inside"][0, 0] == 1.0
    with_probes = compare(candidate, reference, [case], "float32")
    assert with_probes.passed and with_probes.rows[0].n_kinks == 1
    assert not compare(candidate, reference, [case], "float32", probes=0).passed


# --- compare end to end ------------------------------------------------------------------------

def smooth_reference(case):
    """A small stand-in with per-token, per-row and scalar outputs."""
    x = case["inputs"]
    m = x["mask"] == 1
    g = case["params"].get("gamma", 1.0)
    adv = np.where(m, g * (x["values"] - x["old_values"]) + x["logp"], 0.0)
    return {"advantages": adv, "row_sum": np.where(m, adv, 0.0).sum(axis=1),
            "policy_loss": float(np.where(m, adv**2, 0.0).sum() / m.sum())}


def test_compare_identical_passes_and_a_bug_fails_only_its_output():
    cases = generate_cases(0, ["random-0", "random-1", "garbage-in-padding", "left-padding"])
    report = compare(smooth_reference, smooth_reference, cases)
    assert report.passed and len(report.rows) == 12
    assert report.max_errors()["advantages"] == (0.0, 0.0)

    def buggy(case):
        out = smooth_reference(case)
        out["policy_loss"] = out["policy_loss"] * 0.5
        return out

    report = compare(buggy, smooth_reference, cases)
    assert {r.output for r in report.failures} == {"policy_loss"}
    assert len(report.failures) == 4
    assert "FAIL" in str(report) and "FAILED: 4 of 12" in str(report)


@pytest.mark.parametrize("name", ["trl-grpo", "verl-grpo", "openrlhf-grpo"])
def test_critic_free_presets_compare_with_the_default_probes(name):
    # a regression: the probes moved the prompt ids, which are labels (1.0 became
    # 1.0000000000000009 and the preset raised TypeError); they now move only values
    preset = get_preset(name)
    case = generate_group_cases(0, ["group-random-0"])[0]
    probes = C.probe_cases(case, "float64", 3)
    for probe in probes:
        assert np.array_equal(probe["inputs"]["groups"], case["inputs"]["groups"])
        assert np.array_equal(probe["inputs"]["mask"], case["inputs"]["mask"])
    m = case["inputs"]["mask"] == 1
    assert not np.array_equal(probes[0]["inputs"]["logp"][m], case["inputs"]["logp"][m])
    assert compare(preset, name).passed  # probes=8 by default

    def buggy(case):
        out = preset(case)
        out["policy_loss"] = out["policy_loss"] * 0.5
        return out

    assert {r.output for r in compare(buggy, name).failures} == {"policy_loss"}


def test_compare_gives_the_candidate_rounded_inputs_and_the_reference_the_same_values():
    seen = {}

    def reference(case):
        seen["ref"] = case["inputs"]["logp"]
        return smooth_reference(case)

    def candidate(case):
        seen["cand"] = case["inputs"]["logp"]
        return smooth_reference(case)

    case = generate_cases(0, ["random-2"])
    for dtype in ("float32", "bfloat16"):
        report = compare(candidate, reference, case, dtype, probes=0)
        assert seen["ref"].dtype == np.float64 and seen["cand"].dtype == np.float32
        assert np.array_equal(seen["ref"], seen["cand"].astype(np.float64))
        assert report.passed and report.dtype == dtype
    assert np.all(seen["cand"].view(np.uint32) & 0xFFFF == 0)


def test_outputs_rounded_to_a_dtype_pass_its_tolerance_and_not_a_finer_one():
    """Rounding the outputs is the least error any computation in that dtype makes."""
    cases = generate_cases(0, ["random-0", "random-3", "multi-turn-holes"])

    def rounded(dtype):
        def candidate(case):
            out = smooth_reference(as64(case))
            return {k: C.round_to_dtype(v, dtype) for k, v in out.items()}
        return candidate

    def as64(case):
        return {**case, "inputs": {k: np.asarray(v, np.float64) for k, v in case["inputs"].items()}}

    assert compare(rounded("float32"), smooth_reference, cases, "float32").passed
    assert not compare(rounded("float32"), smooth_reference, cases, "float64").passed
    assert compare(rounded("bfloat16"), smooth_reference, cases, "bfloat16").passed
    assert not compare(rounded("bfloat16"), smooth_reference, cases, "float32").passed


def test_candidate_errors_and_rejected_cases_are_reported():
    cases = generate_cases(0, ["random-0", "one-valid-token"])

    def reference(case):
        if case["inputs"]["mask"].sum() < 2:
            raise ValueError("mask: needs two tokens")
        return smooth_reference(case)

    def crashing(case):
        raise RuntimeError("boom")

    report = compare(crashing, reference, cases)
    assert report.rejected == {"one-valid-token": "ValueError: mask: needs two tokens"}
    assert not report.passed
    assert "candidate raised RuntimeError: boom" in str(report)


def test_outputs_must_be_a_list_not_a_string():
    cases = generate_cases(0, ["random-0"])
    seed = get_preset("seed")
    with pytest.raises(TypeError, match="outputs: expected a list of output names"):
        compare(seed, seed, cases, outputs="advantages")
    with pytest.raises(TypeError, match="outputs: expected a list of output names"):
        assert_matches(seed(cases[0]), seed(cases[0]), outputs="advantages")


def test_cast_case_rounds_values_but_not_the_prompt_ids():
    # bfloat16 has 8 significant bits: 257 rounds to 256 (ties to even), 1.01 to 1.0078125
    case = {"name": "c", "inputs": {"scores": np.array([1.01, 2.0]),
                                    "groups": np.array([256.0, 257.0]),
                                    "mask": np.ones((2, 1))}}
    cast = cast_case(case, "bfloat16")
    assert cast["inputs"]["groups"].tolist() == [256.0, 257.0]
    assert cast["inputs"]["scores"].tolist() == [1.0078125, 2.0]
    assert to_bfloat16(np.array([257.0])).tolist() == [256.0]  # what the ids would have been


def test_bad_probes_argument():
    with pytest.raises(ValueError, match="probes"):
        compare(smooth_reference, smooth_reference, [], probes=-1)


def test_docstring_table_lists_the_tolerances():
    doc = C.__doc__
    for dtype, t in TOLERANCES.items():
        line = next(ln for ln in doc.splitlines() if ln.startswith(dtype)).split()
        assert (float(line[2]), float(line[3])) == (t.rtol, t.atol), line
    doc_table = (Path(__file__).resolve().parents[1] / "docs" / "oracle.md").read_text()
    for dtype, t in TOLERANCES.items():
        row = next(ln for ln in doc_table.splitlines() if ln.startswith(f"| {dtype} |"))
        cells = [c.strip() for c in row.split("|")]
        assert (float(cells[3]), float(cells[4])) == (t.rtol, t.atol), row
    assert TOLERANCES["float64"].rtol < TOLERANCES["float32"].rtol < TOLERANCES["bfloat16"].rtol
    for t in TOLERANCES.values():
        # several roundings of an O(1) number fit in both parts of every tolerance
        assert t.atol >= 10 * t.unit_roundoff and t.rtol >= 10 * t.unit_roundoff


def test_error_ratio_is_each_elements_error_over_its_own_allowance():
    # tolerance 1e-9 |expected| + 0: element 0 may miss by 1e-3, element 1 by 1e-9
    tol = Tolerance(rtol=1e-9, atol=0.0, unit_roundoff=2.0 ** -53)
    expected = np.array([1e6, 1.0])
    actual = np.array([1e6 + 5e-4, 1.0 + 9e-10])  # ratios 0.5 and 0.9: both pass
    row = compare_output("x", actual, expected, tolerance=tol)
    assert row.passed and row.worst_index == (1,)
    assert row.max_abs_err == pytest.approx(5e-4)   # at element 0
    assert error_ratio(row) == pytest.approx(0.9, rel=1e-6)  # not 5e-4 / 1e-9
    failing = compare_output("x", np.array([1e6, 1.0 + 3e-9]), expected, tolerance=tol)
    assert not failing.passed and error_ratio(failing) == pytest.approx(3.0, rel=1e-6)
    assert error_ratio(compare_output("x", expected, expected, tolerance=tol)) == 0.0
