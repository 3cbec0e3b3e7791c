"""The frameworks' KL gradient forms as preset options (issue 38, item 2): verl 0.9.1's
``kl_loss_type`` with the suffix "+" (presets ``verl``, ``verl-grpo``; ``core_algos.kl_penalty``
returns k2 - sg(k2) + sg(k)) and OpenRLHF 0.11.2's ``--algo.kl.unbiased_gradient`` with its
bound (presets ``openrlhf``, ``openrlhf-grpo``; ``models/utils.py`` ``compute_approx_kl``
returns sg(k) + w k2 - sg(w k2), w = sg(min(pi_theta / pi_old, KL_IS_WEIGHT_CLIP = 10))).

Expectations, derived apart from the code under test:

* hand values on batches whose policy term is 0 (each group's scores equal: every advantage
  0), the log-ratios chosen exact in binary (d = 0.5, 25, -12, ...), so the KL term's value
  and gradient are written out here token by token;
* central finite differences of the function each framework differentiates, written here (the
  policy term from the preset with the KL loss off or of coefficient 0, which leaves the
  advantages as they are, plus the surrogate of the KL term: k2, or w k2 with w held at the
  point);
* the clamps inside the frameworks' k3 (verl's log-ratio to [-20, 20], OpenRLHF's to
  [-10, inf)) shown to change nothing: where they act, k3 is already beyond the clamp of the
  estimate at 10.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from ppo_numpy.oracle.cases import generate_cases
from ppo_numpy.oracle.group_cases import generate_group_cases
from ppo_numpy.oracle.presets import get_preset

EPS = np.finfo(float).eps


def k3(d: float) -> float:
    """k3 = r - 1 - log r with r = pi_ref / pi_theta = e^-d (hand formula, math.exp)."""
    return math.exp(-d) - 1 + d


def group_case(logp, logp_ref, logp_old=None, **extra) -> dict:
    """One group of the rows of the arrays (every token a response token), equal scores: every
    critic-free estimator gives advantage 0, so the policy term and its gradient are 0."""
    logp = np.array(logp, dtype=float)
    inputs = {"logp": logp, "logp_ref": np.array(logp_ref, dtype=float),
              "logp_old": logp.copy() if logp_old is None else np.array(logp_old, float),
              "mask": np.ones_like(logp), "scores": np.ones(len(logp)),
              "groups": np.zeros(len(logp)), "baseline_scores": np.zeros(len(logp))}
    inputs.update({k: np.array(v, dtype=float) for k, v in extra.items()})
    return {"name": "hand", "inputs": inputs, "params": {}}


# ---------------------------------------------------------------- verl: kl_loss_type "+"

# d = logp - logp_ref = (0.5, 25; -0.5, -30): exact differences of the numbers below. At
# |d| = 25 and 30, k3 is far beyond the clamp at 10 (and beyond verl's log-ratio clamp at 20)
VERL_LOGP = [[-1.0, -0.5], [-1.5, -30.5]]
VERL_REF = [[-1.5, -25.5], [-1.0, -0.5]]
VERL_D = np.array([[0.5, 25.0], [-0.5, -30.0]])


def test_verls_log_ratio_clamp_inside_k3_is_beyond_its_value_clamp():
    # verl 0.9.1 kl_penalty_forward: kl = clamp(ref - logp, -20, 20); k3 = e^kl - kl - 1,
    # clamped to [-10, 10]. Where the first clamp acts (|d| > 20) k3 of the clamped log-ratio
    # is e^-20 + 19 or e^20 - 21, both beyond 10, as is k3 of d itself (k3 grows with |d|):
    # both give 10 there, with gradient 0 (plain) or d (the "+" form, unclamped).
    assert math.exp(-20) + 19 > 10 and math.exp(20) - 21 > 10
    assert k3(20) > 10 and k3(-20) > 10


@pytest.mark.parametrize("kl_loss_type", ["low_var_kl", "k3", "low_var_kl+", "k3+", "k1+",
                                          "kl+", "abs+", "k2+", "mse+"])
def test_verl_grpo_kl_loss_type_by_hand(kl_loss_type):
    coef = 0.1
    case = group_case(VERL_LOGP, VERL_REF)
    out = get_preset("verl-grpo")(case, use_kl_loss=True, kl_loss_coef=coef,
                                  kl_loss_type=kl_loss_type)
    d = VERL_D
    base = kl_loss_type.removesuffix("+")
    # the values: the estimate of the name (k3 clamped to [-10, 10]), plus or not
    if base in ("low_var_kl", "k3"):
        values = np.clip(np.vectorize(k3)(d), -10, 10)  # (k3(0.5), 10; k3(-0.5), 10)
    elif base in ("kl", "k1"):
        values = d
    elif base == "abs":
        values = np.abs(d)
    else:
        values = d**2 / 2
    # token mean over the trainer's N = 4 tokens (verl's batch_num_tokens)
    assert out["stat/actor/kl_loss"] == pytest.approx(values.sum() / 4, rel=4 * EPS)
    assert out["policy_loss"] == pytest.approx(coef * values.sum() / 4, rel=4 * EPS)
    if kl_loss_type.endswith("+"):
        # k2 - sg(k2) + sg(k): k2's gradient d at every token, the clamped ones included
        want = coef * d / 4
    else:
        # k3's own: 1 - e^-d where |k3| <= 10, 0 where the clamp holds it
        want = coef * np.array([[1 - math.exp(-0.5), 0.0], [1 - math.exp(0.5), 0.0]]) / 4
    np.testing.assert_allclose(out["dlogp"], want, rtol=4 * EPS, atol=0)


def test_verl_plus_keeps_the_value_and_the_reward_is_the_same():
    case = generate_group_cases(0, ["kl-gradient-form"], preset="verl-grpo")[0]
    preset = get_preset("verl-grpo")
    plain, plus = (preset(case, kl_loss_type=t) for t in ("low_var_kl", "low_var_kl+"))
    # (the value of k2 - sg(k2) + sg(k) is (k2 - k2) + k = k exactly in floating point: the
    # same computation of k on both sides)
    assert plus["policy_loss"] == plain["policy_loss"]
    assert plus["stat/actor/kl_loss"] == plain["stat/actor/kl_loss"]
    assert not np.array_equal(plus["dlogp"], plain["dlogp"])
    # the KL in the reward carries no gradient: a "+" name gives the same rewards
    r = [preset(case, use_kl_in_reward=True, kl_penalty=t, kl_coef=0.1)["rewards"]
         for t in ("k3", "k3+")]
    assert np.array_equal(r[0], r[1])


def central_differences(f, x, coords, h=1e-6):
    out = {}
    for idx in coords:
        e = np.zeros_like(x)
        e[idx] = h
        out[idx] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def with_logp(case, logp):
    return {**case, "inputs": {**case["inputs"], "logp": logp}}


def away_from_kinks(case, bounds, margin=1e-3):
    """The response tokens whose ratio is at least ``margin`` from each clip bound (the
    clip, min and max kinks, where finite differences straddle two branches)."""
    x = case["inputs"]
    m = x["mask"] == 1
    rho = np.exp(x["logp"] - x["logp_old"])
    far = m.copy()
    for b in bounds:
        far &= np.abs(rho - b) > margin
    return [tuple(int(i) for i in idx) for idx in np.argwhere(far)]


def check_against_differences(dlogp, f, logp, coords):
    num = central_differences(f, logp, coords)
    worst = max(abs(dlogp[i] - n) / max(abs(n), 1e-3) for i, n in num.items())
    # (float64 central differences, h = 1e-6: truncation h^2 |f'''| ~ 1e-12, rounding
    # eps |f| / h ~ 1e-10; a wrong form misses by the KL term's own size, > 1e-4 here)
    assert worst < 1e-6, (worst, {i: (dlogp[i], n) for i, n in num.items()})


@pytest.mark.parametrize("name", ["verl", "verl-grpo"])
def test_verl_plus_against_differences_of_what_verl_differentiates(name):
    # the policy term: the preset with the KL loss off (verl's advantages do not read the
    # KL loss); the KL term: coef * sum_t (1/N) k2_t, k2 = (logp - logp_ref)^2 / 2, the
    # part of k2 - sg(k2) + sg(k3) that has a gradient, over the trainer's N tokens
    preset = get_preset(name)
    if name == "verl":
        case = generate_cases(0, ["kl-gradient-form"], preset="verl")[0]
        coef_key, coef = "beta", 0.05
    else:
        case = generate_group_cases(0, ["kl-gradient-form"], preset="verl-grpo")[0]
        coef_key, coef = "kl_loss_coef", 0.04
    assert case["params"]["kl_loss_type"] == "low_var_kl+"
    x = case["inputs"]
    m = x["mask"] == 1
    N = m.sum()

    def f(logp):
        policy = preset(with_logp(case, logp), use_kl_loss=False)["policy_loss"]
        return policy + coef * (np.where(m, (logp - x["logp_ref"]) ** 2 / 2, 0.0)).sum() / N

    out = preset(case, **{coef_key: coef})
    coords = away_from_kinks(case, (0.8, 1.2, 3.0))
    check_against_differences(out["dlogp"], f, x["logp"], coords)
    # the tokens beyond the clamp (k3 > 10) are among those checked
    d = x["logp"] - x["logp_ref"]
    assert any(abs(d[i]) > 11 for i in coords)


# ---------------------------------------------------------------- OpenRLHF: unbiased_gradient

# d = logp - logp_ref = (0.5, -12; 12, -0.25), logp - logp_old = (0.5, 3; -1, 0): rho = e^3 =
# 20.1 is cut by the bound 10; |d| = 12 puts k1 and k3 beyond the clamp at 10
ORLHF = dict(logp=[[-1.0, -12.5], [-1.5, -2.0]], logp_ref=[[-1.5, -0.5], [-13.5, -1.75]],
             logp_old=[[-1.5, -15.5], [-0.5, -2.0]])
ORLHF_D = np.array([[0.5, -12.0], [12.0, -0.25]])
ORLHF_W = np.array([[math.exp(0.5), 10.0], [math.exp(-1.0), 1.0]])


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("unbiased", [False, True])
def test_openrlhf_grpo_unbiased_gradient_by_hand(estimator, unbiased):
    coef = 0.1
    case = group_case(ORLHF["logp"], ORLHF["logp_ref"], ORLHF["logp_old"])
    out = get_preset("openrlhf-grpo")(case, use_kl_loss=True, init_kl_coef=coef,
                                      kl_estimator=estimator, kl_unbiased_gradient=unbiased)
    d = ORLHF_D
    raw = {"k1": d, "k2": d**2 / 2, "k3": np.vectorize(k3)(d)}[estimator]
    values = np.clip(raw, -10, 10)
    # the token mean over 4 tokens, as ppo_actor.py's aggregate_loss; the value is the
    # estimate's with or without the flag
    assert out["stat/kl"] == pytest.approx(values.sum() / 4, rel=8 * EPS)
    if unbiased:
        # w k2's gradient, w = min(rho, 10) held: w d, unclamped (|d| = 12 included)
        want = coef * ORLHF_W * d / 4
    else:
        own = {"k1": np.ones_like(d), "k2": d, "k3": 1 - np.exp(-d)}[estimator]
        want = coef * np.where(np.abs(raw) <= 10, own, 0.0) / 4
    # (rho = exp(logp - logp_old) rounds at 1 ulp; the rest are exact products)
    np.testing.assert_allclose(out["dlogp"], want, rtol=8 * EPS, atol=0)


def test_openrlhfs_k3_clamp_below_is_beyond_its_value_clamp():
    # OpenRLHF 0.11.2 compute_approx_kl: k3 of log_ratio.clamp(min=-10); at d <= -10 k3 is at
    # least e^10 - 11 > 10 with or without that clamp: the estimate's clamp gives 10 (its
    # gradient 0), and the unbiased form's gradient reads the unclamped d
    assert math.exp(10) - 11 > 10 and k3(-10) > 10


def test_openrlhf_grpo_kl_weight_is_against_logp_old_under_gspo_with_a_correction():
    # GSPO with a rollout correction takes its sequence ratio against logp_rollout
    # (PolicyLoss); the KL loss's weight reads old_action_log_probs, logp_old, whatever
    # (ppo_actor.py training_step). The rollout log-probs 1 away from logp_old would give
    # other weights; with the policy term 0 the gradient is the hand one above.
    rollout = np.array(ORLHF["logp_old"]) - 1.0
    case = group_case(ORLHF["logp"], ORLHF["logp_ref"], ORLHF["logp_old"], logp_rollout=rollout)
    out = get_preset("openrlhf-grpo")(case, use_kl_loss=True, init_kl_coef=0.1,
                                      kl_unbiased_gradient=True, policy_loss_type="gspo",
                                      is_correction_level="token")
    np.testing.assert_allclose(out["dlogp"], 0.1 * ORLHF_W * ORLHF_D / 4, rtol=8 * EPS, atol=0)


@pytest.mark.parametrize("name", ["openrlhf", "openrlhf-grpo"])
@pytest.mark.parametrize("bound", [10.0, None])
def test_openrlhf_unbiased_against_differences_of_what_openrlhf_differentiates(name, bound):
    # the policy term: the preset with the KL loss of coefficient 0 (with --algo.kl.use_loss
    # the rewards carry no KL at any coefficient: the same advantages); the KL term: coef
    # times the token mean of w k2, w = min(exp(logp0 - logp_old), bound) held at the point
    # (sg in OpenRLHF: a constant), whose gradient sg(k) + w k2 - sg(w k2) has
    preset = get_preset(name)
    case = (generate_cases(0, ["kl-gradient-form"], preset=name) if name == "openrlhf" else
            generate_group_cases(0, ["kl-gradient-form"], preset=name))[0]
    assert case["params"]["kl_unbiased_gradient"] is True
    coef_key = "beta" if name == "openrlhf" else "init_kl_coef"
    coef = case["params"][coef_key]
    x = case["inputs"]
    m = x["mask"] == 1
    w = np.exp(x["logp"] - x["logp_old"])
    if bound is not None:
        w = np.minimum(w, bound)

    def f(logp):
        policy = preset(with_logp(case, logp), **{coef_key: 0.0})["policy_loss"]
        k2 = (logp - x["logp_ref"]) ** 2 / 2
        return policy + coef * np.where(m, w * k2, 0.0).sum() / m.sum()

    out = preset(case, kl_is_bound=bound)
    coords = away_from_kinks(case, (0.8, 1.2))
    check_against_differences(out["dlogp"], f, x["logp"], coords)
    # the token with rho = 20 (cut by the bound 10) is among those checked
    rho = np.exp(x["logp"] - x["logp_old"])
    assert any(rho[i] > 10 for i in coords)


def test_openrlhf_ppo_kl_loss_leaves_the_rewards():
    # --algo.kl.use_loss: make_experience's KL is zeros, so the rewards are the clipped score
    # at the last token alone, and the logged kl is the KL loss (beta 0: 0)
    case = generate_cases(0, ["kl-in-loss"], preset="openrlhf")[0]
    x = case["inputs"]
    out = get_preset("openrlhf")(case)
    m = x["mask"] == 1
    last = m.shape[1] - 1 - np.argmax(m[:, ::-1], axis=1)
    want = np.zeros(m.shape)
    want[np.arange(len(last)), last] = np.clip(x["scores"], -10, 10)
    np.testing.assert_array_equal(out["rewards"], want)
    k1 = np.clip(x["logp"] - x["logp_ref"], -10, 10)
    assert out["stat/kl"] == pytest.approx(k1[m].mean(), rel=1e-14)
    assert get_preset("openrlhf")(case, beta=0.0)["stat/kl"] == 0.0


@pytest.mark.parametrize("name, kwargs, error, message", [
    ("verl", dict(kl_loss_type="k4+"), ValueError, "verl: kl_loss_type: unknown option 'k4+'"),
    ("verl-grpo", dict(kl_loss_type="low_var_kl++"), ValueError,
     "verl-grpo: kl_loss_type: unknown option 'low_var_kl++'"),
    ("openrlhf", dict(use_kl_loss=True, kl_unbiased_gradient="yes"), TypeError,
     "openrlhf: kl_unbiased_gradient: expected True or False"),
    ("openrlhf", dict(use_kl_loss="yes"), ValueError, "use_kl_loss: must be True or False"),
    ("openrlhf-grpo", dict(use_kl_loss=True, kl_is_bound=0.5), ValueError,
     "openrlhf-grpo: kl_is_bound: must be >= 1"),
    # (checked with the KL in the reward too, where neither is read)
    ("openrlhf", dict(kl_is_bound=0.5), ValueError, "openrlhf: kl_is_bound: must be >= 1"),
    ("openrlhf", dict(kl_is_bound="10"), TypeError,
     "openrlhf: kl_is_bound: expected a real number"),
    ("openrlhf", dict(kl_unbiased_gradient=1), TypeError,
     "openrlhf: kl_unbiased_gradient: expected True or False"),
    ("openrlhf-grpo", dict(kl_is_bound=0.999), ValueError,
     "openrlhf-grpo: kl_is_bound: must be >= 1"),
    # the convention kl_gradient, checked with the KL in the reward too
    ("verl", dict(kl_gradient="k3+"), ValueError,
     "verl: kl_gradient: unknown gradient form 'k3+'"),
    ("verl-grpo", dict(kl_gradient="straight-through"), ValueError,
     "verl-grpo: kl_gradient: unknown gradient form 'straight-through'"),
    ("openrlhf", dict(kl_gradient=1), ValueError, "openrlhf: kl_gradient: unknown gradient form"),
    ("openrlhf-grpo", dict(kl_gradient="is"), ValueError,
     "openrlhf-grpo: kl_gradient: unknown gradient form 'is'"),
    ("trl-grpo", dict(kl_gradient="bias"), ValueError,
     "trl-grpo: kl_gradient: unknown gradient form 'bias'"),
])
def test_bad_options_name_the_option(name, kwargs, error, message):
    preset = get_preset(name)
    case = (generate_cases(0, ["random-1"]) if "groups" not in preset.input_names else
            generate_group_cases(0, ["group-random-1"]))[0]
    with pytest.raises(error) as err:
        preset(case, **kwargs)
    assert message in str(err.value), str(err.value)


# ---------------------------------------------------------------- the diagnosis names a form

# Each framework's KL gradient in the loss, per token, before the aggregation weight and the
# coefficient (d = logp - logp_ref, rho = exp(logp - logp_old); written here from the
# frameworks' files, not from ppo_numpy.ppo.kl_gradient):
#   TRL 1.16 use_bias_correction_kl (k3 * rho, both differentiated): rho (k3 + 1 - e^-d)
#   verl 0.9.1 low_var_kl, OpenRLHF 0.11.2 k1: the clamped estimate's own derivative
#   verl's "+" (k2 - sg(k2) + sg(k)): d;  OpenRLHF's unbiased_gradient: min(rho, 10) d


def k3_grad_clamped(d):
    """d/dlogp of k3 clamped to [-10, 10]: 1 - e^-d where k3 <= 10, else 0."""
    return np.where(np.exp(-d) - 1 + d <= 10, 1 - np.exp(-d), 0.0)


GRADIENT_FORMS = {
    "trl-ratio": lambda d, rho: rho * (np.exp(-d) - 1 + d + 1 - np.exp(-d)),
    "trl-plain": lambda d, rho: 1 - np.exp(-d),
    "verl-plain": lambda d, rho: k3_grad_clamped(d),
    "straight-through": lambda d, rho: d,
    "openrlhf-k1": lambda d, rho: np.where(np.abs(d) <= 10, 1.0, 0.0),
    "importance": lambda d, rho: np.minimum(rho, 10.0) * d,
    "importance-unbounded": lambda d, rho: rho * d,
}
#: (preset, its coefficient's name, the framework's form, the form planted, the setting the
#: diagnosis must name: the framework's own option, or the convention kl_gradient for a form
#: only another framework takes)
PLANTED_FORMS = [
    ("trl-grpo", "beta", "trl-ratio", "trl-plain", "use_bias_correction_kl=False"),
    ("verl", "beta", "verl-plain", "straight-through", "kl_loss_type='low_var_kl+'"),
    ("verl-grpo", "kl_loss_coef", "verl-plain", "straight-through",
     "kl_loss_type='low_var_kl+'"),
    ("openrlhf", "beta", "openrlhf-k1", "importance", "kl_unbiased_gradient=True"),
    ("openrlhf-grpo", "init_kl_coef", "openrlhf-k1", "importance", "kl_unbiased_gradient=True"),
    ("openrlhf", "beta", "openrlhf-k1", "importance-unbounded",
     "kl_unbiased_gradient=True, kl_is_bound=None"),
    # another framework's form: the convention kl_gradient
    ("verl", "beta", "verl-plain", "importance", "kl_gradient='importance'"),
    ("verl-grpo", "kl_loss_coef", "verl-plain", "importance", "kl_gradient='importance'"),
    ("openrlhf", "beta", "openrlhf-k1", "straight-through", "kl_gradient='straight_through'"),
    ("openrlhf-grpo", "init_kl_coef", "openrlhf-k1", "straight-through",
     "kl_gradient='straight_through'"),
    ("trl-grpo", "beta", "trl-ratio", "straight-through", "kl_gradient='straight_through'"),
]


def with_form(preset, coef_key, own, other):
    """The preset's outputs with the KL term's gradient swapped from the framework's form
    ``own`` to ``other``, by hand: dlogp - coef w (g_own - g_other), w = 1 / N the token
    mean's weight (every preset here aggregates its KL loss over the batch's N tokens: verl's
    trainer count, OpenRLHF's aggregate_loss, TRL's dapo)."""
    def candidate(case):
        out = preset(case)
        p = {**preset.parameters, **case["params"]}
        x = case["inputs"]
        m = x["mask"] == 1
        coef = p[coef_key] if p.get("use_kl_loss", True) else 0.0
        d = np.where(m, x["logp"] - x["logp_ref"], 0.0)
        rho = np.where(m, np.exp(x["logp"] - x["logp_old"]), 0.0)
        g = GRADIENT_FORMS[other](d, rho) - GRADIENT_FORMS[own](d, rho)
        return {**out, "dlogp": out["dlogp"] + coef * np.where(m, g, 0.0) / m.sum()}
    candidate.__name__ = f"{preset.name} with the KL gradient {other}"
    return candidate


@pytest.mark.parametrize("name, coef_key, own, other, label", PLANTED_FORMS,
                         ids=[f"{p[0]}-{p[3]}" for p in PLANTED_FORMS])
def test_a_candidate_with_another_kl_gradient_form_is_named(name, coef_key, own, other, label):
    from ppo_numpy.oracle.diagnose import diagnose

    preset = get_preset(name)
    make = generate_group_cases if "groups" in preset.input_names else generate_cases
    cases = make(0, ["kl-in-loss"], preset=name)
    # the framework's own form swapped for itself: the hand formulas are the preset's (so
    # that the planted one is the only difference)
    same = diagnose(with_form(preset, coef_key, own, own), preset, cases, probes=0)
    assert same.passed, same.summary()
    d = diagnose(with_form(preset, coef_key, own, other), preset, cases, probes=0)
    # only the gradient differs: the value of the KL term is the same in every form but TRL's
    # (whose planted plain form keeps TRL's value here: only dlogp was swapped)
    assert [o for o, r in d.outputs.items() if not r.passed] == ["dlogp"], d.summary()
    assert label in d.explained_by("dlogp"), d.summary()


def test_docs_worked_numbers():
    """docs/conventions.md section 18's table: kl_term_and_grad on four tokens against the
    hand values (d = ln 2 with rho = 1, 2, 20; d = -12 with rho = 20; clamp 10, bound 10), and
    the table's numbers as printed there."""
    from pathlib import Path

    from ppo_numpy import kl_term_and_grad

    ln2 = math.log(2)
    logp = np.array([-1.0, -1.0, -1.0, -12.5])
    logp_ref = logp - np.array([ln2, ln2, ln2, -12.0])
    logp_old = logp - np.log([1.0, 2.0, 20.0, 20.0])
    k3_ln2 = ln2 - 0.5  # e^-ln2 - 1 + ln2
    hand = {  # (value, gradient) per token
        "plain": ([k3_ln2] * 3 + [10.0], [0.5, 0.5, 0.5, 0.0]),
        "ratio": ([k3_ln2, 2 * k3_ln2, 20 * k3_ln2, 200.0], [ln2, 2 * ln2, 20 * ln2, 200.0]),
        "straight_through": ([k3_ln2] * 3 + [10.0], [ln2, ln2, ln2, -12.0]),
        "importance": ([k3_ln2] * 3 + [10.0], [ln2, 2 * ln2, 10 * ln2, -120.0]),
    }
    for form, (value, grad) in hand.items():
        v, g = kl_term_and_grad(logp, logp_ref, "k3", form, logp_old=logp_old, clamp=10.0)
        # (d and rho carry a rounding of logp's size, 12.5: a few ulps of it, times
        # |dk/dd| <= 12 or rho <= 20)
        np.testing.assert_allclose(v, value, rtol=1e-13, atol=1e-12, err_msg=form)
        np.testing.assert_allclose(g, grad, rtol=1e-13, atol=1e-12, err_msg=form)
    text = Path(__file__).parents[1].joinpath("docs", "conventions.md").read_text()
    section = text[text.index("## 18. The KL term in the loss"):]
    for number in (k3_ln2, 2 * k3_ln2, 20 * k3_ln2, ln2, 2 * ln2, 20 * ln2, 10 * ln2):
        assert f"{number:.6f}" in section, number


def test_docs_diagnosis_of_a_kl_form_is_what_the_diagnosis_prints():
    """docs/oracle.md's example ("A KL gradient of another form"): its lines, in the summary
    of the diagnosis of the verl preset with the straight-through gradient planted."""
    from pathlib import Path

    from ppo_numpy.oracle.diagnose import diagnose

    text = Path(__file__).parents[1].joinpath("docs", "oracle.md").read_text()
    start = text.index("**A KL gradient of another form.**")
    block = text[text.index("```text\n", start) + 8:text.index("\n```", start)]
    preset = get_preset("verl")
    cases = generate_cases(0, ["kl-in-loss"], preset="verl")
    d = diagnose(with_form(preset, "beta", "verl-plain", "straight-through"), preset, cases,
                 probes=0)
    # (the max rel err is the hand swap's rounding, which another CPU kind's exp may change:
    # the number is compared as "below 1e-12", far below the gap a wrong form leaves)
    errs = [float(e) for e in re.findall(r"max rel err ([0-9.e+-]+)\)", d.summary())]
    assert errs and max(errs) < 1e-12, d.summary()

    def plain(text):
        return re.sub(r"max rel err [0-9.e+-]+\)", "max rel err X)", text)

    for line in block.splitlines():
        assert plain(line) in plain(d.summary()).splitlines(), (line, d.summary())
