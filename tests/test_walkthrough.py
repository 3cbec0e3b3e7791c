"""``python -m ppo_numpy walkthrough``: every printed number against the running example
worked out by hand (the output shows 5 or 6 significant digits)."""

import math
import re

from ppo_numpy.programs.walkthrough import main


def printed(capsys) -> dict:
    """The numbers after ``=`` on each numbered line, keyed by the line's start."""
    assert main([]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        # the label is padded to a column: at least two spaces before its " = "
        parts = re.split(r"\s{2,}= ", line, maxsplit=1)
        if len(parts) == 2 and re.match(r"\s*(\d+\.|R_t)", line):
            key, value = line.split()[0], parts[1]
            rows[key] = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", value)]
    return rows


def close(got, want):
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert math.isclose(g, w, rel_tol=1e-4, abs_tol=1e-9), (got, want)


def test_walkthrough_prints_the_hand_values(capsys):
    rows = printed(capsys)
    V = [0.5, 0.6, 0.7]
    # 1-2: logp = logp_ref, so KL = 0 and r~ is the score 1 at t = T
    close(rows["1."], [0, 0, 0])
    close(rows["2."], [0, 0, 1])
    # 3: [0 + 0.6 - 0.5, 0 + 0.7 - 0.6, 1 + 0 - 0.7]
    close(rows["3."], [0.1, 0.1, 0.3])
    # 4: A_3 = 0.3, A_2 = 0.1 + 0.95 * 0.3, A_1 = 0.1 + 0.95 * 0.385; R = A + V
    A = [0.46575, 0.385, 0.3]
    close(rows["4."], A)
    close(rows["R_t"], [a + v for a, v in zip(A, V)])
    # 5: (A - mean) / sqrt(var + 1e-8), var with n - 1
    mean = sum(A) / 3
    sd = math.sqrt(sum((a - mean) ** 2 for a in A) / 2 + 1e-8)
    close(rows["5."], [(a - mean) / sd for a in A])
    # 6-7: rho = [1.1, 1.5, 0.7]; A > 0 everywhere, so only 1.5 is clipped (to 1.2)
    close(rows["6."], [1.1, 1.5, 0.7])
    terms = [1.1 * A[0], 1.2 * A[1], 0.7 * A[2]]
    close(rows["7."], terms)
    # 8: one pair, so L_PPO is the sum; 9: the token mean, negated; 1 of 3 tokens clipped
    close(rows["8."], [sum(terms)])
    close(rows["9."], [-sum(terms) / 3, 1 / 3])
    # 10: V = V_old + 0.1 stays inside the clip range 0.2, so 1/2 (V + 0.1 - R)^2
    R = [a + v for a, v in zip(A, V)]
    close(rows["10."], [0.5 * (v + 0.1 - r) ** 2 for v, r in zip(V, R)])
