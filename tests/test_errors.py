"""Every bad input of issue #2 raises ValueError or TypeError, and the message names the
argument and says what is wrong (shapes: both shapes; unknown options: the valid ones)."""

import re
from fractions import Fraction as F

import numpy as np
import pytest

from ppo_numpy import (
    AdaptiveKLController,
    FixedKLController,
    aggregate,
    clipped_surrogate,
    entropy_from_logits,
    entropy_grad,
    gae,
    kl_estimate,
    kl_shaped_rewards,
    log_softmax,
    masked_mean,
    ppo_objective,
    ppo_policy_loss,
    probability_ratio,
    td_errors,
    value_loss,
    whiten,
)

NAN, INF = float("nan"), float("inf")
X3 = [0.1, 0.2, 0.3]
X2 = [0.1, 0.2]
B2 = [[-0.1, -0.2, -0.3], [-0.4, -0.5, -0.6]]


def shapes(name, got, other, want):
    """Message of a shape mismatch: names the argument and shows both shapes."""
    return (rf"^{name}: .*{re.escape(str(got))}.*{re.escape(other)}.*"
            rf"{re.escape(str(want))}")


SHAPE_CASES = [
    ("ratio", lambda: probability_ratio(X3, X2), shapes("logp_old", (2,), "logp", (3,))),
    ("clip", lambda: clipped_surrogate([1.0, 1.0], X3), shapes("advantages", (3,), "rho", (2,))),
    ("kl", lambda: kl_estimate(B2, X3), shapes("logp_ref", (3,), "logp", (2, 3))),
    ("shaped", lambda: kl_shaped_rewards([1.0, 1.0], B2, [X3], 0.1),
     shapes("logp_ref", (1, 3), "logp", (2, 3))),
    ("td", lambda: td_errors(X3, X2), shapes("values", (2,), "rewards", (3,))),
    ("gae", lambda: gae(B2, X3), shapes("values", (3,), "rewards", (2, 3))),
    ("vloss old", lambda: value_loss(X3, X2, X3), shapes("old_values", (2,), "values", (3,))),
    ("vloss R", lambda: value_loss(X3, X3, X2), shapes("returns", (2,), "values", (3,))),
    ("objective", lambda: ppo_objective(X3, X3, X2),
     shapes("advantages", (2,), "logp", (3,))),
    ("policy loss A", lambda: ppo_policy_loss(X3, X3, X2),
     shapes("advantages", (2,), "logp", (3,))),
    ("policy loss", lambda: ppo_policy_loss(X3, X2, X3), shapes("logp_old", (2,), "logp", (3,))),
    ("mask td", lambda: td_errors(X3, X3, mask=[1, 1]), shapes("mask", (2,), "rewards", (3,))),
    ("mask whiten", lambda: whiten(B2, mask=[1, 1, 1]), shapes("mask", (3,), "x", (2, 3))),
    ("mask agg", lambda: aggregate(B2, [[1, 1], [1, 1]]),
     shapes("mask", (2, 2), "per_token", (2, 3))),
    ("mask entropy", lambda: entropy_from_logits(np.zeros((2, 3, 4)), np.ones((3, 2))),
     shapes("mask", (3, 2), "logits", (2, 3))),
    ("mask 2d for 1d", lambda: kl_estimate(X3, X3, "k1", [[1, 1, 1]]),
     shapes("mask", (1, 3), "logp", (3,))),
]


@pytest.mark.parametrize("case, call, pattern", SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_shape_mismatch_names_argument_and_both_shapes(case, call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("call, name", [
    (lambda: td_errors(np.zeros((2, 2, 2)), np.zeros((2, 2, 2))), "rewards"),
    (lambda: gae(0.5, 0.5), "rewards"),
    (lambda: probability_ratio(np.zeros((1, 1, 1)), np.zeros((1, 1, 1))), "logp"),
    (lambda: entropy_from_logits([1.0, 2.0]), "logits"),
])
def test_wrong_rank_names_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name}: expected shape .*got shape"):
        call()


def test_log_softmax_of_an_empty_vocabulary_names_logits():
    for shape in [(0,), (3, 0), (2, 3, 0)]:
        with pytest.raises(ValueError, match=rf"^logits: empty vocabulary \(K = 0 on the last "
                                             rf"axis\), got shape {re.escape(str(shape))}$"):
            log_softmax(np.zeros(shape))


def test_entropy_of_an_empty_vocabulary_names_logits():
    for shape in [(3, 0), (2, 3, 0)]:
        with pytest.raises(ValueError, match=r"^logits: empty vocabulary \(K = 0"):
            entropy_from_logits(np.zeros(shape))
        with pytest.raises(ValueError, match=r"^logits: empty vocabulary \(K = 0"):
            entropy_from_logits(np.zeros(shape), mask=np.ones(shape[:-1]))


def test_entropy_grad_of_an_empty_vocabulary_names_logits():
    for shape in [(3, 0), (2, 3, 0)]:
        with pytest.raises(ValueError, match=r"^logits: empty vocabulary \(K = 0"):
            entropy_grad(np.zeros(shape))


RANGE_CASES = [
    ("td gamma<0", lambda: td_errors(X3, X3, gamma=-0.1), "gamma", r">= 0"),
    ("td gamma>1", lambda: td_errors(X3, X3, gamma=1.1), "gamma", r"<= 1"),
    ("gae gamma>1", lambda: gae(X3, X3, gamma=1.5), "gamma", r"<= 1"),
    ("gae lam<0", lambda: gae(X3, X3, lam=-0.01), "lam", r">= 0"),
    ("gae lam>1", lambda: gae(X3, X3, lam=1.01), "lam", r"<= 1"),
    ("gae lam fraction>1", lambda: gae(X3, X3, lam=F(21, 20)), "lam", r"<= 1"),
    ("gamma nan", lambda: td_errors(X3, X3, gamma=NAN), "gamma", "finite"),
    ("eps<0", lambda: clipped_surrogate(X3, X3, -0.1), "epsilon", r">= 0"),
    ("eps_high<0", lambda: clipped_surrogate(X3, X3, 0.2, epsilon_high=-0.1), "epsilon_high",
     r">= 0"),
    ("objective eps<0", lambda: ppo_objective(X3, X3, X3, epsilon=-0.2), "epsilon", r">= 0"),
    ("policy eps<0", lambda: ppo_policy_loss(X3, X3, X3, epsilon=-0.2), "epsilon", r">= 0"),
    ("dual_clip<=1", lambda: clipped_surrogate(X3, X3, dual_clip=1.0), "dual_clip", r"> 1"),
    ("beta<0", lambda: kl_shaped_rewards(1.0, X3, X3, -0.1), "beta", r">= 0"),
    ("fixed beta<0", lambda: FixedKLController(-0.1), "beta", r">= 0"),
    ("adaptive beta<0", lambda: AdaptiveKLController(-0.1, 1.0, 10.0), "init_beta", r">= 0"),
    ("target<=0", lambda: AdaptiveKLController(0.1, 0.0, 10.0), "target", r"> 0"),
    ("horizon<=0", lambda: AdaptiveKLController(0.1, 1.0, 0.0), "horizon", r"> 0"),
    ("n_steps<0", lambda: AdaptiveKLController(0.1, 1.0, 10.0).update(1.0, -1), "n_steps",
     r">= 0"),
    ("kl nan", lambda: AdaptiveKLController(0.1, 1.0, 10.0).update(NAN, 1), "current_kl",
     "finite"),
    ("clip_range<0", lambda: value_loss(X3, X3, X3, clip_range=-0.1), "clip_range", r">= 0"),
    ("log_ratio_clamp<=0", lambda: probability_ratio(X3, X3, log_ratio_clamp=0.0),
     "log_ratio_clamp", r"> 0"),
    ("kl clamp<=0", lambda: kl_estimate(X3, X3, clamp=-1.0), "clamp", r"> 0"),
    ("norm<=0", lambda: aggregate(X3, mode="seq-mean-token-sum-norm", norm=0), "norm", r"> 0"),
    ("whiten std_eps<0", lambda: whiten(X3, std_eps=-1e-8), "std_eps", r">= 0"),
    ("ddof 2", lambda: whiten(X3, ddof=2), "ddof", "0 or 1"),
    ("block 0", lambda: gae(X3, X3, block=0), "block", r"integer >= 1"),
    ("rho<0", lambda: clipped_surrogate([1.0, -0.5, 1.0], X3), "rho", r">= 0"),
]


@pytest.mark.parametrize("case, call, name, what", RANGE_CASES, ids=[c[0] for c in RANGE_CASES])
def test_out_of_range_scalars(case, call, name, what):
    with pytest.raises(ValueError, match=rf"^{name}: .*{what}"):
        call()


TYPE_CASES = [
    ("gamma str", lambda: td_errors(X3, X3, gamma="0.9"), "gamma"),
    ("gamma bool", lambda: td_errors(X3, X3, gamma=True), "gamma"),
    ("eps None", lambda: clipped_surrogate(X3, X3, None), "epsilon"),
    ("beta complex", lambda: kl_shaped_rewards(1.0, X3, X3, 1j), "beta"),
    ("logp strings", lambda: probability_ratio(["a", "b"], ["c", "d"]), "logp"),
    ("values complex", lambda: td_errors(X3, np.array([1j, 2j, 3j])), "values"),
    ("mask strings", lambda: td_errors(X3, X3, mask=["1", "1", "0"]), "mask"),
    ("shift_mean int", lambda: whiten(X3, shift_mean=1), "shift_mean"),
]


@pytest.mark.parametrize("case, call, name", TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_wrong_types(case, call, name):
    with pytest.raises(TypeError, match=rf"^{name}: "):
        call()


MASK_CASES = [
    ("two", [1, 2, 0]),
    ("half", [1, 0.5, 0]),
    ("minus one", [1, -1, 0]),
    ("nan", [1, NAN, 0]),
]


@pytest.mark.parametrize("case, mask", MASK_CASES, ids=[c[0] for c in MASK_CASES])
def test_mask_not_zero_one(case, mask):
    for call in (lambda: td_errors(X3, X3, mask=mask),
                 lambda: gae(X3, X3, mask=mask),
                 lambda: probability_ratio(X3, X3, mask),
                 lambda: kl_estimate(X3, X3, "k3", mask),
                 lambda: kl_shaped_rewards(1.0, X3, X3, 0.1, mask),
                 lambda: whiten(X3, mask),
                 lambda: value_loss(X3, X3, X3, mask),
                 lambda: aggregate(X3, mask),
                 lambda: clipped_surrogate(X3, X3, mask=mask),
                 lambda: ppo_policy_loss(X3, X3, X3, mask)):
        with pytest.raises(ValueError, match=r"^mask: must contain only 0 and 1"):
            call()


def _nan_at(i, value=NAN):
    x = [0.1, 0.2, 0.3]
    x[i] = value
    return x


FINITE_CASES = [
    ("ratio logp", lambda: probability_ratio(_nan_at(1), X3), "logp"),
    ("ratio logp_old", lambda: probability_ratio(X3, _nan_at(0, INF)), "logp_old"),
    ("clip rho", lambda: clipped_surrogate(_nan_at(2, INF), X3), "rho"),
    ("clip adv", lambda: clipped_surrogate(X3, _nan_at(0, -INF)), "advantages"),
    ("kl logp_ref", lambda: kl_estimate(X3, _nan_at(1), "k3"), "logp_ref"),
    ("shaped logp", lambda: kl_shaped_rewards(1.0, _nan_at(0), X3, 0.1), "logp"),
    ("td rewards", lambda: td_errors(_nan_at(2), X3), "rewards"),
    ("td values", lambda: td_errors(X3, _nan_at(1, INF)), "values"),
    ("gae values", lambda: gae(X3, _nan_at(0)), "values"),
    ("whiten x", lambda: whiten(_nan_at(1)), "x"),
    ("vloss returns", lambda: value_loss(X3, X3, _nan_at(2)), "returns"),
    ("vloss old", lambda: value_loss(X3, _nan_at(2, INF), X3, clip_range=0.2), "old_values"),
    ("aggregate", lambda: aggregate(_nan_at(0)), "per_token"),
    ("objective adv", lambda: ppo_objective(X3, X3, _nan_at(1)), "advantages"),
    ("policy logp", lambda: ppo_policy_loss(_nan_at(1, INF), X3, X3), "logp"),
    ("masked_mean", lambda: masked_mean(_nan_at(0), [1, 1, 1]), "x"),
    ("entropy", lambda: entropy_from_logits([[0.0, NAN]]), "logits"),
]


@pytest.mark.parametrize("case, call, name", FINITE_CASES, ids=[c[0] for c in FINITE_CASES])
def test_non_finite_at_valid_position(case, call, name):
    with pytest.raises(ValueError, match=rf"^{name}: non-finite value .* at valid position"):
        call()


def test_non_finite_score():
    with pytest.raises(ValueError, match=r"^scores: must be finite"):
        kl_shaped_rewards([1.0, NAN], B2, B2, 0.1)


def test_unknown_estimator_lists_valid_ones():
    valid = r"k1, k2, k3, abs"
    with pytest.raises(ValueError, match=rf"^estimator: unknown estimator 'k4'.*{valid}"):
        kl_estimate(X3, X3, "k4")
    with pytest.raises(ValueError, match=rf"^estimator: unknown estimator 'K1'.*{valid}"):
        kl_shaped_rewards(1.0, X3, X3, 0.1, estimator="K1")


def test_unknown_aggregation_lists_valid_ones():
    valid = "token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm"
    with pytest.raises(ValueError, match=rf"^mode: unknown aggregation .*'mean'.*{valid}"):
        aggregate(X3, mode="mean")
    with pytest.raises(ValueError, match=rf"^agg: unknown aggregation .*'sum'.*{valid}"):
        ppo_policy_loss(X3, X3, X3, agg="sum")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_norm_with_a_mode_that_does_not_use_it(mode):
    # it would be silently ignored
    pattern = (r"^norm: only modes 'seq-mean-token-sum-norm', 'dapo', 'dr_grpo' divide by norm"
               rf".*{mode}")
    with pytest.raises(ValueError, match=pattern):
        aggregate(X3, mode=mode, norm=4.0)
    with pytest.raises(ValueError, match=pattern):
        ppo_policy_loss(X3, X3, X3, agg=mode, norm=4.0)


def test_unknown_gae_method_lists_valid_ones():
    with pytest.raises(ValueError, match=r"^method: unknown method 'fast'.*blocked, loop"):
        gae(X3, X3, method="fast")


@pytest.mark.parametrize("x, mask", [
    ([1.0], None),
    ([1.0, 2.0, 3.0], [0, 1, 0]),
    ([[1.0, 2.0], [3.0, 4.0]], [[0, 0], [1, 0]]),
    ([1.0, 2.0], [0, 0]),
])
def test_whitening_needs_two_valid_elements(x, mask):
    # named: the mask when one is given, x itself when not
    name, what = ("x", "elements") if mask is None else ("mask", "valid elements")
    with pytest.raises(ValueError, match=rf"^{name}: whitening needs at least 2 {what}, got"):
        whiten(x, mask)


@pytest.mark.parametrize("scores, logp", [
    ([1.0, 2.0], X3),               # a (T,) response takes one score
    (1.0, B2),                      # a (B, T) batch takes (B,) scores
    ([1.0, 2.0, 3.0], B2),          # wrong B
    ([[1.0], [2.0]], B2),           # (B, 1) is not (B,)
])
def test_wrong_scores_shape(scores, logp):
    with pytest.raises(ValueError, match=r"^scores: expected shape .*got shape"):
        kl_shaped_rewards(scores, logp, logp, 0.1)


def test_row_without_response_token_in_shaped_rewards():
    with pytest.raises(ValueError, match=r"^mask: row 1 has no response token"):
        kl_shaped_rewards([1.0, 2.0], B2, B2, 0.1, [[1, 1, 0], [0, 0, 0]])


def test_single_response_without_any_token_in_shaped_rewards():
    with pytest.raises(ValueError, match=r"^mask: .*no response token"):
        kl_shaped_rewards(1.0, X3, X3, 0.1, [0, 0, 0])


def test_no_valid_token_to_average():
    with pytest.raises(ValueError, match=r"^mask: no valid element"):
        masked_mean(X3, [0, 0, 0])
    with pytest.raises(ValueError, match=r"^mask: no response token"):
        ppo_objective(B2, B2, B2, [[0, 0, 0], [0, 0, 0]])


def test_ragged_arrays():
    with pytest.raises(ValueError, match=r"^rewards: not a rectangular array"):
        td_errors([[0.0, 1.0], [1.0]], [[0.0, 1.0], [1.0, 2.0]])
    with pytest.raises(ValueError, match=r"^mask: not a rectangular array"):
        td_errors([[0.0, 1.0], [1.0, 2.0]], [[0.0, 1.0], [1.0, 2.0]], mask=[[1, 1], [1]])


@pytest.mark.parametrize("call, name", [
    (lambda: td_errors([], []), "rewards"),
    (lambda: gae(np.zeros((2, 0)), np.zeros((2, 0))), "rewards"),
    (lambda: probability_ratio([], []), "logp"),
    (lambda: kl_shaped_rewards(1.0, [], [], 0.1), "logp"),
])
def test_empty_time_axis(call, name):
    with pytest.raises(ValueError, match=rf"^{name}: .*no time steps"):
        call()


@pytest.mark.parametrize("eps_mode", ["add", "floor"])
def test_whitening_constant_values_without_eps(eps_mode):
    with pytest.raises(ValueError, match=r"^x: .*variance 0.*eps"):
        whiten([2.0, 2.0, 7.0], [1, 1, 0], std_eps=0, eps_mode=eps_mode)


# --- exact (Fraction) input: padding never matters, bad entries are named -------------------


def test_exact_input_with_nan_and_inf_in_padding():
    # the same calls as in float mode: garbage at padding is ignored, the output stays exact
    r = [F(0), F(0), F(1), NAN]
    v = [F(1, 2), F(3, 5), F(7, 10), INF]
    m = [1, 1, 1, 0]
    A, R = gae(r, v, 1, F(19, 20), m)
    assert list(A) == [F(1863, 4000), F(77, 200), F(3, 10), 0]
    assert all(isinstance(a, F) for a in A) and R[3] == 0
    assert list(td_errors(r, v, 1, m)) == [F(1, 10), F(1, 10), F(3, 10), 0]
    assert list(value_loss(v, v, r, m)) == [F(1, 8), F(9, 50), F(9, 200), 0]
    assert aggregate([F(1), F(2), -INF], [1, 1, 0]) == F(3, 2)
    assert list(clipped_surrogate([F(3, 2), NAN], [F(2), F(1)], F(1, 5), mask=[1, 0])) == [
        F(12, 5), 0]
    assert list(kl_shaped_rewards(F(1), [F(-1), INF], [F(-3, 2), NAN], F(1, 10), [1, 0])) == [
        F(-1, 20) + 1, 0]


@pytest.mark.parametrize("call, name", [
    (lambda: td_errors([F(0), NAN, F(1)], X3), "rewards"),
    (lambda: gae(X3, [F(1), F(2), INF]), "values"),
    (lambda: aggregate([F(1), -INF]), "per_token"),
    (lambda: value_loss([F(1)], [NAN], [F(1)], clip_range=0.2), "old_values"),
])
def test_exact_input_non_finite_at_valid_position(call, name):
    with pytest.raises(ValueError, match=rf"^{name}: non-finite value .* at valid position"):
        call()


def test_exact_non_finite_score():
    with pytest.raises(ValueError, match=r"^scores: must be finite"):
        kl_shaped_rewards([F(1), NAN], B2, B2, 0.1)


@pytest.mark.parametrize("call, name", [
    (lambda: td_errors([F(0), "0.5"], X2), "rewards"),
    (lambda: gae(X2, [F(1), None]), "values"),
    (lambda: aggregate([F(1), 1j]), "per_token"),
    (lambda: probability_ratio([F(0), "1"], X2), "logp"),
])
def test_exact_input_entries_that_are_not_numbers(call, name):
    with pytest.raises(TypeError, match=rf"^{name}: expected real numbers"):
        call()
