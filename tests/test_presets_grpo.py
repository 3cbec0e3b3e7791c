"""The critic-free presets (trl-grpo, verl-grpo, openrlhf-grpo) and their group cases.

Each convention is checked by hand on a case where it shows (the numbers are derived
in the comments), every preset's gradient against finite differences of its own loss,
and the properties of group baselines on the presets' outputs.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy.oracle import golden
from ppo_numpy.oracle.group_cases import EDGE_CASES, cases_for, generate_group_cases
from ppo_numpy.oracle.presets import GROUP_INPUT_NAMES, PRESETS, get_preset

DOCS = Path(__file__).resolve().parents[1] / "docs"
GROUP_PRESETS = [n for n, p in PRESETS.items() if p.input_names == GROUP_INPUT_NAMES]


def group_case(mask, scores, groups, *, log_ratio=None, ref_shift=None, baseline=None):
    m = np.asarray(mask, dtype=float)
    logp_old = np.where(m == 1, -1.0, 0.0)
    logp = logp_old + (0.0 if log_ratio is None else np.asarray(log_ratio, float))
    logp_ref = logp_old + (0.0 if ref_shift is None else np.asarray(ref_shift, float))
    B = m.shape[0]
    return {"logp": np.where(m == 1, logp, 0.0), "logp_old": logp_old,
            "logp_ref": np.where(m == 1, logp_ref, 0.0), "mask": m,
            "scores": np.asarray(scores, float), "groups": np.asarray(groups, float),
            "baseline_scores": np.zeros(B) if baseline is None else np.asarray(baseline, float)}


# --------------------------------------------------------------------------------------
# the epsilon and group of one of each framework


ONE_GROUP = group_case(np.ones((4, 2)), [1, 0, 0, 0], [0, 0, 0, 0])


def test_group_std_epsilon_of_each_framework():
    # mean 1/4, ddof-1 std sqrt((9/16 + 3/16) / 3) = 1/2: A_0 = 0.75 / (0.5 + eps)
    want = {"trl-grpo": np.float32(0.75) / (np.float32(0.5) + np.float32(1e-4)),
            "verl-grpo": np.float32(0.75) / (np.float32(0.5) + np.float32(1e-6)),
            "openrlhf-grpo": 0.75 / (0.5 + 1e-9)}
    for name, value in want.items():
        A = get_preset(name)(ONE_GROUP)["advantages"]
        assert A[0, 0] == pytest.approx(float(value), rel=1e-7 if name != "openrlhf-grpo"
                                        else 1e-15), name
        assert A[0, 0] == A[0, 1]  # one advantage per response, at each of its tokens


def test_group_of_one_in_each_framework():
    case = group_case(np.ones((3, 1)), [1.0, 1.0, 0.0], [0, 1, 1])
    # TRL: its own mean is its baseline -> 0; verl: mean 0, std 1 -> 1 / (1 + 1e-6)
    assert get_preset("trl-grpo")(case)["advantages"][0, 0] == 0.0
    verl = get_preset("verl-grpo")(case)["advantages"][0, 0]
    assert verl == pytest.approx(float(np.float32(1) / np.float32(1 + 1e-6)), rel=1e-7)
    assert get_preset("verl-grpo")(case, adv_estimator="rloo")["advantages"][0, 0] == 1.0
    with pytest.raises(ValueError, match=r"openrlhf-grpo: a group has 1 response"):
        get_preset("openrlhf-grpo")(case)


def test_openrlhf_clips_the_group_value_at_ten():
    # one success in 200: A = 0.995 / (std + 1e-9) = 14.07 > 10, clipped to 10 at the last
    # token; no KL (logp_ref = logp_old), so every token's return-to-go is 10
    scores = np.zeros(200)
    scores[0] = 1.0
    case = group_case(np.ones((200, 2)), scores, np.zeros(200))
    A = get_preset("openrlhf-grpo")(case)["advantages"]
    assert A[0].tolist() == [10.0, 10.0]
    trl = get_preset("trl-grpo")(case)["advantages"][0, 0]
    assert trl == pytest.approx(0.995 / (np.sqrt(0.995 / 199 * 1) + 1e-4), rel=1e-5)


def test_verl_score_is_the_sum_of_token_rewards_with_the_kl_in_the_reward():
    # use_kl_in_reward with k1: token rewards = score at the last token - kl_coef k1; the
    # group [1 - 0.1 (0.5 + 0.5), 0 - 0.1 (-0.5)] = [0.9, 0.05], rloo: [0.85, -0.85]
    case = group_case(np.ones((2, 2)), [1.0, 0.0], [0, 0],
                      ref_shift=[[-0.5, -0.5], [0.5, 0.0]])
    out = get_preset("verl-grpo")(case, adv_estimator="rloo", use_kl_in_reward=True,
                                  kl_coef=0.1)
    np.testing.assert_allclose(out["advantages"], [[0.85, 0.85], [-0.85, -0.85]], rtol=1e-14)
    np.testing.assert_allclose(out["rewards"], [[-0.05, 0.95], [0.05, 0.0]], rtol=1e-14)


# --------------------------------------------------------------------------------------
# the loss forms through each preset


def test_trl_loss_types_by_hand():
    # rho = 1, rows of lengths 1 and 3 in one group, scores [1, 0]: A = +-0.5 / (0.7071 + 1e-4)
    case = group_case([[1, 0, 0], [1, 1, 1]], [1.0, 0.0], [0, 0])
    a = float(np.float32(0.5) / (np.float32(np.sqrt(0.5)) + np.float32(1e-4)))
    P = get_preset("trl-grpo")
    # per-token loss -A: dapo / bnpo (1 token x -a, 3 x +a) / 4 = a / 2
    assert P(case)["policy_loss"] == pytest.approx(a / 2, rel=1e-6)
    assert P(case, loss_type="bnpo")["policy_loss"] == pytest.approx(a / 2, rel=1e-6)
    # grpo: (-a / 1 + 3 a / 3) / 2 = 0
    assert P(case, loss_type="grpo")["policy_loss"] == pytest.approx(0.0, abs=1e-6)
    # dr_grpo: 2 a / (2 x 512)
    assert P(case, loss_type="dr_grpo")["policy_loss"] == pytest.approx(2 * a / 1024, rel=1e-6)
    # dapo with a global token count of 8 (another process had 4 more tokens)
    assert P(case, num_items_in_batch=8)["policy_loss"] == pytest.approx(2 * a / 8, rel=1e-6)


def test_trl_beta_adds_k3_per_token():
    # A = 0 (equal scores), logp_ref - logp = -0.5 everywhere: the loss is beta k3 with
    # k3 = exp(-0.5) + 0.5 - 1
    case = group_case(np.ones((2, 2)), [1.0, 1.0], [0, 0], ref_shift=-0.5)
    out = get_preset("trl-grpo")(case, beta=0.04)
    k3 = np.exp(-0.5) + 0.5 - 1
    assert out["policy_loss"] == pytest.approx(0.04 * k3, rel=1e-14)
    assert out["stat/kl"] == pytest.approx(k3, rel=1e-14)


def test_clip_statistics_low_and_high():
    # A > 0 with rho = e^0.5 = 1.65 > 1.2 (high), A < 0 with rho = e^-0.5 = 0.61 < 0.8 (low)
    case = group_case(np.ones((2, 1)), [1.0, 0.0], [0, 0], log_ratio=[[0.5], [-0.5]])
    out = get_preset("trl-grpo")(case)
    assert out["stat/clip_ratio/high_mean"] == 0.5 and out["stat/clip_ratio/low_mean"] == 0.5
    assert out["stat/clip_ratio/region_mean"] == 1.0
    assert out["dlogp"].tolist() == [[0.0], [0.0]]
    # verl's dual clip: A < 0 with rho = e^2 = 7.4 > 3 is bounded at 3 A (pg_clipfrac_lower)
    case = group_case(np.ones((2, 1)), [1.0, 0.0], [0, 0], log_ratio=[[0.0], [2.0]])
    out = get_preset("verl-grpo")(case)
    assert out["stat/actor/pg_clipfrac_lower"] == 0.5
    A1 = out["advantages"][1, 0]
    assert out["policy_loss"] == pytest.approx(-(out["advantages"][0, 0] + 3 * A1) / 2,
                                               rel=1e-14)


def test_verl_gspo_caps_the_sequence_log_ratio():
    # one response of two tokens with log-ratios [30, 10]: sequence log-ratio 20, capped at
    # 10; A < 0 (the other response scored 1): the unclipped branch -A e^10, gradient 0
    case = group_case(np.ones((2, 2)), [0.0, 1.0], [0, 0], log_ratio=[[30.0, 10.0], [0, 0]])
    out = get_preset("verl-grpo")(case, loss_mode="gspo")
    A0, A1 = out["advantages"][0, 0], out["advantages"][1, 0]
    # seq-mean-token-mean: (-A0 e^10 - A1 1) / 2
    assert out["policy_loss"] == pytest.approx((-A0 * np.exp(10.0) - A1) / 2, rel=1e-12)
    assert out["dlogp"][0].tolist() == [0.0, 0.0]


def test_cispo_weights_of_trl_and_verl():
    # rho = 1.5 for response 0 (A > 0): TRL weight min(1.5, epsilon_high = 5) = 1.5,
    # verl clip(1.5, 0.8, 1.2) = 1.2; d loss / d logp = -w A / n (token mean of 2 tokens)
    case = group_case(np.ones((2, 1)), [1.0, 0.0], [0, 0],
                      log_ratio=[[np.log(1.5)], [0.0]])
    trl = get_preset("trl-grpo")(case, loss_type="cispo", epsilon_high=5.0)
    verl = get_preset("verl-grpo")(case, loss_mode="cispo")
    np.testing.assert_allclose(trl["dlogp"][0, 0], -1.5 * trl["advantages"][0, 0] / 2,
                               rtol=1e-14)
    np.testing.assert_allclose(verl["dlogp"][0, 0], -1.2 * verl["advantages"][0, 0] / 2,
                               rtol=1e-14)
    assert trl["stat/cispo_clip_ratio"] == 0.0
    assert verl["stat/actor/pg_clipfrac"] == 0.5  # ratio != its clipped weight


# --------------------------------------------------------------------------------------
# gradients, properties, registry, golden files


GRADIENT_OPTIONS = {
    "trl-grpo": [{}, {"loss_type": "grpo", "importance_sampling_level": "sequence",
                      "beta": 0.1}, {"loss_type": "dr_grpo", "delta": 1.3},
                 {"loss_type": "cispo", "epsilon_high": 3.0}],
    "verl-grpo": [{}, {"loss_mode": "gspo", "use_kl_loss": True},
                  {"adv_estimator": "reinforce_plus_plus", "loss_mode": "cispo"},
                  {"adv_estimator": "remax", "loss_agg_mode": "seq-mean-token-sum"}],
    "openrlhf-grpo": [{}, {"policy_loss_type": "gspo", "use_kl_loss": True,
                           "kl_estimator": "k3"}, {"advantage_estimator": "reinforce"}],
}


@pytest.mark.parametrize("name", GROUP_PRESETS)
def test_gradients_match_finite_differences(name):
    rng = np.random.default_rng(7)
    mask = (np.arange(4)[None] < np.array([4, 2, 3, 1, 4, 2])[:, None]).astype(float)
    log_ratio = rng.choice([-0.45, -0.1, 0.05, 0.1, 0.4], mask.shape)
    log_ratio += rng.uniform(-0.02, 0.02, mask.shape)
    case = group_case(mask, rng.normal(0, 1, 6), [0, 0, 0, 1, 1, 1], log_ratio=log_ratio,
                      ref_shift=rng.normal(0, 0.3, mask.shape), baseline=rng.normal(0, 1, 6))
    P = get_preset(name)
    for options in GRADIENT_OPTIONS[name]:
        out = P(case, **options)
        cispo = options.get("loss_type") == "cispo" or options.get("loss_mode") == "cispo"
        h, fd = 1e-6, np.zeros(mask.shape)
        for idx in np.ndindex(mask.shape):
            plus, minus = dict(case), dict(case)
            plus["logp"], minus["logp"] = case["logp"].copy(), case["logp"].copy()
            plus["logp"][idx] += h
            minus["logp"][idx] -= h
            if cispo:  # the weight is not differentiated: move logp_old with logp
                plus["logp_old"], minus["logp_old"] = case["logp_old"].copy(), \
                    case["logp_old"].copy()
                plus["logp_old"][idx] += h
                minus["logp_old"][idx] -= h
            fd[idx] = (P(plus, **options)["policy_loss"]
                       - P(minus, **options)["policy_loss"]) / (2 * h)
        fd = np.where(mask == 1, fd, 0.0)
        np.testing.assert_allclose(out["dlogp"], fd, rtol=1e-6, atol=1e-9,
                                   err_msg=f"{name} {options}")
        assert np.any(out["dlogp"]), (name, options)


@pytest.mark.parametrize("name", GROUP_PRESETS)
def test_permuting_rows_with_their_group_ids_permutes_the_outputs(name):
    case = generate_group_cases(0, ["interleaved-groups"])[0]["inputs"]
    perm = np.random.default_rng(0).permutation(case["mask"].shape[0])
    permuted = {k: v[perm] for k, v in case.items()}
    a, b = get_preset(name)(case), get_preset(name)(permuted)
    np.testing.assert_allclose(b["advantages"], a["advantages"][perm], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(b["dlogp"], a["dlogp"][perm], rtol=1e-6, atol=1e-12)
    assert b["policy_loss"] == pytest.approx(a["policy_loss"], rel=1e-6, abs=1e-12)


def test_a_constant_added_to_a_group_leaves_grpo_and_rloo_unchanged():
    case = generate_group_cases(0, ["group-random-1"])[0]["inputs"]
    shifted = dict(case, scores=case["scores"] + np.where(case["groups"] == 0, 3.0, -2.0))
    for name, options in [("verl-grpo", {}), ("verl-grpo", {"adv_estimator": "rloo"}),
                          ("openrlhf-grpo", {"advantage_estimator": "rloo"}),
                          ("trl-grpo", {"scale_rewards": "none"})]:
        a = get_preset(name)(case, **options)["advantages"]
        b = get_preset(name)(shifted, **options)["advantages"]
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_group_edge_cases_exercise_what_they_say():
    cases = {c["name"]: c["inputs"] for c in generate_group_cases(0)}
    assert set(EDGE_CASES) <= set(cases)
    _, counts = np.unique(cases["group-of-one"]["groups"], return_counts=True)
    assert 1 in counts
    eq = cases["equal-scores"]
    assert np.ptp(eq["scores"][eq["groups"] == 0]) == 0
    assert cases["interleaved-groups"]["groups"].tolist()[:3] == [0, 1, 2]
    lengths = cases["length-bias"]["mask"].sum(axis=1)
    assert lengths.max() == 16 and lengths.min() == 1
    cb = cases["clip-bounds"]
    log_ratio = (cb["logp"] - cb["logp_old"])[cb["mask"] == 1]
    assert np.mean(np.abs(log_ratio) >= 2 - 1e-9) > 0.5  # beyond e^2 > the dual bound 3
    # the same seed gives the same arrays
    again = {c["name"]: c["inputs"] for c in generate_group_cases(0)}
    for name in cases:
        for k in cases[name]:
            assert cases[name][k].tobytes() == again[name][k].tobytes()


def test_the_critic_free_presets_reject_bad_options_by_name():
    with pytest.raises(ValueError, match=r"trl-grpo: loss_type: unknown option 'ppo'"):
        get_preset("trl-grpo")(ONE_GROUP, loss_type="ppo")
    with pytest.raises(ValueError, match=r"verl-grpo: adv_estimator: unknown option 'gae'"):
        get_preset("verl-grpo")(ONE_GROUP, adv_estimator="gae")
    with pytest.raises(ValueError,
                       match=r"openrlhf-grpo: advantage_estimator: unknown option 'grpo'"):
        get_preset("openrlhf-grpo")(ONE_GROUP, advantage_estimator="grpo")
    with pytest.raises(ValueError, match=r"verl-grpo: unknown parameter\(s\) beta"):
        get_preset("verl-grpo")(ONE_GROUP, beta=0.1)
    no_groups = {k: v for k, v in ONE_GROUP.items() if k != "groups"}
    with pytest.raises(ValueError, match=r"case: missing input\(s\) groups"):
        get_preset("trl-grpo")(no_groups)
    with pytest.raises(TypeError, match=r"groups: expected integers"):
        get_preset("trl-grpo")(dict(ONE_GROUP, groups=np.array([0.5, 0, 0, 0])))


def test_the_documented_side_by_side_numbers():
    text = (DOCS / "conventions.md").read_text()
    m = np.array([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=float)
    case = group_case(m, [1.0, 0.0, 0.0, 0.0], np.zeros(4))
    rows = re.findall(r"^\| `([a-z-]+)`([^|]*)\| ([-+0-9.]+) \| ([-+0-9.]+) \| ([-+0-9.]+) \|$",
                      text, flags=re.M)
    assert len(rows) == 8
    for name, options, A0, loss, dlogp0 in rows:
        kwargs = {}
        for key, value in re.findall(r"([a-z_]+) ([a-z_0-9]+)", options.replace("(", "")
                                     .replace(")", "")):
            if key in get_preset(name).defaults:
                kwargs[key] = int(value) if value.isdigit() else value
        out = get_preset(name)(case, **kwargs)
        assert f"{out['advantages'][0, 0]:.9f}" == A0, (name, options)
        assert f"{out['policy_loss']:+.9f}" == loss, (name, options)
        assert f"{out['dlogp'][0, 0]:+.9f}" == dlogp0, (name, options)


@pytest.mark.parametrize("name", GROUP_PRESETS)
def test_golden_files_of_the_critic_free_presets(name, tmp_path):
    golden.export(tmp_path, name)
    manifest, cases = golden.load(tmp_path)
    assert manifest["input_names"] == list(GROUP_INPUT_NAMES)
    assert len(cases) == len(cases_for(PRESETS[name], 0))
    report, problems = golden.verify(tmp_path)
    assert report.passed and problems == []
