"""The KL term's exact expectations by enumeration (ppo_numpy.grads.kl_exact).

Independent checks, written here without the module's code:

* the two targets, KL(pi || pi_ref) and KL(pi_ref || pi), against their definition as sums
  over the responses, and their gradients against centered finite differences of that sum as
  a function of the logits (softmax of each prefix's block, in the documented order);
* every row of the table, categorical and two- and three-token policies, on- and off-policy:
  the expected gradient against the average over the responses, weighted by the sampling
  policy, of finite differences of the per-response function the framework differentiates
  (the surrogates of tests/test_kl_gradient.py; PPO's ratio times the fixed returns of a
  reward);
* exact Fractions where the formula is rational (the plain k1, k3 and abs in the loss, the
  forward KL's gradient), worked out by hand;
* the identities of docs/derivations.md sections 13 and 14, each a test named for it.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy import KL_ESTIMATORS
from ppo_numpy.grads.gradcheck import numerical_grad
from ppo_numpy.grads.kl_exact import (
    enumerate_responses,
    expected_kl_term,
    kl_gradient_table,
    kl_targets,
    logit_labels,
)
from ppo_numpy.ppo.kl_gradient import FORMS

# the running example of docs/derivations.md section 12, and a sampler pi_old
PI, REF, OLD = [F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)], [F(1, 3), F(2, 3)]
# two tokens: the first as PI; the second uniform after token 1, (1/5, 4/5) after token 2
PI2 = [PI, [[F(1, 2), F(1, 2)], [F(1, 5), F(4, 5)]]]
REF2 = [REF, [REF, REF]]
OLD2 = [OLD, [[F(2, 3), F(1, 3)], [F(1, 4), F(3, 4)]]]


def random_policy(rng, K, T):
    return [rng.dirichlet(np.ones(K) * 2, size=(K,) * t) for t in range(T)]


RNG = np.random.default_rng(38)
POLICIES = {
    "categorical": (PI, REF, OLD),
    "categorical K=3 floats": tuple(random_policy(RNG, 3, 1)[0] for _ in range(3)),
    "two tokens": (PI2, REF2, OLD2),
    "three tokens floats": tuple(random_policy(RNG, 2, 3) for _ in range(3)),
}


# ---------------------------------------------------------------- the references


def tables_of(policy):
    """The conditionals as a list of float arrays (a categorical vector as [vector])."""
    if not isinstance(policy[0], (list, tuple, np.ndarray)) or np.ndim(policy[0]) == 0:
        policy = [policy]
    return [np.array(t, dtype=float) for t in policy]


def softmax_blocks(z, K, T):
    """{prefix: softmax of its logits}; the blocks in the documented order: position by
    position, the prefixes of a position in lexicographic order."""
    out, i = {}, 0
    for t in range(T):
        for prefix in itertools.product(range(K), repeat=t):
            block = z[i:i + K]
            e = np.exp(block - block.max())
            out[prefix] = e / e.sum()
            i += K
    return out


def logits_of(tables):
    K, T = tables[0].shape[0], len(tables)
    return np.concatenate([np.log(tables[t][prefix]) for t in range(T)
                           for prefix in itertools.product(range(K), repeat=t)])


def seq_prob(probs_of, y):
    return math.prod(probs_of(tuple(y[:t]))[y[t]] for t in range(len(y)))


def kl_by_definition(pi_tables, ref_tables, z=None):
    """(KL(P || R), KL(R || P)) summed over every response; P from logits z if given."""
    K, T = pi_tables[0].shape[0], len(pi_tables)
    pol = (softmax_blocks(z, K, T).__getitem__ if z is not None
           else lambda pre: pi_tables[len(pre)][pre])
    rev = fwd = 0.0
    for y in itertools.product(range(K), repeat=T):
        P = seq_prob(pol, y)
        R = seq_prob(lambda pre: ref_tables[len(pre)][pre], y)
        rev += P * math.log(P / R)
        fwd += R * math.log(R / P)
    return rev, fwd


def k_of(d, estimator):
    return {"k1": d, "k2": d**2 / 2, "k3": math.exp(-d) - 1 + d, "abs": abs(d)}[estimator]


def per_response(z, z0, y, estimator, placement, form, ref_tables, old_tables, gamma, bound):
    """The function a framework differentiates for the sampled response y, at logits z
    (z0: the point of the check, where OpenRLHF's weight is computed and held)."""
    K, T = ref_tables[0].shape[0], len(ref_tables)
    pol, pol0 = softmax_blocks(z, K, T), softmax_blocks(z0, K, T)
    total = 0.0
    ks = [k_of(math.log(old_tables[t][tuple(y[:t])][y[t]] / ref_tables[t][tuple(y[:t])][y[t]]),
               estimator) for t in range(T)]
    for t in range(T):
        pre = tuple(y[:t])
        logp = math.log(pol[pre][y[t]])
        logp_ref = math.log(ref_tables[t][pre][y[t]])
        logp_old = math.log(old_tables[t][pre][y[t]])
        d = logp - logp_ref
        rho = math.exp(logp - logp_old)
        if placement == "reward":
            G = sum(gamma ** (s - t) * ks[s] for s in range(t, T))
            total += rho * G
        elif form == "plain":
            total += k_of(d, estimator)
        elif form == "ratio":
            total += k_of(d, estimator) * rho
        elif form == "straight_through":
            total += d**2 / 2
        else:
            w = pol0[pre][y[t]] / old_tables[t][pre][y[t]]
            total += (w if bound is None else min(w, bound)) * d**2 / 2
    return total


def expected_by_differences(pi, ref, old, estimator, placement, form, gamma=1.0, bound=10.0):
    """sum_y q(y) grad_z f_y(z) with each gradient by centered differences."""
    pi_t, ref_t = tables_of(pi), tables_of(ref)
    old_t = pi_t if old is None else tables_of(old)
    K, T = pi_t[0].shape[0], len(pi_t)
    z0 = logits_of(pi_t)
    total = np.zeros_like(z0)
    for y in itertools.product(range(K), repeat=T):
        q = seq_prob(lambda pre: old_t[len(pre)][pre], y)
        g = numerical_grad(lambda p, y=y: per_response(p["z"], z0, y, estimator, placement,
                                                        form, ref_t, old_t, gamma, bound),
                           {"z": z0}, "z")
        total += q * g
    return total


def reverse_kl_by_differences(pi, ref):
    """grad_z KL(pi || pi_ref) by centered differences of the definition."""
    pi_t, ref_t = tables_of(pi), tables_of(ref)
    return numerical_grad(lambda p: kl_by_definition(pi_t, ref_t, p["z"])[0],
                          {"z": logits_of(pi_t)}, "z")


def assert_close(got, want, what, atol=1e-8):
    got = np.array([float(x) for x in got])
    assert np.max(np.abs(got - want)) <= atol, f"{what}: got {got}, expected {want}"


# ---------------------------------------------------------------- the targets


@pytest.mark.parametrize("name", POLICIES)
def test_targets_against_the_definition_and_finite_differences(name):
    pi, ref, _ = POLICIES[name]
    t = kl_targets(pi, ref)
    pi_t, ref_t = tables_of(pi), tables_of(ref)
    rev, fwd = kl_by_definition(pi_t, ref_t)
    assert math.isclose(float(t.kl_reverse), rev, rel_tol=1e-12)
    assert math.isclose(float(t.kl_forward), fwd, rel_tol=1e-12)
    z0 = logits_of(pi_t)
    for which, grad in ((0, t.dkl_reverse), (1, t.dkl_forward)):
        fd = numerical_grad(lambda p, which=which: kl_by_definition(pi_t, ref_t, p["z"])[which],
                            {"z": z0}, "z")
        assert_close(grad, fd, f"{name}, {'reverse' if which == 0 else 'forward'}")


def test_forward_kl_gradient_is_pi_minus_ref_exactly():
    # KL(ref || softmax(z)) = sum ref log ref - sum_k ref_k (z_k - logsumexp z): d/dz = pi - ref
    t = kl_targets(PI, REF)
    assert t.dkl_forward.tolist() == [F(-1, 4), F(1, 4)]
    assert all(isinstance(x, F) for x in t.dkl_forward)
    # two tokens: R(prefix) (pi(. | prefix) - ref(. | prefix)) in each block: R = 1/2 each
    t2 = kl_targets(PI2, REF2)
    assert t2.dkl_forward.tolist() == [F(-1, 4), F(1, 4), 0, 0, F(-3, 20), F(3, 20)]


# ---------------------------------------------------------------- every row


@pytest.mark.parametrize("name", POLICIES)
def test_every_row_against_differences_of_what_is_differentiated(name):
    pi, ref, old = POLICIES[name]
    bound = 1.05  # binds on some tokens of every example (pi / pi_old up to 9/8 and more)
    rows = kl_gradient_table(pi, ref, old, gamma=0.9 if "three" in name else 1, bound=bound)
    assert len(rows) == 2 * (4 * 4 + 4)
    for r in rows:
        fd = expected_by_differences(pi, ref, old if r["sampler"] == "pi_old" else None,
                                     r["estimator"], r["placement"], r["form"],
                                     0.9 if "three" in name else 1.0, bound)
        # abs in the loss where pi = pi_ref (the second position after token 1 of "two
        # tokens"): the quotient straddles |d|'s kink at d = 0 and is off by O(h) times d's
        # curvature (1e-7 here); sign(0) = 0 is its limit as h -> 0
        kink = r["estimator"] == "abs" and r["placement"] == "loss" and name == "two tokens"
        assert_close(r["grad"], fd, f"{name}: {r['estimator']} {r['placement']} {r['form']} "
                                    f"{r['sampler']}", 1e-6 if kink else 1e-8)


def test_values_in_expectation():
    """k1 and k3 are unbiased for KL(pi || pi_ref) when sampled from pi; k3 rho sampled from
    pi_old too (E_old[rho k3] = E_pi[k3]); the plain k3 sampled from pi_old is not."""
    kl = kl_targets(PI, REF).kl_reverse
    for estimator in ("k1", "k3"):
        v, _ = expected_kl_term(PI, REF, estimator, "loss")
        assert math.isclose(float(v), kl, rel_tol=1e-14)
    v, _ = expected_kl_term(PI, REF, "k3", "loss", "ratio", pi_old=OLD)
    assert math.isclose(float(v), kl, rel_tol=1e-14)
    v, _ = expected_kl_term(PI, REF, "k3", "loss", "plain", pi_old=OLD)
    # E_old[k3] = sum old (ref/pi - 1 + log(pi/ref))
    want = sum(o * (float(r / p) - 1 + math.log(p / r)) for p, r, o in zip(PI, REF, OLD))
    assert math.isclose(float(v), want, rel_tol=1e-14) and abs(v - kl) > 0.01
    # E[k2] = E[d^2] / 2 is not the KL
    v, _ = expected_kl_term(PI, REF, "k2", "loss")
    want = sum(p * math.log(p / r) ** 2 / 2 for p, r in zip(PI, REF))
    assert math.isclose(float(v), want, rel_tol=1e-14)


# ---------------------------------------------------------------- exact values


def test_rational_rows_are_exact_fractions_by_hand():
    """grad_z log pi(y) = e_y - pi: e_1 - pi = (3/4, -3/4), e_2 - pi = (-1/4, 1/4)."""
    def grad(**kw):
        g = expected_kl_term(PI, REF, **kw)[1]
        assert all(isinstance(x, F) for x in g), g
        return g.tolist()

    # k1 plain: sum_y pi(y) (e_y - pi) = 0
    assert grad(estimator="k1") == [0, 0]
    # k3 plain: c = 1 - ref/pi = (-1, 1/3): 1/4 (-1)(3/4) + 3/4 (1/3)(-1/4) = -1/4
    assert grad(estimator="k3") == [F(-1, 4), F(1, 4)]
    # abs plain: c = sign(log(pi/ref)) = (-1, 1): -3/16 - 3/16 = -3/8
    assert grad(estimator="abs") == [F(-3, 8), F(3, 8)]
    # sampled from pi_old = (1/3, 2/3): k3 plain 1/3 (-1)(3/4) + 2/3 (1/3)(-1/4) = -11/36
    assert grad(estimator="k3", pi_old=OLD) == [F(-11, 36), F(11, 36)]
    # k1 plain from pi_old: 1/3 (3/4) + 2/3 (-1/4) = 1/12
    assert grad(estimator="k1", pi_old=OLD) == [F(1, 12), F(-1, 12)]


def test_float_input_gives_the_exact_tables_numbers():
    exact = kl_gradient_table(PI, REF, OLD, bound=F(21, 20))
    floats = kl_gradient_table([0.25, 0.75], [0.5, 0.5], [1 / 3, 2 / 3], bound=1.05)
    for a, b in zip(exact, floats):
        assert a["gradient_of"] == b["gradient_of"], (a, b)
        assert_close(a["grad"], np.array(b["grad"], dtype=float), "float vs exact", 1e-14)
        assert math.isclose(float(a["value"]), b["value"], rel_tol=1e-13, abs_tol=1e-15)


def test_mixed_input_reads_floats_as_their_decimals():
    # 0.25 is read as 1/4 once a Fraction appears: the k3 row stays exact
    g = expected_kl_term([0.25, F(3, 4)], [0.5, 0.5], "k3")[1]
    assert g.tolist() == [F(-1, 4), F(1, 4)]


# ---------------------------------------------------------------- the identities


def row(rows, estimator, placement, form, sampler="pi_theta"):
    (r,) = [r for r in rows if (r["estimator"], r["placement"], r["form"], r["sampler"])
            == (estimator, placement, form, sampler)]
    return r


def test_identity_on_policy_k2_loss_and_ratio_k3_give_the_reverse_kl_gradient():
    """Section 13: per sample both give (logp - logp_ref) grad logp; in expectation the
    gradient of KL(pi || pi_ref). So do verl's k3+ and OpenRLHF's importance form."""
    e = enumerate_responses(PI, REF)
    from ppo_numpy.ppo.kl_gradient import estimator_terms, form_terms
    per_sample = {}
    for estimator, form in (("k2", "plain"), ("k3", "ratio"), ("k3", "straight_through"),
                            ("k3", "importance")):
        k, dk = estimator_terms(e.d, e.rm1, estimator)
        per_sample[(estimator, form)] = form_terms(k, dk, e.d, e.rho, form, 10)[1]
    for c in per_sample.values():
        assert_close(c.ravel(), np.array(e.d, dtype=float).ravel(), "per sample c = d", 1e-15)
    for name in ("categorical", "categorical K=3 floats"):
        pi, ref, _ = POLICIES[name]
        rows = kl_gradient_table(pi, ref)
        fd = reverse_kl_by_differences(pi, ref)
        for estimator, form in per_sample:
            r = row(rows, estimator, "loss", form)
            assert r["gradient_of"] == "KL(pi||ref)", r
            assert_close(r["grad"], fd, f"{name} {estimator} {form}")


def test_identity_k3_as_a_loss_has_the_forward_kl_gradient():
    """Section 12: E_pi[(1 - ref/pi) grad log pi] = -sum ref grad log pi = grad KL(ref || pi)."""
    for name in ("categorical", "categorical K=3 floats"):
        pi, ref, _ = POLICIES[name]
        r = row(kl_gradient_table(pi, ref), "k3", "loss", "plain")
        assert r["gradient_of"] == "KL(ref||pi)", r
        assert_close(r["grad"], np.array(kl_targets(pi, ref).dkl_forward, dtype=float), name,
                     1e-15)
    r = row(kl_gradient_table(PI, REF), "k3", "loss", "plain")
    assert r["gap_forward"] == 0 and isinstance(r["gap_forward"], F)


def test_identity_k1_in_the_reward_gives_the_sequence_kl_gradient_and_the_loss_does_not():
    """Section 14: with gamma = 1 and no critic the k1 reward's gradient is the sequence's
    reverse KL's; per token in the loss k1 has expectation 0 and k3 (and k2, the corrected
    forms) lose the later tokens' dependence on the earlier ones."""
    for name in ("two tokens", "three tokens floats"):
        pi, ref, _ = POLICIES[name]
        rows = kl_gradient_table(pi, ref)
        fd = reverse_kl_by_differences(pi, ref)
        r = row(rows, "k1", "reward", None)
        assert r["gradient_of"] == "KL(pi||ref)", r
        assert_close(r["grad"], fd, name)
        for estimator in KL_ESTIMATORS:
            for form in FORMS:
                r = row(rows, estimator, "loss", form)
                assert r["gradient_of"] == "neither" and r["gap_reverse"] > 1e-3, r
        # k1 per token: 0 in expectation (exactly with Fractions; in floats a sum of 24
        # terms of size <= 1 cancels to a few ulps)
        g = row(rows, "k1", "loss", "plain")["grad"]
        assert all(x == 0 for x in g) if name == "two tokens" else np.abs(
            np.array(g, dtype=float)).max() < 1e-15
        # gamma < 1 discounts the later tokens' KL: not the gradient either
        r = row(kl_gradient_table(pi, ref, gamma=0.9), "k1", "reward", None)
        assert r["gradient_of"] == "neither" and r["gap_reverse"] > 1e-3
    # the two-token example: the second position's blocks agree (its KL has no later
    # tokens), the first's differ: -0.2059898041 per token against -0.2421294461
    rows = kl_gradient_table(PI2, REF2)
    loss = np.array(row(rows, "k3", "loss", "ratio")["grad"], dtype=float)
    reward = np.array(row(rows, "k1", "reward", None)["grad"], dtype=float)
    np.testing.assert_allclose(loss[2:], reward[2:], rtol=1e-14, atol=1e-17)
    assert math.isclose(loss[0], -0.2059898041, rel_tol=1e-9)
    assert math.isclose(reward[0], -0.2421294461, rel_tol=1e-9)


def test_identity_off_policy_the_ratio_and_unbounded_importance_forms_stay_unbiased():
    """Section 13: E_old[rho (k' + k) grad logp] = grad E_pi[k] for k1 and k3; OpenRLHF's w d
    too while its bound does not bind; the plain and straight-through forms do not."""
    rows = kl_gradient_table(PI, REF, OLD, bound=10)
    for estimator, form in (("k1", "ratio"), ("k3", "ratio"), ("k3", "importance"),
                            ("k1", "importance")):
        assert row(rows, estimator, "loss", form, "pi_old")["gradient_of"] == "KL(pi||ref)"
    for estimator, form in (("k3", "plain"), ("k3", "straight_through"), ("k2", "plain")):
        assert row(rows, estimator, "loss", form, "pi_old")["gradient_of"] == "neither"
    # rho = pi / pi_old = (3/4, 9/8): a bound of 1 cuts 9/8 to 1
    r = row(kl_gradient_table(PI, REF, OLD, bound=1), "k3", "loss", "importance", "pi_old")
    assert r["gradient_of"] == "neither"
    # by hand: 1/3 (3/4) log(1/2) (3/4) + 2/3 (1) log(3/2) (-1/4)
    want = F(3, 16) * math.log(0.5) - F(1, 6) * math.log(1.5)
    assert math.isclose(float(r["grad"][0]), want, rel_tol=1e-14)


def test_identical_policies_every_gradient_is_zero():
    rows = kl_gradient_table(REF, REF, OLD)
    for r in rows:
        if r["placement"] == "loss" and r["form"] == "ratio" and r["estimator"] == "abs":
            continue  # sign(0) = 0 and |0| = 0: also 0
        assert all(x == 0 for x in r["grad"]) or r["sampler"] == "pi_old", r
        assert r["gradient_of"] in ("both", "neither")
    assert {r["gradient_of"] for r in rows if r["sampler"] == "pi_theta"} == {"both"}


def test_random_policies_on_policy_identities_hold():
    rng = np.random.default_rng(0)
    for _ in range(5):
        K, T = int(rng.integers(2, 4)), int(rng.integers(1, 3))
        pi, ref = random_policy(rng, K, T), random_policy(rng, K, T)
        rows = kl_gradient_table(pi, ref)
        assert row(rows, "k1", "reward", None)["gradient_of"] == "KL(pi||ref)"
        if T == 1:
            assert row(rows, "k3", "loss", "plain")["gradient_of"] == "KL(ref||pi)"
            assert row(rows, "k3", "loss", "ratio")["gradient_of"] == "KL(pi||ref)"


def test_logit_labels_follow_the_gradient_order():
    assert logit_labels(PI2) == ["z[1]", "z[2]", "z[1 | 1]", "z[2 | 1]", "z[1 | 2]", "z[2 | 2]"]
    assert len(logit_labels(POLICIES["three tokens floats"][0])) == 2 * (1 + 2 + 4)


# ---------------------------------------------------------------- bad input


FPI, FREF = [0.25, 0.75], [0.5, 0.5]


@pytest.mark.parametrize("args, kwargs, message", [
    (([0.3, 0.6], FREF), {}, "pi: the probabilities sum to 0.9, not 1"),
    (([F(1, 3), F(1, 3)], REF), {}, "pi: the probabilities sum to 2/3, not 1"),
    (([0.3, 0.6], REF), {}, "pi: the probabilities sum to 9/10, not 1"),
    ((FPI, [0.5, 0.6]), {}, "pi_ref: the probabilities sum to 1.1"),
    ((FPI, FREF), {"pi_old": [0.2, 0.7]}, "pi_old: the probabilities sum to 0.9"),
    ((FPI, [1.0, 0.0]), {}, "pi_ref: probability 0.0 of token 2: every probability must be > 0"),
    (([F(1), F(0)], REF), {}, "pi: probability 0 of token 2"),
    ((PI2, [REF, [REF, [0.5, 0.4]]]), {}, "pi_ref[1]: the probabilities after the prefix (2,) "
                                          "sum to 9/10"),
    ((PI, REF), {"bound": 0.5, "form": "importance"}, "bound: must be >= 1"),
    ((PI, REF), {"placement": "advantage"}, "placement: expected one of loss, reward"),
    ((PI, REF), {"placement": "reward", "form": "ratio"}, "form: a KL in the reward is a "
                                                          "constant"),
    ((PI, REF), {"form": "k3+"}, "form: unknown gradient form 'k3+'"),
    ((PI, REF), {"gamma": 1.5, "placement": "reward", "form": None}, "gamma: must be <= 1"),
    ((PI, [0.25, 0.25, 0.5]), {}, "pi_ref: 1 position(s) over 3 tokens, but pi has 1 over 2"),
    ((PI2, REF), {}, "pi_ref: 1 position(s) over 2 tokens, but pi has 2"),
    ((PI2, [REF, [REF]]), {}, "pi_ref[1]: expected shape (2, 2)"),
    (([0.5, float("nan")], REF), {}, "pi: probability nan of token 2 is not finite"),
    (([[0.5] * 2] + [np.full((2,) * t + (2,), 0.5) for t in range(1, 11)], REF), {},
     "pi: K^T = 2^11 responses to enumerate, more than 1024"),
])
def test_bad_input_names_the_argument(args, kwargs, message):
    with pytest.raises(ValueError) as err:
        expected_kl_term(*args, **kwargs)
    assert message in str(err.value), str(err.value)


def test_bad_table_arguments():
    with pytest.raises(ValueError, match="bound: must be >= 1"):
        kl_gradient_table(PI, REF, OLD, bound=0.9)
    with pytest.raises(TypeError, match="pi: expected the probabilities"):
        kl_targets("0.5,0.5", REF)
    pi = [0.25, 0.75]
    kl_gradient_table(pi, REF)
    assert pi == [0.25, 0.75]
