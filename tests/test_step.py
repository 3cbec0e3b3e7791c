"""One optimizer step across ranks and micro-batches (ppo_numpy.step).

* the layout helper and the layout's checks (each error names the entry);
* every normaliser's weight per token by hand, in Fractions, on small uneven layouts, and
  micro-batch losses by hand;
* ``step/dlogp`` against centered finite differences of the summed micro-batch losses;
* without a layout, the one-batch call, bit for bit;
* properties over random layouts: the global token mean keeps the full-batch gradient
  under any layout; TRL's ``grpo`` rule does when the micro-batches hold equal numbers of
  rows; its ``bnpo`` rule exactly when they hold equal numbers of tokens.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppo_numpy import gradcheck, policy_loss_and_grad
from ppo_numpy.step import (
    Normaliser,
    check_layout,
    policy_step,
    step_layout,
    step_outputs,
    step_weights,
)
from tests._helpers import assert_exact, assert_same, show

# ---- the layout ----


def test_step_layout_deals_rows_by_hand():
    assert step_layout(5) == [[[0, 1, 2, 3, 4]]]
    assert step_layout(5, ranks=2, micro_batches=2) == [[[0, 1], [2]], [[3], [4]]]
    assert step_layout(5, ranks=2, micro_batches=2, deal="round-robin") == [[[0, 2], [4]],
                                                                            [[1], [3]]]
    assert step_layout(8, 2, 2) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    assert step_layout(7, 1, 3) == [[[0, 1, 2], [3, 4], [5, 6]]]
    for deal in ("contiguous", "round-robin"):
        for B, P, K in [(4, 2, 2), (9, 2, 3), (13, 3, 2)]:
            lay = step_layout(B, P, K, deal)
            assert [len(rank) for rank in lay] == [K] * P
            assert sorted(i for rank in lay for mb in rank for i in mb) == list(range(B))
            assert check_layout(lay, B) is not None


@pytest.mark.parametrize("call, error, match", [
    (lambda: step_layout(3, 2, 2), ValueError, r"n_rows: 2 ranks x 2 micro-batches need at "
                                               r"least 4 rows .*got 3"),
    (lambda: step_layout(4, 0), ValueError, "ranks: must be an integer >= 1"),
    (lambda: step_layout(4, 2, 1.0), TypeError, "micro_batches: must be an integer"),
    (lambda: step_layout(4, deal="random"), ValueError, "deal: unknown deal 'random'"),
])
def test_step_layout_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("layout, error, match", [
    ([[[0, 1], [2]]], ValueError, r"layout: rows 3 of the batch's 4 are in no micro-batch"),
    ([[[0, 1]], [[2, 1, 3]]], ValueError,
     r"layout\[1\]\[0\]\[1\]: row 1 is repeated \(also at layout\[0\]\[0\]\[1\]\)"),
    ([[[0, 1], []], [[2, 3]]], ValueError, r"layout\[0\]\[1\]: an empty micro-batch"),
    ([[[0, 1, 2, 3]], []], ValueError, r"layout\[1\]: rank 1 has no micro-batch"),
    ([], ValueError, "layout: no rank"),
    ([[[0, 1, 2, 4]]], ValueError,
     r"layout\[0\]\[0\]\[3\]: row 4 is out of range for a batch of 4 rows"),
    ([[[0, 1, 2, -1]]], ValueError, r"layout\[0\]\[0\]\[3\]: row -1 is out of range"),
    ([[[0, 1.0, 2, 3]]], TypeError, r"layout\[0\]\[0\]\[1\]: expected a row index \(an int\), "
                                    r"got float 1.0"),
    ([[[0, True, 2, 3]]], TypeError, r"layout\[0\]\[0\]\[1\]: expected a row index"),
    ([[[0, 1], 2, [3]]], TypeError, r"layout\[0\]\[1\]: expected a list of row indices, "
                                    "got int"),
    # a rank given as a flat list of rows: its first micro-batch is an int
    ([[0, 1, 2, 3]], TypeError, r"layout\[0\]\[0\]: expected a list of row indices, got int"),
    ([[[0, 1, 2, 3]], 4], TypeError, r"layout\[1\]: expected a list of micro-batches"),
    ("0123", TypeError, "layout: expected a list over ranks"),
    ([[np.array([0.0, 1.0]), [2, 3]]], TypeError,
     r"layout\[0\]\[0\]: expected a 1-D array of row indices"),
])
def test_check_layout_names_the_entry(layout, error, match):
    with pytest.raises(error, match=match):
        check_layout(layout, 4)
    # the same message from the public functions that take a layout
    with pytest.raises(error, match=match):
        step_weights(np.ones((4, 2)), layout)


def test_check_layout_accepts_integer_arrays_and_copies():
    given_rows = np.array([2, 0])
    lay = check_layout([[given_rows, [1]], [np.array([3], dtype=np.uint8)]], 4)
    assert [[mb.tolist() for mb in rank] for rank in lay] == [[[2, 0], [1]], [[3]]]
    lay[0][0][0] = 7
    assert given_rows.tolist() == [2, 0]  # a new array, the input untouched
    assert [mb.tolist() for mb in check_layout(None, 3)[0]] == [[0, 1, 2]]


# ---- the normalisers' weights by hand ----

# Five rows with 4, 1, 2, 0 and 5 response tokens, padded to T = 5. N = 12 tokens, B = 5
# rows, B' = 4 of them with a token.
LENGTHS = [4, 1, 2, 0, 5]
T = 5
MASK = (np.arange(T)[None, :] < np.array(LENGTHS)[:, None]).astype(int)
# two ranks of two micro-batches: rank 0 {0, 1} (5 tokens) and {2} (2); rank 1 {3} (0)
# and {4} (5): P = 2, K = 2
UNEVEN = [[[0, 1], [2]], [[3], [4]]]
# rank 0 {0} (4 tokens) and {1, 2} (3); rank 1 {3, 4} (5): K_0 = 2, K_1 = 1
RAGGED = [[[0], [1, 2]], [[3, 4]]]
EPS = F(1, 10**8)  # verl's and OpenRLHF's 1e-8, as written

# the weight of each row's tokens in the applied gradient, 1 / (P d_i D_{r,k}), worked out
# from the conventions' formulas (module docstring of ppo_numpy.step.normalisers); the row
# without tokens weighs 0 whatever its divisor
HAND = [
    # the global token mean: 1/N for every token
    (Normaliser("global"), UNEVEN, [F(1, 12)] * 5),
    # the global sequence mean of token means: 1 / (B' n_i)
    (Normaliser("global", "seq-mean-token-mean"), UNEVEN,
     [F(1, 16), F(1, 4), F(1, 8), 0, F(1, 20)]),
    # the global sequence mean of token sums: 1 / B'
    (Normaliser("global", "seq-mean-token-sum"), RAGGED, [F(1, 4)] * 5),
    # each micro-batch's token mean / K_r, ranks averaged: 1 / (P K_r N_{r,k})
    (Normaliser("micro-batch-mean"), RAGGED,
     [F(1, 2 * 2 * 4), F(1, 2 * 2 * 3), F(1, 2 * 2 * 3), 0, F(1, 2 * 1 * 5)]),
    # TRL grpo: 1 / (P K B_{r,k} n_i)
    (Normaliser("trl", "grpo"), UNEVEN,
     [F(1, 4 * 2 * 4), F(1, 4 * 2 * 1), F(1, 4 * 1 * 2), 0, F(1, 4 * 1 * 5)]),
    (Normaliser("trl", "sapo"), UNEVEN,
     [F(1, 32), F(1, 8), F(1, 8), 0, F(1, 20)]),
    # TRL bnpo: 1 / (P K N_{r,k})
    (Normaliser("trl", "bnpo"), UNEVEN, [F(1, 20), F(1, 20), F(1, 8), 0, F(1, 20)]),
    # TRL dr_grpo: 1 / (P K B_{r,k} L), L = T = 5, or 3 given
    (Normaliser("trl", "dr_grpo"), UNEVEN, [F(1, 40), F(1, 40), F(1, 20), 0, F(1, 20)]),
    (Normaliser("trl", "dr_grpo", norm=3), UNEVEN,
     [F(1, 24), F(1, 24), F(1, 12), 0, F(1, 12)]),
    # TRL luspo: 1 / (P K B_{r,k})
    (Normaliser("trl", "luspo"), UNEVEN, [F(1, 8), F(1, 8), F(1, 4), 0, F(1, 4)]),
    # TRL dapo, S = K: N_gen / P x K / S = 12 / 2: 1 / (P 6) = 1/12
    (Normaliser("trl", "dapo"), UNEVEN, [F(1, 12)] * 5),
    (Normaliser("trl", "cispo", steps_per_generation=2), UNEVEN, [F(1, 12)] * 5),
    # S = 1: two generation batches, micro-batches 0 (rows 0, 1, 3: 5 tokens) and 1 (rows 2,
    # 4: 7 tokens); D = N_g / 2 x 2 / 1 = N_g: 1 / (2 N_g)
    (Normaliser("trl", "vespo", steps_per_generation=1), UNEVEN,
     [F(1, 10), F(1, 10), F(1, 14), 0, F(1, 14)]),
    # S = 4 > K: the generation batch (30 tokens) spans two steps; D = 30/2 x 2/4 = 15/2
    (Normaliser("trl", "dapo", steps_per_generation=4, num_items_in_batch=30), UNEVEN,
     [F(1, 15)] * 5),
    # verl: N / P, 1 / P, GBS / P (GBS = 5 rows, or 8 given), x loss_scale_factor (T, or 2)
    (Normaliser("verl"), RAGGED, [F(1, 12)] * 5),
    (Normaliser("verl", "token-sum"), UNEVEN, [1] * 5),
    (Normaliser("verl", "seq-mean-token-sum"), UNEVEN, [F(1, 5)] * 5),
    (Normaliser("verl", "seq-mean-token-sum", global_batch_size=8), UNEVEN, [F(1, 8)] * 5),
    (Normaliser("verl", "seq-mean-token-sum-norm"), UNEVEN, [F(1, 25)] * 5),
    (Normaliser("verl", "seq-mean-token-sum-norm", norm=2), UNEVEN, [F(1, 10)] * 5),
    # verl seq-mean-token-mean: 1 / ((n_i + 1e-8) GBS), GBS counting the empty row
    (Normaliser("verl", "seq-mean-token-mean"), UNEVEN,
     [1 / ((n + EPS) * 5) if n else 0 for n in LENGTHS]),
    # OpenRLHF: N / P; 1 / ((n_i + 1e-8) B'), B' only the rows with a token
    (Normaliser("openrlhf"), RAGGED, [F(1, 12)] * 5),
    (Normaliser("openrlhf", "seq-mean-token-mean"), UNEVEN,
     [1 / ((n + EPS) * 4) if n else 0 for n in LENGTHS]),
]


def _label(case):
    norm, layout, _ = case
    extra = ",".join(f"{k}={getattr(norm, k)}" for k in ("norm", "steps_per_generation",
                                                         "num_items_in_batch",
                                                         "global_batch_size")
                     if getattr(norm, k) is not None)
    return f"{norm.name}-{norm.mode}" + (f"-{extra}" if extra else "") + (
        "-ragged" if layout is RAGGED else "")


@pytest.mark.parametrize("case", HAND, ids=[_label(c) for c in HAND])
def test_weights_by_hand(case):
    norm, layout, rows = case
    expected = np.array([[F(r) * int(m) for m in row] for r, row in zip(rows, MASK)],
                        dtype=object)
    w = step_weights(MASK, layout, norm, exact=True)
    assert_exact(w, expected, normaliser=norm, layout=layout)
    # float64: the exact weights to rounding (a few divisions and products of counts)
    wf = step_weights(MASK, layout, norm)
    assert wf.dtype == np.float64
    np.testing.assert_allclose(wf, expected.astype(float), rtol=4 * 2.0**-52, atol=0,
                               err_msg=show(normaliser=norm, layout=layout))


def test_full_batch_flags_by_hand():
    # which of the hand cases keep the full-batch gradient, and by how much the others
    # deviate: max |w / w_full - 1| over the tokens
    def flags(norm, layout):
        out = step_outputs(np.zeros((5, T)), np.zeros((5, T)), MASK, layout, norm)
        return out["step/full_batch"], out["step/deviation"]

    # (the deviations below are the exact ratios' floats: float(F(a, b) - 1))
    assert flags(Normaliser("global"), UNEVEN) == (True, 0.0)
    # grpo alone weighs 1 / (5 n_i); in the step 1/32, 1/8, 1/8, 1/20 against 1/20, 1/5,
    # 1/10, 1/25: ratios 5/8, 5/8, 5/4, 5/4
    assert flags(Normaliser("trl", "grpo"), UNEVEN) == (False, 0.375)
    # bnpo alone is the token mean 1/12; in the step 1/20 and 1/8: ratios 3/5 and 3/2
    assert flags(Normaliser("trl", "bnpo"), UNEVEN) == (False, 0.5)
    # dapo: the global token mean unless the generation batch is not the step
    assert flags(Normaliser("trl", "dapo"), UNEVEN) == (True, 0.0)
    # S = 1: 1/10 and 1/14 against 1/12: ratios 6/5 and 6/7
    assert flags(Normaliser("trl", "dapo", steps_per_generation=1), UNEVEN) == (
        False, float(F(1, 5)))
    # S = 4 with a generation batch of twice the step's 12 tokens: 1/12 again
    assert flags(Normaliser("trl", "dapo", steps_per_generation=4, num_items_in_batch=24),
                 UNEVEN) == (True, 0.0)
    # the micro-batch means on RAGGED: 1/16, 1/12, 1/12, 1/10 against 1/12: 3/4 ... 6/5
    assert flags(Normaliser("micro-batch-mean"), RAGGED) == (False, 0.25)
    for norm in (Normaliser("verl", "seq-mean-token-mean"), Normaliser("openrlhf"),
                 Normaliser("verl", "token-sum"), Normaliser("global", "seq-mean-token-mean")):
        assert flags(norm, UNEVEN) == (True, 0.0), norm


def test_micro_batch_losses_by_hand():
    # l_{i,t} = t + 1 on the response tokens: row sums 10, 1, 3, 0, 15
    terms = np.array([[F(t + 1) * int(m) for t, m in enumerate(row)] for row in MASK],
                     dtype=object)
    zeros = np.zeros((5, T), dtype=object) + F(0)

    def losses(norm, layout=UNEVEN):
        return step_outputs(terms, zeros, MASK, layout, norm)["step/losses"]

    # grpo: ((10/4 + 1/1) / 2) / 2, (3/2) / 2, 0, (15/5) / 2
    assert_exact(losses(Normaliser("trl", "grpo")), [F(7, 8), F(3, 4), 0, F(3, 2)])
    # the global token mean: each micro-batch's sum / (12 / 2)
    assert_exact(losses(Normaliser("global")), [F(11, 6), F(1, 2), 0, F(5, 2)])
    # verl seq-mean-token-mean: sum_i (sum_t l) / (n_i + 1e-8) / (5 / 2)
    assert_exact(losses(Normaliser("verl", "seq-mean-token-mean")),
                 [(10 / (4 + EPS) + 1 / (1 + EPS)) * F(2, 5), 3 / (2 + EPS) * F(2, 5), 0,
                  15 / (5 + EPS) * F(2, 5)])
    # micro-batch-mean on RAGGED: 10/4 / 2, (1 + 3)/3 / 2, 15/5 / 1
    assert_exact(losses(Normaliser("micro-batch-mean"), RAGGED), [F(5, 4), F(2, 3), F(3)])


# ---- the policy loss's step: finite differences, the one-batch call ----

def _policy_inputs(rng, B=6, T_=7, eps=0.2):
    lengths = np.array([7, 1, 4, 0, 2, 6])[:B]
    m = (np.arange(T_)[None, :] < lengths[:, None]).astype(float)
    log_ratio = rng.uniform(-0.5, 0.5, (B, T_))
    # away from the clip's kinks, where the derivative jumps
    near = np.abs(np.abs(log_ratio) - np.log1p(eps)) < 5e-3
    log_ratio[near] += 2e-2
    logp_old = rng.uniform(-3.0, -0.1, (B, T_))
    A = rng.normal(0.0, 1.0, (B, T_))
    logp_ref = logp_old + rng.normal(0.0, 0.2, (B, T_))
    return logp_old + log_ratio, logp_old, A, m, logp_ref


FD_CASES = [
    (Normaliser("global"), {}),
    (Normaliser("global", "seq-mean-token-mean"), {"kl_coef": 0.1}),
    (Normaliser("micro-batch-mean"), {}),
    (Normaliser("trl", "grpo"), {"kl_coef": 0.05, "epsilon_high": 0.28}),
    (Normaliser("trl", "dapo", steps_per_generation=1), {"importance_level": "sequence"}),
    (Normaliser("verl", "seq-mean-token-mean"), {"loss_type": "sapo"}),
    (Normaliser("openrlhf", "seq-mean-token-mean"), {"dual_clip": 3.0}),
]


@pytest.mark.parametrize("norm, options", FD_CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_step_dlogp_matches_finite_differences(norm, options):
    rng = np.random.default_rng(37)
    logp, logp_old, A, m, logp_ref = _policy_inputs(rng)
    layout = [[[0, 5], [2]], [[3, 1], [4]]]  # uneven: 13, 4, 1 and 2 tokens
    if norm.name == "micro-batch-mean":
        layout = [[[0, 5], [2]], [[3, 1, 4]]]  # no micro-batch without a token
    P = len(layout)

    def summed(p):
        # each rank's backward adds its micro-batches; the ranks are then averaged
        out = policy_step(p["logp"], logp_old, A, m, layout, norm, logp_ref=logp_ref,
                          **options)
        return float(out["step/losses"].sum()) / P

    out = policy_step(logp, logp_old, A, m, layout, norm, logp_ref=logp_ref, **options)
    report = gradcheck(summed, {"logp": logp}, {"logp": out["step/dlogp"]})
    assert report["logp"].close, str(report["logp"])
    assert np.all(out["step/dlogp"][m == 0] == 0.0)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                 "grpo", "dr_grpo", "luspo"])
def test_without_a_layout_the_one_batch_call_bit_for_bit(agg):
    # exact equality: the step's forward and backward are the one-batch call's functions on
    # the same rows with the same divisors (D / 1 is D), the same operations in the same order
    rng = np.random.default_rng(1)
    logp, logp_old, A, m, logp_ref = _policy_inputs(rng)
    loss, _, dlogp = policy_loss_and_grad(logp, logp_old, A, m, agg=agg, kl_coef=0.1,
                                          logp_ref=logp_ref)
    out = policy_step(logp, logp_old, A, m, None, Normaliser("global", agg), kl_coef=0.1,
                      logp_ref=logp_ref)
    assert_same(out["step/losses"], [loss])
    assert_same(out["step/dlogp"], dlogp)
    assert out["step/full_batch"] and out["step/deviation"] == 0.0
    # a (T,) input is one row
    one = policy_step(logp[0], logp_old[0], A[0], m[0])
    assert one["step/dlogp"].shape == (7,)
    assert_same(one["step/dlogp"], policy_loss_and_grad(logp[0], logp_old[0], A[0], m[0])[2])


def test_step_outputs_of_the_policy_terms_agree_with_policy_step():
    # the generic function on the per-token terms and the gradient of their row sums
    # (the one-batch call with the token-sum weights, dapo with norm 1) against the
    # micro-batch kernels: the same numbers to rounding (relative 1e-14 of the largest)
    rng = np.random.default_rng(2)
    logp, logp_old, A, m, _ = _policy_inputs(rng)
    _, _, dterms = policy_loss_and_grad(logp, logp_old, A, m, agg="dapo", norm=1)
    terms = np.zeros_like(logp)
    for i, j in zip(*np.nonzero(m)):
        terms[i, j] = policy_loss_and_grad(logp[i:i + 1, j:j + 1], logp_old[i:i + 1, j:j + 1],
                                           A[i:i + 1, j:j + 1], agg="dapo", norm=1)[0]
    layout = step_layout(6, 2, 2, "round-robin")
    for norm in (Normaliser("trl", "grpo"), Normaliser("verl", "seq-mean-token-sum"),
                 Normaliser("global", "seq-mean-token-mean")):
        a = step_outputs(terms, dterms, m, layout, norm)
        b = policy_step(logp, logp_old, A, m, layout, norm)
        for key in ("step/losses", "step/dlogp"):
            scale = np.abs(b[key]).max()
            np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-14 * scale,
                                       err_msg=f"{norm} {key}")
        assert a["step/full_batch"] == b["step/full_batch"]


# ---- properties over random layouts ----

@st.composite
def layouts(draw, max_rows=9, equal_rows=False):
    """A batch's lengths and a layout of its rows: P ranks of K micro-batches (the same K on
    every rank, as TRL), rows shuffled; ``equal_rows``: every micro-batch as many rows."""
    P = draw(st.integers(1, 3))
    K = draw(st.integers(1, 3))
    if equal_rows:
        per = draw(st.integers(1, 3))
        sizes = [per] * (P * K)
    else:
        sizes = draw(st.lists(st.integers(1, 3), min_size=P * K, max_size=P * K))
    B = sum(sizes)
    lengths = draw(st.lists(st.integers(0, 6), min_size=B, max_size=B))
    if not any(lengths):
        lengths[0] = 1
    order = draw(st.permutations(list(range(B))))
    cuts = np.cumsum([0] + sizes)
    mbs = [list(order[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    return np.array(lengths), [mbs[r * K:(r + 1) * K] for r in range(P)]


def _mask_of(lengths, T_=6):
    return (np.arange(T_)[None, :] < lengths[:, None]).astype(float)


@settings(max_examples=60, deadline=None)
@given(layouts(), st.integers(0, 2**32 - 1))
def test_the_global_token_mean_is_the_same_under_any_layout(case, seed):
    lengths, layout = case
    m = _mask_of(lengths)
    rng = np.random.default_rng(seed)
    logp_old = rng.uniform(-2, -0.1, m.shape)
    logp, A = logp_old + rng.uniform(-0.3, 0.3, m.shape), rng.normal(size=m.shape)
    out = policy_step(logp, logp_old, A, m, layout)
    assert out["step/full_batch"] and out["step/deviation"] == 0.0
    one = policy_step(logp, logp_old, A, m)
    # the weights differ from the one batch's only by rounding (1/N against 1/(P (N/P)))
    np.testing.assert_allclose(out["step/dlogp"], one["step/dlogp"], rtol=4 * 2.0**-52,
                               atol=0, err_msg=show(lengths=lengths, layout=layout))
    # each micro-batch's loss is P times its share: they add to P times the one-batch loss
    P = len(layout)
    np.testing.assert_allclose(out["step/losses"].sum() / P, one["step/losses"][0],
                               rtol=1e-12, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(layouts(equal_rows=True))
def test_trl_grpo_keeps_the_full_batch_gradient_with_equal_row_counts(case):
    lengths, layout = case
    m = _mask_of(lengths)
    w = step_weights(m, layout, Normaliser("trl", "grpo"), exact=True)
    w_full = step_weights(m, None, Normaliser("trl", "grpo"), exact=True)
    assert (w == w_full).all(), show(lengths=lengths, layout=layout)


@settings(max_examples=80, deadline=None)
@given(layouts())
def test_trl_bnpo_keeps_it_exactly_when_token_counts_are_equal(case):
    lengths, layout = case
    m = _mask_of(lengths)
    tokens = [int(lengths[mb].sum()) for rank in layout for mb in rank]
    out = step_outputs(np.zeros(m.shape), np.zeros(m.shape), m, layout,
                       Normaliser("trl", "bnpo"))
    assert out["step/full_batch"] == (len(set(tokens)) == 1), show(tokens=tokens)
    assert (out["step/deviation"] > 0) == (len(set(tokens)) > 1)


def test_trl_grpo_is_not_invariant_with_unequal_row_counts():
    # three rows of 2 tokens, micro-batches of one row and of two: the lone row weighs
    # 1 / (K B_{0,0} n) = 1/(2 x 1 x 2) in the step against 1 / (B n) = 1/(3 x 2) alone
    m = _mask_of(np.array([2, 2, 2]))
    out = step_outputs(np.zeros(m.shape), np.zeros(m.shape), m, [[[0], [1, 2]]],
                       Normaliser("trl", "grpo"))
    assert not out["step/full_batch"] and out["step/deviation"] == 0.5


# ---- bad input ----

@pytest.mark.parametrize("make, error, match", [
    (lambda: Normaliser("deepspeed"), ValueError, "name: unknown normaliser 'deepspeed'"),
    (lambda: Normaliser("trl", "token-mean"), ValueError,
     "mode: unknown TRL loss_type 'token-mean'"),
    (lambda: Normaliser("verl", "grpo"), ValueError, "mode: unknown verl loss_agg_mode"),
    (lambda: Normaliser("openrlhf", "seq-mean-token-sum"), ValueError,
     "mode: unknown OpenRLHF reduction"),
    (lambda: Normaliser("global", "token-mean", norm=3), ValueError, "norm: only modes"),
    (lambda: Normaliser("trl", "grpo", norm=3), ValueError,
     "norm: TRL divides by max_completion_length only in loss_type 'dr_grpo'"),
    (lambda: Normaliser("trl", "grpo", steps_per_generation=2), ValueError,
     "steps_per_generation: only TRL's num-items rule"),
    (lambda: Normaliser("global", num_items_in_batch=2), ValueError, "num_items_in_batch: only"),
    (lambda: Normaliser("verl", global_batch_size=4), ValueError,
     "global_batch_size: only verl's sequence modes"),
    (lambda: Normaliser("trl", steps_per_generation=0), ValueError,
     "steps_per_generation: must be an integer >= 1"),
    (lambda: Normaliser("verl", "seq-mean-token-sum-norm", norm=-1.0), ValueError, "norm"),
])
def test_normaliser_bad_input(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("norm, layout, match", [
    (Normaliser("micro-batch-mean"), UNEVEN,
     r"layout\[1\]\[0\]: a micro-batch without a response token: its token-mean alone is "
     "0/0"),
    (Normaliser("trl", "grpo"), RAGGED,
     "layout: TRL runs the same number of micro-batches on every rank .* got 2, 1"),
    (Normaliser("trl", "dapo", steps_per_generation=4), UNEVEN,
     "num_items_in_batch: with steps_per_generation=4 > 2 .* spans 2 optimizer steps"),
    (Normaliser("trl", "dapo", steps_per_generation=3), UNEVEN,
     "steps_per_generation: 3 is not a multiple of the step's 2"),
    (Normaliser("trl", "dapo", steps_per_generation=1, num_items_in_batch=12), UNEVEN,
     "num_items_in_batch: with steps_per_generation=1 <= 2 .* come from the layout"),
])
def test_a_layout_the_normaliser_cannot_take(norm, layout, match):
    with pytest.raises(ValueError, match=match):
        step_weights(MASK, layout, norm)


def test_policy_step_bad_input_and_inputs_untouched():
    rng = np.random.default_rng(3)
    logp, logp_old, A, m, logp_ref = _policy_inputs(rng)
    with pytest.raises(ValueError, match="agg: a step aggregates by its normaliser"):
        policy_step(logp, logp_old, A, m, agg="grpo")
    with pytest.raises(ValueError, match="kl_agg: a step aggregates by its normaliser"):
        policy_step(logp, logp_old, A, m, kl_coef=0.1, logp_ref=logp_ref, kl_agg="token-mean")
    with pytest.raises(TypeError, match="normaliser: expected a Normaliser or one of"):
        policy_step(logp, logp_old, A, m, normaliser=3)
    with pytest.raises(ValueError, match="mask: expected shape"):
        step_weights([1, 1, 0])
    with pytest.raises(ValueError, match="terms: expected shape"):
        step_outputs([1.0, 2.0], [1.0, 1.0])
    copies = [x.copy() for x in (logp, logp_old, A, m)]
    layout = [[[0, 5], [2]], [[3, 1], [4]]]
    policy_step(logp, logp_old, A, m, layout, Normaliser("trl", "grpo"))
    step_weights(m, layout)
    for x, c in zip((logp, logp_old, A, m), copies):
        assert_same(x, c)
    assert layout == [[[0, 5], [2]], [[3, 1], [4]]]


def test_docs_step_numbers():
    # docs/conventions.md, section 17: the table's weights and verdicts, computed
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "conventions.md").read_text()
    m = (np.arange(1000)[None, :] < np.array([10, 1000])[:, None]).astype(int)
    rows = {'`Normaliser("global")`': Normaliser("global"),
            '`Normaliser("micro-batch-mean")`': Normaliser("micro-batch-mean"),
            '`Normaliser("trl", "grpo")`': Normaliser("trl", "grpo"),
            '`Normaliser("trl", "bnpo")`': Normaliser("trl", "bnpo")}
    for label, norm in rows.items():
        for layout in ([[[0], [1]]], [[[0]], [[1]]]):
            w = step_weights(m, layout, norm, exact=True)
            out = step_outputs(np.zeros(m.shape), np.zeros(m.shape), m, layout, norm)
            line = [ln for ln in text.splitlines() if ln.startswith(f"| {label}")]
            assert len(line) == 1, label
            cells = [c.strip() for c in line[0].split("|")[2:5]]
            assert [F(cells[0]), F(cells[1])] == [w[0, 0], w[1, 0]], (label, cells)
            assert cells[2].startswith("yes" if out["step/full_batch"] else "no"), label
