"""Properties over random inputs (hypothesis) of the conventions in issue #2.

* a padded batch gives what each row gives on its own unpadded slice, with right, left and
  arbitrary contiguous placement, and garbage (NaN, inf, 1e300) in the padding;
* a mask with holes gives what the compacted row (response tokens only) gives;
* every per-token output is exactly 0 at padding;
* a policy against itself: ratio exactly 1, every KL estimate exactly 0;
* the clipped objective never exceeds the unclipped one; k2, k3, abs are >= 0;
* inputs are never modified; float32 and int inputs are accepted and float64 returned.

Element-wise functions must agree *exactly* with the row on its own; the blocked GAE and
the whitening statistics sum in a different order, so they agree to 1e-12.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from ppo_numpy import (
    KL_ESTIMATORS,
    aggregate,
    clipped_surrogate,
    entropy_from_logits,
    gae,
    kl_estimate,
    kl_shaped_rewards,
    ppo_policy_loss,
    probability_ratio,
    td_errors,
    value_loss,
    whiten,
)
from tests._helpers import (
    FAST,
    assert_close,
    assert_same,
    assert_zero_at_padding,
    finite,
    masks_with_holes,
    padded_batches,
)

unit = st.floats(0.0, 1.0)
logps = finite(-20.0, 0.0)
values = finite(-5.0, 5.0)
ratios = finite(0.0, 3.0)
# multiples of 1/4: sums are exact in float64 whatever the order
dyadic = st.integers(-40, 40).map(lambda k: k / 4)


def check_rows(batch, out, row_fn, *, exact=True, name="output", **inputs):
    """Each row of ``out`` on its slice equals ``row_fn(i)``; padding is exactly 0."""
    for i in range(len(batch.rows)):
        got, want = batch.valid(out, i), row_fn(i)
        info = dict(row=i, placement=batch.placement, mask=batch.mask, **inputs)
        if exact:
            assert_same(got, want, **info)
        else:
            assert_close(got, want, rtol=1e-12, atol=1e-12, **info)
    assert_zero_at_padding(out, batch.mask, name, mask=batch.mask, **inputs)


# --- padded batch == row by row --------------------------------------------------------------


@FAST
@given(padded_batches([logps, logps]))
def test_ratio_rows(b):
    logp, logp_old = b.arrays
    out = probability_ratio(logp, logp_old, b.mask)
    check_rows(b, out, lambda i: probability_ratio(*b.rows[i]), name="rho", logp=logp)


@FAST
@given(padded_batches([logps, logps]), st.sampled_from(KL_ESTIMATORS))
def test_kl_estimate_rows(b, est):
    logp, logp_ref = b.arrays
    out = kl_estimate(logp, logp_ref, est, b.mask)
    check_rows(b, out, lambda i: kl_estimate(*b.rows[i], est), name=est, logp=logp)


@FAST
@given(padded_batches([ratios, values]), finite(0.0, 0.5),
       st.none() | finite(0.0, 0.5), st.none() | finite(1.01, 5.0))
def test_clipped_surrogate_rows(b, eps, eps_high, c):
    rho, A = b.arrays
    kw = dict(epsilon_high=eps_high, dual_clip=c)
    out = clipped_surrogate(rho, A, eps, mask=b.mask, **kw)
    check_rows(b, out, lambda i: clipped_surrogate(*b.rows[i], eps, **kw), name="surrogate",
               rho=rho, advantages=A, eps=eps, **kw)


@FAST
@given(padded_batches([values, values]), unit)
def test_td_errors_rows(b, gamma):
    r, v = b.arrays
    out = td_errors(r, v, gamma, b.mask)
    check_rows(b, out, lambda i: td_errors(*b.rows[i], gamma), name="delta",
               rewards=r, values=v, gamma=gamma)


@FAST
@given(padded_batches([values, values]), unit, unit, st.sampled_from([1, 2, 3, 64]))
def test_gae_rows(b, gamma, lam, block):
    r, v = b.arrays
    for method in ("loop", "blocked"):
        A, R = gae(r, v, gamma, lam, b.mask, method=method, block=block)
        inputs = dict(rewards=r, values=v, gamma=gamma, lam=lam, method=method, block=block)
        exact = method == "loop"
        rows = [gae(*row, gamma, lam, method=method, block=block) for row in b.rows]
        check_rows(b, A, lambda i, rows=rows: rows[i][0], exact=exact, name="advantages", **inputs)
        check_rows(b, R, lambda i, rows=rows: rows[i][1], exact=exact, name="returns", **inputs)


@FAST
@given(padded_batches([logps, logps]), finite(0.0, 2.0), st.sampled_from(KL_ESTIMATORS),
       st.data())
def test_kl_shaped_rewards_rows(b, beta, est, data):
    logp, logp_ref = b.arrays
    scores = np.array(data.draw(st.lists(values, min_size=len(b.rows), max_size=len(b.rows))))
    out = kl_shaped_rewards(scores, logp, logp_ref, beta, b.mask, est)
    check_rows(b, out, lambda i: kl_shaped_rewards(scores[i], *b.rows[i], beta, estimator=est),
               name="rewards", logp=logp, logp_ref=logp_ref, scores=scores, beta=beta)


@FAST
@given(padded_batches([values, values, values]), st.none() | finite(0.0, 1.0))
def test_value_loss_rows(b, c):
    V, V_old, R = b.arrays
    out = value_loss(V, V_old, R, b.mask, clip_range=c)
    check_rows(b, out, lambda i: value_loss(*b.rows[i], clip_range=c), name="value loss",
               values=V, old_values=V_old, returns=R, clip_range=c)


@FAST
@given(padded_batches([dyadic], min_len=2), st.sampled_from([0, 1]), st.booleans())
def test_whiten_uses_statistics_of_all_valid_elements(b, ddof, shift_mean):
    (x,) = b.arrays
    out = whiten(x, b.mask, shift_mean, ddof=ddof)
    # the batch statistics are those of the concatenated valid elements
    flat = np.concatenate([row[0] for row in b.rows])
    want = whiten(flat, None, shift_mean, ddof=ddof)
    got = np.concatenate([b.valid(out, i) for i in range(len(b.rows))])
    assert_close(got, want, rtol=1e-12, atol=1e-12, x=x, mask=b.mask, ddof=ddof,
                 shift_mean=shift_mean)
    assert_zero_at_padding(out, b.mask, "whitened", x=x)


@FAST
@given(padded_batches([values]), st.sampled_from([
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]))
def test_aggregate_ignores_garbage_in_padding(b, mode):
    (x,) = b.arrays
    got = aggregate(x, b.mask, mode)
    clean = np.where(b.mask == 1, x, 0.0)
    assert got == aggregate(clean, b.mask, mode), (mode, x, b.mask)
    assert np.isfinite(got)


# --- masks with holes ------------------------------------------------------------------------


@FAST
@given(masks_with_holes(), st.data(), unit, unit, st.sampled_from([1, 2, 5, 64]))
def test_gae_with_holes_equals_compacted_rows(mask, data, gamma, lam, block):
    B, T = mask.shape
    r = np.array(data.draw(st.lists(values, min_size=B * T, max_size=B * T))).reshape(B, T)
    v = np.array(data.draw(st.lists(values, min_size=B * T, max_size=B * T))).reshape(B, T)
    r[mask == 0], v[mask == 0] = np.nan, np.inf  # holes hold garbage
    delta = td_errors(r, v, gamma, mask)
    for method in ("loop", "blocked"):
        A, R = gae(r, v, gamma, lam, mask, method=method, block=block)
        for i in range(B):
            keep = mask[i] == 1
            inputs = dict(row=i, mask=mask[i], rewards=r[i], values=v[i], gamma=gamma,
                          lam=lam, method=method, block=block)
            A_c, R_c = gae(r[i, keep], v[i, keep], gamma, lam, method=method, block=block)
            if method == "loop":
                assert_same(A[i, keep], A_c, **inputs)
                assert_same(R[i, keep], R_c, **inputs)
            else:
                assert_close(A[i, keep], A_c, rtol=1e-12, atol=1e-12, **inputs)
                assert_close(R[i, keep], R_c, rtol=1e-12, atol=1e-12, **inputs)
            assert_same(delta[i, keep], td_errors(r[i, keep], v[i, keep], gamma), **inputs)
        assert_zero_at_padding(A, mask, "advantages", method=method)
        assert_zero_at_padding(R, mask, "returns", method=method)
    assert_zero_at_padding(delta, mask, "delta")


@FAST
@given(st.integers(1, 150), st.sampled_from([1, 2, 7, 32, 64, 200]), unit, unit, st.data())
def test_gae_blocked_equals_loop_on_long_rows(T, block, gamma, lam, data):
    r = np.array(data.draw(st.lists(values, min_size=T, max_size=T)))
    v = np.array(data.draw(st.lists(values, min_size=T, max_size=T)))
    A_loop, _ = gae(r, v, gamma, lam, method="loop")
    A_blk, _ = gae(r, v, gamma, lam, method="blocked", block=block)
    assert_close(A_blk, A_loop, rtol=1e-11, atol=1e-11, rewards=r, values=v, gamma=gamma,
                 lam=lam, block=block)


# --- identical policies, signs, the clip bound -----------------------------------------------


@FAST
@given(padded_batches([logps]))
def test_policy_against_itself(b):
    (logp,) = b.arrays
    rho = probability_ratio(logp, logp.copy(), b.mask)
    assert_same(rho, b.mask.astype(np.float64), logp=logp, mask=b.mask)
    for est in KL_ESTIMATORS:
        kl = kl_estimate(logp, logp.copy(), est, b.mask)
        assert_same(kl, np.zeros(logp.shape), estimator=est, logp=logp, mask=b.mask)


@FAST
@given(st.lists(st.tuples(logps, logps), min_size=1, max_size=20))
def test_k2_k3_abs_are_nonnegative(pairs):
    logp, logp_ref = np.array(pairs).T
    for est in ("k2", "k3", "abs"):
        kl = kl_estimate(logp, logp_ref, est)
        assert np.all(kl >= 0), (est, logp, logp_ref, kl)


@FAST
@given(st.lists(st.tuples(ratios, values), min_size=1, max_size=20), finite(0.0, 1.0),
       st.none() | finite(0.0, 1.0))
def test_clipped_never_exceeds_unclipped(pairs, eps, eps_high):
    rho, A = np.array(pairs).T
    out = clipped_surrogate(rho, A, eps, epsilon_high=eps_high)
    unclipped = rho * A
    assert np.all(out <= unclipped), (rho, A, eps, eps_high, out)
    # inside [1 - eps, 1 + eps_high] nothing is clipped
    hi = eps if eps_high is None else eps_high
    inside = (rho >= 1 - eps) & (rho <= 1 + hi)
    assert_same(out[inside], unclipped[inside], rho=rho, advantages=A, eps=eps)


@FAST
@given(st.lists(st.tuples(ratios, values), min_size=1, max_size=20), finite(0.0, 0.5),
       finite(1.01, 5.0))
def test_dual_clip_bounds_negative_advantages_below(pairs, eps, c):
    rho, A = np.array(pairs).T
    out = clipped_surrogate(rho, A, eps, dual_clip=c)
    plain = clipped_surrogate(rho, A, eps)
    neg = A < 0
    assert np.all(out[neg] >= c * A[neg]), (rho, A, c, out)
    assert_same(out[~neg], plain[~neg], rho=rho, advantages=A)
    assert_same(out[neg], np.maximum(plain[neg], c * A[neg]), rho=rho, advantages=A, c=c)


# --- inputs never modified; dtypes -----------------------------------------------------------


def _all_calls(arrs, mask, scores):
    a, b, c = arrs
    rho = np.abs(a)
    return {
        "probability_ratio": lambda: probability_ratio(a, b, mask),
        "clipped_surrogate": lambda: clipped_surrogate(rho, b, 0.2, mask=mask, dual_clip=3.0),
        "kl_estimate": lambda: kl_estimate(a, b, "k3", mask),
        "kl_shaped_rewards": lambda: kl_shaped_rewards(scores, a, b, 0.1, mask),
        "td_errors": lambda: td_errors(a, b, 0.9, mask),
        "gae loop": lambda: gae(a, b, 0.9, 0.8, mask, method="loop"),
        "gae blocked": lambda: gae(a, b, 0.9, 0.8, mask, method="blocked", block=2),
        "whiten": lambda: whiten(a, mask, ddof=1),
        "value_loss": lambda: value_loss(a, b, c, mask, clip_range=0.2),
        "aggregate": lambda: aggregate(a, mask, "seq-mean-token-mean"),
        "ppo_policy_loss": lambda: ppo_policy_loss(a, b, c, mask, dual_clip=3.0),
    }


@FAST
@given(padded_batches([values, values, values], min_len=2), st.booleans())
def test_inputs_are_never_modified(b, use_mask):
    arrs = [a.copy() for a in b.arrays]
    mask = b.mask.copy() if use_mask else None
    if not use_mask:
        arrs = [np.where(b.mask == 1, a, 0.5) for a in arrs]  # no garbage without a mask
    scores = np.arange(len(b.rows), dtype=np.float64)
    before = [a.copy() for a in arrs] + [scores.copy()]
    mask_before = None if mask is None else mask.copy()
    for name, call in _all_calls(arrs, mask, scores).items():
        call()
        for k, (now, then) in enumerate(zip(arrs + [scores], before)):
            assert np.array_equal(now, then, equal_nan=True), (
                f"{name} modified input {k}: before {then}, after {now}")
        if mask is not None:
            assert np.array_equal(mask, mask_before), f"{name} modified the mask"


def test_entropy_does_not_modify_input_without_mask():
    logits = np.array([[3.0, 1.0, -2.0], [0.0, 0.0, 5.0]])
    before = logits.copy()
    entropy_from_logits(logits)
    assert np.array_equal(logits, before)


@FAST
@given(padded_batches([values, values, values], min_len=2))
def test_float32_input_gives_float64_output(b):
    with np.errstate(over="ignore"):  # 1e300 in padding becomes inf in float32
        arrs32 = [a.astype(np.float32) for a in b.arrays]
    arrs64 = [a.astype(np.float64) for a in arrs32]  # the same numbers, widened
    scores = np.arange(len(b.rows), dtype=np.float32)
    calls32 = _all_calls(arrs32, b.mask, scores)
    calls64 = _all_calls(arrs64, b.mask, scores.astype(np.float64))
    for name in calls32:
        out32, out64 = calls32[name](), calls64[name]()
        outs32 = out32 if isinstance(out32, tuple) else (out32,)
        outs64 = out64 if isinstance(out64, tuple) else (out64,)
        for o32, o64 in zip(outs32, outs64):
            if isinstance(o32, dict):
                assert o32 == o64, name
                continue
            assert np.asarray(o32).dtype == np.float64, (name, np.asarray(o32).dtype)
            assert_same(o32, o64, function=name)


def test_int_input_gives_float64_output():
    a = np.array([[1, 2, 3], [0, -1, 4]])
    b = np.array([[0, 1, 1], [2, 2, -3]])
    c = np.array([[1, 1, 0], [0, 3, 1]])
    mask = np.array([[1, 1, 1], [0, 1, 1]])
    calls_int = _all_calls([a, b, c], mask, np.array([1, 2]))
    calls_f = _all_calls([a.astype(float), b.astype(float), c.astype(float)], mask,
                         np.array([1.0, 2.0]))
    for name in calls_int:
        out_i, out_f = calls_int[name](), calls_f[name]()
        for oi, of in zip(out_i if isinstance(out_i, tuple) else (out_i,),
                          out_f if isinstance(out_f, tuple) else (out_f,)):
            if isinstance(oi, dict):
                assert oi == of, name
                continue
            assert np.asarray(oi).dtype == np.float64, name
            assert_same(oi, of, function=name)
