"""The row-wise form of the sequence-level loss equals the readable form (the definition).

Expected values come from ``policy_loss_forward`` / ``policy_loss_backward`` / ``policy_loss_stats``
(the readable form, itself checked against hand calculations and finite differences in
test_grpo_loss.py and test_loss_grads.py), and one hand calculation below.
"""

import numpy as np
import pytest

import ppo_numpy
from ppo_numpy import ppo_policy_loss
from ppo_numpy.fast.gspo_rowwise import (
    ROWWISE_FROM,
    gspo_rowwise_kernel,
    policy_loss_and_grad,
    rowwise_advantages,
)
from ppo_numpy.policy_loss.kernel import (
    APPROX_KL,
    policy_loss_backward,
    policy_loss_forward,
    policy_loss_stats,
)
from ppo_numpy.policy_loss.objective import loss_options
from ppo_numpy.ppo.aggregation import aggregate_kernel

ULPS = 4


def batch(B, T, seed, *, empty_row=False):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, B)
    if empty_row:
        lengths[1] = 0
    m = np.arange(T)[None, :] < lengths[:, None]
    logp_old = np.where(m, -rng.uniform(0.1, 3.0, (B, T)), 0.0)
    logp = np.where(m, logp_old + rng.normal(0, 0.15, (B, T)), 0.0)
    logp_ref = np.where(m, logp_old + rng.normal(0, 0.1, (B, T)), 0.0)
    A_i = rng.normal(0, 1, (B, 1))
    A_i[0] = 0.0
    return logp, logp_old, logp_ref, np.where(m, A_i, 0.0), m


def assert_close(got, want, what, scale=None):
    """|got - want| <= 4 ulps of ``scale``: the largest |want| by default; for a sum with
    cancellation, the sum of its terms' magnitudes."""
    if scale is None:
        scale = float(np.max(np.abs(want), initial=0.0))
    scale = max(scale, 1e-300)
    err = float(np.max(np.abs(np.asarray(got) - np.asarray(want)), initial=0.0))
    assert err <= ULPS * np.spacing(scale), f"{what}: max |diff| {err:.3g}, scale {scale:.3g}"


OPTIONS = [
    dict(agg="grpo"), dict(agg="token-mean"), dict(agg="seq-mean-token-mean"),
    dict(agg="seq-mean-token-sum-norm", norm=7.0), dict(agg="dr_grpo"), dict(agg="dapo"),
    dict(agg="seq-mean-token-sum", log_ratio_clamp=0.2), dict(agg="grpo", log_ratio_max=0.05),
    dict(agg="grpo", epsilon=0.05, epsilon_high=0.1), dict(agg="grpo", delta=1.02),
    dict(agg="token-mean", dual_clip=1.05, epsilon=0.01),
    dict(agg="grpo", kl_coef=0.1, kl_estimator="k3"),
    dict(agg="grpo", kl_coef=0.05, kl_estimator="k1", kl_agg="token-mean", kl_clamp=0.01),
]


@pytest.mark.parametrize("kw", OPTIONS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("seed", [0, 1])
def test_rowwise_equals_the_readable_form(kw, seed):
    logp, logp_old, logp_ref, A, m = batch(9, 13, seed, empty_row=seed == 1)
    opts = loss_options(importance_level="sequence", **kw)
    f = policy_loss_forward(logp, logp_old, A, m, opts, logp_ref)
    want_stats = policy_loss_stats(f, A, m, opts)
    want_grad = policy_loss_backward(f, A, m, opts, logp_ref)
    A_row = rowwise_advantages(A, m)
    assert A_row is not None
    g, stats, dlogp = gspo_rowwise_kernel(logp, logp_old, A_row, m, opts, logp_ref,
                                          approx_kl=APPROX_KL)
    # the loss is a sum of terms of both signs: its rounding is of the terms' magnitudes
    term_scale = float(aggregate_kernel(np.abs(f.term), m, opts.agg, opts.norm))
    kl_scale = 0.0 if f.kl is None else opts.kl_coef * float(
        aggregate_kernel(np.abs(f.kl), m, opts.kl_agg or opts.agg,
                         opts.norm if opts.kl_agg in (None, opts.agg) else None))
    for name, scale in (("loss", term_scale + kl_scale), ("policy_loss", term_scale),
                        ("kl_loss", kl_scale / max(opts.kl_coef, 1e-300))):
        assert_close(getattr(g, name), getattr(f, name), name, scale)
    assert_close(dlogp, want_grad, "dlogp")
    assert set(stats) == set(want_stats)
    for name, want in want_stats.items():
        if "clipfrac" in name:
            assert stats[name] == want, name  # counts of tokens: exact
        elif name.startswith("approx_kl"):
            assert stats[name] == want, name  # the same token terms, summed alike: exact
        else:
            assert_close(stats[name], want, name)
    assert np.all(dlogp[~m] == 0.0)


def test_rowwise_by_hand():
    """Two responses of 2 and 1 tokens, A = [1, -1], token log-ratios [0.3, 0.1] and [-0.5]:
    s = [exp(0.2), exp(-0.5)] = [1.2214, 0.6065]. Row 0 is above 1.2 with A > 0: clipped,
    term 1.2; row 1 is below 0.8 with A < 0: clipped, term -0.8. grpo aggregation (mean of
    token means): loss = -(1.2 + (-0.8)) / 2 = -0.2, and the gradient is 0 (both clipped)."""
    logp = np.array([[0.3, 0.1], [-0.5, 0.0]])
    m = np.array([[True, True], [True, False]])
    A = np.array([[1.0, 1.0], [-1.0, 0.0]])
    g, stats, dlogp = gspo_rowwise_kernel(logp, np.zeros((2, 2)), rowwise_advantages(A, m), m,
                                          loss_options(agg="grpo", importance_level="sequence"),
                                          approx_kl=APPROX_KL)
    assert g.loss == pytest.approx(-0.2, abs=1e-15)
    assert dlogp.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert stats["clipfrac_active"] == 1.0
    # inside the range (eps = 0.9): row 0 unclipped, d loss / d logp_t = -(1/2) (1/2) 1 s_0
    _, _, d = gspo_rowwise_kernel(logp, np.zeros((2, 2)), rowwise_advantages(A, m), m,
                                  loss_options(epsilon=0.9, agg="grpo",
                                               importance_level="sequence"), approx_kl=())
    assert d[0].tolist() == pytest.approx([-0.25 * np.exp(0.2)] * 2, rel=1e-15)


def test_token_varying_advantages_keep_the_readable_form():
    logp, logp_old, _, A, m = batch(4, 6, 3)
    assert rowwise_advantages(A, m) is not None
    A2 = A.copy()
    A2[2, 0] += 1e-9
    assert rowwise_advantages(A2, m) is None


def test_policy_loss_and_grad_takes_the_rule_and_agrees():
    # the fast form's policy_loss_and_grad (this module's import) against the reference's
    # kernel; the public ppo_numpy.policy_loss_and_grad is the reference itself
    B, T = 64, ROWWISE_FROM // 64
    logp, logp_old, _, A, m = batch(B, T, 5)
    kw = dict(agg="grpo", importance_level="sequence")
    loss, stats, d = policy_loss_and_grad(logp, logp_old, A, m, **kw)
    ref = ppo_numpy.policy_loss_and_grad(logp, logp_old, A, m, **kw)
    f_ref = policy_loss_forward(logp, logp_old, A, m, loss_options(**kw))
    assert ref[0] == f_ref.loss  # the public function runs the reference kernel: same bits
    opts = loss_options(**kw)
    f = policy_loss_forward(logp, logp_old, A, m, opts)
    assert_close(loss, f.loss, "loss")
    assert_close(d, policy_loss_backward(f, A, m, opts), "dlogp")
    assert stats["clipfrac_active"] == policy_loss_stats(f, A, m, opts)["clipfrac_active"]


def garbage_at_padding(x, m, seed):
    """``x`` with finite garbage at padding: large values whose differences overflow."""
    rng = np.random.default_rng(seed)
    junk = rng.choice([1e308, -1e308, 3.5, -7.0], size=x.shape)
    return np.where(m, x, junk)


@pytest.mark.parametrize("kw", [dict(agg="grpo"), dict(agg="dapo", log_ratio_clamp=0.1),
                                dict(agg="token-mean", epsilon=0.05, log_ratio_max=0.02)],
                         ids=["grpo", "dapo-clamp", "token-mean-max"])
def test_the_fast_form_reads_no_padding(kw):
    # policy_loss_and_grad hands large inputs to the fast form without zeroing their padding:
    # whatever finite values the padding holds, every output equals that of zeroed inputs, bit
    # for bit, and the caller's arrays are not written into
    B, T = 64, 2 * ROWWISE_FROM // 64
    logp, logp_old, _, A, m = batch(B, T, 7)
    kw = dict(kw, importance_level="sequence")
    want_loss, want_stats, want_d = policy_loss_and_grad(logp, logp_old, A, m, **kw)
    args = [garbage_at_padding(x, m, s) for s, x in enumerate((logp, logp_old, A))]
    before = [a.copy() for a in args]
    with np.errstate(all="raise"):  # no warning may escape from the garbage either
        loss, stats, d = policy_loss_and_grad(*args, m, **kw)
    assert loss == want_loss and stats == want_stats
    assert d.tobytes() == want_d.tobytes()
    assert all(np.array_equal(a, b) for a, b in zip(args, before))


def test_token_varying_advantages_with_garbage_padding_take_the_readable_form():
    B, T = 64, 2 * ROWWISE_FROM // 64
    logp, logp_old, _, A, m = batch(B, T, 8)
    A = A + np.where(m, np.arange(T) * 1e-3, 0.0)  # no longer one advantage per response
    kw = dict(agg="grpo", importance_level="sequence")
    want = policy_loss_and_grad(logp, logp_old, A, m, **kw)
    args = [garbage_at_padding(x, m, s) for s, x in enumerate((logp, logp_old, A))]
    got = policy_loss_and_grad(*args, m, **kw)
    assert got[0] == want[0] and got[1] == want[1] and np.array_equal(got[2], want[2])
    opts = loss_options(**kw)
    f = policy_loss_forward(logp, logp_old, A, m, opts)
    assert got[0] == f.loss


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("T", [6, 2 * ROWWISE_FROM // 64], ids=["small", "fast-form"])
def test_approx_kl_chooses_the_statistics_only(level, T):
    logp, logp_old, _, A, m = batch(64, T, 9)
    kw = dict(agg="grpo", importance_level=level)
    loss, stats, d = policy_loss_and_grad(logp, logp_old, A, m, **kw)
    # the three estimators by hand on the response tokens
    x = (logp - logp_old)[m]
    assert stats["approx_kl_k1"] == pytest.approx(np.mean(-x), rel=1e-12)
    assert stats["approx_kl_k2"] == pytest.approx(np.mean(x * x / 2), rel=1e-12)
    assert stats["approx_kl_k3"] == pytest.approx(np.mean(np.exp(x) - 1 - x), rel=1e-9)
    for choice, keys in [(False, ()), ((), ()), (("k1",), ("k1",)), (["k3", "k1"], ("k1", "k3")),
                         (True, ("k1", "k2", "k3"))]:
        got_loss, got, got_d = policy_loss_and_grad(logp, logp_old, A, m, approx_kl=choice, **kw)
        assert got_loss == loss and np.array_equal(got_d, d)
        assert [k for k in got if k.startswith("approx_kl")] == [f"approx_kl_{k}" for k in keys]
        assert {k: stats[k] for k in got} == got
        # (ppo_policy_loss: the readable form, equal to the fast one to rounding)
        pl, st = ppo_policy_loss(logp, logp_old, A, m, approx_kl=choice, **kw)
        assert_close(pl, loss, "loss")
        assert list(st) == list(got)


@pytest.mark.parametrize("bad, error, words", [("k1", TypeError, "approx_kl"),
                                               (("k4",), ValueError, "approx_kl"),
                                               (None, TypeError, "approx_kl")])
def test_approx_kl_bad_values_are_named(bad, error, words):
    logp, logp_old, _, A, m = batch(4, 6, 1)
    with pytest.raises(error, match=words):
        policy_loss_and_grad(logp, logp_old, A, m, approx_kl=bad)
    with pytest.raises(error, match=words):
        ppo_policy_loss(logp, logp_old, A, m, approx_kl=bad)


def test_row_counts_count_the_tokens():
    from ppo_numpy.fast.gspo_rowwise import _row_counts

    m = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1]], dtype=bool)
    assert _row_counts(m).tolist() == [[2], [0], [3]]
    assert _row_counts(m).dtype == np.int64
    wide = np.ones((2, 70000), dtype=bool)  # more tokens than a uint8 or uint16 holds
    wide[1, ::2] = False
    assert _row_counts(wide).tolist() == [[70000], [35000]]
    assert _row_counts(m[:, ::2]).tolist() == [[1], [0], [2]]  # a strided view


@pytest.mark.parametrize("name", ["logp", "logp_old", "advantages"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("T", [6, 2 * ROWWISE_FROM // 64], ids=["small", "fast-form"])
def test_a_non_finite_input_is_named_on_the_fast_path_too(name, bad, T):
    # the fast form checks the values on its results; a NaN or inf at a response token still
    # raises the checked path's ValueError naming the argument and the position
    logp, logp_old, _, A, m = batch(64, T, 11)
    args = {"logp": logp, "logp_old": logp_old, "advantages": A}
    row = 3
    col = int(np.flatnonzero(m[row])[-1])
    args[name] = args[name].copy()
    args[name][row, col] = bad
    if name == "advantages":  # a whole response's advantage: still one per response
        args[name][row, m[row]] = bad
    for level in ("sequence", "token"):
        with pytest.raises(ValueError, match=rf"{name}: non-finite value .* at valid position"):
            policy_loss_and_grad(*args.values(), m, agg="grpo", importance_level=level)


def test_nan_padding_and_empty_rows_take_the_fast_form_unharmed():
    # NaN at padding (as verl and OpenRLHF may leave it) and a row without tokens: the result
    # is that of zeroed inputs, bit for bit
    B, T = 64, 2 * ROWWISE_FROM // 64
    logp, logp_old, _, A, m = batch(B, T, 12, empty_row=True)
    kw = dict(agg="grpo", importance_level="sequence", log_ratio_clamp=0.3)
    want = policy_loss_and_grad(logp, logp_old, A, m, **kw)
    nan_pad = [np.where(m, x, np.nan) for x in (logp, logp_old, A)]
    with np.errstate(all="raise"):
        got = policy_loss_and_grad(*nan_pad, m, **kw)
    assert got[0] == want[0] and got[1] == want[1] and got[2].tobytes() == want[2].tobytes()


def test_an_overflowing_log_ratio_gives_the_readable_forms_answer():
    # finite log-probabilities whose difference overflows: the fast form's check sends the
    # call to the checked path, whose answer equals the readable form's to rounding
    B, T = 64, 2 * ROWWISE_FROM // 64
    logp, logp_old, _, A, m = batch(B, T, 13)
    logp, logp_old = logp.copy(), logp_old.copy()
    logp[2, 0], logp_old[2, 0] = 1e308, -1e308
    kw = dict(agg="grpo", importance_level="sequence")
    with np.errstate(all="ignore"):
        got = policy_loss_and_grad(logp, logp_old, A, m, **kw)
        opts = loss_options(**kw)
        f = policy_loss_forward(logp, logp_old, A, m, opts)
        want_d = policy_loss_backward(f, A, m, opts)
    assert_close(got[0], f.loss, "loss")
    ok = np.isfinite(want_d)  # (row 2's gradient: inf times 0 there, in both forms)
    assert not ok.all() and np.array_equal(np.isfinite(got[2]), ok)
    assert_close(got[2][ok], want_d[ok], "dlogp")
