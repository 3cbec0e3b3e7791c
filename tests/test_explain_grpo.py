"""``explain grpo`` and ``explain rloo``: the group-baseline tables against hand calculations.

Every expected number is worked out in the test (exact fractions, or the float formula
written out), not taken from the library.
"""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy import grpo_advantages, rloo_advantages
from ppo_numpy.explain import grpo_table, rloo_table
from ppo_numpy.programs.explain import main

SCORES = [F(1), F(0), F(0), F(1)]
GROUPS = [0, 0, 1, 1]
DEV = "s_i - mean_g(i)"
LOO = "b_i = others' mean"


def assert_exact(got, expected, what=""):
    """Equal as Fractions, and every value really a Fraction (not a float that compares equal)."""
    assert all(isinstance(g, F) for g in got), f"{what}: not all Fractions: {got!r}"
    assert got == expected, f"{what}: expected {expected}, got {got}"


def test_grpo_none_is_exact_and_equals_the_hand_values():
    tab = grpo_table(SCORES, GROUPS, scale="none")
    assert tab.exact
    assert tab.column("i") == [1, 2, 3, 4] and tab.column("group") == GROUPS
    half = F(1, 2)
    assert_exact(tab.column("mean_g(i)"), [half] * 4, "mean")
    assert_exact(tab.column(DEV), [half, -half, -half, half], "deviation")
    assert_exact(tab.column("A_i"), [half, -half, -half, half], "A")
    assert "std" not in tab.columns


def test_grpo_group_std_of_one_and_zero_is_sqrt_half():
    # std of [1, 0] with ddof 1: sqrt(((1/2)^2 + (1/2)^2) / 1) = sqrt(1/2)
    tab = grpo_table(SCORES, GROUPS)
    assert_exact(tab.column("variance"), [F(1, 2)] * 4, "variance")
    std = math.sqrt(0.5)
    a = 0.5 / (std + 1e-6)
    for got, want in [("std", [std] * 4), ("std + eps", [std + 1e-6] * 4),
                      ("A_i", [a, -a, -a, a])]:
        values = tab.column(got)
        assert all(isinstance(v, float) for v in values), (got, values)
        assert np.allclose(values, want, rtol=1e-14, atol=0), (got, values, want)
    text = tab.text()
    assert "~0.7071067812" in text and "~0.7071057812" in text and "~-0.7071057812" in text
    assert "1/2" in text  # mean, deviation and variance stay exact


def test_grpo_ddof_0_and_eps():
    # ddof 0: variance (1/4 + 1/4) / 2 = 1/4, std 1/2; eps 1e-4: A = (1/2) / (1/2 + 1e-4)
    tab = grpo_table(SCORES, GROUPS, ddof=0, std_eps=1e-4)
    assert_exact(tab.column("variance"), [F(1, 4)] * 4, "variance")
    a = 0.5 / (0.5 + 1e-4)
    assert np.allclose(tab.column("A_i"), [a, -a, -a, a], rtol=1e-14, atol=0)


def test_grpo_batch_uses_the_std_of_all_scores_and_the_group_mean():
    # scores [1, 0, 0, 0, 1, 1]: group means 1/3, 2/3; batch mean 1/2, every squared
    # deviation 1/4, variance (6/4) / 5 = 3/10 (ddof 1)
    s = [F(x) for x in (1, 0, 0, 0, 1, 1)]
    g = [0, 0, 0, 1, 1, 1]
    tab = grpo_table(s, g, scale="batch")
    assert_exact(tab.column("mean_g(i)"), [F(1, 3)] * 3 + [F(2, 3)] * 3, "mean")
    assert_exact(tab.column("variance"), [F(3, 10)] * 6, "variance")
    dev = [F(2, 3), F(-1, 3), F(-1, 3), F(-2, 3), F(1, 3), F(1, 3)]
    assert_exact(tab.column(DEV), dev, "deviation")
    want = [float(d) / (math.sqrt(0.3) + 1e-6) for d in dev]
    assert np.allclose(tab.column("A_i"), want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("ddof", [0, 1])
def test_grpo_table_columns_give_the_library_advantage(scale, ddof):
    # the displayed steps reproduce the library's A: deviation / (std + eps)
    rng = np.random.default_rng(3)
    s = rng.normal(size=12)
    g = rng.permutation(np.arange(12) % 4)
    tab = grpo_table(s, g, scale=scale, std_eps=1e-3, ddof=ddof)
    A = grpo_advantages(s, g, scale=scale, std_eps=1e-3, ddof=ddof)
    assert np.array_equal(tab.column("A_i"), A)
    dev = np.array(tab.column(DEV))
    if scale == "none":
        assert np.array_equal(dev, A)
    else:
        assert np.allclose(dev / np.array(tab.column("std + eps")), A, rtol=1e-13, atol=0)
        assert np.allclose(np.array(tab.column("std")) ** 2, tab.column("variance"),
                           rtol=1e-13, atol=0)


def test_grpo_equal_scores_give_exactly_zero():
    tab = grpo_table([0.1, 0.1, 0.1, 1.0, 0.0], [5, 5, 5, 6, 6])
    assert tab.column(DEV)[:3] == [0.0, 0.0, 0.0]
    assert tab.column("A_i")[:3] == [0.0, 0.0, 0.0]


def test_rloo_exact_hand_values():
    tab = rloo_table(SCORES, GROUPS)
    assert tab.exact and tab.column("n_g(i)") == [2, 2, 2, 2]
    assert_exact(tab.column("sum of the others"), [F(0), F(1), F(1), F(0)], "others")
    assert_exact(tab.column(LOO), [F(0), F(1), F(1), F(0)], "baseline")
    assert_exact(tab.column("A_i"), [F(1), F(-1), F(-1), F(1)], "A")


def test_rloo_interleaved_groups_of_three_and_the_identity():
    # group 0 = rows 1, 4, 6 with scores 3, 1, 0; group 1 all 0
    s = [F(x) for x in (3, 0, 0, 1, 0, 0)]
    g = [0, 1, 1, 0, 1, 0]
    tab = rloo_table(s, g)
    assert_exact(tab.column(LOO), [F(1, 2), F(0), F(0), F(3, 2), F(0), F(2)], "baseline")
    A = [F(5, 2), F(0), F(0), F(-1, 2), F(0), F(-2)]
    assert_exact(tab.column("A_i"), A, "A")
    # A_i = n / (n - 1) (s_i - mean_g): 3/2 of the Dr. GRPO advantage
    none = grpo_advantages(s, g, scale="none")
    assert list(F(3, 2) * none) == A
    assert list(rloo_advantages(s, g)) == A


def test_cli_grpo_and_rloo(capsys):
    assert main(["grpo", "--scores", "1,0,0,1", "--groups", "0,0,1,1", "--scale", "none",
                 "--exact"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[5].split("|")[-1].strip() == "-1/2"  # A_2 (title, blank, header, rule)
    assert main(["grpo", "--scores", "1,0,0,1", "--groups", "0,0,1,1", "--exact"]) == 0
    out = capsys.readouterr().out
    assert "~0.7071057812" in out and "floats, marked ~" in out
    assert main(["grpo", "--scores", "1,0,0,1", "--groups=-1,-1,2,2", "--ddof", "0",
                 "--std-eps", "0"]) == 0
    assert " -1.0 " not in capsys.readouterr().out  # ids -1 read as integers
    assert main(["rloo", "--scores", "1,0,0,1", "--groups", "0,0,1,1", "--format",
                 "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| 2 | 0 | 0 | 2 | 1 | 1 | -1 |" in out


@pytest.mark.parametrize("argv, message", [
    (["grpo", "--scores", "1,0,0", "--groups", "0,0,1,1"],
     "--groups: expected 3 numbers to match --scores, got 4"),
    (["grpo", "--scores", "1,0,0,1", "--groups", "0,0.5,1,1"],
     "--groups: entry 2 of 4 is '0.5', not an integer prompt id"),
    (["rloo", "--scores", "1,0,0,1", "--groups", "0,0,1,2"],
     "--groups: prompt id 1 (entry 3) has a single response"),
    (["grpo", "--scores", "1,0,1", "--groups", "0,0,1"],
     "--groups: prompt id 1 (entry 3) has a single response"),
    (["grpo", "--scores", "1,x,0,1", "--groups", "0,0,1,1"],
     "--scores: 'x' (entry 2 of 4) is not a number"),
    (["grpo", "--scores", "1,0,0,1", "--groups", "0,0,1,1", "--std-eps", "-1"],
     "--std-eps: must be >= 0"),
    (["grpo", "--scores", "1,1,0,1", "--groups", "0,0,1,1", "--std-eps", "0"],
     "--scores: the group of prompt id 0 has equal scores"),
    (["grpo", "--scores", "1,0,0,1", "--groups", "0,0,1,1", "--scale", "prompt"],
     "argument --scale: invalid choice"),
    (["rloo", "--scores", "1,0", "--groups", "0,0", "--mask", "1,1"],
     "unrecognized arguments: --mask"),
])
def test_cli_group_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert [line for line in err.splitlines() if "error:" in line] == \
        [line for line in err.splitlines() if message in line], err
