"""The presets' new options of issue 27 on the batch of docs/conventions.md ("verl 0.9.1's
newer estimators", "TRL 1.16.0's luspo and vespo"): every number of those tables against a
value worked by hand here, and the presets' errors for bad options."""

import math

import numpy as np
import pytest

from ppo_numpy.family.advantages import gdpo_advantages
from ppo_numpy.oracle.presets import get_preset

M = np.array([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=float)
LOGP = np.where(M == 1, -1.0, 0.0)
CASE = {"logp": LOGP, "logp_old": LOGP, "logp_ref": LOGP, "mask": M,
        "scores": np.array([1.0, 0.0, 0.0, 0.0]), "groups": np.zeros(4),
        "baseline_scores": np.zeros(4)}
N = 10  # response tokens
VERL, TRL = get_preset("verl-grpo"), get_preset("trl-grpo")


def test_verl_estimators_on_the_documented_batch():
    # opo: b = (1 * 1 + 0) / 10 = 0.1; the token-mean loss at rho = 1 is -sum_t A_t / 10
    # = -(0.9 - 3 * 0.1 - 2 * 0.1 - 4 * 0.1) / 10 = 0; dlogp_0 = -A_0 / 10
    out = VERL(CASE, adv_estimator="opo")
    np.testing.assert_allclose(out["advantages"][:, 0], [0.9, -0.1, -0.1, -0.1], rtol=1e-6)
    assert abs(out["policy_loss"]) < 1e-7
    assert out["dlogp"][0, 0] == pytest.approx(-0.09, rel=1e-6)
    # gpg: alpha = 4 / 1; A = 4 (s - 1/4); loss = -(3 - 3 - 2 - 4) / 10 = 0.6
    out = VERL(CASE, adv_estimator="gpg")
    np.testing.assert_allclose(out["advantages"][:, 0], [3.0, -1.0, -1.0, -1.0], rtol=1e-6)
    assert out["policy_loss"] == pytest.approx(0.6, rel=1e-6)
    # grpo_passk: lead 1 over the std 1/2 (+ 1e-6), the others 0; loss = -A_0 / 10
    out = VERL(CASE, adv_estimator="grpo_passk")
    lead = 1 / (0.5 + 1e-6)
    np.testing.assert_allclose(out["advantages"][:, 0], [lead, 0, 0, 0], rtol=1e-6)
    assert out["policy_loss"] == pytest.approx(-lead / 10, rel=1e-6)
    out = VERL(CASE, adv_estimator="grpo_passk", norm_adv_by_std_in_grpo=False)
    np.testing.assert_allclose(out["advantages"][:, 0], [1, 0, 0, 0], rtol=1e-7)
    # gdpo with the score as its one component: GRPO a = 0.75 / (0.5 + 1e-6) and
    # b = -0.25 / (0.5 + 1e-6) on 1 and 9 tokens; mean (a + 9 b) / 10, ddof-1 variance
    a, b = 0.75 / (0.5 + 1e-6), -0.25 / (0.5 + 1e-6)
    mean = (a + 9 * b) / 10
    var = ((a - mean) ** 2 + 9 * (b - mean) ** 2) / 9
    want = [(a - mean) / math.sqrt(var + 1e-8), (b - mean) / math.sqrt(var + 1e-8)]
    for kw in ({}, {"norm_adv_by_std_in_grpo": False}, {"use_kl_in_reward": True}):
        out = VERL(CASE, adv_estimator="gdpo", **kw)  # verl ignores both here
        np.testing.assert_allclose(out["advantages"][:, 0], [want[0]] + [want[1]] * 3,
                                   rtol=1e-6)
    assert want[0] == pytest.approx(2.846050, abs=1e-6)


def test_gdpo_components_against_grpo_of_the_sum():
    comps = np.array([[1.0, 0.0], [0.0, 10.0], [0.0, 0.0], [0.0, 0.0]])
    case = {**CASE, "reward_components": comps, "scores": comps.sum(axis=1)}
    out = VERL(case, adv_estimator="gdpo")
    # each component: one 1-of-4 (or 10-of-4) pattern: GRPO 0.75/0.5 and -0.25/0.5 (eps
    # aside), so S = [1.5 - 0.5, -0.5 + 1.5, -1, -1] = [1, 1, -1, -1] (to 1e-6)
    S = np.array([1.0, 1.0, -1.0, -1.0])
    tok = np.repeat(S, M.sum(axis=1).astype(int))
    want = (S - tok.mean()) / math.sqrt(tok.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(out["advantages"][:, 0], want, rtol=1e-5)
    np.testing.assert_allclose(out["advantages"],
                               gdpo_advantages(comps, np.zeros(4, int), M, singleton="raw"),
                               rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="gdpo_reward_weights has 3 weights for 2"):
        VERL(case, adv_estimator="gdpo", gdpo_reward_weights=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="reward_components: expected shape"):
        VERL({**case, "reward_components": comps[:3]}, adv_estimator="gdpo")


def test_trl_luspo_and_vespo_on_the_documented_batch():
    off = {**CASE, "logp": np.where(M == 1, -0.95, 0.0)}  # rho = e^0.05 at every token
    A = np.array([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-4)
    rho = math.exp(0.05)  # inside [0.8, 1.2]: no clip
    n = M.sum(axis=1)
    for kw in ({"importance_sampling_level": "sequence"}, {}):
        out = TRL(off, loss_type="luspo", **kw)
        # -(1/B) sum_i n_i rho A_i; dlogp_0 = -(1/4) rho A_0 (one token)
        assert out["policy_loss"] == pytest.approx(-(n * rho * A).sum() / 4, rel=1e-6)
        assert out["dlogp"][0, 0] == pytest.approx(-rho * A[0] / 4, rel=1e-6)
    assert out["policy_loss"] == pytest.approx(0.788295645, rel=1e-7)
    # vespo: log w_i = 0.05 n_i; (k, lambda) = (2, 3) for A >= 0, (3, 2) else
    out = TRL(off, loss_type="vespo")
    w = np.exp(0.05 * n)
    k, lam = np.where(A >= 0, 2.0, 3.0), np.where(A >= 0, 3.0, 2.0)
    phi = np.exp(lam) * w ** k * np.exp(-lam * w)
    # dapo over the 10 tokens: -sum_{i,t} phi_i A_i logp_t / 10, logp = -0.95
    assert out["policy_loss"] == pytest.approx(-(phi * A * n * -0.95).sum() / N, rel=1e-6)
    np.testing.assert_allclose(out["dlogp"][M == 1], np.repeat(-phi * A / N, n.astype(int)),
                               rtol=1e-6)
    assert out["stat/vespo/phi_seq_mean"] == pytest.approx(phi.mean(), rel=1e-6)
    assert phi[0] == pytest.approx(0.9476, abs=1e-4)


def test_preset_options_are_checked():
    with pytest.raises(ValueError, match="adv_estimator: unknown option 'gdpo2'"):
        VERL(CASE, adv_estimator="gdpo2")
    with pytest.raises(ValueError, match="vespo_k_pos"):
        TRL(CASE, loss_type="vespo", vespo_k_pos=-1.0)
    with pytest.raises(ValueError, match="single response"):
        VERL({**CASE, "groups": np.array([0.0, 0.0, 0.0, 1.0])}, adv_estimator="grpo_passk")


def test_the_gdpo_case_carries_its_components_and_the_rollout_checks_them():
    from ppo_numpy.batch import Rollout
    from ppo_numpy.oracle.group_cases import generate_group_cases

    (case,) = generate_group_cases(0, ["gdpo-components"], preset="verl-grpo")
    c = case["inputs"]["reward_components"]
    assert c.shape == (12, 2) and case["params"] == {"adv_estimator": "gdpo"}
    np.testing.assert_array_equal(c.sum(axis=1), case["inputs"]["scores"])
    assert set(np.unique(c[:, 0])) <= {0.0, 1.0}
    # the presets that do not read it ignore it
    other = {k: v for k, v in case["inputs"].items() if k != "reward_components"}
    assert VERL(case["inputs"])["policy_loss"] == VERL(other)["policy_loss"]
    with pytest.raises(ValueError, match=r"reward_components: expected shape \(2, K\)"):
        Rollout(mask=np.ones((2, 3)), reward_components=np.ones(2))
    with pytest.raises(ValueError, match="reward_components"):
        Rollout(mask=np.ones((2, 3)), reward_components=[[1.0], [np.inf]])


def test_golden_files_keep_the_reward_components(tmp_path):
    from ppo_numpy.oracle import golden
    from ppo_numpy.oracle.group_cases import generate_group_cases

    cases = generate_group_cases(0, ["gdpo-components", "equal-scores"], preset="verl-grpo")
    golden.export(tmp_path, VERL, cases)
    _, back = golden.load(tmp_path)
    np.testing.assert_array_equal(back[0]["inputs"]["reward_components"],
                                  cases[0]["inputs"]["reward_components"])
    assert "reward_components" not in back[1]["inputs"]
    np.testing.assert_array_equal(back[0]["expected"]["advantages"],
                                  VERL(cases[0])["advantages"])
