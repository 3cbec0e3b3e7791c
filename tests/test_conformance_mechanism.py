"""The conformance suite's own mechanism (issue 34), without the frameworks: a framework
default that differs from the preset's is a failing pair naming the option; a configuration
field read that is neither mapped nor pinned is listed; the recorders log what is read and
keep the framework's isinstance checks true. (``make conformance`` runs it on the installed
releases; the closing note of issue 34 shows it failing on an edited release.)"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tests.conformance import coverage, framework_config
from tests.conformance.framework_config import Recorder, default_pairs, recording


def test_a_changed_framework_default_is_a_failing_pair(monkeypatch):
    # what GRPOConfig() would give with TRL's epsilon edited from 0.2 to 0.25
    def edited(name):
        return {"epsilon": ("GRPOConfig.epsilon", 0.25), "beta": ("GRPOConfig.beta", 0.0),
                "loss_type": ("GRPOConfig.loss_type", "dapo")}

    monkeypatch.setattr(framework_config, "framework_defaults", edited)
    pairs = {p[0]: p for p in default_pairs("trl-grpo")}
    assert pairs["epsilon"] == ("epsilon", 0.2, "GRPOConfig.epsilon", 0.25, False)
    assert pairs["beta"][-1] and pairs["loss_type"][-1]


def test_a_defining_option_may_differ(monkeypatch):
    monkeypatch.setattr(framework_config, "framework_defaults", lambda name: {
        "adv_estimator": ("algorithm.adv_estimator", "gae")})
    assert default_pairs("verl-grpo")[0][-1] is True


@pytest.mark.parametrize("a, b, same", [(0.2, 0.2, True), (1, 1.0, True), (None, None, True),
                                        (None, 0.0, False), (False, 0, False),
                                        ((0.5, 5.0), [0.5, 5], True), ("k1", "kl", False)])
def test_same(a, b, same):
    assert framework_config._same(a, b) is same


def test_an_unlisted_field_read_is_named():
    log = {"GRPOConfig.epsilon", "GRPOConfig.top_entropy_quantile", "GRPOConfig.new_knob"}
    assert coverage.unlisted("trl-grpo", log) == ["GRPOConfig.new_knob"]
    rows = coverage.table_lines({"trl-grpo": {"fields_read": sorted(log)}})
    assert "| `trl-grpo` | `GRPOConfig.new_knob` | **not listed: fails** |" in rows
    assert "| `trl-grpo` | `GRPOConfig.epsilon` | `epsilon` |" in rows


@dataclasses.dataclass(frozen=True)
class Inner:
    loss_mode: str = "vanilla"


@dataclasses.dataclass(frozen=True)
class Outer:
    clip: float = 0.2
    unused: int = 3
    inner: Inner = Inner()


def test_the_recorders_log_what_is_read():
    log = set()
    cfg = recording(Outer(), log, "Outer.")
    assert isinstance(cfg, Outer) and cfg.clip == 0.2 and cfg.inner.loss_mode == "vanilla"
    assert isinstance(cfg.inner, Inner)
    assert log == {"Outer.clip", "Outer.inner.loss_mode"}
    log2 = set()
    ns = Recorder(SimpleNamespace(a=SimpleNamespace(b=1), c=2), log2, "args.")
    assert ns.a.b == 1 and ns.get("c") == 2
    assert log2 == {"args.a.b", "args.c"}


def test_openrlhf_args_post_processing(monkeypatch):
    monkeypatch.setattr(framework_config, "openrlhf_parser_defaults", lambda: {
        "--actor.eps_clip": 0.2, "--actor.eps_clip_low_high": None,
        "--algo.advantage.is_correction_threshold": [5.0]})
    args = framework_config.openrlhf_args({"epsilon": 0.1}, framework_config.OPENRLHF)
    # train_ppo_ray.py: eps_clip_low_high from eps_clip; one threshold h is [0, h]
    assert args.actor.eps_clip_low_high == (0.1, 0.1)
    assert args.algo.advantage.is_correction_threshold == [0.0, 5.0]


def test_an_output_the_framework_returns_on_some_paths_only_is_named():
    # issue 34, defect 3: the preset logged stat/actor/pg_clipfrac on verl's bypass REINFORCE
    # path, where verl returns none; a candidate following verl was told it left it out. An
    # output compared on some cases and not returned on others fails, unless listed with why.
    from tests.conformance.run import partial_outputs

    unchecked = {"stat/actor/pg_clipfrac": ["c1", "c2"], "stat/critic/score/mean": ["c1"],
                 "stat/group_reward_std": ["c3"]}
    compared = {"stat/actor/pg_clipfrac": {}, "stat/group_reward_std": {}, "dlogp": {}}
    allowed = {"stat/group_reward_std": "groups of unequal sizes"}
    # (critic/score/mean is never returned: listed apart, as not returned)
    assert partial_outputs(unchecked, compared, allowed) == {"stat/actor/pg_clipfrac": 2}
    assert partial_outputs({}, compared, allowed) == {}


def test_the_nan_padding_claims_are_read_from_the_docs_and_checked():
    # issue 34, defect 7: docs/conventions.md said NaN at padding makes verl's loss NaN; its
    # table now says which cells, and make conformance runs verl on each
    import math
    from pathlib import Path

    from tests.conformance import nan_padding

    docs = (Path(__file__).resolve().parents[1] / "docs" / "conventions.md").read_text()
    table = nan_padding.read_table(docs)
    assert set(table) == {(m, c) for m in nan_padding.MODES for c in nan_padding.COLUMNS}
    assert table[("token-mean", '`rollout_is="token"`')] == "finite"
    assert table[("seq-mean-token-mean", "`bypass_mode=True`")] == "NaN"
    rows = [("token-mean", "no weights", "NaN", 0.19476, "equal"),         # docs wrong
            ("seq-mean-token-sum", "no weights", "finite", math.nan, ""),  # docs wrong
            ("token-mean", "x", "finite", 0.5, "policy_loss: expected 1"),  # preset differs
            ("token-mean", "y", None, 0.5, "equal"),                       # not in the docs
            ("seq-mean-token-mean", "z", "NaN", math.nan, "")]             # as the docs say
    lines = nan_padding.failures(rows)
    assert len(lines) == 4 and "docs/conventions.md says NaN, verl 0.9.1's loss is 0.19476" \
        in lines[0] and "not in docs" in lines[3]


def test_a_field_set_through_a_recorder_is_set_on_the_object():
    # OpenRLHF's experience maker writes args.algo.advantage.gamma = 1.0 for the critic-free
    # estimators: the write must reach the parsed arguments, as in OpenRLHF
    args = SimpleNamespace(algo=SimpleNamespace(advantage=SimpleNamespace(gamma=0.9)))
    log = set()
    view = Recorder(args, log, "args.")
    view.algo.advantage.gamma = 1.0
    assert args.algo.advantage.gamma == 1.0 and view.algo.advantage.gamma == 1.0
    assert log == {"args.algo.advantage.gamma"}


def test_openrlhf_experience_maker_reads_are_listed():
    # the stand-in experience maker reads its arguments from the parsed args (issue 34): the
    # length penalties, no_std_norm and n_samples_per_prompt are in the coverage table
    reads = {"args.algo.advantage.no_std_norm", "args.reward.overlong_buffer_len",
             "args.reward.stop_properly_penalty_coef", "args.rollout.n_samples_per_prompt",
             "args.algo.advantage.estimator"}
    assert coverage.unlisted("openrlhf", reads) == []
    assert coverage.unlisted("openrlhf-grpo", reads) == []
    assert coverage.unlisted("openrlhf", {"args.reward.overlong_penalty_factor"}) == [
        "args.reward.overlong_penalty_factor"]


def test_the_step_comparison_names_preset_micro_batch_and_output():
    # the distributed step's comparison (tests/conformance/step_presets.py) without torch: the
    # preset's own outputs as the "framework's", one micro-batch's loss and one token's
    # gradient moved by 1e-9 of their scale (above RTOL 1e-12), a statistic by 1e-3
    import numpy as np

    from tests.conformance import step_presets

    job = ("verl", {}, "uneven", None)
    want = step_presets.expected(job)
    got = {k: np.array(want[k], copy=True) for k in
           ("step/losses", "step/value_losses", "step/dlogp", "step/dvalues")}
    got["stats"] = {"actor/pg_loss": want["step/stat/actor/pg_loss"] + 1e-3}
    assert step_presets.differences(job, {**got, "stats": {}}, want) == []
    got["step/losses"][2] += 1e-9 * np.abs(want["step/losses"]).max()
    got["step/dvalues"][4, 2] += 1e-9 * np.abs(want["step/dvalues"]).max()
    lines = step_presets.differences(job, got, want)
    # the uneven layout: rank 0 holds rows 0-2 and 3, rank 1 row 4 and the rest
    assert len(lines) == 3, lines
    assert lines[0].startswith("verl (defaults), uneven: rank 1 micro-batch 0: step/losses ")
    assert lines[1].startswith("verl (defaults), uneven: rank 1 micro-batch 0, token (4, 2): "
                               "step/dvalues ")
    assert lines[2].startswith("verl (defaults), uneven: step/stat/actor/pg_loss ")
    assert "(framework) vs" in lines[0] and "(preset)" in lines[0]
    # a planted wrong normaliser moves every micro-batch of the preset
    planted = step_presets.expected(job, plant="verl")
    assert not np.allclose(planted["step/losses"], want["step/losses"])


def test_openrlhfs_float32_kl_slack_is_below_a_wrong_count():
    # OpenRLHF's KL loss is float32 (step_presets.float32_slack): the slack on the losses, the
    # gradient and the logged "kl" is derived from u = 2^-24 and the inputs' magnitudes; it
    # is 0 for a job without the KL loss, and far below what one token more or less in the
    # step's count N moves (1 / N of the KL part beta kl, of the logged kl, and of a token's
    # gradient beta / N)
    import numpy as np

    from tests.conformance import step_presets

    plain = ("openrlhf", {}, "uneven", None)
    assert step_presets.float32_slack(plain) == {}
    job = ("openrlhf", {"use_kl_loss": True, "beta": 0.05,
                        "loss_agg_mode": "seq-mean-token-mean"}, "interleaved", None)
    slack = step_presets.float32_slack(job)
    want = step_presets.expected(job)
    N = int(np.sum(step_presets.step_case(job)["inputs"]["mask"]))
    assert slack["dlogp"] < 1e-3 * 0.05 / N
    assert slack["losses"] < 1e-2 * 0.05 * want["step/stat/kl"] / N
    assert slack["stat/kl"] < 1e-2 * want["step/stat/kl"] / N
    got = {k: np.array(want[k], copy=True) for k in
           ("step/losses", "step/value_losses", "step/dlogp", "step/dvalues")}
    got["stats"] = {"kl": want["step/stat/kl"] + 0.5 * slack["stat/kl"]}
    got["step/losses"][1] += 0.5 * slack["losses"]
    assert step_presets.differences(job, got, want) == []
    got["step/losses"][1] += 2 * slack["losses"]
    got["step/dlogp"][0, 0] += 2 * slack["dlogp"]
    got["stats"]["kl"] += 2 * slack["stat/kl"]
    lines = step_presets.differences(job, got, want)
    # (the interleaved layout: rank 0 holds rows 0 and 2, then row 4)
    assert len(lines) == 3, lines
    assert "interleaved: rank 0 micro-batch 1: step/losses " in lines[0]
    assert "interleaved: rank 0 micro-batch 0, token (0, 0): step/dlogp " in lines[1]
    assert "interleaved: step/stat/kl " in lines[2]
    # derived for k1 without the unbiased gradient only
    k3 = ("openrlhf", {"use_kl_loss": True, "kl_estimator": "k3"}, "uneven", None)
    with pytest.raises(ValueError, match="derived for the k1 KL"):
        step_presets.float32_slack(k3)
