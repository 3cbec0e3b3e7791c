"""Tests of the hand-calculation tables (ppo_numpy.explain) and `python -m ppo_numpy explain`.

Every expected number is worked out by hand in the comments beside it, in exact fractions.
"""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest

from ppo_numpy.explain import (
    clip_table,
    format_number,
    gae_table,
    ppo_tables,
    ratio_clip_tables,
    ratio_table,
    render,
    rewards_table,
    rollout_is_table,
)
from ppo_numpy.programs.explain import main
from ppo_numpy.programs.hand_calculations import REGENERATE, render_docs
from tests._helpers import last_digit, same_printout

ROOT = Path(__file__).resolve().parents[1]

CARRY = "(gamma lambda) * A_hat_{t+1}"
RETURN = "R_t = A_hat_t + V(s_t)"


def fr(*texts):
    return [F(t) for t in texts]


def assert_exact(got, expected, what=""):
    """Equal as Fractions, and every value really a Fraction (not a float that compares equal)."""
    assert all(isinstance(g, F) for g in got), f"{what}: not all Fractions: {got!r}"
    assert got == expected, f"{what}: expected {expected}, got {got}"


# ---------------------------------------------------------------- GAE table


def test_gae_table_running_example_exact():
    # rewards [0, 0, 1], V = [1/2, 3/5, 7/10], gamma 1, lambda 19/20; rows t = 3, 2, 1.
    # t = 3: V(s_4) = 0, delta_3 = 1 - 7/10 = 3/10, A_hat_3 = 3/10, R_3 = 3/10 + 7/10 = 1
    # t = 2: delta_2 = 7/10 - 3/5 = 1/10, (19/20)(3/10) = 57/200, A_hat_2 = 77/200,
    #        R_2 = 77/200 + 120/200 = 197/200
    # t = 1: delta_1 = 3/5 - 1/2 = 1/10, (19/20)(77/200) = 1463/4000, A_hat_1 = 1863/4000,
    #        R_1 = 1863/4000 + 2000/4000 = 3863/4000
    tab = gae_table([0, 0, 1], fr("0.5", "0.6", "0.7"), gamma=1, lam=0.95)
    assert tab.column("t") == [3, 2, 1]
    assert_exact(tab.column("r~_t"), fr(1, 0, 0), "r~_t")
    assert_exact(tab.column("V(s_t)"), fr("7/10", "3/5", "1/2"), "V(s_t)")
    assert_exact(tab.column("V(s_{t+1})"), fr(0, "7/10", "3/5"), "V(s_{t+1})")
    assert_exact(tab.column("delta_t"), fr("3/10", "1/10", "1/10"), "delta_t")
    assert_exact(tab.column(CARRY), fr(0, "57/200", "1463/4000"), CARRY)
    assert_exact(tab.column("A_hat_t"), fr("3/10", "77/200", "1863/4000"), "A_hat_t")
    assert_exact(tab.column(RETURN), fr(1, "197/200", "3863/4000"), RETURN)
    # the docstring values of gae: [0.46575, 0.385, 0.3]
    assert tab.column("A_hat_t")[::-1] == fr("0.46575", "0.385", "0.3")
    text = tab.text()
    assert "lambda = 19/20" in text and "1863/4000" in text
    assert not any("~" in line for line in text.splitlines()[4:7])  # rows: no float marks


def test_gae_table_floats_print_short_decimals():
    tab = gae_table([0, 0, 1], [0.5, 0.6, 0.7], 1.0, 0.95)
    A = tab.column("A_hat_t")
    assert all(isinstance(a, float) for a in A)
    assert np.allclose(A, [0.3, 0.385, 0.46575], rtol=0, atol=1e-15)
    text = tab.text()
    # 10 significant digits: the binary noise of 0.30000000000000004 is not shown
    assert "0.46575" in text and "0.30000000000000004" not in text
    assert not any("~" in line for line in text.splitlines()[4:7])


def test_gae_table_discount_and_padding():
    # gamma 9/10, lambda 19/20 -> gamma lambda = 171/200; position 4 is padding (V = 9/10
    # there is ignored: V(s_{T+1}) = 0 for t = 3).
    # delta_3 = 1 - 7/10 = 3/10;  A_3 = 3/10
    # delta_2 = (9/10)(7/10) - 6/10 = 3/100;  A_2 = 3/100 + (171/200)(3/10) = 60/2000 + 513/2000
    # delta_1 = (9/10)(6/10) - 5/10 = 1/25;  A_1 = 1/25 + (171/200)(573/2000)
    #         = 16000/400000 + 97983/400000 = 113983/400000
    tab = gae_table(fr(0, 0, 1, 0), fr("0.5", "0.6", "0.7", "0.9"), 0.9, 0.95, mask=[1, 1, 1, 0])
    assert "gamma lambda = 171/200" in tab.title
    assert tab.column("t") == ["4 (pad)", 3, 2, 1]
    assert tab.rows[0][3:] == ("-",) * 5
    assert_exact(tab.column("V(s_{t+1})")[1:], fr(0, "7/10", "3/5"), "V(s_{t+1})")
    assert_exact(tab.column("delta_t")[1:], fr("3/10", "3/100", "1/25"), "delta_t")
    assert_exact(tab.column(CARRY)[1:], fr(0, "513/2000", "97983/400000"), CARRY)
    assert_exact(tab.column("A_hat_t")[1:], fr("3/10", "573/2000", "113983/400000"), "A_hat_t")


def test_gae_table_mask_with_a_hole_skips_padding():
    # mask [1, 0, 1]: the next state of t = 1 is t = 3. gamma 1, lambda 1/2.
    # delta_3 = 1 - 7/10 = 3/10; delta_1 = 0 + 7/10 - 1/2 = 1/5; A_1 = 1/5 + (1/2)(3/10) = 7/20
    tab = gae_table(fr(0, 5, 1), fr("0.5", 9, "0.7"), 1, F(1, 2), mask=[1, 0, 1])
    assert tab.column("t") == [3, "2 (pad)", 1]
    assert_exact([tab.column("V(s_{t+1})")[2]], [F(7, 10)], "V(s_2) of t = 1")
    assert_exact([tab.column(CARRY)[2]], [F(3, 20)], CARRY)
    assert_exact([tab.column("A_hat_t")[i] for i in (0, 2)], fr("3/10", "7/20"), "A_hat_t")


def test_gae_table_rejects_a_batch():
    with pytest.raises(ValueError, match=r"rewards: expected shape \(T,\)"):
        gae_table([[0, 1]], [[0.5, 0.5]])


# ---------------------------------------------------------------- clip table


def test_clip_table_four_cases_kinks_and_zero_advantage():
    # eps = 1/5: range [4/5, 6/5]
    # t1 rho 11/10, A 2: inside, 11/5 both           -> unclipped, d = 2
    # t2 rho 3/2,   A 2: 3 vs (6/5)2 = 12/5, min 12/5 -> clipped, d = 0
    # t3 rho 9/10,  A -1: inside, -9/10               -> unclipped, d = -1
    # t4 rho 1/2,   A -1: -1/2 vs -4/5, min -4/5      -> clipped, d = 0
    # t5 rho 6/5,   A 2: kink at 1 + eps, 12/5        -> unclipped at the kink, d = 2
    # t6 rho 4/5,   A -1: kink at 1 - eps, -4/5       -> unclipped at the kink, d = -1
    # t7 rho 3/2,   A 0: both 0                        -> unclipped, d = 0
    rho = fr("1.1", "1.5", "0.9", "0.5", "1.2", "0.8", "1.5")
    A = fr(2, 2, -1, -1, 2, -1, 0)
    tab = clip_table(rho, A, 0.2)
    assert "[4/5, 6/5]" in tab.title
    assert_exact(tab.column("clip(rho_t)"), fr("11/10", "6/5", "9/10", "4/5", "6/5", "4/5", "6/5"))
    assert_exact(tab.column("rho_t * A_hat_t"),
                 fr("11/5", 3, "-9/10", "-1/2", "12/5", "-4/5", 0))
    assert_exact(tab.column("clip(rho_t) * A_hat_t"),
                 fr("11/5", "12/5", "-9/10", "-4/5", "12/5", "-4/5", 0))
    assert_exact(tab.column("min"), fr("11/5", "12/5", "-9/10", "-4/5", "12/5", "-4/5", 0))
    assert tab.column("active") == ["unclipped", "clipped", "unclipped", "clipped",
                                    "unclipped, at the kink", "unclipped, at the kink",
                                    "unclipped"]
    assert_exact(tab.column("d min / d rho_t"), fr(2, 0, -1, 0, 2, -1, 0))


def test_clip_table_kink_derivative_is_the_left_or_right_limit_from_inside():
    # the printed derivative at a kink equals the finite-difference slope from inside the range
    # (A > 0 at rho = 1 + eps: from the left; A < 0 at rho = 1 - eps: from the right)
    h = F(1, 10**6)
    for rho, A, inside in ((F(6, 5), F(2), F(6, 5) - h), (F(4, 5), F(-1), F(4, 5) + h)):
        d = clip_table([rho], [A]).column("d min / d rho_t")[0]
        slope = (clip_table([rho], [A]).column("min")[0]
                 - clip_table([inside], [A]).column("min")[0]) / (rho - inside)
        assert d == slope == A


def test_clip_table_derivative_agrees_with_loss_grads_including_kinks():
    loss_grads = pytest.importorskip("ppo_numpy.grads.loss_grads")
    # rows 5 and 6 sit exactly on the kinks on every CPU kind: rho is exp(logp - 0), the very
    # bits the loss computes from logp and logp_old = 0 (NumPy's exp gives an element the
    # same bits whatever array it is in), and the clip range is read off those rhos:
    # eps_high = rho_5 - 1 and eps = 1 - rho_6 are exact (Sterbenz: rho in [1/2, 2]), so
    # 1 + eps_high == rho_5 and 1 - eps == rho_6. (exp(log 1.2) == 1.2 holds on some kinds
    # only.)
    logp = np.log([1.1, 1.5, 0.9, 0.5, 1.2, 0.8])
    rho = np.exp(logp - 0.0)
    eps, eps_high = 1 - rho[5], rho[4] - 1
    assert 1 + eps_high == rho[4] and 1 - eps == rho[5]
    A = np.array([2.0, 2.0, -1.0, -1.0, 2.0, -1.0])
    table_d = clip_table(rho, A, eps, epsilon_high=eps_high).column("d min / d rho_t")
    assert table_d == [2.0, 0.0, -1.0, 0.0, 2.0, -1.0]
    # policy loss summed over tokens: dloss/dlogp = -(dterm/drho) rho; dterm/drho is 2, 0 or
    # -1, so the product and the division by rho are exact
    dlogp = loss_grads.policy_loss_grad(logp, np.zeros(6), A, agg="seq-mean-token-sum",
                                        epsilon=eps, epsilon_high=eps_high)
    assert list(-dlogp / rho) == table_d


def test_clip_table_dual_clip():
    # c = 3, A = -1 everywhere
    # rho 1/2: min(-1/2, -4/5) = -4/5 > -3              -> clipped, d = 0
    # rho 2:   min(-2, -6/5) = -2 > -3                  -> unclipped, d = -1
    # rho 3:   min(-3, -6/5) = -3 = c A: the kink rho=c -> unclipped at the kink, d = -1
    # rho 7/2: min(-7/2, -6/5) = -7/2 < -3, term = -3   -> dual clip, d = 0
    tab = clip_table(fr("0.5", 2, 3, "3.5"), fr(-1, -1, -1, -1), 0.2, dual_clip=3)
    assert_exact(tab.column("min"), fr("-4/5", -2, -3, "-7/2"))
    assert_exact(tab.column("c * A_hat_t"), fr(-3, -3, -3, -3))
    assert_exact(tab.column("term_t"), fr("-4/5", -2, -3, -3))
    assert tab.column("active") == ["clipped", "unclipped", "unclipped, at the kink", "dual clip"]
    assert_exact(tab.column("d term_t / d rho_t"), fr(0, -1, -1, 0))


def test_clip_table_asymmetric_range():
    # eps 1/5, eps_high 7/25: range [4/5, 32/25]; rho 5/4 with A 1 is inside (5/4 < 32/25)
    tab = clip_table(fr("1.25", "1.3"), fr(1, 1), 0.2, epsilon_high=0.28)
    assert "[4/5, 32/25]" in tab.title and "eps_high" in tab.title
    assert_exact(tab.column("min"), fr("5/4", "32/25"))
    assert tab.column("active") == ["unclipped", "clipped"]


def test_clip_table_padding_row():
    tab = clip_table(fr("1.5", 7), fr(2, 1), mask=[1, 0])
    assert tab.column("t") == [1, "2 (pad)"]
    assert tab.column("min")[1] == "-"


# ---------------------------------------------------------------- ratio and rewards


def test_ratio_table_difference_exact_and_rho_float():
    # logp - logp_old = [0, 1/2]; rho = [1, e^(1/2)]
    tab = ratio_table(fr(0, "-0.5"), fr(0, -1))
    assert_exact(tab.column("logp_t - logp_old_t"), fr(0, "1/2"))
    rho = tab.column("rho_t = exp(...)")
    assert rho == [1.0, pytest.approx(math.exp(0.5), rel=1e-15)]
    assert all(isinstance(x, float) for x in rho)
    assert "~1.648721271" in tab.text()


def test_rewards_table_k1_exact():
    # KL = logp - logp_ref = [-1 + 3/2, -2 + 9/5, -1/2 + 3/5] = [1/2, -1/5, 1/10]
    # -beta KL = [-1/20, 1/50, -1/100]; score 1 at t = 3 -> r~ = [-1/20, 1/50, 99/100]
    tab = rewards_table(1, fr(-1, -2, "-0.5"), fr("-1.5", "-1.8", "-0.6"), 0.1)
    assert "beta = 1/10" in tab.title
    assert_exact(tab.column("KL_t (k1 = logp_t - logp_ref_t)"), fr("1/2", "-1/5", "1/10"))
    assert_exact(tab.column("-beta * KL_t"), fr("-1/20", "1/50", "-1/100"))
    assert tab.column("score added") == ["", "", F(1)]
    assert_exact(tab.column("r~_t"), fr("-1/20", "1/50", "99/100"))


def test_rewards_table_k2_and_mask_moves_the_score():
    # k2 = d^2 / 2 = [1/8, 1/50, 1/200]; -beta k2 = [-1/80, -1/500, -1/2000]
    # mask [1, 1, 0]: the score 1 goes to t = 2 -> r~ = [-1/80, 499/500, 0 at padding]
    tab = rewards_table(1, fr(-1, -2, "-0.5"), fr("-1.5", "-1.8", "-0.6"), 0.1, mask=[1, 1, 0],
                        estimator="k2")
    assert_exact(tab.column("-beta * KL_t")[:2], fr("-1/80", "-1/500"))
    assert tab.column("score added")[:2] == ["", F(1)]
    assert_exact(tab.column("r~_t")[:2], fr("-1/80", "499/500"))
    assert tab.column("t")[2] == "3 (pad)"


def test_rewards_table_k3_is_float_and_marked():
    # k3 = exp(-d) - 1 + d with d = logp - logp_ref
    d = [0.5, -0.2, 0.1]
    k3 = [math.exp(-x) - 1 + x for x in d]
    tab = rewards_table(1, fr(-1, -2, "-0.5"), fr("-1.5", "-1.8", "-0.6"), 0.1, estimator="k3")
    kl = tab.column("KL_t (k3 = (r - 1) - log r)")
    assert all(isinstance(x, float) for x in kl)
    assert kl == pytest.approx(k3, rel=1e-12)
    assert tab.column("r~_t") == pytest.approx([-0.1 * k3[0], -0.1 * k3[1], 1 - 0.1 * k3[2]],
                                                rel=1e-12)
    assert "~0.1065306597" in tab.text()  # exp(-1/2) - 1/2 = 0.10653065971...
    assert tab.column("logp_t")[0] == F(-1)  # the inputs stay exact


# ---------------------------------------------------------------- ppo chain


def test_ppo_tables_one_response_exact():
    # rewards of test_rewards_table_k1_exact: [-1/20, 1/50, 99/100]; V = [1/2, 3/5, 7/10]
    # delta = [-1/20 + 1/10, 1/50 + 1/10, 99/100 - 7/10] = [1/20, 3/25, 29/100]
    # A_3 = 29/100; A_2 = 3/25 + (19/20)(29/100) = 240/2000 + 551/2000 = 791/2000
    # A_1 = 1/20 + (19/20)(791/2000) = 2000/40000 + 15029/40000 = 17029/40000
    # rho = [11/10, 3/2, 7/10], eps 1/5:
    #   (11/10)(17029/40000) = 187319/400000 (inside)
    #   3/2 > 6/5, A > 0: (6/5)(791/2000) = 2373/5000 (clipped)
    #   7/10 < 4/5, A > 0: min((7/10)(29/100), (4/5)(29/100)) = 203/1000
    # L_PPO = (187319 + 189840 + 81200)/400000 = 458359/400000
    tables = ppo_tables(1, fr(-1, -2, "-0.5"), fr("-1.5", "-1.8", "-0.6"), fr("0.5", "0.6", "0.7"),
                        0.1, 1, 0.95, rho=fr("1.1", "1.5", "0.7"), epsilon=0.2)
    rewards, gae_tab, clip, objective = tables
    assert_exact(rewards.column("r~_t"), fr("-1/20", "1/50", "99/100"))
    assert_exact(gae_tab.column("delta_t")[::-1], fr("1/20", "3/25", "29/100"))
    assert_exact(gae_tab.column("A_hat_t")[::-1], fr("17029/40000", "791/2000", "29/100"))
    assert_exact(clip.column("min"), fr("187319/400000", "2373/5000", "203/1000"))
    assert clip.column("active") == ["unclipped", "clipped", "unclipped"]
    values = objective.column("value")
    assert_exact(values, [F(458359, 400000), -F(458359, 400000) / 3])


def test_ppo_tables_with_logp_become_float_and_marked():
    logp_old = fr(-1, -2, "-0.5")
    logp = [F(-1) + F(1, 10), F(-2) + F(1, 2), F("-0.5")]
    tables = ppo_tables(1, logp_old, logp_old, fr("0.5", "0.6", "0.7"), 0.1, 1, 0.95, logp=logp)
    assert [t.title.split(":")[0] for t in tables] == [
        "KL-shaped rewards", "TD errors and GAE, backwards in t", "Probability ratio",
        "Clipped surrogate", "The objective for this response"]
    # no KL: A = [1863/4000, 77/200, 3/10]; rho = [e^(1/10), e^(1/2), 1]: the second is clipped
    expected = (math.exp(0.1) * 1863 / 4000 + 1.2 * 77 / 200 + 1.0 * 3 / 10)
    L = tables[-1].column("value")[0]
    assert isinstance(L, float) and L == pytest.approx(expected, rel=1e-12)
    assert all(t.exact for t in tables) and "~" in tables[3].text()


def test_ppo_tables_needs_exactly_one_of_rho_and_logp():
    with pytest.raises(ValueError, match="rho: give exactly one"):
        ppo_tables(1, [0.0], [0.0], [0.5], 0.1)


def test_ratio_clip_tables_marks_floats():
    ratio, clip = ratio_clip_tables(fr("-0.9", "-1.3"), fr(-1, -1), fr(1, -1))
    # rho = [e^(1/10), e^(-3/10) = 0.7408 < 4/5]: the second is clipped for A = -1
    assert clip.column("active") == ["unclipped", "clipped"]
    assert clip.column("min") == pytest.approx([math.exp(0.1), -0.8], rel=1e-15)
    assert clip.exact and "~-0.8" in clip.text()


# ---------------------------------------------------------------- formatting


def test_format_number():
    assert format_number(F(-1, 20)) == "-1/20"
    assert format_number(F(6, 3)) == "2"
    assert format_number(7) == "7"
    assert format_number(0.46574999999999994) == "0.46575"
    assert format_number(-0.0) == "0"
    assert format_number(1.0, exact=True) == "~1"
    assert format_number("unclipped", exact=True) == "unclipped"


def test_text_and_markdown_layout():
    tab = clip_table(fr("1.5"), fr(2))
    lines = tab.text().splitlines()
    header, rule, row = lines[2], lines[3], lines[4]
    # columns line up: every "|" of the header sits above a "+" of the rule and a "|" of the row
    bars = [i for i, ch in enumerate(header) if ch == "|"]
    assert bars == [i for i, ch in enumerate(rule) if ch == "+"]
    assert bars == [i for i, ch in enumerate(row) if ch == "|"]
    md = tab.markdown().splitlines()
    assert md[2].startswith("| `t` | `rho_t` |") and set(md[3]) <= set("|-:")
    assert md[4] == "| 1 | 3/2 | 2 | 6/5 | 3 | 12/5 | 12/5 | clipped | 0 |"
    # "|" inside a label is escaped so the Markdown table keeps its columns
    k = rewards_table(0, fr(0), fr(0), 0, estimator="abs").markdown()
    assert "`KL_t (abs = \\|logp_t - logp_ref_t\\|)`" in k
    with pytest.raises(ValueError, match="fmt"):
        render([tab], "html")
    with pytest.raises(KeyError, match="no column"):
        tab.column("rho")


# ---------------------------------------------------------------- CLI


GAE_ARGS = ["gae", "--rewards", "0,0,1", "--values", "0.5,0.6,0.7", "--gamma", "1", "--lam", "0.95"]


def test_cli_gae_exact(capsys):
    assert main(GAE_ARGS + ["--exact"]) == 0
    out = capsys.readouterr().out
    for value in ("1863/4000", "77/200", "3/10", "1463/4000", "3863/4000", "lambda = 19/20"):
        assert value in out
    assert "0.46575" not in out


def test_cli_gae_float_and_markdown(capsys):
    assert main(GAE_ARGS + ["--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 0 | 0.5 | 0.6 | 0.1 | 0.36575 | 0.46575 | 0.96575 |" in out
    assert "1863/4000" not in out


def test_cli_fraction_syntax_and_negative_lists(capsys):
    # "19/20" typed directly; negative lists after a space or "="
    assert main(["rewards", "--logp", "-1,-2,-1/2", "--logp-ref=-3/2,-1.8,-0.6", "--score", "1",
                 "--beta", "1/10", "--exact"]) == 0
    out = capsys.readouterr().out
    assert "99/100" in out and "-1/20" in out


def test_cli_clip_dual_and_logp(capsys):
    assert main(["clip", "--rho", "0.5,2,3,3.5", "--advantages", "-1,-1,-1,-1",
                 "--dual-clip", "3", "--exact"]) == 0
    assert "dual clip" in capsys.readouterr().out
    assert main(["clip", "--logp", "-0.9,-1.3", "--logp-old", "-1,-1", "--advantages", "1,-1"]) == 0
    out = capsys.readouterr().out
    assert "1.105170918" in out and "Probability ratio" in out  # e^(1/10) = 1.1051709180...


def test_cli_ppo(capsys):
    assert main(["ppo", "--score", "1", "--logp-old", "-1,-2,-0.5", "--logp-ref",
                 "-1.5,-1.8,-0.6", "--values", "0.5,0.6,0.7", "--beta", "0.1", "--rho",
                 "1.1,1.5,0.7", "--exact"]) == 0
    assert "458359/400000" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["gae", "--rewards", "0,0,1", "--values", "0.5,0.6"],
     "--values: expected 3 numbers to match --rewards, got 2"),
    (GAE_ARGS[:-4] + ["--gamma", "abc"], "--gamma: 'abc' is not a number"),
    (GAE_ARGS[:-4] + ["--lam", "nan"], "--lam: 'nan' is not a finite number"),
    (GAE_ARGS[:-4] + ["--gamma", "2"], "--gamma: must be <= 1"),
    (["gae", "--rewards", "0,x,1", "--values", "1,2,3"], "--rewards: 'x' (entry 2 of 3)"),
    (["gae", "--rewards", "0,,1", "--values", "1,2,3"], "--rewards: entry 2 of '0,,1' is empty"),
    (["gae", "--rewards", "", "--values", "1"], "--rewards: expected a comma-separated list"),
    (GAE_ARGS + ["--mask", "1,2,0"], "--mask: entries must be 0 or 1, got '2'"),
    (GAE_ARGS + ["--mask", "1,1"], "--mask: expected 3 numbers to match --rewards, got 2"),
    (["gae", "--rewards", "0,0,1"], "the following arguments are required: --values"),
    (["clip", "--rho", "1,-1", "--advantages", "1,1"], "--rho: ratios must be >= 0"),
    (["clip", "--advantages", "1"], "one of the arguments --rho --logp is required"),
    (["clip", "--rho", "1", "--logp", "0", "--advantages", "1"],
     "argument --logp: not allowed with argument --rho"),
    (["clip", "--logp", "0", "--advantages", "1"], "--logp-old: required with --logp"),
    (["clip", "--rho", "1", "--advantages", "1", "--epsilon", "-0.1"], "--epsilon: must be >= 0"),
    (["clip", "--rho", "1", "--advantages", "1", "--dual-clip", "1"],
     "--dual-clip: must be > 1"),
    (["rewards", "--logp", "0,0", "--logp-ref", "0,0", "--score", "1", "--beta", "-1"],
     "--beta: must be >= 0"),
    (["rewards", "--logp", "0,0", "--logp-ref", "0,0", "--score", "s", "--beta", "1"],
     "--score: 's' is not a number"),
    (["rewards", "--logp", "0,0", "--logp-ref", "0,0", "--score", "1", "--beta", "1",
      "--mask", "0,0"], ("--mask: ", "no response token")),
    (["rewards", "--logp", "0", "--logp-ref", "0", "--score", "1", "--beta", "1",
      "--estimator", "k9"], "argument --estimator: invalid choice"),
    (["ppo", "--score", "1", "--logp-old", "0", "--logp-ref", "0", "--values", "0",
      "--beta", "0"], "one of the arguments --rho --logp is required"),
    (["variance"], "invalid choice: 'variance'"),
    (["rollout-is", "--logp-old", "0,0", "--logp-rollout", "0"],
     "--logp-rollout: expected 2 numbers to match --logp-old, got 1"),
    (["rollout-is", "--logp-old", "0", "--logp-rollout", "0", "--clip-min", "3"],
     "--clip-min: must be <= clip_max"),
    (["rollout-is", "--logp-old", "0", "--logp-rollout", "0", "--clip-max", "-1"],
     "--clip-max: must be > 0"),
    (["rollout-is", "--logp-old", "0", "--logp-rollout", "0", "--level", "geometric"],
     "--mode: level='geometric'"),
    (["rollout-is", "--logp-old", "0", "--logp-rollout", "0", "--level", "seq"],
     "argument --level: invalid choice"),
    (["rollout-is", "--logp-old", "0"], "the following arguments are required: --logp-rollout"),
])
def test_cli_errors_exit_2_naming_the_option(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    for fragment in (message,) if isinstance(message, str) else message:
        assert fragment in err, err


def test_cli_help_exits_0(capsys):
    assert main(["gae", "--help"]) == 0
    assert "--rewards" in capsys.readouterr().out


@pytest.mark.parametrize("quantity", ["clip", "ppo"])
def test_cli_help_says_one_of_rho_and_logp_is_required(quantity, capsys):
    assert main([quantity, "--help"]) == 0
    out = capsys.readouterr().out
    # the usage line shows the required choice, a heading says it in words
    assert "(--rho X1,X2,... | --logp X1,X2,...)" in " ".join(out.split())
    heading = next(line for line in out.splitlines() if "one of these is required" in line)
    section = out.split(heading, 1)[1].split("\n\n")[0]
    assert "--rho" in section and "--logp" in section
    # and neither is listed among the optional options
    options = out.split("options:", 1)[1].split(heading)[0]
    assert "--rho" not in options and "  --logp " not in options


def test_cli_gae_warns_about_a_reward_on_padding(capsys):
    # mask [1, 1, 0]: the reward 1 at t = 3 sits on padding. gae ignores it, so the rewards
    # seen are [0, 0]: delta_2 = 0 + 0 - 3/5 (V(s_3) = 0 after the last response token),
    # delta_1 = 0 + 3/5 - 1/2 = 1/10
    assert main(["gae", "--rewards", "0,0,1", "--values", "0.5,0.6,0.7", "--mask", "1,1,0",
                 "--exact"]) == 0
    captured = capsys.readouterr()
    assert ("warning: --rewards: entry 3 is 1, but --mask marks t = 3 as padding: padding is "
            "ignored, so this reward is dropped (the last response token is t = 2)"
            in captured.err), captured.err
    assert "-3/5" in captured.out and "3 (pad)" in captured.out
    # one line per dropped reward; zeros on padding and no mask give no warning
    assert main(["gae", "--rewards", "2,0,1", "--values", "0,0,0", "--mask", "0,1,0"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 2 and "entry 1 is 2" in err and "entry 3 is 1" in err
    for argv in (GAE_ARGS, ["gae", "--rewards", "0,1,0", "--values", "0,0,0", "--mask", "1,1,0"]):
        assert main(argv) == 0
        assert capsys.readouterr().err == ""


def test_cli_subprocess():
    cmd = [sys.executable, "-m", "ppo_numpy", "explain"] + GAE_ARGS + ["--exact"]
    ok = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "1863/4000" in ok.stdout
    bad = subprocess.run(cmd[:-1] + ["--values", "0.5"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert bad.returncode == 2
    assert "--values: expected 3 numbers to match --rewards, got 1" in bad.stderr


# ---------------------------------------------------------------- docs


def test_docs_are_up_to_date():
    # the page as generated on this machine: the same text, each float printed to 10
    # significant digits within one unit of its last digit (another CPU kind may round a
    # number that sits at a boundary the other way: tests._helpers.same_printout); exact
    # fractions and every word the same
    committed = (ROOT / "docs" / "hand-calculations.md").read_text()
    fresh = render_docs()
    assert fresh == committed or same_printout(fresh, committed), (
        f"docs/hand-calculations.md is out of date; regenerate it with `{REGENERATE}`")


def test_same_printout_allows_one_unit_of_the_last_digit_only():
    assert same_printout("A_1 = 0.4657500000, x 1.5e-12", "A_1 = 0.4657499999, x 1.4e-12")
    assert not same_printout("A_1 = 0.4657500000", "A_1 = 0.4657499998")   # two units
    assert not same_printout("A_1 = 0.4657500000", "A_1 = 0.4657600000")   # a changed value
    assert not same_printout("A_1 = 1863/4000", "A_1 = 1864/4000")         # fractions exactly
    assert not same_printout("A_1 = 0.46575", "A_2 = 0.46575")              # the words too
    assert last_digit("0.4657") == 1e-4 and last_digit("42") == 0.0
    assert last_digit("1.5e-12") == pytest.approx(1e-13, rel=1e-12)


def test_exact_table_with_nan_and_inf_at_padding():
    # padding may hold anything; its raw values are shown as given, without the float mark ~
    # delta_2 = 1 - 1/2 = 1/2, A_2 = 1/2; delta_1 = 1/2 - 1/2 = 0, A_1 = (19/20)(1/2) = 19/40
    tab = gae_table([F(0), F(1), float("nan")], [F(1, 2), F(1, 2), float("inf")],
                    mask=[1, 1, 0])
    assert_exact([tab.column("A_hat_t")[i] for i in (1, 2)], fr("1/2", "19/40"), "A_hat_t")
    pad = tab.text().splitlines()[4]
    assert pad.startswith("3 (pad)") and "nan" in pad and "inf" in pad and "~" not in pad


# ---------------------------------------------------------------- rollout importance weights

RIS = fr("-1", "-2", "-0.5"), fr("-1.8", "-1.5", "-0.4")


def test_rollout_is_table_token_truncate_exact_log_ratios():
    # log w = -1 + 9/5, -2 + 3/2, -1/2 + 2/5 = 4/5, -1/2, -1/10; w = e^0.8 > 2 is truncated
    tab = rollout_is_table(*RIS)
    assert_exact(tab.column("log w_t = logp_old_t - logp_rollout_t"), fr("4/5", "-1/2", "-1/10"))
    assert tab.column("case") == ["truncated to clip_max = 2", "inside", "inside"]
    w = tab.column("weight w_t")
    assert w[0] == 2 and w[1] == pytest.approx(math.exp(-0.5), rel=1e-15)
    assert w[2] == pytest.approx(math.exp(-0.1), rel=1e-15)
    assert tab.column("w_t = exp(log w_t)")[0] == pytest.approx(math.exp(0.8), rel=1e-15)


def test_rollout_is_table_mask_sequence_geometric_and_padding():
    tab = rollout_is_table(*RIS, mode="mask", clip_min=F("0.7"))
    assert tab.column("case") == ["masked: above clip_max = 2", "masked: below clip_min = 7/10",
                                  "inside"]
    assert tab.column("weight w_t")[:2] == [0, 0]
    # the sum of the log-ratios is 1/5: e^0.2 = 1.2214 > 1.1 at every token
    tab = rollout_is_table(*RIS, level="sequence", clip_max=F("1.1"))
    assert tab.column("exp(sum_t log w_t)") == [pytest.approx(math.exp(0.2), rel=1e-15)] * 3
    assert tab.column("weight w_t") == [F(11, 10)] * 3
    # the geometric mean e^(1/15) is in [1/2, 5]: the token ratios are kept, unclamped
    tab = rollout_is_table(*RIS, level="geometric", mode="mask", clip_min=F(1, 2), clip_max=5)
    assert tab.column("g = exp(mean_t log w_t)")[0] == pytest.approx(math.exp(1 / 15),
                                                                     rel=1e-15)
    assert tab.column("weight w_t")[0] == pytest.approx(math.exp(0.8), rel=1e-15)
    # padding: the third token is not read; the sum is 3/10 over the two others
    tab = rollout_is_table(*RIS, level="sequence", clip_max=None, mask=[1, 1, 0])
    assert tab.column("weight w_t")[:2] == [pytest.approx(math.exp(0.3), rel=1e-15)] * 2
    assert tab.rows[2][0] == "3 (pad)"


def test_cli_rollout_is(capsys):
    assert main(["rollout-is", "--logp-old", "-1,-2,-0.5", "--logp-rollout", "-1.8,-1.5,-0.4",
                 "--level", "sequence", "--mode", "mask", "--clip-max", "1.2", "--exact"]) == 0
    out = capsys.readouterr().out
    # e^0.2 = 1.2214 > 1.2: masked at every token
    assert out.count("masked: above clip_max = 6/5") == 3 and "~1.221402758" in out
    assert main(["rollout-is", "--logp-old", "0", "--logp-rollout", "-30", "--clip-max", "none",
                 "--log-ratio-bound", "20"]) == 0
    out = capsys.readouterr().out
    assert f"{math.exp(20):.10g}" in out and "clamped to [-20, 20]" in out
