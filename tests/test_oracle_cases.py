"""The oracle's case generator: determinism, the core's input contract, each edge case."""

import numpy as np
import pytest

from ppo_numpy import gae, kl_shaped_rewards, probability_ratio, value_loss, whiten
from ppo_numpy.oracle.cases import (
    EDGE_CASES,
    GARBAGE,
    INPUT_NAMES,
    N_RANDOM,
    case_names,
    edge_case,
    generate_cases,
    mask_from_lengths,
)
from ppo_numpy.oracle.presets import get_preset

PER_TOKEN = ("logp", "logp_old", "logp_ref", "values", "old_values")


@pytest.fixture(scope="module")
def cases():
    return {c["name"]: c for c in generate_cases(0)}


def valid(case):
    return case["inputs"]["mask"] == 1


def test_default_cases_are_random_then_edge(cases):
    assert list(cases) == [f"random-{k}" for k in range(N_RANDOM)] + list(EDGE_CASES)
    assert case_names() == list(cases)


def test_same_seed_bit_identical_other_seed_differs():
    a, b, c = generate_cases(3), generate_cases(3), generate_cases(4)
    for x, y in zip(a, b):
        for n in INPUT_NAMES:
            assert x["inputs"][n].tobytes() == y["inputs"][n].tobytes(), (x["name"], n)
        assert x["params"] == y["params"]
    differ = [x["name"] for x, z in zip(a, c)
              if not np.array_equal(x["inputs"]["logp"], z["inputs"]["logp"], equal_nan=True)]
    assert len(differ) == len(a)


def test_a_case_does_not_depend_on_the_others_selected(cases):
    for name in ("random-5", "left-padding", "garbage-in-padding"):
        alone = generate_cases(0, [name])[0]
        for n in INPUT_NAMES:
            assert alone["inputs"][n].tobytes() == cases[name]["inputs"][n].tobytes()


def test_names_random_and_edge_expand():
    names = [c["name"] for c in generate_cases(0, ["random", "edge"], n_random=2)]
    assert names == ["random-0", "random-1"] + list(EDGE_CASES)
    assert [c["name"] for c in generate_cases(0, ["random-12"])] == ["random-12"]


@pytest.mark.parametrize("bad, err", [(["nope"], ValueError), ("random-0", TypeError),
                                      (["random-x"], ValueError)])
def test_bad_names(bad, err):
    with pytest.raises(err, match="names"):
        generate_cases(0, bad)


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_bad_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        generate_cases(seed, ["random-0"])


def test_bad_edge_name_and_lengths():
    with pytest.raises(ValueError, match="unknown edge case"):
        edge_case("nope")
    with pytest.raises(ValueError, match="lengths"):
        mask_from_lengths([0, 2], 3)
    with pytest.raises(ValueError, match="padding"):
        mask_from_lengths([1], 3, padding="middle")


def test_every_case_keeps_the_input_contract(cases):
    for name, case in cases.items():
        x = case["inputs"]
        B, T = x["mask"].shape
        # (logp_rollout, the rollout correction's input, is optional: (B, T), <= 0 in the mask)
        assert set(INPUT_NAMES) <= set(x) <= set(INPUT_NAMES) | {"logp_rollout"}, name
        assert all(v.dtype == np.float64 for v in x.values()), name
        if "logp_rollout" in x:
            assert x["logp_rollout"].shape == (B, T), name
            assert np.all(x["logp_rollout"][valid(case)] <= 0), name
        assert x["scores"].shape == (B,), name
        assert all(x[n].shape == (B, T) for n in PER_TOKEN), name
        assert set(np.unique(x["mask"])) <= {0.0, 1.0}, name
        assert np.all(x["mask"].sum(axis=1) >= 1), f"{name}: a row without response token"
        m = valid(case)
        for n in PER_TOKEN:
            assert np.all(np.isfinite(x[n][m])), (name, n)
        for n in ("logp", "logp_old", "logp_ref"):
            assert np.all(x[n][m] <= 0), f"{name}: {n} is a log-probability"
        assert np.all(np.isfinite(x["scores"])), name
        for p in ("gamma", "lam"):
            assert 0 <= case["params"].get(p, 0.5) <= 1, (name, p)


def test_the_core_accepts_every_case(cases):
    for name, case in cases.items():
        x, m = case["inputs"], case["inputs"]["mask"]
        gamma, lam = case["params"].get("gamma", 1.0), case["params"].get("lam", 0.95)
        r = kl_shaped_rewards(x["scores"], x["logp_old"], x["logp_ref"], 0.05, m, "k3")
        A, R = gae(r, x["old_values"], gamma, lam, m)
        value_loss(x["values"], x["old_values"], R, m, 0.2)
        probability_ratio(x["logp"], x["logp_old"], m)
        assert np.all(np.isfinite(A)) and np.all(np.isfinite(R)), name
        if name == "one-valid-token":
            with pytest.raises(ValueError, match="at least 2 valid elements"):
                whiten(A, m)
        else:
            whiten(A, m)


def test_random_cases_exercise_both_sides_of_every_clip(cases):
    rho, dv = [], []
    for k in range(N_RANDOM):
        x = cases[f"random-{k}"]["inputs"]
        m = x["mask"] == 1
        rho.append(np.exp(x["logp"] - x["logp_old"])[m])
        dv.append(np.abs(x["values"] - x["old_values"])[m])
    rho, dv = np.concatenate(rho), np.concatenate(dv)
    assert np.mean(rho > 1.2) > 0.03 and np.mean(rho < 0.8) > 0.03
    assert 0.3 < np.mean((rho >= 0.8) & (rho <= 1.2)) < 0.97
    assert 0.2 < np.mean(dv > 0.2) < 0.8
    odd = [cases[f"random-{k}"]["params"] for k in range(1, N_RANDOM, 2)]
    even = [cases[f"random-{k}"]["params"] for k in range(0, N_RANDOM, 2)]
    assert all(set(p) == {"gamma", "lam"} for p in odd) and all(p == {} for p in even)


def test_unpadded_cases_for_presets_without_a_mask(cases):
    full = [n for n, c in cases.items() if np.all(c["inputs"]["mask"] == 1)]
    assert full == ["random-2", "random-6", "extreme-log-ratios", "extreme-kl",
                    "all-equal-rewards", "gamma0-lam0", "gamma0-lam1", "gamma1-lam0",
                    "gamma1-lam1", "values-on-clip-bounds", "one-sided-log-ratios"]


def test_length_1(cases):
    assert cases["length-1"]["inputs"]["mask"].sum(axis=1).tolist() == [1.0] * 4


def contiguous_runs(row):
    return int(row[0] == 1) + int(np.sum(np.diff(row) == 1))


def test_left_and_right_padding(cases):
    left = cases["left-padding"]["inputs"]["mask"]
    right = cases["right-padding"]["inputs"]["mask"]
    assert np.all(left[:, -1] == 1) and np.any(left[:, 0] == 0)
    assert np.all(right[:, 0] == 1) and np.any(right[:, -1] == 0)
    assert all(contiguous_runs(r) == 1 for r in np.concatenate([left, right]))
    # the same lengths in both layouts: one is the other mirrored
    assert np.array_equal(left, right[:, ::-1])


def test_multi_turn_holes(cases):
    mask = cases["multi-turn-holes"]["inputs"]["mask"]
    assert all(contiguous_runs(r) >= 2 for r in mask)
    # every response starts at column 0, so the holes are all that differs from right padding
    # and verl (whose GAE skips holes) takes the case
    assert np.all(mask[:, 0] == 1)
    get_preset("verl")(cases["multi-turn-holes"])


def test_garbage_in_padding(cases):
    x = cases["garbage-in-padding"]["inputs"]
    pad = x["mask"] == 0
    for n in PER_TOKEN:
        held = x[n][pad]
        assert np.isnan(held).any() and np.isposinf(held).any() and np.isneginf(held).any(), n
        assert np.any(held == 1e30) and np.any(held == -1e30), n
        assert np.all(np.isin(held[~np.isnan(held)], [g for g in GARBAGE if g == g])), n


def test_extreme_log_ratios(cases):
    case = cases["extreme-log-ratios"]
    x, m = case["inputs"], valid(case)
    d = (x["logp"] - x["logp_old"])[m]
    assert np.isclose(d.max(), 50.0, atol=1e-12) and np.isclose(d.min(), -50.0, atol=1e-12)
    assert np.sum(np.abs(np.abs(d) - 50) < 1e-9) >= 4
    assert np.any(np.abs(np.abs(d) - 20) < 1e-9)
    # rho reaches e^50 ~ 5.18e21, still finite in float32
    assert np.isfinite(np.float32(np.exp(d.max())))


def test_extreme_kl(cases):
    case = cases["extreme-kl"]
    x, m = case["inputs"], valid(case)
    for n in ("logp", "logp_old"):
        d = (x[n] - x["logp_ref"])[m]
        assert d.max() >= 50 - 0.5 and d.min() <= -50 + 0.5, n
    # the policy's own log-ratio stays ordinary: no clip is extreme here
    assert np.max(np.abs(x["logp"] - x["logp_old"])[m]) < 1.0


def test_all_equal_rewards_make_every_advantage_exactly_one(cases):
    case = cases["all-equal-rewards"]
    x, m = case["inputs"], case["inputs"]["mask"]
    assert case["params"] == {"gamma": 1.0, "lam": 1.0}
    assert np.all(x["scores"] == 1.0)
    assert np.array_equal(x["logp"], x["logp_ref"]) and np.array_equal(x["logp"], x["logp_old"])
    assert not np.any(x["values"]) and not np.any(x["old_values"])
    # no KL, V = 0, gamma = lam = 1: A_t = sum of the rewards from t on = the score = 1
    r = kl_shaped_rewards(x["scores"], x["logp_old"], x["logp_ref"], 0.1, m)
    A, _ = gae(r, x["old_values"], 1.0, 1.0, m)
    assert np.array_equal(A, m)


def test_gamma_lambda_limits(cases):
    for g in (0, 1):
        for lam in (0, 1):
            assert cases[f"gamma{g}-lam{lam}"]["params"] == {"gamma": float(g), "lam": float(lam)}


def test_one_valid_token(cases):
    assert cases["one-valid-token"]["inputs"]["mask"].sum() == 1.0


def test_make_case_checks_shapes():
    from ppo_numpy.oracle.cases import make_case

    x = dict(generate_cases(0, ["random-0"])[0]["inputs"])
    with pytest.raises(ValueError, match="missing scores"):
        make_case("x", "", {k: v for k, v in x.items() if k != "scores"})
    x["values"] = x["values"][:, :-1]
    with pytest.raises(ValueError, match="values: expected shape"):
        make_case("x", "", x)
