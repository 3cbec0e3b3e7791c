"""Tests of the framework presets (ppo_numpy/oracle/presets/).

Each preset is checked by hand on the conventions it differs in (the numbers
are derived in the comments next to them), presets are checked to agree where
their conventions agree, and every preset's gradients are checked against
centered finite differences of its own losses.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy import kl_shaped_rewards, whiten
from ppo_numpy.oracle import DEFAULT_PRESET, INPUT_NAMES, PRESETS, Preset, get_preset

DOCS = Path(__file__).resolve().parents[1] / "docs"
ARRAY_KEYS = ("rewards", "advantages", "returns", "dlogp", "dvalues")
#: the presets of PPO with a value head (the critic-free ones: tests/test_presets_grpo.py)
PPO_PRESETS = {k: p for k, p in PRESETS.items() if p.input_names == INPUT_NAMES}


def make_case(mask, *, scores, logp_old=None, logp=None, logp_ref=None, old_values=None,
              values=None):
    """A case dict; logp and logp_ref default to logp_old, values to old_values."""
    mask = np.asarray(mask, dtype=np.float64)
    logp_old = np.full(mask.shape, -1.0) if logp_old is None else np.asarray(logp_old, float)
    old_values = np.zeros(mask.shape) if old_values is None else np.asarray(old_values, float)
    return {
        "logp": logp_old.copy() if logp is None else np.asarray(logp, float),
        "logp_old": logp_old,
        "logp_ref": logp_old.copy() if logp_ref is None else np.asarray(logp_ref, float),
        "values": old_values.copy() if values is None else np.asarray(values, float),
        "old_values": old_values,
        "scores": np.asarray(scores, dtype=np.float64),
        "mask": mask,
    }


def close(got, want, tol=1e-12):
    np.testing.assert_allclose(np.asarray(got, float), np.asarray(want, float), rtol=tol,
                               atol=tol)


def whiten_by_hand(values, ddof, eps=1e-8, floor=False):
    """Whitening written out for the test: (x - mean) / sqrt(var + eps) (or max(var, eps))."""
    x = np.asarray(values, dtype=np.float64)
    mean = sum(x) / len(x)
    var = sum((v - mean) ** 2 for v in x) / (len(x) - ddof)
    return (x - mean) / math.sqrt(max(var, eps) if floor else var + eps)


# --------------------------------------------------------------------------------------
# The registry and the call contract


def test_registry_names_and_default():
    assert list(PRESETS) == ["seed", "trl", "trl-0.11", "verl", "openrlhf", "deepspeed-chat",
                             "lm-human-preferences", "trl-grpo", "verl-grpo", "openrlhf-grpo"]
    assert DEFAULT_PRESET == "seed"
    assert INPUT_NAMES == ("logp", "logp_old", "logp_ref", "values", "old_values", "scores",
                           "mask")
    for name, preset in PRESETS.items():
        assert isinstance(preset, Preset) and preset.name == name
        assert get_preset(name) is preset
        assert preset.description and preset.sources
    for preset in PPO_PRESETS.values():
        assert {"gamma", "lam", "epsilon", "value_clip"} <= set(preset.defaults)


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown preset 'ppo'.*seed, trl, trl-0\.11, verl"):
        get_preset("ppo")


def test_unknown_parameter_lists_valid_ones():
    case = make_case([[1, 1]], scores=[1.0])
    with pytest.raises(ValueError, match=r"verl: unknown parameter\(s\) lambda; valid ones"):
        get_preset("verl")(case, **{"lambda": 0.9})


def test_missing_input_and_bad_shapes_are_named():
    case = make_case([[1, 1]], scores=[1.0])
    del case["old_values"]
    with pytest.raises(ValueError, match=r"case: missing input\(s\) old_values"):
        get_preset("seed")(case)
    case = make_case([[1, 1]], scores=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"scores: expected shape \(1,\)"):
        get_preset("seed")(case)
    case = make_case([[1, 1], [0, 0]], scores=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"mask: row 1 has no response token"):
        get_preset("seed")(case)


def test_nested_case_form_and_override_precedence():
    case = make_case([[1, 1, 1]], scores=[1.0], old_values=[[0.5, 0.6, 0.7]])
    nested = {"name": "x", "inputs": case, "params": {"lam": 0.0}}
    # lam = 0: the advantages are the TD errors [0.1, 0.1, 0.3]
    close(get_preset("seed")(nested)["advantages"], [[0.1, 0.1, 0.3]])
    # a keyword override wins over the case's params: lam = 1 gives [0.5, 0.4, 0.3]
    close(get_preset("seed")(nested, lam=1.0)["advantages"], [[0.5, 0.4, 0.3]])


def test_outputs_shapes_types_determinism_and_no_mutation():
    rng = np.random.default_rng(3)
    case = make_case(np.ones((2, 4)), scores=rng.normal(size=2),
                     logp_old=rng.normal(-1, 0.3, (2, 4)), old_values=rng.normal(size=(2, 4)))
    case["logp"] = case["logp_old"] + rng.uniform(-0.1, 0.1, (2, 4))
    case["logp_ref"] = case["logp_old"] + rng.uniform(-0.3, 0.3, (2, 4))
    before = {k: v.copy() for k, v in case.items()}
    for preset in PPO_PRESETS.values():
        out = preset(case)
        again = preset(case)
        for k in ARRAY_KEYS:
            assert out[k].shape == (2, 4) and out[k].dtype == np.float64, (preset.name, k)
            assert np.array_equal(out[k], again[k]), (preset.name, k)
        for k in ("policy_loss", "value_loss"):
            assert isinstance(out[k], float) and out[k] == again[k]
        stats = [k for k in out if k.startswith("stat/")]
        assert stats, preset.name
        assert all(isinstance(out[k], float) for k in stats)
    for k in case:
        assert np.array_equal(case[k], before[k]), k


def test_every_source_file_is_in_the_framework_notes():
    notes = (DOCS / "frameworks.md").read_text()
    for preset in PRESETS.values():
        if preset.name == "seed":
            continue
        for source in preset.sources:
            path = re.split(r"[ ,(]", source.split(": ", 1)[1])[0]
            assert path.split("/")[-1] in notes, (preset.name, path)


# --------------------------------------------------------------------------------------
# seed: score at the last token, V = 0 after it, no whitening, -L_PPO summed over tokens


def seed_case():
    # k1 = logp_old - logp_ref = [[0.5, -0.2, 0.1], [0, 0, pad]]; the padding holds garbage
    return make_case(
        [[1, 1, 1], [1, 1, 0]], scores=[1.0, 2.0],
        logp_old=[[-1.0, -2.0, -0.5], [-0.3, -1.1, np.nan]],
        logp_ref=[[-1.5, -1.8, -0.6], [-0.3, -1.1, -7.0]],
        old_values=[[0.5, 0.6, 0.7], [0.2, 0.4, np.inf]],
        values=[[0.6, 0.6, 0.5], [0.2, 0.5, np.nan]])


def test_seed_by_hand():
    out = get_preset("seed")(seed_case(), beta=0.1)
    # r~ = -0.1 k1, score at the last token: row 0 [-0.05, 0.02, -0.01 + 1], row 1 [0, 0 + 2]
    close(out["rewards"], [[-0.05, 0.02, 0.99], [0.0, 2.0, 0.0]])
    # row 0: delta = [-0.05 + 0.6 - 0.5, 0.02 + 0.7 - 0.6, 0.99 + 0 - 0.7] = [0.05, 0.12, 0.29]
    #        A = [0.05 + 0.95 * 0.3955, 0.12 + 0.95 * 0.29, 0.29]
    # row 1: delta = [0 + 0.4 - 0.2, 2 + 0 - 0.4] = [0.2, 1.6]; A = [0.2 + 0.95 * 1.6, 1.6]
    A = [[0.05 + 0.95 * 0.3955, 0.3955, 0.29], [1.72, 1.6, 0.0]]
    close(out["advantages"], A)  # no whitening
    close(out["returns"], [[0.425725 + 0.5, 0.3955 + 0.6, 0.29 + 0.7], [1.92, 2.0, 0.0]])
    # rho = 1: -L_PPO = -(mean over the two responses of the summed advantages)
    close(out["policy_loss"], -((0.425725 + 0.3955 + 0.29) + (1.72 + 1.6)) / 2)
    close(out["stat/objective"], -out["policy_loss"])
    # d(-L_PPO)/dlogp = -A rho / B at every token (nothing clipped at rho = 1)
    close(out["dlogp"], -np.array(A) / 2)
    # value loss: token mean over the 5 tokens of 1/2 (V - R)^2, no clipping
    R = [0.925725, 0.9955, 0.99, 1.92, 2.0]
    V = [0.6, 0.6, 0.5, 0.2, 0.5]
    close(out["value_loss"], sum(0.5 * (v - r) ** 2 for v, r in zip(V, R)) / 5)
    close(out["dvalues"][0], [(v - r) / 5 for v, r in zip(V[:3], R[:3])])
    # KL per response, summed then averaged: (0.5 - 0.2 + 0.1 + 0) / 2
    close(out["stat/kl_per_sequence"], 0.2)


# --------------------------------------------------------------------------------------
# trl (current): score one slot after, the value of that slot kept, value loss over it


def trl_case():
    # row 0: 2 tokens then the slot after (whose log-probs differ: TRL must not read them);
    # row 1 fills the row, so its score goes to its last token
    logp_old = np.array([[-1.0, -1.0, -3.0], [-1.0, -1.0, -1.0]])
    logp_ref = np.array([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    return make_case([[1, 1, 0], [1, 1, 1]], scores=[1.0, 2.0], logp_old=logp_old,
                     logp_ref=logp_ref, logp=logp_old + [[-0.3, 0.1, 0.0], [0.0, 0.0, 0.0]],
                     old_values=[[0.5, 0.6, 0.2], [0.1, 0.2, 0.3]])


def test_trl_score_one_slot_after_moves_the_advantages():
    out = get_preset("trl")(trl_case(), lam=0.5)
    # row 0: KL 0 on the tokens and 0 at the slot after (TRL fills both log-probs there)
    close(out["rewards"], [[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]])
    # row 0, GAE over tokens + slot after with V(slot) = 0.2 kept:
    #   delta = [0 + 0.6 - 0.5, 0 + 0.2 - 0.6, 1 + 0 - 0.2] = [0.1, -0.4, 0.8]
    #   A = [0.1 + 0.5 * 0.0, -0.4 + 0.5 * 0.8, 0.8] = [0.1, 0.0, 0.8]
    # (the seed's convention gives A = [0.1 + 0.5 * 0.4, 1 - 0.6] = [0.3, 0.4] instead)
    # row 1, full: delta = [0.1, 0.1, 2 - 0.3]; A = [0.1 + 0.5 * 0.95, 0.1 + 0.5 * 1.7, 1.7]
    raw = [0.1, 0.0, 0.575, 0.95, 1.7]
    close(out["returns"], [[0.6, 0.6, 1.0], [0.675, 1.15, 2.0]])
    # whitened over the 5 response tokens (not the slot after), ddof 1, eps 1e-8
    w = whiten_by_hand(raw, ddof=1)
    close(out["advantages"], [[w[0], w[1], 0.0], [w[2], w[3], w[4]]])
    # value loss: token mean over the 6 positions of mask + slot after, V = V_old
    R = [0.6, 0.6, 1.0, 0.675, 1.15, 2.0]
    V = [0.5, 0.6, 0.2, 0.1, 0.2, 0.3]
    close(out["value_loss"], sum(0.5 * (v - r) ** 2 for v, r in zip(V, R)) / 6)
    close(out["dvalues"], np.reshape([(v - r) / 6 for v, r in zip(V, R)], (2, 3)))
    assert out["dvalues"][0, 2] == pytest.approx((0.2 - 1.0) / 6, abs=1e-15)


def test_trl_statistics_by_hand():
    out = get_preset("trl")(trl_case(), lam=0.5)
    # logp - logp_old = [-0.3, 0.1] on row 0, 0 on row 1
    # approxkl: 0.5 (0.09 + 0.01) summed, divided by B T = 6
    close(out["stat/policy/approxkl_avg"], 0.05 / 6)
    # ratio over all 6 positions, 1 at the padding position
    close(out["stat/val/ratio"], (math.exp(-0.3) + math.exp(0.1) + 3 + 1) / 6)
    # token (0, 0) has A < 0 (0.1 is below the mean 0.665) and rho = e^-0.3 < 0.8: clipped;
    # token (0, 1) rho = e^0.1 inside the range; row 1 rho = 1: clipfrac 1/5
    close(out["stat/policy/clipfrac_avg"], 1 / 5)
    # objective/entropy: row 0 -(-1 - 1) plus -1.0 for its one padding column; row 1 3
    close(out["stat/objective/entropy"], ((2 - 1) + 3) / 2)
    close(out["stat/objective/kl"], 0.0)
    close(out["stat/objective/scores"], 1.5)
    close(out["stat/objective/rlhf_reward"], 1.5)
    close(out["stat/loss/value_avg"], out["value_loss"])
    close(out["stat/val/clipfrac_avg"], 0.0)


def test_trl_k3_estimator_and_beta():
    case = make_case([[1, 1, 0]], scores=[0.0], logp_old=[[-1.0, -1.5, 0.0]],
                     logp_ref=[[-1.5, -1.5, 0.0]])
    # log r = logp_ref - logp_old = -0.5 at token 0: k3 = e^-0.5 - 1 + 0.5, k1 = 0.5
    k3 = math.exp(-0.5) - 0.5
    out = get_preset("trl")(case, kl_estimator="k3", beta=0.2)
    close(out["rewards"], [[-0.2 * k3, 0.0, 0.0]])
    close(get_preset("trl")(case, beta=0.2)["rewards"], [[-0.1, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"trl: kl_estimator 'k2' is not one"):
        get_preset("trl")(case, kl_estimator="k2")


def test_trl_whiten_rewards_covers_the_slot_after():
    case = make_case([[1, 1, 0]], scores=[1.0])
    out = get_preset("trl")(case, whiten_rewards=True)
    # rewards [0, 0, 1] over the 3 positions of mask + slot after: mean 1/3,
    # var (ddof 1) = (2 (1/3)^2 + (2/3)^2) / 2 = 1/3, the mean added back
    s = math.sqrt(1 / 3 + 1e-8)
    close(out["rewards"], [[(0 - 1 / 3) / s + 1 / 3, (0 - 1 / 3) / s + 1 / 3,
                            (1 - 1 / 3) / s + 1 / 3]])


def test_trl_rejects_what_it_cannot_represent():
    trl = get_preset("trl")
    holes = make_case([[1, 0, 1, 0]], scores=[1.0])
    with pytest.raises(ValueError, match=r"trl: mask row 0 is not a prefix of ones"):
        trl(holes)
    left = make_case([[1, 1, 0], [0, 1, 1]], scores=[1.0, 1.0])
    with pytest.raises(ValueError, match=r"trl: mask row 1 is not a prefix of ones"):
        trl(left)
    case = trl_case()
    case["old_values"][0, 2] = np.nan
    with pytest.raises(ValueError, match=r"trl: old_values is nan at padding position \(0, 2\)"):
        trl(case)


# --------------------------------------------------------------------------------------
# trl-0.11: holes are zero-value states, ratio threshold, k2/abs, score clipping


def holes_case():
    # mask [1, 0, 1]: the hole's log-probs and values are garbage that must not be read
    return make_case([[1, 0, 1], [1, 1, 1]], scores=[1.0, 0.0],
                     logp_old=[[-1.0, np.nan, -1.0], [-1.0, -1.0, -1.0]],
                     old_values=[[0.5, 123.0, 0.7], [0.0, 0.0, 0.0]])


def test_trl_011_holes_are_zero_value_states():
    out = get_preset("trl-0.11")(holes_case(), lam=0.5)
    # row 0, values times mask = [0.5, 0, 0.7], rewards [0, 0, 1], every column:
    #   delta = [0 + 0 - 0.5, 0 + 0.7 - 0, 1 + 0 - 0.7] = [-0.5, 0.7, 0.3]
    #   A = [-0.5 + 0.5 * 0.85, 0.7 + 0.5 * 0.3, 0.3] = [-0.075, 0.85, 0.3]
    #   returns = A + V on the tokens: [0.425, (hole), 1.0]
    close(out["returns"][0], [0.425, 0.0, 1.0])
    # the seed (and verl) skip the hole: delta = [0 + 0.7 - 0.5, ., 0.3], A_0 = 0.2 + 0.5 * 0.3
    seed = get_preset("seed")(holes_case(), lam=0.5)
    close(seed["returns"][0], [0.35 + 0.5, 0.0, 1.0])
    # row 1 has no reward and no value: A = 0; whitening over the 5 tokens
    w = whiten_by_hand([-0.075, 0.3, 0.0, 0.0, 0.0], ddof=1)
    close(out["advantages"], [[w[0], 0.0, w[1]], [w[2], w[3], w[4]]])


def test_trl_011_agrees_with_openrlhf_gae_on_holes():
    trl = get_preset("trl-0.11")(holes_case(), beta=0.01, lam=0.5)
    orl = get_preset("openrlhf")(holes_case(), lam=0.5)
    close(orl["returns"], trl["returns"])
    close(orl["rewards"], trl["rewards"])


def test_trl_011_ratio_threshold_skips_the_batch():
    case = make_case([[1, 1], [1, 1]], scores=[1.0, -1.0], old_values=[[0.1, 0.2], [0.0, 0.4]])
    case["logp"] = case["logp_old"] + math.log(20.0)
    case["values"] = case["old_values"] + 0.05
    out = get_preset("trl-0.11")(case)
    # the token mean of the ratio is 20 > 10: both losses and gradients are multiplied by 0
    assert out["policy_loss"] == 0.0 and out["value_loss"] == 0.0
    assert not np.any(out["dlogp"]) and not np.any(out["dvalues"])
    close(out["stat/ppo/policy/policykl"], -math.log(20.0))
    kept = get_preset("trl-0.11")(case, ratio_threshold=100.0)
    assert kept["value_loss"] > 0 and np.any(kept["dvalues"])


def test_trl_011_statistics_and_kl_penalties_by_hand():
    case = make_case([[1, 1, 0]], scores=[3.0], logp_old=[[-1.0, -2.0, 0.0]],
                     logp_ref=[[-1.5, -1.5, 0.0]], old_values=[[0.0, 0.0, 0.0]])
    case["logp"] = case["logp_old"] + [[0.2, -0.4, 0.0]]
    p = get_preset("trl-0.11")
    out = p(case, beta=0.1, score_clip=2.0)
    # k1 = [0.5, -0.5]; the score 3 is clipped to 2 and added at the last token
    close(out["rewards"], [[-0.05, 0.05 + 2.0, 0.0]])
    # policykl = mean(logp_old - logp) = (-0.2 + 0.4) / 2; approxkl = 0.5 (0.04 + 0.16) / 2
    close(out["stat/ppo/policy/policykl"], 0.1)
    close(out["stat/ppo/policy/approxkl"], 0.05)
    # mean_non_score_reward is a token mean: (-0.05 + 0.05) / 2; objective/kl a row sum
    close(out["stat/ppo/mean_non_score_reward"], 0.0)
    close(out["stat/objective/kl"], 0.0)
    close(out["stat/ppo/mean_scores"], 2.0)
    assert math.isnan(out["stat/ppo/std_scores"])  # one response: ddof 1 has no value
    close(out["stat/objective/entropy"], 3.0)
    # kl_penalty "mse" (k2) and "abs"
    close(p(case, beta=0.1, kl_estimator="k2")["rewards"], [[-0.0125, -0.0125 + 3.0, 0.0]])
    close(p(case, beta=0.1, kl_estimator="abs")["rewards"], [[-0.05, -0.05 + 3.0, 0.0]])
    with pytest.raises(ValueError, match=r"trl-0\.11: whiten_rewards=True is not reproduced"):
        p(case, whiten_rewards=True)


# --------------------------------------------------------------------------------------
# verl: KL off by default, dual clip 3, log-ratio clamp 20, k3 clamp 10, lam 1


def dual_case():
    # one response of two tokens: rewards [0, 1]; V_old = [0, 0.5]; gamma = lam = 1:
    #   delta = [0 + 0.5 - 0, 1 - 0.5] = [0.5, 0.5]; A = [1.0, 0.5]; R = A + V_old = [1.0, 1.0]
    # whitened (ddof 1): +-0.25 / sqrt(0.125 + 1e-8) =: +-a
    return make_case([[1, 1]], scores=[1.0], logp_old=[[-1.0, -1.0]], logp_ref=[[-3.0, 0.5]],
                     logp=[[-1.0, -1.0 + math.log(5.0)]], old_values=[[0.0, 0.5]])


def test_verl_ignores_the_kl_by_default_and_applies_the_dual_clip():
    a = 0.25 / math.sqrt(0.125 + 1e-8)
    out = get_preset("verl")(dual_case())
    close(out["rewards"], [[0.0, 1.0]])  # use_kl_in_reward=False: logp_ref is not used
    close(out["returns"], [[1.0, 1.0]])
    close(out["advantages"], [[a, -a]])
    # token 0: rho = 1, A = a; token 1: rho = 5, A = -a: min(-5a, -1.2a) = -5a, dual clip
    # max(-5a, 3 * -a) = -3a. Loss = -(a - 3a) / 2 = a; without the dual clip -(a - 5a) / 2
    close(out["policy_loss"], a)
    close(get_preset("verl")(dual_case(), dual_clip=None)["policy_loss"], 2 * a)
    # gradient: -(1/2) a rho on token 0, 0 where the dual clip holds
    close(out["dlogp"], [[-a / 2, 0.0]])
    close(out["stat/actor/pg_clipfrac_lower"], 0.5)
    close(out["stat/actor/pg_clipfrac"], 0.0)  # min picks rho A on token 1: not "clipped"
    close(out["stat/actor/ppo_kl"], -math.log(5.0) / 2)
    # value loss, V = V_old: token mean of 1/2 (V - R)^2 = (0.5 + 0.125) / 2
    close(out["value_loss"], 0.3125)
    # explained variance: 1 - var(R - V_old) / (var(R) + 1e-5) = 1 - 0.125 / 1e-5
    close(out["stat/critic/vf_explained_var"], 1.0 - 0.125 / 1e-5, tol=1e-9)
    close(out["stat/critic/score/mean"], 1.0)
    assert "stat/actor/reward_kl_penalty" not in out


def test_verl_kl_in_reward_and_the_k3_clamp():
    case = make_case([[1, 1]], scores=[1.0], logp_old=[[-21.0, -1.0]], logp_ref=[[-1.0, -1.5]])
    verl = get_preset("verl")
    # k3 with log r = logp_ref - logp_old = [20, -0.5]: e^20 - 21 is clamped to 10
    k3 = math.exp(-0.5) - 1 + 0.5
    out = verl(case, use_kl_in_reward=True, kl_estimator="k3", beta=0.1)
    close(out["rewards"], [[-1.0, -0.1 * k3 + 1.0]])
    close(out["stat/actor/reward_kl_penalty"], (10 + k3) / 2)
    close(out["stat/actor/reward_kl_penalty_coeff"], 0.1)
    # k1 is not clamped: -0.1 * (-20) = 2
    close(verl(case, use_kl_in_reward=True, beta=0.1)["rewards"], [[2.0, -0.05 + 1.0]])


def test_verl_and_openrlhf_clamp_the_log_ratio_openrlhf_logs_it_unclamped():
    case = make_case([[1, 1]], scores=[1.0], old_values=[[0.0, 0.5]])
    case["logp"] = case["logp_old"] + [[30.0, 0.0]]
    # verl's ppo_kl uses the clamped log-ratio: -(20 + 0) / 2; OpenRLHF's the raw one
    close(get_preset("verl")(case)["stat/actor/ppo_kl"], -10.0)
    close(get_preset("openrlhf")(case)["stat/ppo_kl"], -15.0)
    # the clamped token is clipped (A > 0, rho = e^20): no gradient
    assert get_preset("verl")(case)["dlogp"][0, 0] == 0.0


def test_verl_requires_the_response_to_start_at_column_0():
    with pytest.raises(ValueError, match=r"verl: mask row 0 does not start at column 0"):
        get_preset("verl")(make_case([[0, 1, 1]], scores=[1.0]))


# --------------------------------------------------------------------------------------
# openrlhf: KL clamped to 10, score clipped to (-10, 10), ddof-0 whitening with a floor


def test_openrlhf_clamps_the_kl_and_the_score():
    case = make_case([[1, 1]], scores=[25.0], logp_old=[[-1.0, -2.0]], logp_ref=[[-31.0, -1.5]])
    out = get_preset("openrlhf")(case)
    # k1 = [30, -0.5] -> [10, -0.5]; beta 0.01; the score 25 -> 10 at the last token
    close(out["rewards"], [[-0.1, 0.005 + 10.0]])
    close(out["stat/kl"], (10 - 0.5) / 2)
    close(out["stat/reward"], 25.0)  # logged raw


def test_openrlhf_whitens_with_ddof_0():
    # the raw advantages of dual_case are [1.0, 0.5]: with ddof 0 they become exactly +-1
    out = get_preset("openrlhf")(dual_case(), beta=0.0)
    close(out["advantages"], [[1.0, -1.0]])
    verl = get_preset("verl")(dual_case())
    a = 0.25 / math.sqrt(0.125 + 1e-8)
    close(verl["advantages"], [[a, -a]])


def test_openrlhf_eps_is_a_floor_on_the_variance():
    # raw advantages [s - V0, s - V1] differ by V1 - V0 = 1e-5: var (ddof 0) = 2.5e-11 < 1e-8
    case = make_case([[1, 1]], scores=[1.0], old_values=[[0.0, 1e-5]])
    out = get_preset("openrlhf")(case, beta=0.0)
    close(out["advantages"], [[0.5e-5 / 1e-4, -0.5e-5 / 1e-4]])
    # verl adds eps instead (and uses ddof 1: var = 5e-11)
    b = 0.5e-5 / math.sqrt(5e-11 + 1e-8)
    close(get_preset("verl")(case)["advantages"], [[b, -b]])


def test_openrlhf_one_token_in_the_batch_has_advantage_0():
    case = make_case([[0, 1, 0]], scores=[2.0], logp_old=[[0.0, -1.0, 0.0]],
                     logp_ref=[[0.0, -1.5, 0.0]], old_values=[[0.0, 0.5, 0.0]],
                     values=[[0.0, 0.7, 0.0]])
    out = get_preset("openrlhf")(case)
    # k1 = 0.5, beta 0.01: r = -0.005 + 2 = 1.995; V = 0 after it: R = 1.995
    close(out["rewards"], [[0.0, 1.995, 0.0]])
    close(out["returns"], [[0.0, 1.995, 0.0]])
    # mean = A itself and var (ddof 0) = 0, floored at 1e-8: (A - A) / 1e-4 = 0
    close(out["advantages"], [[0.0, 0.0, 0.0]])
    close(out["policy_loss"], 0.0)
    close(out["dlogp"], [[0.0, 0.0, 0.0]])
    # |V - V_old| = 0.2 < 0.5: 1/2 (0.7 - 1.995)^2, gradient 0.7 - 1.995
    close(out["value_loss"], 0.5 * 1.295**2)
    close(out["dvalues"], [[0.0, -1.295, 0.0]])


# --------------------------------------------------------------------------------------
# deepspeed-chat: clipped score one slot after with that slot's KL, no whitening


def test_deepspeed_chat_by_hand():
    case = make_case([[1, 1, 0]], scores=[7.0], logp_old=[[-1.0, -2.0, -0.5]],
                     logp_ref=[[-1.5, -1.8, -1.5]], old_values=[[0.5, 0.6, 0.2]],
                     values=[[0.6, 0.5, 99.0]])
    out = get_preset("deepspeed-chat")(case)
    # k1 = [0.5, -0.2, 1.0] (the slot after included), beta 0.1, score clip(7) = 5 at the slot
    close(out["rewards"], [[-0.05, 0.02, -0.1 + 5.0]])
    # delta = [-0.05 + 0.6 - 0.5, 0.02 + 0.2 - 0.6, 4.9 - 0.2] = [0.05, -0.38, 4.7]
    # A = [0.05 + 0.95 * 4.085, -0.38 + 0.95 * 4.7, 4.7]; not whitened; the slot not in the loss
    A0, A1 = 0.05 + 0.95 * 4.085, -0.38 + 0.95 * 4.7
    close(out["advantages"], [[A0, A1, 0.0]])
    close(out["returns"], [[A0 + 0.5, A1 + 0.6, 0.0]])
    close(out["policy_loss"], -(A0 + A1) / 2)
    close(out["dlogp"], [[-A0 / 2, -A1 / 2, 0.0]])
    # value loss over the two tokens only; |V - V_old| = 0.1 < 0.2 so the clip is inactive
    R0, R1 = A0 + 0.5, A1 + 0.6
    close(out["value_loss"], (0.5 * (0.6 - R0) ** 2 + 0.5 * (0.5 - R1) ** 2) / 2)
    close(out["dvalues"], [[(0.6 - R0) / 2, (0.5 - R1) / 2, 0.0]])
    close(out["stat/reward"], 7.0)  # logged before the clip
    close(out["stat/actor_loss"], out["policy_loss"])
    close(out["stat/critic_loss"], out["value_loss"])


def test_deepspeed_chat_full_row_gets_the_score_at_its_last_token():
    case = make_case([[1, 1]], scores=[-9.0])
    close(get_preset("deepspeed-chat")(case)["rewards"], [[0.0, -5.0]])


def test_deepspeed_chat_rejects_garbage_at_the_slot_after():
    case = make_case([[1, 0, 0]], scores=[1.0], logp_old=[[-1.0, np.nan, np.nan]])
    with pytest.raises(ValueError, match=r"deepspeed-chat: logp_old is nan at padding"):
        get_preset("deepspeed-chat")(case)


def test_trl_and_deepspeed_chat_agree_up_to_whitening():
    # same beta, scores inside [-5, 5], no KL at the slot after (so both rewards agree)
    rng = np.random.default_rng(7)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=float)
    logp_old = rng.normal(-1, 0.3, mask.shape)
    logp_ref = np.where(mask > 0, logp_old + rng.normal(0, 0.2, mask.shape), logp_old)
    case = make_case(mask, scores=rng.uniform(-4, 4, 3), logp_old=logp_old, logp_ref=logp_ref,
                     old_values=rng.normal(size=mask.shape))
    trl = get_preset("trl")(case, beta=0.1)
    ds = get_preset("deepspeed-chat")(case)
    close(ds["rewards"], trl["rewards"])
    close(ds["returns"], np.where(mask > 0, trl["returns"], 0.0))
    close(whiten(ds["advantages"], mask), trl["advantages"])


# --------------------------------------------------------------------------------------
# lm-human-preferences: no mask, rewards and advantages whitened with ddof 0


def test_lm_human_preferences_by_hand():
    case = make_case([[1, 1]], scores=[1.0])
    out = get_preset("lm-human-preferences")(case)
    # rewards [0, 1] whitened with the mean kept: mean 0.5, var (ddof 0) 0.25
    s = math.sqrt(0.25 + 1e-8)
    r = [0.5 - 0.5 / s, 0.5 + 0.5 / s]
    close(out["rewards"], [r])
    # V_old = 0: A = R = [r0 + 0.95 r1, r1]
    R = [r[0] + 0.95 * r[1], r[1]]
    close(out["returns"], [R])
    close(out["advantages"], [whiten_by_hand(R, ddof=0)])
    close(out["value_loss"], (0.5 * R[0] ** 2 + 0.5 * R[1] ** 2) / 2)
    close(out["stat/ppo/returns/var"], ((R[0] - R[1]) / 2) ** 2)  # ddof 0
    close(out["stat/objective/score_total"], 1.0)
    plain = get_preset("lm-human-preferences")(case, whiten_rewards=False)
    close(plain["rewards"], [[0.0, 1.0]])
    close(plain["returns"], [[0.95, 1.0]])


def test_lm_human_preferences_has_no_mask():
    with pytest.raises(ValueError, match=r"lm-human-preferences: mask row 0 has padding"):
        get_preset("lm-human-preferences")(make_case([[1, 0]], scores=[1.0]))


# --------------------------------------------------------------------------------------
# Agreement where conventions agree


def random_case(mask, seed, spread=0.1):
    rng = np.random.default_rng(seed)
    mask = np.asarray(mask, dtype=float)
    logp_old = rng.normal(-1, 0.3, mask.shape)
    old_values = rng.normal(size=mask.shape)
    values = old_values + rng.uniform(-0.15, 0.15, mask.shape)
    values[:, ::3] += 0.4  # some tokens outside a 0.2 value clip
    return make_case(mask, scores=rng.normal(size=mask.shape[0]), logp_old=logp_old,
                     logp=logp_old + rng.uniform(-spread, spread, mask.shape),
                     logp_ref=logp_old + rng.normal(0, 0.2, mask.shape),
                     old_values=old_values, values=values)


def assert_same(a, b, keys=("rewards", "advantages", "returns", "policy_loss", "value_loss",
                            "dlogp", "dvalues")):
    for k in keys:
        close(a[k], b[k])


def test_verl_equals_the_seed_when_its_options_are_switched_off():
    # holes are skipped by both; the response starts at column 0
    case = random_case([[1, 1, 0, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 0, 1, 0, 0, 0]], 11)
    seed = get_preset("seed")(case, beta=0.02, lam=1.0, whiten_advantages=True,
                              policy_agg="token-mean", value_clip=0.5)
    verl = get_preset("verl")(case, use_kl_in_reward=True, beta=0.02, dual_clip=None,
                              log_ratio_clamp=None)
    assert_same(seed, verl)


def test_trl_011_equals_the_seed_without_holes():
    # V = 0 after the last token and the score at the last token in both; left zeros allowed
    case = random_case([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], 12)
    seed = get_preset("seed")(case, beta=0.2, whiten_advantages=True, policy_agg="token-mean",
                              value_clip=0.2)
    trl = get_preset("trl-0.11")(case)
    assert_same(seed, trl)


def test_trl_agrees_with_the_seed_on_full_rows():
    # no room after the last token: TRL's score lands on it, and nothing is kept after
    case = random_case(np.ones((3, 4)), 13)
    seed = get_preset("seed")(case, whiten_advantages=True, policy_agg="token-mean",
                              value_clip=0.2)
    assert_same(seed, get_preset("trl")(case))


def test_lm_human_preferences_equals_the_seed_up_to_ddof():
    case = random_case(np.ones((2, 5)), 14)
    lmhp = get_preset("lm-human-preferences")(case, whiten_rewards=False)
    seed = get_preset("seed")(case, beta=0.2, policy_agg="token-mean", value_clip=0.2)
    close(lmhp["rewards"], seed["rewards"])
    close(lmhp["returns"], seed["returns"])
    close(lmhp["advantages"], whiten(seed["advantages"], ddof=0))


# --------------------------------------------------------------------------------------
# Gradients: dlogp and dvalues against centered finite differences of each preset's losses


GRADIENT_CASES = {
    "seed": [[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 0]],
    "trl": [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]],
    "trl-0.11": [[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 0]],
    "verl": [[1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]],
    "openrlhf": [[1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 0]],
    "deepspeed-chat": [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]],
    "lm-human-preferences": np.ones((3, 4)),
}


@pytest.mark.parametrize("name", list(PPO_PRESETS))
def test_gradients_match_finite_differences(name):
    preset = get_preset(name)
    case = random_case(GRADIENT_CASES[name], 21)
    out = preset(case)
    h = 1e-6
    for key, grad, loss in (("logp", "dlogp", "policy_loss"), ("values", "dvalues",
                                                               "value_loss")):
        fd = np.zeros_like(out[grad])
        for idx in np.ndindex(fd.shape):
            plus, minus = dict(case), dict(case)
            plus[key], minus[key] = case[key].copy(), case[key].copy()
            plus[key][idx] += h
            minus[key][idx] -= h
            fd[idx] = (preset(plus)[loss] - preset(minus)[loss]) / (2 * h)
        np.testing.assert_allclose(out[grad], fd, rtol=1e-6, atol=1e-9,
                                   err_msg=f"{name}: {grad} vs finite differences")
        assert np.any(out[grad]), (name, grad)


# --------------------------------------------------------------------------------------
# The core keywords added for the presets


def test_score_offset_and_score_clip():
    z = [0.0, 0.0, 0.0]
    # one slot after the last token; a full row keeps it on its last token
    close(kl_shaped_rewards([1.0, 2.0], [z, z], [z, z], 0.1, [[1, 0, 0], [1, 1, 1]],
                            score_offset=1), [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    close(kl_shaped_rewards([7.0, -7.0], [z, z], [z, z], 0.1, score_clip=(-1.0, 3.0)),
          [[0.0, 0.0, 3.0], [0.0, 0.0, -1.0]])
    with pytest.raises(ValueError, match=r"score_offset: must be 0 or 1"):
        kl_shaped_rewards(1.0, z, z, 0.1, score_offset=2)
    with pytest.raises(ValueError, match=r"score_clip: low must be < high"):
        kl_shaped_rewards(1.0, z, z, 0.1, score_clip=(2.0, 1.0))
    with pytest.raises(ValueError, match=r"score_clip: must be > 0"):
        kl_shaped_rewards(1.0, z, z, 0.1, score_clip=0.0)


def test_whiten_eps_mode():
    # var (ddof 0) of [0, 2] is 1: eps 3 added gives /2, as a floor /sqrt(3); below it no effect
    close(whiten([0.0, 2.0], ddof=0, std_eps=3.0), [-0.5, 0.5])
    close(whiten([0.0, 2.0], ddof=0, std_eps=3.0, eps_mode="floor"), [-1 / math.sqrt(3),
                                                                  1 / math.sqrt(3)])
    close(whiten([0.0, 2.0], ddof=0, std_eps=0.5, eps_mode="floor"), [-1.0, 1.0])
    with pytest.raises(ValueError, match=r"eps_mode: expected 'add' or 'floor'"):
        whiten([0.0, 2.0], eps_mode="clamp")


# --------------------------------------------------------------------------------------
# Exact to the last tie: values on the value-clip bounds (issue 14 item 3)


def values_on_the_bounds(c, B=8, T=3, seed=5):
    """A case with every value exactly on fl(V_old +- c) or one ulp inside, returns near."""
    rng = np.random.default_rng(seed)
    old = rng.uniform(-0.3, 0.3, size=(B, T))
    sign = np.where(rng.random((B, T)) < 0.5, 1.0, -1.0)
    values = old + sign * c
    inside = rng.random((B, T)) < 0.5
    values = np.where(inside, np.nextafter(values, old), values)
    logp_old = -rng.gamma(2.0, 0.5, size=(B, T))
    return make_case(np.ones((B, T)), scores=rng.normal(0, 1.5, B), logp_old=logp_old,
                     logp=logp_old + rng.normal(0, 0.1, (B, T)), old_values=old,
                     values=values)


def trl_vf_clipfrac(case, returns, c):
    """TRL's PPOTrainer.train, written out: vpredclipped = clamp(vpred, V_old - c, V_old + c),
    vf_clipfrac = masked_mean(vf_losses2 > vf_losses1) over the mask (+ slot after: none
    here, the rows are full)."""
    vpred, old = case["values"], case["old_values"]
    vpredclipped = np.minimum(np.maximum(vpred, old - c), old + c)
    vf_losses1 = (vpred - returns) ** 2
    vf_losses2 = (vpredclipped - returns) ** 2
    return float(np.mean(vf_losses2 > vf_losses1))


def test_trl_value_clipfrac_equals_trls_on_values_exactly_on_the_bounds():
    preset = get_preset("trl")
    differs = 0
    for seed in range(40):
        case = values_on_the_bounds(0.2, seed=seed)
        # gamma 1, lam 0: R_t = r_t + V_old,t+1
        out = preset(case, gamma=1.0, lam=0.0)
        want = trl_vf_clipfrac(case, out["returns"], 0.2)
        assert out["stat/val/clipfrac_avg"] == want, (seed, out["stat/val/clipfrac_avg"], want)
        offset = preset(case, gamma=1.0, lam=0.0, value_clip_form="offset")
        differs += offset["stat/val/clipfrac_avg"] != want
    # the offset form (the preset's form before) disagrees with TRL on some of them
    assert differs > 0


def test_trl_value_clip_on_the_bounds_against_torch():
    torch = pytest.importorskip("torch")
    preset = get_preset("trl")
    for seed in range(10):
        case = values_on_the_bounds(0.2, seed=seed)
        out = preset(case, gamma=1.0, lam=0.0)
        vpred = torch.tensor(case["values"], dtype=torch.float64, requires_grad=True)
        old = torch.tensor(case["old_values"], dtype=torch.float64)
        R = torch.tensor(out["returns"], dtype=torch.float64)
        # trl/trainer/ppo_trainer.py (v0.20.0), the value loss of PPOTrainer.train
        vpredclipped = torch.clamp(vpred, old - 0.2, old + 0.2)
        vf_losses1 = torch.square(vpred - R)
        vf_losses2 = torch.square(vpredclipped - R)
        vf_loss = 0.5 * torch.max(vf_losses1, vf_losses2).mean()
        vf_clipfrac = (vf_losses2 > vf_losses1).float().mean()
        vf_loss.backward()
        assert float(vf_loss.detach()) == pytest.approx(out["value_loss"], rel=1e-15, abs=0)
        # torch's clip fraction is float32 k / n (rounded once)
        assert float(vf_clipfrac) == float(np.float32(out["stat/val/clipfrac_avg"]))
        # at a tie (V on the bound: V_clip = V) torch splits the gradient of max in half
        # and clamp passes it at its bounds: V - R, as the preset
        np.testing.assert_allclose(vpred.grad.numpy(), out["dvalues"], rtol=1e-15, atol=0)


def test_a_variance_of_one_token_is_a_clear_error_not_a_zero_division():
    # TRL's and verl's masked_var raise ValueError for a mask that sums to 1; trl-0.11 with
    # whiten_mask="all" whitens over every position but still logs the returns' variance
    # over the one valid token (it raised ZeroDivisionError before)
    from ppo_numpy.oracle.cases import generate_cases

    (case,) = generate_cases(0, ["one-valid-token"])
    with pytest.raises(ValueError, match=r"^mask: a variance with divisor n - 1 needs at least "
                                         r"2 valid elements, got 1$"):
        get_preset("trl-0.11")(case, whiten_mask="all")
