"""``python -m ppo_numpy walkthrough``: every printed number against the running example
worked out by hand here (the output shows up to 10 significant digits).

The inputs are read from the output too, and checked against the values the hand
calculation starts from, so the printed inputs alone are enough to redo every step.
"""

import math
import re

from ppo_numpy.programs.walkthrough import main

NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"


def output(capsys) -> str:
    assert main([]) == 0
    return capsys.readouterr().out


def rows(out: str) -> dict:
    """``label = [numbers]`` lines, keyed by the label's first word (``1.``, ``R_t``, ...)."""
    found = {}
    for line in out.splitlines():
        # "label = [x, y, z]" or "label = x"; the label itself may contain " = "
        m = re.fullmatch(r"(.*?)\s+= (\[.*\]|" + NUMBER + ")", line)
        if m:
            key = m.group(1).split()[0]
            assert key not in found, f"two rows start with {key!r}"
            found[key] = [float(x) for x in re.findall(NUMBER, m.group(2))]
    return found


def close(got, want, what):
    assert len(got) == len(want), f"{what}: expected {want}, printed {got}"
    for g, w in zip(got, want):
        # 10 significant digits are printed
        assert math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-12), (
            f"{what}: expected {want}, printed {got}")


def test_walkthrough_prints_its_inputs(capsys):
    out = output(capsys)
    r = rows(out)
    close(r["logp_old"], [-1, -2, -0.5], "logp_old")
    close(r["logp_ref"], [-1.5, -1.8, -0.6], "logp_ref")
    close(r["V_old(s_t)"], [0.5, 0.6, 0.7], "V_old")
    params = dict(re.findall(r"(\w+) = (" + NUMBER + ")", out.splitlines()[4]))
    assert params == {"score": "1", "beta": "0.1", "gamma": "1", "lambda": "0.95",
                      "eps": "0.2", "c": "0.2"}, params
    # the exact-fraction command reproduces the same chain
    assert "explain ppo --score 1 --logp-old -1,-2,-0.5 --logp-ref -1.5,-1.8,-0.6" in out


def test_walkthrough_prints_the_hand_values(capsys):
    r = rows(output(capsys))
    V, c = [0.5, 0.6, 0.7], 0.2
    # 1: KL_t = logp_old - logp_ref = [-1 + 1.5, -2 + 1.8, -0.5 + 0.6]: nonzero, one negative
    kl = [0.5, -0.2, 0.1]
    close(r["1."], kl, "1. KL k1")
    #    k3 = exp(-k1) - 1 + k1 >= 0 even where k1 < 0: exp(-0.5) - 0.5 = 0.10653...
    close(r["k3"], [math.exp(-k) - 1 + k for k in kl], "k3")
    assert all(k > 0 for k in r["k3"])
    # 2: -beta KL = [-0.05, 0.02, -0.01], plus the score 1 at t = 3
    rew = [-0.05, 0.02, -0.01 + 1]
    close(r["2."], rew, "2. rewards")
    # 3: delta = [-0.05 + 0.6 - 0.5, 0.02 + 0.7 - 0.6, 0.99 + 0 - 0.7]
    delta = [0.05, 0.12, 0.29]
    close(r["3."], delta, "3. delta")
    # 4: A_3 = 0.29; A_2 = 0.12 + 0.95 * 0.29 = 0.3955; A_1 = 0.05 + 0.95 * 0.3955 = 0.425725
    A = [0.425725, 0.3955, 0.29]
    close(r["4."], A, "4. A_hat")
    R = [0.925725, 0.9955, 0.99]  # A + V
    close(r["R_t"], R, "R_t")
    # whitening: mean = 1.111225 / 3; var with n - 1 = 2
    mean = 1.111225 / 3
    var = ((0.425725 - mean) ** 2 + (0.3955 - mean) ** 2 + (0.29 - mean) ** 2) / 2
    close(r["mean(A_hat),"], [mean, var], "mean, var")
    # 5: (A - mean) / sqrt(var + 1e-8)
    close(r["5."], [(a - mean) / math.sqrt(var + 1e-8) for a in A], "5. whiten")
    # 6: rho as chosen; 7: eps = 0.2, range [0.8, 1.2], A > 0 everywhere:
    #    1.1 inside: 1.1 * 0.425725 = 0.4682975; 1.5 clipped to 1.2: 1.2 * 0.3955 = 0.4746;
    #    0.7 below 0.8 but A > 0, so the min is rho A: 0.7 * 0.29 = 0.203 (0.8 * 0.29 = 0.232)
    close(r["6."], [1.1, 1.5, 0.7], "6. rho")
    terms = [0.4682975, 0.4746, 0.203]
    close(r["7."], terms, "7. clipped surrogate")
    # 8: one response, so L_PPO is the sum 1.1458975 (= 458359/400000)
    close(r["8."], [1.1458975], "8. L_PPO")
    # 9: token mean, negated: -1.1458975 / 3; one of the three tokens clipped
    close(r["9."], [-1.1458975 / 3, 1 / 3], "9. policy loss, clip fraction")
    #    KL(pi_old || pi_theta) from the old samples with r = rho: k1 = mean(-log rho),
    #    k3 = mean(rho - 1 - log rho) = mean(rho - 1) + k1 = 0.1 + k1: nonzero
    k1 = -(math.log(1.1) + math.log(1.5) + math.log(0.7)) / 3
    close(r["approx"], [k1, (0.1 + 0.5 - 0.3) / 3 + k1], "approx KL")
    assert k1 < 0 < r["approx"][1]
    # 10: V = V_old + 0.1 = [0.6, 0.7, 0.8]; V - V_old = 0.1 < c = 0.2, so V_clip = V and
    #     the loss is 1/2 (V - R)^2 = 1/2 [0.325725^2, 0.2955^2, 0.19^2]
    V_new = [0.6, 0.7, 0.8]
    close(r["V(s_t)"], V_new, "V after the update")
    assert all(abs(vn - v - 0.1) < 1e-12 < c for vn, v in zip(V_new, V))
    close(r["10."], [0.5 * 0.325725 ** 2, 0.5 * 0.2955 ** 2, 0.5 * 0.19 ** 2], "10. value loss")


def test_walkthrough_beta_0_note_is_the_docstring_example(capsys):
    # beta = 0: rewards [0, 0, 1], delta [0.1, 0.1, 0.3], A_3 = 0.3, A_2 = 0.1 + 0.95 * 0.3,
    # A_1 = 0.1 + 0.95 * 0.385 = 0.46575
    out = output(capsys)
    assert "rewards are [0, 0, 1] and A_hat = [0.46575, 0.385, 0.3]" in out


def test_the_walkthrough_says_which_advantages_step_7_uses(capsys):
    out = output(capsys)
    # step 5 whitens, steps 7-9 use step 4's A_hat (issue 39): said, and what row 7 holds
    assert "steps 7-9 use A_hat of step 4, unwhitened" in out
    found = rows(out)
    rho, A = found["6."], found["4."]
    want = [min(r * a, min(max(r, 0.8), 1.2) * a) for r, a in zip(rho, A)]
    assert all(abs(x - y) < 1e-9 for x, y in zip(found["7."], want)), (found["7."], want)
