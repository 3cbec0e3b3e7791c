"""``explain kl-gradient``: the KL term's gradient tables against hand calculations.

The running example of docs/derivations.md section 12: pi_theta = (1/4, 3/4), pi_ref = (1/2,
1/2), and a sampler pi_old = (1/3, 2/3). Every expected number is worked out here (exact
fractions, or the float formula written out), not taken from the library.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction as F

import pytest

from ppo_numpy.explain.kl_gradient import kl_gradient_tables
from ppo_numpy.programs.explain import main

PI, REF, OLD = [F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)], [F(1, 3), F(2, 3)]
D = [math.log(0.5), math.log(1.5)]               # d = log(pi / pi_ref)
KL = 0.25 * D[0] + 0.75 * D[1]                    # KL(pi || pi_ref)
GRAD_REV = 0.25 * D[0] * 0.75 + 0.75 * D[1] * -0.25  # sum_y pi d (e_y - pi), z[1]


def by_row(table, placement, estimator, form):
    (row,) = [r for r in table.rows if r[:3] == (placement, estimator, form)]
    return dict(zip(table.columns, row))


def test_step_1_tokens_exact():
    tabs = kl_gradient_tables(PI, REF, OLD)
    assert len(tabs) == 5 and all(t.exact for t in tabs)
    tok = tabs[0]
    assert tok.column("y") == [1, 2]
    assert tok.column("r = pi_ref / pi") == [F(2), F(2, 3)]
    assert tok.column("rho = pi / pi_old") == [F(3, 4), F(9, 8)]
    assert tok.column("e_y - pi: z[1]") == [F(3, 4), F(-1, 4)]
    assert tok.column("e_y - pi: z[2]") == [F(-3, 4), F(1, 4)]
    for got, want in zip(tok.column("d = log pi - log pi_ref"), D):
        assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-15)


def test_step_2_estimates():
    est = kl_gradient_tables(PI, REF)[1]
    assert est.column("k3' = 1 - r") == [F(-1), F(1, 3)]
    assert est.column("k1' = 1") == [F(1), F(1)]
    assert est.column("abs' = sign(d)") == [-1, 1]
    for got, d in zip(est.column("k3 = (r - 1) + d"), D):
        assert math.isclose(got, math.exp(-d) - 1 + d, rel_tol=1e-14)
    for got, d in zip(est.column("k2 = d^2 / 2"), D):
        assert math.isclose(got, d * d / 2, rel_tol=1e-15)


def test_step_3_targets():
    tgt = kl_gradient_tables(PI, REF)[2]
    rev, fwd = tgt.rows
    assert math.isclose(rev[1], KL, rel_tol=1e-15)
    assert math.isclose(rev[2], GRAD_REV, rel_tol=1e-14) and math.isclose(rev[3], -GRAD_REV,
                                                                          rel_tol=1e-14)
    # KL(ref || pi) = sum ref log(ref / pi) = (1/2) log 2 + (1/2) log(2/3); gradient pi - ref
    assert math.isclose(fwd[1], 0.5 * math.log(2) + 0.5 * math.log(2 / 3), rel_tol=1e-15)
    assert fwd[2:] == (F(-1, 4), F(1, 4))


def test_step_4_on_policy_by_hand():
    on = kl_gradient_tables(PI, REF)[3]
    assert len(on.rows) == 4 * 4 + 4
    k3 = by_row(on, "loss", "k3", "plain")
    assert (k3["c(1)"], k3["c(2)"]) == (F(-1), F(1, 3))
    # (1/4)(-1)(3/4) + (3/4)(1/3)(-1/4) = -1/4
    assert (k3["E[d/dz[1]]"], k3["E[d/dz[2]]"]) == (F(-1, 4), F(1, 4))
    assert k3["gradient of"] == "KL(ref||pi)" and k3["gap to grad KL(ref||pi)"] == 0
    assert math.isclose(k3["gap to grad KL(pi||ref)"], abs(-0.25 - GRAD_REV), rel_tol=1e-13)
    assert math.isclose(k3["E[value]"], KL, rel_tol=1e-14)
    for estimator, form in (("k3", "ratio"), ("k3", "straight_through"),
                            ("k3", "importance"), ("k2", "plain")):
        r = by_row(on, "loss", estimator, form)
        assert math.isclose(r["c(1)"], D[0], rel_tol=1e-14)
        assert math.isclose(r["E[d/dz[1]]"], GRAD_REV, rel_tol=1e-14)
        assert r["gradient of"] == "KL(pi||ref)", (estimator, form)
    k1 = by_row(on, "loss", "k1", "plain")
    assert (k1["E[d/dz[1]]"], k1["gradient of"]) == (0, "neither")
    reward = by_row(on, "reward", "k1", "-")
    assert reward["gradient of"] == "KL(pi||ref)"
    assert math.isclose(reward["E[d/dz[1]]"], GRAD_REV, rel_tol=1e-14)


def test_step_5_off_policy_by_hand():
    off = kl_gradient_tables(PI, REF, OLD)[4]
    k3 = by_row(off, "loss", "k3", "plain")
    # (1/3)(-1)(3/4) + (2/3)(1/3)(-1/4) = -11/36
    assert (k3["E[d/dz[1]]"], k3["gradient of"]) == (F(-11, 36), "neither")
    ratio = by_row(off, "loss", "k3", "ratio")
    # c = rho d: (3/4) log(1/2), (9/8) log(3/2)
    assert math.isclose(ratio["c(1)"], 0.75 * D[0], rel_tol=1e-14)
    assert math.isclose(ratio["c(2)"], 1.125 * D[1], rel_tol=1e-14)
    assert ratio["gradient of"] == "KL(pi||ref)"
    plus = by_row(off, "loss", "k3", "straight_through")
    # (1/3) d_1 (3/4) + (2/3) d_2 (-1/4)
    assert math.isclose(plus["E[d/dz[1]]"], D[0] / 4 - D[1] / 6, rel_tol=1e-14)
    assert plus["gradient of"] == "neither"
    assert by_row(off, "loss", "k3", "importance")["gradient of"] == "KL(pi||ref)"
    # a bound of 1 cuts rho = 9/8 to 1: (1/3)(3/4) d_1 (3/4) + (2/3)(1) d_2 (-1/4)
    bounded = by_row(kl_gradient_tables(PI, REF, OLD, bound=1)[4], "loss", "k3", "importance")
    assert math.isclose(bounded["E[d/dz[1]]"], 3 / 16 * D[0] - D[1] / 6, rel_tol=1e-14)
    assert bounded["gradient of"] == "neither"


def test_float_tables_are_not_marked():
    tabs = kl_gradient_tables([0.25, 0.75], [0.5, 0.5])
    assert not any(t.exact for t in tabs)
    assert not re.search(r"~[-\d]", tabs[3].text())
    assert by_row(tabs[3], "loss", "k3", "plain")["gradient of"] == "KL(ref||pi)"


def test_sequences_are_refused():
    with pytest.raises(ValueError, match="pi: explain kl-gradient takes one categorical"):
        kl_gradient_tables([PI, [REF, REF]], [REF, [REF, REF]])


def test_cli_exact_and_markdown(capsys):
    argv = ["kl-gradient", "--pi", "1/4,3/4", "--pi-ref", "1/2,1/2", "--pi-old", "1/3,2/3",
            "--exact"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "-11/36" in out and "~-0.2059898041" in out and "Step 5" in out
    assert "verl 0.9.1 kl_loss_type=k3+" in out
    assert main(argv + ["--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| `placement` | `estimator` |" in md
    # floats without --exact, no pi_old: four tables, no ~
    assert main(["kl-gradient", "--pi", "0.25,0.75", "--pi-ref", "0.5,0.5"]) == 0
    out = capsys.readouterr().out
    assert "Step 5:" not in out and not re.search(r"~[-\d]", out) and "-0.25" in out
    assert main(["kl-gradient", "--pi", "1/4,3/4", "--pi-ref", "1/2,1/2", "--pi-old",
                 "1/3,2/3", "--bound", "none"]) == 0
    assert "min(rho, none) d" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--pi", "0.3,0.6", "--pi-ref", "0.5,0.5"], "--pi: the probabilities sum to 0.9, not 1"),
    (["--pi", "1/4,3/4", "--pi-ref", "1,0", "--exact"],
     "--pi-ref: probability 0 of token 2: every probability must be > 0"),
    (["--pi", "1/4,3/4", "--pi-ref", "1/2,1/2", "--pi-old", "1/2,1/3", "--exact"],
     "--pi-old: the probabilities sum to 5/6, not 1"),
    (["--pi", "1/4,3/4", "--pi-ref", "1/2,1/2", "--bound", "0.5"], "--bound: must be >= 1"),
    (["--pi", "1/4,3/4", "--pi-ref", "1/3,1/3,1/3"],
     "--pi-ref: expected 2 numbers to match --pi, got 3"),
    (["--pi", "1/4,3/4", "--pi-ref", "1/2,1/2", "--mask", "1,1"], "unrecognized arguments"),
    (["--pi", "a,b", "--pi-ref", "1/2,1/2"], "--pi: 'a' (entry 1 of 2) is not a number"),
    (["--pi-ref", "1/2,1/2"], "the following arguments are required: --pi"),
])
def test_cli_errors_exit_2_naming_the_option(argv, message, capsys):
    assert main(["kl-gradient", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err, err
