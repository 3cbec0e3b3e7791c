"""The critic-free presets' rollout-correction options (trl-grpo, verl-grpo, openrlhf-grpo):
hand-computed numbers, bad input naming the option, padding that changes nothing, and the
property that logp_rollout = logp_old changes no loss."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ppo_numpy.oracle.group_cases import generate_group_cases
from ppo_numpy.oracle.presets import get_preset

PRESET_OPTIONS = {
    "trl-grpo": [{}, {"vllm_importance_sampling_mode": "token_truncate"},
                 {"vllm_importance_sampling_mode": "token_mask",
                  "vllm_importance_sampling_clip_min": 0.5},
                 {"vllm_importance_sampling_mode": "sequence_truncate",
                  "importance_sampling_level": "sequence"}],
    "verl-grpo": [{"rollout_is": "token"}, {"rollout_is": "sequence"},
                  {"rollout_is": "token", "rollout_is_threshold": "0.5_2.0",
                   "rollout_is_batch_normalize": True},
                  {"bypass_mode": True, "rollout_is": "token",
                   "rollout_loss_type": "reinforce"}],
    "openrlhf-grpo": [{"is_correction_level": "token"}, {"is_correction_level": "seq"},
                      {"is_correction_level": "token", "is_correction_mode": "clip"}],
}


def one_group(logp_rollout=None):
    """One prompt, two responses of 2 and 1 tokens, scores 1 and 0 (advantages +-1/sqrt 2
    for verl and OpenRLHF's ddof-1 group std), logp = logp_old (ratio 1)."""
    lp_old = np.log([[0.5, 0.25], [0.5, 1.0]])
    lp_old[1, 1] = 0.0
    inputs = {"logp": lp_old.copy(), "logp_old": lp_old, "logp_ref": lp_old.copy(),
              "scores": np.array([1.0, 0.0]), "groups": np.array([0.0, 0.0]),
              "baseline_scores": np.array([0.0, 0.0]), "mask": np.array([[1, 1], [1, 0]])}
    if logp_rollout is not None:
        inputs["logp_rollout"] = np.asarray(logp_rollout, dtype=np.float64)
    return {"inputs": inputs, "params": {}}


# rollout probabilities: token ratios pi_old / pi_rollout = 0.5/0.125 = 4, 0.25/0.5 = 1/2;
# the one-token response 0.5/0.25 = 2
ROLLOUT = np.log([[0.125, 0.5], [0.25, 1.0]])
ROLLOUT[1, 1] = 0.0


def test_verl_token_tis_by_hand():
    # verl token TIS, threshold 2: weights [2, 1/2] and [2]; ratio 1, the vanilla loss is
    # -A w per token, token-mean over 3 tokens, A = +-(1 - 1/2)/(std 0.7071 + 1e-6)
    out = get_preset("verl-grpo")(one_group(ROLLOUT), rollout_is="token")
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    want = -(a * 2 + a * 0.5 - a * 2) / 3
    assert out["policy_loss"] == pytest.approx(want, rel=1e-6)
    assert out["dlogp"][0].tolist() == pytest.approx([-a * 2 / 3, -a * 0.5 / 3], rel=1e-6)


def test_verl_rejection_before_the_advantages_by_hand():
    # token_k1 with threshold 1.5 keeps 1/1.5 <= w <= 1.5: none of 4, 1/2, 2; seq_sum_k1
    # keeps the first response (log 4 + log 1/2 = log 2 > log 1.5? no: dropped) -- so with
    # threshold 2.5: response 0 (w 2) and response 1 (w 2) both kept, token_k1 2.5 drops 4
    out = get_preset("verl-grpo")(one_group(ROLLOUT), rollout_rs="token_k1",
                                  rollout_rs_threshold=2.5)
    # the first token (w = 4) is rejected: advantage 0 there, the token mean over 2 tokens
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert out["advantages"][0, 0] == 0.0
    assert out["advantages"][0, 1] == pytest.approx(a, rel=1e-6)
    assert out["policy_loss"] == pytest.approx(-(a - a) / 2, abs=1e-12)
    assert out["dlogp"][0].tolist() == pytest.approx([0.0, -a / 2], rel=1e-6)


def test_trl_sequence_mask_by_hand():
    # TRL's default sequence_mask, max 3: sequence ratios 4 * 1/2 = 2 (kept) and 2 (kept);
    # with max 1.5 both are dropped and the loss is 0
    out = get_preset("trl-grpo")(one_group(ROLLOUT))
    base = get_preset("trl-grpo")(one_group())
    assert out["policy_loss"] == pytest.approx(2 * base["policy_loss"], rel=1e-12)
    dropped = get_preset("trl-grpo")(one_group(ROLLOUT), vllm_importance_sampling_clip_max=1.5)
    assert dropped["policy_loss"] == 0.0
    assert out["stat/sampling/importance_sampling_ratio/mean"] == pytest.approx(2.0)
    # use_vllm=False: TRL has no sampling log-probs, no correction
    off = get_preset("trl-grpo")(one_group(ROLLOUT), use_vllm=False)
    assert off["policy_loss"] == base["policy_loss"]


def test_openrlhf_sequence_gate_keeps_unclamped_token_ratios():
    # geometric means sqrt(4 * 1/2) = 1.414 and 2, both in [0.5, 5]: the coefficients are
    # the token ratios 4, 1/2 and 2 themselves (TRL's sequence mask would weigh 2, 2, 2)
    p = get_preset("openrlhf-grpo")
    out = p(one_group(ROLLOUT), is_correction_level="seq")
    a = 0.5 / (math.sqrt(0.5) + 1e-9)
    assert out["dlogp"][0].tolist() == pytest.approx([-a * 4 / 3, -a * 0.5 / 3], rel=1e-6)
    assert out["stat/is_filter_ratio"] == 0.0
    assert out["stat/vllm_kl"] == pytest.approx(-(math.log(4) - math.log(2) + math.log(2)) / 3)


@pytest.mark.parametrize("name", PRESET_OPTIONS)
def test_identical_rollout_changes_no_loss(name):
    case = generate_group_cases(0, ["rollout-close"])[0]
    clean = {**case, "inputs": {k: v for k, v in case["inputs"].items() if k != "logp_rollout"}}
    same = {**case, "inputs": {**case["inputs"], "logp_rollout": case["inputs"]["logp_old"]}}
    p = get_preset(name)
    for options in PRESET_OPTIONS[name]:
        if options.get("bypass_mode"):
            continue  # (bypass takes the ratio against the rollout: another loss)
        # (the clean case without any correction option: off in every framework)
        off = {k: v for k, v in options.items()
               if k in ("importance_sampling_level", "vllm_importance_sampling_mode")}
        a, b = p({**clean, "params": off}), p({**same, "params": options})
        assert b["policy_loss"] == pytest.approx(a["policy_loss"], rel=1e-12, abs=1e-15)
        np.testing.assert_allclose(b["dlogp"], a["dlogp"], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", PRESET_OPTIONS)
def test_garbage_at_padding_changes_nothing(name):
    (dirty,) = generate_group_cases(0, ["rollout-nan-padding"])
    m = dirty["inputs"]["mask"] == 1
    # logp_rollout's padding holds NaN, +-inf, +-1e30; the other inputs' finite garbage is
    # kept (openrlhf-grpo's "return" reads the KL at padding, as OpenRLHF 0.11.2 sums it)
    clean = {**dirty, "inputs": {**dirty["inputs"],
                                 "logp_rollout": np.where(m, dirty["inputs"]["logp_rollout"],
                                                          0.0)}}
    keep = {k: v.copy() for k, v in dirty["inputs"].items()}
    p = get_preset(name)
    for options in PRESET_OPTIONS[name]:
        a, b = p({**clean, "params": options}), p({**dirty, "params": options})
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name} {options} {k}")
    for k, v in keep.items():  # the inputs are not modified
        np.testing.assert_array_equal(dirty["inputs"][k], v)


@pytest.mark.parametrize("name, options, option", [
    ("trl-grpo", {"use_vllm": True}, "use_vllm=True"),
    ("verl-grpo", {"rollout_is": "token"}, "rollout_is='token'"),
    ("verl-grpo", {"rollout_rs": "token_k1", "rollout_rs_threshold": 2.0}, "rollout_rs"),
    ("verl-grpo", {"bypass_mode": True}, "bypass_mode=True"),
    ("openrlhf-grpo", {"is_correction_level": "seq"}, "is_correction_level='seq'"),
])
def test_correction_without_logp_rollout_names_the_option(name, options, option):
    with pytest.raises(ValueError, match=f"^{name}: {option}.* needs logp_rollout"):
        get_preset(name)(one_group(), **options)


@pytest.mark.parametrize("name, options, message", [
    ("trl-grpo", {"vllm_importance_sampling_clip_min": 4.0},
     "vllm_importance_sampling_clip_min must be < vllm_importance_sampling_clip_max"),
    ("trl-grpo", {"vllm_importance_sampling_clip_max": -1.0},
     "vllm_importance_sampling_clip_max: must be > 0"),
    ("trl-grpo", {"vllm_importance_sampling_clip_max": math.nan},
     "vllm_importance_sampling_clip_max: must be finite"),
    ("trl-grpo", {"vllm_importance_sampling_mode": "token"}, "vllm_importance_sampling_mode"),
    ("trl-grpo", {"off_policy_mask_threshold": -0.1}, "off_policy_mask_threshold: must be >= 0"),
    ("verl-grpo", {"rollout_is": "token", "rollout_is_threshold": "3_2"},
     "rollout_is_threshold: lower must be <= upper"),
    ("verl-grpo", {"rollout_is": "token", "rollout_is_threshold": -2.0},
     "rollout_is_threshold: thresholds must be positive"),
    ("verl-grpo", {"rollout_is": "token", "rollout_is_threshold": "nan"},
     "rollout_is_threshold: thresholds must be positive and finite"),
    ("verl-grpo", {"rollout_rs": "token_k2", "rollout_rs_threshold": "0.1_2"},
     "rollout_rs_threshold: token_k2 takes an upper bound only"),
    ("verl-grpo", {"rollout_rs": "token_k1"}, "rollout_rs_threshold: rollout_rs needs"),
    ("verl-grpo", {"rollout_rs": "token_k9", "rollout_rs_threshold": 2.0}, "rollout_rs"),
    ("openrlhf-grpo", {"is_correction_level": "token", "is_correction_threshold": (5.0, 0.5)},
     "is_correction_threshold: low must be <= high"),
    ("openrlhf-grpo", {"is_correction_level": "token", "is_correction_gating": "tv"},
     "is_correction_gating='tv' takes an upper bound only"),
    ("openrlhf-grpo", {"is_correction_level": "seq", "is_correction_mode": "clip"},
     "is_correction_mode='clip' needs"),
])
def test_bad_options_name_the_argument(name, options, message):
    with pytest.raises((ValueError, TypeError), match=f"^{name}: {message}"):
        get_preset(name)(one_group(ROLLOUT), **options)


def test_openrlhf_binary_kl_rounds_below_zero():
    # docs/conventions.md section 14: OpenRLHF 0.11.2's binary KL (p log(p/q) + (1 - p)
    # log((1 - p)/(1 - q))) of two nearly equal probabilities rounds below 0, and its
    # single-threshold gate [0, h] drops the token; rollout_divergence_gate follows it
    # (issue 34 defect 6: low 0 by default), a negative low keeps it
    from ppo_numpy.mismatch.correction import rollout_divergence_gate

    lp_old, lp_roll = -2.3132620422323567, -2.313262052349042
    p, q = math.exp(lp_roll), math.exp(lp_old)
    d = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    assert -1e-16 < d < 0
    w = rollout_divergence_gate([[lp_old]], [[lp_roll]], divergence="binary_kl", high=0.01)
    assert w[0, 0] == 0.0  # (dropped, as OpenRLHF drops it)
    w = rollout_divergence_gate([[lp_old]], [[lp_roll]], divergence="binary_kl", high=0.01,
                                low=-1e-12)
    assert w[0, 0] == pytest.approx(math.exp(lp_old - lp_roll), rel=1e-15)
    # the measurement quoted: 200,000 tokens, |logp_rollout - logp_old| ~ N(0, 1e-6)
    rng = np.random.default_rng(0)
    lq = np.log(rng.uniform(0.01, 0.99, 200000))
    lp = lq + rng.normal(0, 1e-6, lq.shape)
    p, q = np.exp(lp), np.exp(lq)
    d = p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))
    # about half a percent round below 0 (docs/conventions.md: 0.52 %): 1035 of 200,000 with
    # NumPy's AVX-512 exp and log, 1039 with its AVX2 and SSE loops; the count is of
    # rounding artefacts, so it is a claim about its size, not about the count
    assert 0.4 < float(np.mean(d < 0)) * 100 < 0.65


def test_gspo_gradient_forms_of_the_presets():
    # docs/conventions.md section 14: trl-grpo gives GSPO the row mean of its token weights
    # (TRL's (B, 1) loss), verl-grpo each token its own (verl's sg(s) pi_t / sg(pi_t))
    lp_old = np.log([[0.5, 0.5], [0.5, 0.5]])
    case = {"inputs": {"logp": lp_old.copy(), "logp_old": lp_old, "logp_ref": lp_old.copy(),
                       "scores": np.array([1.0, 0.0]), "groups": np.array([0.0, 0.0]),
                       "baseline_scores": np.zeros(2), "mask": np.ones((2, 2)),
                       # token ratios [2, 1/2] and [1, 1]
                       "logp_rollout": np.log([[0.25, 1.0 - 1e-12], [0.5, 0.5]])},
            "params": {}}
    w = np.array([0.5 / 0.25, 0.5 / (1.0 - 1e-12)])
    trl = get_preset("trl-grpo")(case, importance_sampling_level="sequence",
                                 vllm_importance_sampling_mode="token_truncate",
                                 loss_type="grpo")
    verl = get_preset("verl-grpo")(case, loss_mode="gspo", rollout_is="token",
                                   rollout_is_threshold=5.0, loss_agg_mode="seq-mean-token-mean")
    # the same loss value, -(1/2) A mean(w) for the first response (s = 1)
    assert trl["policy_loss"] == pytest.approx(verl["policy_loss"] * (
        trl["advantages"][0, 0] / verl["advantages"][0, 0]), rel=1e-6)
    # the gradients of response 0 are proportional to mean(w) at both tokens and to w_t
    g_trl = trl["dlogp"][0] / trl["advantages"][0, 0]
    g_verl = verl["dlogp"][0] / verl["advantages"][0, 0]
    assert g_trl.tolist() == pytest.approx([-w.mean() / 4] * 2, rel=1e-9)
    assert g_verl.tolist() == pytest.approx((-w / 4).tolist(), rel=1e-9)


def test_trl_vespo_refuses_what_trl_refuses():
    p = get_preset("trl-grpo")
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        p(one_group(ROLLOUT), loss_type="vespo")          # TRL's default mode, sequence_mask
    # the token modes are taken; the level does not change VESPO's weights (TRL ignores it)
    token = p(one_group(ROLLOUT), loss_type="vespo", vllm_importance_sampling_mode="token_mask")
    seq = p(one_group(ROLLOUT), loss_type="vespo", vllm_importance_sampling_mode="token_mask",
            importance_sampling_level="sequence")
    np.testing.assert_array_equal(token["dlogp"], seq["dlogp"])


def test_trl_vespo_with_the_off_policy_mask_multiplies_the_dropped_terms_by_zero():
    # trl 1.16.0 _compute_loss: per_token_loss = -phi A logp, times the off-policy mask (the
    # vLLM ratio inside phi), summed over every token / 3. Row 1 (A < 0) has mean(logp_rollout
    # - logp) = log(0.9 / 0.5) = 0.59 > 0.5: dropped
    p = get_preset("trl-grpo")
    rollout = np.log([[0.125, 0.5], [0.9, 1.0]])
    rollout[1, 1] = 0.0
    args = dict(loss_type="vespo", vllm_importance_sampling_mode="token_mask")
    free = p(one_group(rollout), **args)
    masked = p(one_group(rollout), **args, off_policy_mask_threshold=0.5)
    assert free["dlogp"][1, 0] != 0.0 and masked["dlogp"][1, 0] == 0.0
    np.testing.assert_array_equal(masked["dlogp"][0], free["dlogp"][0])
    # phi constant in logp: row 1's term of the loss is its gradient times its logp
    dropped = free["dlogp"][1, 0] * np.log(0.5)
    assert masked["policy_loss"] == pytest.approx(free["policy_loss"] - dropped, rel=1e-12)
    assert masked["stat/vespo/phi_seq_mean"] == free["stat/vespo/phi_seq_mean"]


def test_verl_bypass_mode_ignores_the_actors_loss_mode():
    # verl 0.9.1 apply_bypass_mode sets loss_mode="bypass_mode" whatever the actor's
    p = get_preset("verl-grpo")
    vanilla = p(one_group(ROLLOUT), bypass_mode=True)
    for mode in ("geo_mean", "sapo", "dro"):
        other = p(one_group(ROLLOUT), bypass_mode=True, loss_mode=mode)
        np.testing.assert_array_equal(other["dlogp"], vanilla["dlogp"])
        assert other["policy_loss"] == vanilla["policy_loss"]
