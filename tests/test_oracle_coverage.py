"""A candidate says what it implements; the report says what it covered (issue 36, item 3).

The design: a candidate raises NotImplementedError("option=value") on a case it does not
implement (``ppo_numpy.oracle.coverage.implements``); the case is listed, not compared, and
the report ends with the option values compared and not implemented. Also: the case
selection by what the cases exercise (``--cases rollout``), ``omit=`` and ``outputs=`` on
the cases where the reference produces an output.
"""

from __future__ import annotations

import pytest

from ppo_numpy.oracle.compare import compare
from ppo_numpy.oracle.coverage import coverage_of, implements, not_implemented_option
from ppo_numpy.oracle.diagnose import diagnose
from ppo_numpy.oracle.group_cases import SELECTIONS, cases_for, generate_group_cases
from ppo_numpy.oracle.presets import get_preset
from ppo_numpy.programs.oracle import main as oracle_main

TRL = get_preset("trl-grpo")
CASES = cases_for(TRL, 0)


def dapo_only(case):
    p = {**TRL.parameters, **case["params"]}
    implements(p, loss_type=("dapo",))
    return TRL(case)


def test_a_case_the_candidate_does_not_implement_is_listed_not_compared():
    report = compare(dapo_only, TRL, CASES, probes=0)
    skipped = {c["name"] for c in CASES if c["params"].get("loss_type", "dapo") != "dapo"}
    assert set(report.not_implemented) == skipped == {
        "cispo-loss", "dr-grpo-loss", "sapo-loss", "vespo-loss", "luspo-loss"}
    assert report.not_implemented["cispo-loss"] == "loss_type='cispo'"
    assert not {r.case for r in report.rows} & skipped
    assert report.passed, str(report)  # what it compared matches
    text = str(report)
    assert report.verdict.endswith("(5 cases not implemented by the candidate)")
    assert "not implemented by the candidate: loss_type='cispo' (not compared: cispo-loss)" in \
        text
    # the report ends with the coverage: the values compared, on how many cases, and not
    n = len(CASES) - 5
    tail = text.splitlines()[-len(report.coverage.lines()):]
    assert tail[0] == (f"coverage: {n} of {len(CASES)} cases compared; 5 not implemented by "
                       "the candidate, 0 rejected by the reference")
    (line,) = [t for t in tail if t.startswith("  loss_type:")]
    assert line == (f"  loss_type: compared 'dapo' ({n} cases); not implemented 'cispo' (1), "
                    "'dr_grpo' (1), 'sapo' (1), 'vespo' (1), 'luspo' (1)")


def test_a_comparison_that_compared_nothing_never_passes():
    def nothing(case):
        raise NotImplementedError("loss_type='dapo'")

    report = compare(nothing, TRL, CASES[:3], probes=0)
    assert not report.passed and not report.rows
    assert report.verdict == ("NOT passed: nothing compared (the candidate implements none of "
                              "the 3 case(s) the reference accepts)")
    d = diagnose(nothing, TRL, CASES[:3], probes=0)
    assert not d.passed
    assert d.summary() == ("diagnosis: nothing compared (the candidate implements none of the "
                           "3 cases the preset accepts)")


def test_the_diagnosis_leaves_out_what_the_candidate_does_not_implement():
    # a wrong eps on the cases it implements is named; the others are listed
    def wrong_eps(case):
        dapo_only(case)
        return TRL(case, std_eps=1e-6)

    d = diagnose(wrong_eps, TRL, CASES, probes=0)
    assert d.explained_by("advantages")[0] == "std_eps=1e-06"
    assert "cispo-loss" in d.report.not_implemented
    assert "not implemented by the candidate: loss_type='vespo'" in str(d)


def test_implements_by_hand():
    implements({"a": 1, "b": "x"}, a=(1, 2), b=("x",))
    with pytest.raises(NotImplementedError, match=r"^b='y'$"):
        implements({"a": 1, "b": "y"}, a=(1, 2), b=("x",))
    with pytest.raises(NotImplementedError, match=r"^a=True$"):
        implements({"a": True}, a=(1,))          # True is not the number 1 here
    with pytest.raises(NotImplementedError, match=r"^t=\(0.5, 2.0\)$"):
        implements({"t": (0.5, 2.0)}, t=((0.5, 5.0),))
    implements({"t": [0.5, 5.0]}, t=((0.5, 5.0),))  # a list and a tuple: the same bounds
    with pytest.raises(TypeError, match="'c' is not a parameter of the case"):
        implements({"a": 1}, c=(1,))
    with pytest.raises(TypeError, match="expected a tuple of supported values"):
        implements({"a": "x"}, a="x")


def test_a_message_is_an_option_only_when_it_names_one():
    assert not_implemented_option("beta=0.04", ["beta"]) == ("beta", 0.04)
    assert not_implemented_option("rollout_is_threshold='0.5_2.0'",
                                  ["rollout_is_threshold"]) == ("rollout_is_threshold",
                                                                "0.5_2.0")
    assert not_implemented_option("x = y z", ["x"]) == ("x", "y z")  # (not a literal)
    assert not_implemented_option("gamma=1", ["beta"]) is None
    assert not_implemented_option("", ["beta"]) is None


def test_a_message_that_names_no_option_is_listed_as_it_is():
    def no_gspo(case):
        if case["params"].get("importance_sampling_level") == "sequence":
            raise NotImplementedError("no GSPO yet")
        return TRL(case)

    report = compare(no_gspo, TRL, CASES, probes=0)
    assert "not implemented by the candidate: no GSPO yet (not compared: " in str(report)
    assert "importance_sampling_level: compared 'token'" in str(report)


def test_the_coverage_counts_a_correction_on_the_cases_with_logp_rollout_only():
    cases = generate_group_cases(0, ["group-random-0", "rollout-close", "rollout-truncate"],
                                 preset="trl-grpo")
    cov = coverage_of(TRL, cases, {"group-random-0", "rollout-close"},
                      {"rollout-truncate": "vllm_importance_sampling_mode='token_truncate'"}, {})
    entry = cov.options["vllm_importance_sampling_mode"]
    assert entry["n_with"] == 2 and entry["needs"] == "logp_rollout"
    assert entry["compared"] == {"sequence_mask": 1}
    assert entry["not implemented"] == {"token_truncate": 1}
    assert (cov.n_cases, cov.n_compared, cov.n_not_implemented) == (3, 2, 1)


def test_omit_leaves_out_a_named_output_and_says_so():
    def without_reward_std(case):
        out = TRL(case)
        out.pop("stat/reward_std")
        return out

    assert not compare(without_reward_std, TRL, CASES[:4], probes=0).passed
    report = compare(without_reward_std, TRL, CASES[:4], probes=0, omit=["stat/reward_std"])
    assert report.passed and report.omitted == ("stat/reward_std",)
    assert "left out by request (omit=), not compared: stat/reward_std" in str(report)
    assert "stat/reward_std" not in {r.output for r in report.rows}
    # returned anyway: still not compared
    assert compare(TRL, TRL, CASES[:2], probes=0, omit=["stat/reward_std"]).passed
    with pytest.raises(ValueError, match="omit: 'stat/reward_sd' is not an output of the "
                                         "reference; closest known: 'stat/reward_std'"):
        compare(TRL, TRL, CASES[:2], omit=["stat/reward_sd"])
    with pytest.raises(TypeError, match="single string"):
        compare(TRL, TRL, CASES[:2], omit="stat/reward_std")


def test_outputs_compares_an_output_where_the_reference_produces_it():
    # stat/kl exists with beta > 0 only: compared on kl-in-loss, not failed elsewhere
    def with_kl(case):
        out = TRL(case)
        return {k: out[k] for k in ("policy_loss", "stat/kl") if k in out}

    report = compare(with_kl, TRL, CASES, probes=0, outputs=["policy_loss", "stat/kl"])
    assert report.passed, str(report)
    assert {r.case for r in report.rows if r.output == "stat/kl"} == {"kl-in-loss",
                                                                       "rollout-kl"}


def test_cases_rollout_selects_every_case_with_the_samplers_log_probs():
    for name in ("trl-grpo", "verl-grpo", "openrlhf-grpo"):
        every = cases_for(get_preset(name), 0)
        rollout = cases_for(get_preset(name), 0, ["rollout"])
        assert [c["name"] for c in rollout] == [c["name"] for c in every
                                                if "logp_rollout" in c["inputs"]]
        # the rule behind the word: a case carries logp_rollout iff it is named rollout-*
        assert all(("logp_rollout" in c["inputs"]) == c["name"].startswith("rollout-")
                   for c in every)
        assert all(c["params"] == e["params"] for c in rollout for e in every
                   if e["name"] == c["name"])
    assert set(SELECTIONS) == {"random", "edge", "rollout", "preset"}
    names = [c["name"] for c in generate_group_cases(0, ["random", "rollout-gspo", "random"],
                                                     preset="verl-grpo")]
    assert names == [f"group-random-{k}" for k in range(6)] + ["rollout-gspo"]
    with pytest.raises(ValueError, match="'rollout'"):
        generate_group_cases(0, ["rollouts"])


def test_the_ppo_cases_take_rollout_too():
    from ppo_numpy.oracle.cases import generate_cases

    assert [c["name"] for c in generate_cases(0, ["rollout"])] == ["rollout-mismatch"]


def test_cli_cases_rollout_omit_and_a_partial_candidate(tmp_path, capsys):
    src = tmp_path / "mine.py"
    src.write_text(
        "from ppo_numpy.oracle.coverage import implements\n"
        "from ppo_numpy.oracle.presets import get_preset\n"
        "P = get_preset('verl-grpo')\n"
        "def token_only(case):\n"
        "    p = {**P.parameters, **case['params']}\n"
        "    implements(p, rollout_is=('token',), bypass_mode=(False,))\n"
        "    out = P(case)\n"
        "    out.pop('stat/rollout_corr/kl')\n"
        "    return out\n")
    rc = oracle_main(["compare", f"{src}:token_only", "--preset", "verl-grpo", "--cases",
                      "rollout", "--omit", "stat/rollout_corr/kl", "--probes", "0"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "not implemented by the candidate: rollout_is=None (not compared: rollout-close, " \
        "rollout-far, rollout-one-token" in out
    assert "left out by request (omit=), not compared: stat/rollout_corr/kl" in out
    assert out.splitlines()[-1].startswith("  ") and "coverage:" in out
    (line,) = [t for t in out.splitlines() if t.startswith("  rollout_is,")]
    assert line.startswith("  rollout_is, on the 16 cases with logp_rollout: compared 'token' (")
    # nothing compared: exit 1, the verdict says why
    rc = oracle_main(["compare", f"{src}:token_only", "--preset", "verl-grpo", "--cases",
                      "group-random-0", "--probes", "0"])
    out = capsys.readouterr().out
    assert rc == 1 and out.startswith("NOT passed: nothing compared (the candidate implements "
                                      "none of the 1 case(s)")


def test_the_docs_worked_example_prints_what_the_docs_show(capsys):
    # docs/oracle.md, "Check an implementation that covers part of a framework": every line
    # of the verdicts, the lists and the coverage (the table's errors vary in their last
    # digits between CPU kinds, and so does a "max rel err": not these)
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "oracle.md").read_text()
    example = str(root / "examples" / "trl_token_truncate.py")
    common = ["--preset", "trl-grpo", "--dtype", "float32", "--outputs", "advantages",
              "policy_loss", "dlogp"]
    rollout = ["--cases", "rollout", "--param", "vllm_importance_sampling_mode=token_truncate"]
    runs = [(["compare", f"{example}:step", *common], 0),
            (["compare", f"{example}:step", *common, *rollout], 0),
            (["diagnose", f"{example}:step_without_clip_min", *common, *rollout], 1)]
    for argv, rc in runs:
        assert oracle_main(argv) == rc
        out = capsys.readouterr().out.splitlines()
        if argv[0] == "diagnose":  # (the docs show the diagnosis's own lines, before the report)
            out = out[:out.index("")]
        shown = [line for line in out if line.startswith((
            "passed:", "FAILED:", "not implemented by the candidate", "rejected by the",
            "coverage:", "  ", "diagnosis against", "    the vLLM", "match the preset"))]
        assert len(shown) >= 3, out
        for line in shown:
            assert line in doc, line
    # the example implements what it says: on those cases it matches
    assert "passed: 42 output comparisons (17 cases not implemented by the candidate)" in doc


def test_a_correction_switched_on_everywhere_rejects_the_other_cases_in_one_line():
    verl = get_preset("verl-grpo")
    cases = cases_for(verl, 0)
    report = compare(verl, verl, cases, probes=0, params={"rollout_is": "token"})
    without = [c["name"] for c in cases if "logp_rollout" not in c["inputs"]]
    assert sorted(report.rejected) == sorted(without)
    lines = [t for t in str(report).splitlines() if t.startswith("rejected by the reference")]
    assert len(lines) == 1 and lines[0].startswith(
        f"rejected by the reference, not compared: {', '.join(without)}: ValueError: "
        "verl-grpo: rollout_is='token' needs logp_rollout")
    assert lines[0].endswith("--cases rollout (cases=...) selects the cases with logp_rollout")
    assert report.passed  # (the preset against itself, on the cases with logp_rollout)


def test_a_numeric_option_with_many_values_is_given_as_its_range():
    from ppo_numpy.oracle.cases import generate_cases

    seed = get_preset("seed")
    report = compare(seed, seed, generate_cases(0), probes=0)
    (gamma,) = [t for t in report.coverage.lines() if t.startswith("  gamma:")]
    values = {c["params"].get("gamma", 1.0) for c in generate_cases(0)}
    assert len(values) > 4
    assert gamma == (f"  gamma: compared {len(values)} values from {min(values)!r} to "
                     f"{max(values)!r} ({len(report.cases)} cases)")
