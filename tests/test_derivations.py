"""The worked numbers of docs/derivations.md sections 10-14, recomputed by running the library.

Each test computes the numbers with ppo_numpy's functions, checks them against the closed
forms derived in the docs (exact fractions where the formula is rational), and checks that
the docs print them, so that the page and the code cannot drift apart.
"""

from __future__ import annotations

from fractions import Fraction as F
from pathlib import Path

import numpy as np

from ppo_numpy import (
    aggregate_grad,
    grpo_advantages,
    kl_estimate,
    kl_estimate_grad,
    policy_loss_grad,
    rloo_advantages,
)

DOC = (Path(__file__).resolve().parents[1] / "docs" / "derivations.md").read_text()


def section(number: int) -> str:
    return DOC.split(f"\n## {number}. ", 1)[1].split("\n## ", 1)[0]


def in_doc(number: int, *fragments: str) -> None:
    text = " ".join(section(number).split())  # line breaks as spaces
    for fragment in fragments:
        assert fragment in text, f"section {number} of docs/derivations.md lacks {fragment!r}"


def g10(f: float) -> str:
    return f"{f:.10g}"


# ---------------------------------------------------------------- 10. leave one out


def test_leave_one_out_identity_worked_example():
    s = [F(3), F(1), F(0)]
    rloo = list(rloo_advantages(s, [0, 0, 0]))
    none = list(grpo_advantages(s, [0, 0, 0], scale="none"))
    assert none == [F(5, 3), F(-1, 3), F(-4, 3)]
    assert rloo == [F(5, 2), F(-1, 2), F(-2)] == [F(3, 2) * a for a in none]
    in_doc(10, "[5/3, -1/3, -4/3]", "[5/2, -1/2, -2]")


def expected_gradient(advantages, pi, scores, n=2):
    """E[(1/n) sum_i A_i (e_{y_i} - pi)] over every outcome of n draws of a 2-answer policy."""
    g = [F(0), F(0)]
    for y1 in (0, 1):
        for y2 in (0, 1):
            prob = pi[y1] * pi[y2]
            A = advantages([scores[y1], scores[y2]], [0, 0])
            for a, y in zip(A, (y1, y2)):
                for k in (0, 1):
                    g[k] += prob * F(1, n) * a * ((k == y) - pi[k])
    return g


def test_leave_one_out_baseline_is_unbiased_by_enumeration():
    pi, scores = [F(1, 4), F(3, 4)], [F(1), F(0)]
    # grad_z J = grad_z pi_a = pi_a (e_a - pi)
    true = [pi[0] * (1 - pi[0]), -pi[0] * pi[1]]
    assert true == [F(3, 16), F(-3, 16)]
    assert expected_gradient(rloo_advantages, pi, scores) == true

    def group_mean(s, g):
        return grpo_advantages(s, g, scale="none")

    assert expected_gradient(group_mean, pi, scores) == [t / 2 for t in true]
    in_doc(10, "(3/16, -3/16)", "(3/32, -3/32)")


# ---------------------------------------------------------------- 11. weights


def test_std_weights_hard_and_medium_prompts():
    scores = np.array([1] + [0] * 7 + [1] * 4 + [0] * 4, dtype=float)
    groups = np.repeat([0, 1], 8)
    A = grpo_advantages(scores, groups)
    none = grpo_advantages(scores, groups, scale="none")
    # std_g with ddof 1: sqrt((1/8)(7/8) * 8/7) = sqrt(1/8); sqrt((1/2)(1/2) * 8/7) = sqrt(2/7)
    std_hard, std_med = np.sqrt(1 / 8), np.sqrt(2 / 7)
    f_hard, f_med = 1 / (std_hard + 1e-6), 1 / (std_med + 1e-6)
    assert np.allclose(A[:8], none[:8] * f_hard, rtol=1e-14) and np.allclose(
        A[8:], none[8:] * f_med, rtol=1e-14)
    assert list(none[[0, 1, 8, 12]]) == [7 / 8, -1 / 8, 1 / 2, -1 / 2]
    sums = np.abs(A[:8]).sum(), np.abs(A[8:]).sum()
    assert np.abs(none[:8]).sum() == 7 / 4 and np.abs(none[8:]).sum() == 4
    in_doc(11, g10(std_hard), g10(std_med), g10(f_hard), g10(f_med), g10(A[0]), g10(A[1]),
           g10(A[8]), g10(A[12]), g10(sums[0]), g10(sums[1]), "7/16",
           f"{sums[0] / sums[1]:.4f}", f"{f_hard / f_med:.3f}")
    # 7 right of 8 has the same factor as 1 right of 8
    easy = grpo_advantages([1.0] * 7 + [0.0], [0] * 8)
    assert np.allclose(easy, -A[:8][::-1], rtol=1e-14)


def test_length_weights_of_grpo_token_mean_and_dr_grpo():
    mask = np.zeros((2, 8), dtype=bool)
    mask[0, :2] = True
    mask[1, :] = True
    zeros = np.zeros((2, 8))
    want = {"grpo": (1 / 4, 1 / 16), "token-mean": (1 / 10, 1 / 10), "dr_grpo": (1 / 16, 1 / 16)}
    for mode, (short, long) in want.items():
        w = aggregate_grad(zeros, mask, mode, **({"norm": 8} if mode == "dr_grpo" else {}))
        assert np.allclose(w[0, :2], short, rtol=1e-15) and np.allclose(w[1], long, rtol=1e-15)
        assert np.all(w[0, 2:] == 0)
    # on-policy, nothing clipped: d loss / d logp = -w A = w for A = -1
    logp = np.full((2, 8), -1.0)
    d = policy_loss_grad(logp, logp, -np.ones((2, 8)), mask, agg="grpo")
    assert np.allclose(d[0, :2], 1 / 4, rtol=1e-15) and np.allclose(d[1], 1 / 16, rtol=1e-15)
    in_doc(11, "1/(B L)", "1/4 and of the long one 1/16", "1/10 to every token", "1/16")


# ---------------------------------------------------------------- 12. k3


def test_k3_gradient_worked_example():
    k3 = kl_estimate([-1.0], [-1.5], "k3")[0]
    dk3 = kl_estimate_grad([-1.0], [-1.5], "k3")[0]
    # each side rounds once: an exp of -0.5 (0.607, within 1 ulp = 1.1e-16 on every CPU
    # kind) or an expm1 (-0.393, within 1 ulp = 5.6e-17); the additions are exact (Sterbenz).
    # So they may differ by 1.7e-16, 1.6e-15 of k3 = 0.107: rtol 4e-15
    assert np.isclose(k3, np.exp(-0.5) - 1 + 0.5, rtol=4e-15, atol=0)
    assert np.isclose(dk3, 1 - np.exp(-0.5), rtol=1e-15, atol=0)
    d = policy_loss_grad([-1.0], [-1.0], [0.0], logp_ref=[-1.5], kl_coef=1.0,
                         kl_estimator="k3")[0]
    assert np.isclose(d, dk3, rtol=1e-15, atol=0)
    in_doc(12, g10(k3), g10(dk3))


def test_k3_expectations_in_the_loss_and_in_the_reward():
    pi, ref = np.array([0.25, 0.75]), np.array([0.5, 0.5])
    e = np.eye(2)
    logp, logp_ref = np.log(pi), np.log(ref)
    dk3 = kl_estimate_grad(logp, logp_ref, "k3")
    assert np.allclose(dk3, [-1, 1 / 3], rtol=1e-14)
    k1 = kl_estimate(logp, logp_ref, "k1")
    k3 = kl_estimate(logp, logp_ref, "k3")

    def expect(per_answer):  # E_{y ~ pi}[c_y (e_y - pi)]
        return sum(pi[y] * per_answer[y] * (e[y] - pi) for y in (0, 1))

    loss_k3 = expect(dk3)
    assert np.allclose(loss_k3, pi - ref, rtol=1e-14)  # grad_z KL(ref || pi)
    kl = float(np.sum(pi * np.log(pi / ref)))
    grad_kl = pi * (np.log(pi / ref) - kl)  # grad_z KL(pi || ref)
    assert np.isclose(kl, float(np.dot(pi, k3)), rtol=1e-14)  # E[k3] = KL(pi || ref)
    assert np.allclose(expect(k1), grad_kl, rtol=1e-14)
    reward_k3 = expect(k3)
    assert np.allclose(reward_k3, grad_kl - (pi - ref), rtol=1e-12)
    # gradient ascent on -beta k3 lowers z_a: pi_a = 1/4 moves away from pi_ref's 1/2
    assert reward_k3[0] > 0
    in_doc(12, "(-1/4, 1/4)", g10(kl), f"({g10(grad_kl[0])}, {g10(grad_kl[1])})",
           f"({g10(reward_k3[0])}, {g10(reward_k3[1])})")


# ---------------------------------------------------------------- 13. the gradient forms


def test_forms_worked_example_off_policy():
    from ppo_numpy import kl_gradient_table, kl_term_and_grad

    pi, ref, old = [F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)], [F(1, 3), F(2, 3)]
    d = [np.log(0.5), np.log(1.5)]
    # on-policy, per token: c = rho d = d for the ratio form of k3 (rho = 1 in value)
    _, c = kl_term_and_grad(np.log([0.25, 0.75]), np.log([0.5, 0.5]), "k3", "ratio")
    assert np.allclose(c, d, rtol=1e-14)
    want = {  # the first component of each expected gradient, by hand
        ("pi_theta", "k3", "ratio"): 0.25 * d[0] * 0.75 + 0.75 * d[1] * -0.25,
        ("pi_old", "k3", "ratio"): (1 / 3) * 0.75 * d[0] * 0.75 + (2 / 3) * 1.125 * d[1] * -0.25,
        ("pi_old", "k3", "straight_through"): (1 / 3) * d[0] * 0.75 + (2 / 3) * d[1] * -0.25,
        ("pi_old", "k3", "importance"): (1 / 3) * 0.75 * d[0] * 0.75
        + (2 / 3) * 1.125 * d[1] * -0.25,
    }
    rows = {(r["sampler"], r["estimator"], r["form"]): r
            for r in kl_gradient_table(pi, ref, old) if r["placement"] == "loss"}
    for key, value in want.items():
        assert np.isclose(float(rows[key]["grad"][0]), value, rtol=1e-14, atol=0), key
    assert rows[("pi_old", "k3", "plain")]["grad"][0] == F(-11, 36)
    assert rows[("pi_old", "k3", "plain")]["gradient_of"] == "neither"
    assert rows[("pi_old", "k3", "ratio")]["gradient_of"] == "KL(pi||ref)"
    bounded = {(r["sampler"], r["estimator"], r["form"]): r
               for r in kl_gradient_table(pi, ref, old, bound=1)}[("pi_old", "k3", "importance")]
    cut = (1 / 3) * 0.75 * d[0] * 0.75 + (2 / 3) * 1 * d[1] * -0.25
    assert np.isclose(float(bounded["grad"][0]), cut, rtol=1e-14, atol=0)
    in_doc(13, g10(want[("pi_theta", "k3", "ratio")]), "-11/36", "-1/4",
           g10(want[("pi_old", "k3", "straight_through")]), g10(cut), "(3/4, 9/8)",
           "KL_IS_WEIGHT_CLIP = 10.0", "use_bias_correction_kl=True", "kl_loss_type=k3+")


# ---------------------------------------------------------------- 14. a sequence


def test_sequence_worked_example_reward_against_loss():
    from ppo_numpy import kl_gradient_table
    from ppo_numpy.grads.kl_exact import kl_targets

    half = [F(1, 2), F(1, 2)]
    pi = [[F(1, 4), F(3, 4)], [half, [F(1, 5), F(4, 5)]]]
    ref = [half, [half, half]]
    kl2 = 0.2 * np.log(0.4) + 0.8 * np.log(1.6)
    own = 0.25 * np.log(0.5) * 0.75 + 0.75 * np.log(1.5) * -0.25  # the first position's KL'
    seq = own + 0.75 * -0.25 * kl2
    second = 0.75 * 0.2 * (np.log(0.4) - kl2)  # d/dz[1 | 2]: P(2) pi(1|2) (d - KL_2)
    kl = 0.25 * np.log(0.5) + 0.75 * np.log(1.5) + 0.75 * kl2
    t = kl_targets(pi, ref)
    assert np.isclose(float(t.kl_reverse), kl, rtol=1e-14)
    rows = {(r["placement"], r["estimator"], r["form"]): r
            for r in kl_gradient_table(pi, ref)}
    reward = [float(x) for x in rows[("reward", "k1", None)]["grad"]]
    loss = [float(x) for x in rows[("loss", "k3", "ratio")]["grad"]]
    assert np.isclose(reward[0], seq, rtol=1e-14) and np.isclose(loss[0], own, rtol=1e-14)
    assert np.isclose(reward[4], second, rtol=1e-14) and np.isclose(loss[4], second, rtol=1e-14)
    assert rows[("reward", "k1", None)]["gradient_of"] == "KL(pi||ref)"
    assert rows[("loss", "k3", "ratio")]["gradient_of"] == "neither"
    assert np.isclose(float(rows[("loss", "k3", "ratio")]["gap_reverse"]), 3 / 16 * kl2,
                      rtol=1e-13)
    assert rows[("loss", "k3", "plain")]["grad"][4] == F(-9, 40)
    assert t.dkl_forward[4] == F(-3, 20)
    assert all(x == 0 for x in rows[("loss", "k1", "plain")]["grad"])
    in_doc(14, g10(kl2), g10(kl), g10(seq), g10(own), g10(3 / 16 * kl2), g10(second), "-9/40",
           "-3/20")
