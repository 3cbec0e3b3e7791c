"""The third policy's conventions no framework names (issue 36): each preset under the other
value, against hand calculations on one small batch.

Four responses in two groups, rho = 1 everywhere (logp = logp_old: every clipped loss is
unclipped, so the policy loss is -sum_t a_t w_t A_t with a_t the aggregation weights) and
the token ratios w = pi_old / pi_rollout of docs/conventions.md section 14's worked numbers:

    row 0: [4, 0.4, 0.625]  product 1,      geometric mean 1
    row 1: [8]              product 8,      geometric mean 8
    row 2: [2.5, 2.5]       product 6.25,   geometric mean 2.5
    row 3: [0.6, 0.6, 0.6]  product 0.216,  geometric mean 0.6

(no statistic on a bound of the tests' bands, 0.5 and 2: a ratio read back from log-probs is
off by an ulp, which would decide it)

The advantages A are read from the preset's own output (tested in test_presets_grpo.py);
the weights, the masks and the losses are written here by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from ppo_numpy.oracle.presets import get_preset

W = [[4.0, 0.4, 0.625], [8.0, 1.0, 1.0], [2.5, 2.5, 1.0], [0.6, 0.6, 0.6]]
MASK = np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=float)
N = 9  # response tokens
LOGP_OLD = np.log([[0.8, 0.2, 0.5], [0.8, 0.5, 0.5], [0.75, 0.75, 0.5], [0.3, 0.2, 0.1]])


def case(params=None, **inputs):
    logp_rollout = np.where(MASK == 1, LOGP_OLD - np.log(W), 0.0)
    x = {"logp": LOGP_OLD * MASK, "logp_old": LOGP_OLD * MASK, "logp_ref": LOGP_OLD * MASK,
         "mask": MASK, "scores": np.array([1.0, 0.0, 1.0, 0.0]),
         "groups": np.array([0.0, 0.0, 1.0, 1.0]), "baseline_scores": np.zeros(4),
         "logp_rollout": logp_rollout}
    x.update(inputs)
    return {"name": "hand", "inputs": x, "params": dict(params or {})}


def rows(A):
    """One advantage per response (constant along it here), at every column."""
    return np.repeat(np.asarray(A)[:, :1], 3, axis=1)


def token_mean_loss(A, w, mask=MASK):
    # -sum_t w_t A_t / (response tokens of the loss's mask)
    return -float(np.sum(np.where(mask == 1, np.asarray(w) * A, 0.0)) / mask.sum())


def close(a, b, rel=1e-12):
    return abs(a - b) <= rel * max(1.0, abs(b))


TRL_SEQ = {"vllm_importance_sampling_mode": "sequence_truncate",
           "vllm_importance_sampling_clip_min": 0.5, "vllm_importance_sampling_clip_max": 2.0}


@pytest.mark.parametrize("how, weights", [
    ("product", [1.0, 2.0, 2.0, 0.5]),          # 1, 8 -> 2, 6.25 -> 2, 0.216 -> 0.5
    ("geometric-mean", [1.0, 2.0, 2.0, 0.6]),   # 1, 8 -> 2, 2.5 -> 2, 0.6
])
def test_trl_sequence_weight_product_or_geometric_mean_truncated(how, weights):
    out = get_preset("trl-grpo")(case(TRL_SEQ), is_sequence_weight=how)
    A = rows(out["advantages"])
    w = np.array(weights)[:, None] * np.ones((4, 3))
    assert close(out["policy_loss"], token_mean_loss(A, w))  # dapo: sum / 9 tokens


def test_trl_sequence_weight_geometric_mean_changes_a_masked_response():
    # sequence_mask, bounds [0.5, 2]: products 1, 8, 6.25, 0.216 keep row 0 only; geometric
    # means 1, 8, 2.5, 0.6 keep rows 0 and 3
    p = {**TRL_SEQ, "vllm_importance_sampling_mode": "sequence_mask"}
    trl = get_preset("trl-grpo")
    A = rows(trl(case(p))["advantages"])
    product = trl(case(p))["policy_loss"]
    geometric = trl(case(p), is_sequence_weight="geometric-mean")["policy_loss"]
    assert close(product, token_mean_loss(A, [[1.0] * 3, [0] * 3, [0] * 3, [0] * 3]))
    assert close(geometric, token_mean_loss(A, [[1.0] * 3, [0] * 3, [0] * 3, [0.6] * 3]))


def test_trl_masked_weights_zero_or_drop():
    # TRL's default sequence_mask, clip_max 3: products 1, 8, 6.25, 0.216 -> 1, 0, 0, 0.216;
    # "drop" takes rows 1 and 2 (3 tokens) out of the dapo normalisation: 6 tokens left
    trl = get_preset("trl-grpo")
    out = trl(case())
    A = rows(out["advantages"])
    w = np.array([1.0, 0.0, 0.0, 0.216])[:, None] * np.ones((4, 3))
    assert close(out["policy_loss"], token_mean_loss(A, w))
    dropped = trl(case(), masked_weights="drop")
    kept = MASK * np.array([1, 0, 0, 1])[:, None]
    assert close(dropped["policy_loss"], token_mean_loss(A, w, kept))
    # d loss / d logp_t = -w_t A_t / (tokens of the loss's mask), 0 at a dropped token
    assert np.allclose(dropped["dlogp"], np.where(kept == 1, -w * A / 6, 0.0), rtol=1e-12,
                       atol=0)


def test_trl_off_policy_mask_as_a_weight_or_a_mask():
    # no vLLM weights; the off-policy mask at 0.4 drops a response with A < 0 whose mean of
    # logp_rollout - logp (= -log w here) exceeds 0.4: row 3 (-log 0.6 = 0.51); row 1
    # (A < 0) has -log 8 < 0 and stays
    p = {"vllm_importance_sampling_correction": False, "off_policy_mask_threshold": 0.4}
    trl = get_preset("trl-grpo")
    out = trl(case(p))
    A = rows(out["advantages"])
    keep = np.array([1.0, 1.0, 1.0, 0.0])[:, None] * np.ones((4, 3))
    assert close(out["policy_loss"], token_mean_loss(A, keep))             # / 9
    masked = trl(case(p), rejection="mask")["policy_loss"]
    assert close(masked, token_mean_loss(A, keep, MASK * keep))           # / 6


@pytest.mark.parametrize("which, dropped_rows", [
    # mean of sampling - current over the rows with A < 0 (1 and 3), against 0.4:
    # sampling-current: logp_rollout - logp = -log w - 0.3 -> row 1: -2.38, row 3: 0.21;
    # old-current: logp_old - logp = -0.3 -> none; sampling-old: -log w -> row 3: 0.51
    ("sampling-current", []), ("old-current", []), ("sampling-old", [3]),
])
def test_trl_off_policy_mask_reads_its_log_probs(which, dropped_rows):
    p = {"vllm_importance_sampling_correction": False, "off_policy_mask_threshold": 0.4}
    logp = (LOGP_OLD + 0.3) * MASK  # the current policy, log-ratio 0.3 at every token
    out = get_preset("trl-grpo")(case(p, logp=logp), off_policy_mask_logps=which)
    A = rows(out["advantages"])
    keep = np.array([0.0 if i in dropped_rows else 1.0 for i in range(4)])[:, None]
    rho = np.exp(0.3)  # 1.35 > 1.2: clipped where A > 0
    term = np.minimum(rho * A, np.clip(rho, 0.8, 1.2) * A)
    assert close(out["policy_loss"], -float(np.sum(MASK * keep * term)) / N)


VERL_TIS = {"rollout_is": "token", "rollout_is_threshold": 2.0}
TIS = [[2.0, 0.4, 0.625], [2.0, 0, 0], [2.0, 2.0, 0], [0.6, 0.6, 0.6]]


def test_verl_rejection_as_a_mask_or_a_zero_weight():
    # seq_mean_k1 at 2 keeps a response whose mean log(pi_rollout / pi_old) = -mean log w
    # lies in [log 0.5, log 2]: rows 0 (0) and 3 (0.51); rows 1 (-2.08) and 2 (-0.92) go
    p = {**VERL_TIS, "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": 2.0}
    verl = get_preset("verl-grpo")
    keep = np.array([1.0, 0.0, 0.0, 1.0])[:, None] * MASK
    A = rows(verl(case())["advantages"])  # GRPO reads the scores, whatever the mask
    masked = verl(case(p))
    # verl: the rejected tokens leave the mask (6 tokens left), their advantage 0
    assert close(masked["policy_loss"], token_mean_loss(A, TIS, keep))
    assert np.array_equal(masked["advantages"], A * keep)
    weighted = verl(case(p), rejection="weight")
    assert close(weighted["policy_loss"], token_mean_loss(A, np.array(TIS) * keep))  # / 9
    assert np.array_equal(weighted["advantages"], A * MASK)


def test_verl_masked_weights_zero_or_drop():
    # IcePop [0.5, 2]: row 0 [0, 0, 0.625], row 1 [0], row 2 [0, 0], row 3 [0.6, 0.6, 0.6]
    p = {"rollout_is": "token", "rollout_is_threshold": "0.5_2.0"}
    verl = get_preset("verl-grpo")
    w = np.array([[0, 0, 0.625], [0, 0, 0], [0, 0, 0], [0.6, 0.6, 0.6]])
    out = verl(case(p))
    A = rows(out["advantages"])
    assert close(out["policy_loss"], token_mean_loss(A, w))                    # / 9
    dropped = verl(case(p), masked_weights="drop")
    assert close(dropped["policy_loss"], token_mean_loss(A, w, (w > 0) * 1.0))  # / 4


def test_verl_weights_on_the_kl_term():
    # k1 KL loss of coefficient 0.5 against logp_ref = logp - 0.2: KL_t = 0.2 at every token
    p = {**VERL_TIS, "use_kl_loss": True, "kl_loss_coef": 0.5, "kl_loss_type": "k1"}
    verl = get_preset("verl-grpo")
    c = case(p, logp_ref=(LOGP_OLD - 0.2) * MASK)
    plain, weighted = verl(c), verl(c, is_weights_on_kl=True)
    A = rows(plain["advantages"])
    w = np.array(TIS)
    policy = token_mean_loss(A, w)
    assert close(plain["policy_loss"], policy + 0.5 * 0.2)
    assert close(weighted["policy_loss"], policy + 0.5 * float(np.sum(MASK * w * 0.2)) / N)
    # d/dlogp_t of the KL part: 0.5 * (w_t) / 9, the k1's derivative 1
    assert np.allclose(weighted["dlogp"] - plain["dlogp"], MASK * 0.5 * (w - 1) / N,
                       rtol=0, atol=1e-15)


def test_verl_bypass_reinforce_weight_detached_or_differentiated():
    # bypass: old := rollout; w_t = min(pi_theta / pi_rollout, 2) of the current logp (=
    # logp_old here, so the token ratios of W); loss = -sum_t w_t A_t logp_t / 9
    p = {"bypass_mode": True, "rollout_loss_type": "reinforce", **VERL_TIS}
    verl = get_preset("verl-grpo")
    out = verl(case(p))
    A = rows(out["advantages"])
    w, logp = np.array(TIS), LOGP_OLD * MASK
    assert close(out["policy_loss"], -float(np.sum(MASK * w * A * logp)) / N)
    assert np.allclose(out["dlogp"], -MASK * w * A / N, rtol=1e-12, atol=0)
    # differentiated: d(w_t logp_t)/dlogp_t = w_t + logp_t dw_t/dlogp_t, dw_t/dlogp_t = w_t
    # where the weight is its ratio (not truncated: 0.4, 0.625, 0.6), 0 where truncated
    through = np.array([[0, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1]])
    flows = verl(case(p), is_weights_detach=False)
    want = -MASK * A * (w + logp * w * through) / N
    assert np.allclose(flows["dlogp"], want, rtol=1e-12, atol=0)
    assert close(flows["policy_loss"], out["policy_loss"])


def test_verl_gmpo_weight_geometric_or_arithmetic_mean():
    # GMPO at rho = 1: loss = -(1/B) sum_i c_i Abar_i, c_i the response's weight from its
    # token TIS weights: geometric mean exp(mean log(w + 1e-10)) or the arithmetic mean
    p = {**VERL_TIS, "loss_mode": "geo_mean"}
    verl = get_preset("verl-grpo")
    A = verl(case(p))["advantages"][:, 0]
    geo = [np.exp(np.mean(np.log(np.array(r[:n]) + 1e-10))) for r, n in zip(TIS, [3, 1, 2, 3])]
    arith = [np.mean(r[:n]) for r, n in zip(TIS, [3, 1, 2, 3])]
    assert close(verl(case(p))["policy_loss"], -float(np.mean(np.array(geo) * A)), 1e-10)
    assert close(verl(case(p), gmpo_weight_mean="arithmetic")["policy_loss"],
                 -float(np.mean(np.array(arith) * A)), 1e-10)


def test_verl_gspo_token_or_sequence_gradient_with_token_weights():
    # GSPO at s_i = 1 (inside the clip range), token-mean: verl's token form gives token t
    # -w_t A / 9; the sequence form (s_i differentiated) the response's mean weight
    p = {**VERL_TIS, "loss_mode": "gspo"}
    verl = get_preset("verl-grpo")
    token, sequence = verl(case(p)), verl(case(p), sequence_gradient="sequence")
    A = rows(token["advantages"])
    w = np.array(TIS)
    n = MASK.sum(axis=1, keepdims=True)
    w_bar = (w * MASK).sum(axis=1, keepdims=True) / n
    assert np.allclose(token["dlogp"], -MASK * w * A / N, rtol=1e-12, atol=0)
    assert np.allclose(sequence["dlogp"], -MASK * w_bar * A / N, rtol=1e-12, atol=0)
    assert close(token["policy_loss"], sequence["policy_loss"])  # the same loss value


@pytest.mark.parametrize("how, kept_rows", [
    # band [0.5, 2]: geometric means 1, 8, 2.5, 0.6 keep rows 0 and 3; products 1, 8,
    # 6.25, 0.216 keep row 0 only; a kept response keeps its token ratios
    ("geometric-mean", [0, 3]), ("product", [0]),
])
def test_openrlhf_sequence_gate_reads_the_geometric_mean_or_the_product(how, kept_rows):
    p = {"is_correction_level": "seq", "is_correction_threshold": (0.5, 2.0),
         "init_kl_coef": 0.0}
    out = get_preset("openrlhf-grpo")(case(p), is_sequence_weight=how)
    A = rows(out["advantages"])
    w = np.array(W) * np.array([1.0 if i in kept_rows else 0.0 for i in range(4)])[:, None]
    assert close(out["policy_loss"], token_mean_loss(A, w))


def test_openrlhf_log_ratio_bound():
    # token mask, band [0, 1e12]: a log-ratio of 25 keeps e^25, or e^20 under a bound of 20
    logp_rollout = np.where(MASK == 1, LOGP_OLD - np.log(W), 0.0)
    logp_rollout[0, 0] = LOGP_OLD[0, 0] - 25.0
    p = {"is_correction_level": "token", "is_correction_threshold": (0.0, 1e12),
         "init_kl_coef": 0.0}
    orl = get_preset("openrlhf-grpo")
    for bound, w00 in ((None, np.exp(25.0)), (20.0, np.exp(20.0))):
        out = orl(case(p, logp_rollout=logp_rollout), is_log_ratio_bound=bound)
        A = rows(out["advantages"])
        w = np.array(W)
        w[0, 0] = w00
        assert close(out["policy_loss"], token_mean_loss(A, w), 1e-12)


def test_a_convention_value_the_preset_does_not_know_is_a_clear_error():
    with pytest.raises(ValueError, match="masked_weights: expected one of 'zero', 'drop'"):
        get_preset("trl-grpo")(case(), masked_weights="keep")
    with pytest.raises(ValueError, match="is_weights_on_kl: expected True or False"):
        get_preset("verl-grpo")(case({**VERL_TIS, "use_kl_loss": True}),
                                is_weights_on_kl="yes")
    with pytest.raises(ValueError, match="off_policy_mask_logps"):
        get_preset("trl-grpo")(case({"off_policy_mask_threshold": 0.5}),
                               off_policy_mask_logps="rollout")
