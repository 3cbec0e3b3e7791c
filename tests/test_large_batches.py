"""Large batches with anything at padding (NaN, inf, 1e300): each output must equal its rows
computed one by one on the response tokens alone, whatever the padding holds, and a bad value
at a response token is named at its index in the whole array. (Before issue 35 the checks had
large-array paths from 16384 and 262144 entries; the shapes still span both sizes.)"""

import numpy as np
import pytest

import ppo_numpy as P

SHAPES = [(64, 300),  # 19200 entries
          (40, 2000),  # 80000
          (128, 2100)]  # 268800


def _batch(garbage, seed=0, B=64, T=300):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, T + 1, B)
    mask = np.arange(T)[None] < lengths[:, None]
    logp = rng.normal(-1, 0.5, (B, T))
    logp_ref = logp + rng.normal(0, 0.3, (B, T))
    A = rng.normal(size=(B, T))
    rho = np.exp(rng.normal(0, 0.3, (B, T)))
    if garbage is not None:
        logp, logp_ref, A, rho = (np.where(mask, x, garbage) for x in (logp, logp_ref, A, rho))
    return lengths, mask, logp, logp_ref, A, rho, rng.normal(size=B)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("garbage", [None, 1e300, np.nan, np.inf, -3.0])
def test_large_batch_equals_its_rows(garbage, shape):
    lengths, mask, logp, logp_ref, A, rho, scores = _batch(garbage, 0, *shape)
    given = [x.copy() for x in (logp, logp_ref, A, rho)]
    rewards = P.kl_shaped_rewards(scores, logp, logp_ref, 0.1, mask, "k3")
    term = P.clipped_surrogate(rho, A, 0.2, dual_clip=3.0, mask=mask)
    for i, n in enumerate(lengths):
        want = P.kl_shaped_rewards(scores[i], logp[i, :n], logp_ref[i, :n], 0.1, None, "k3")
        np.testing.assert_array_equal(rewards[i, :n], want)
        np.testing.assert_array_equal(term[i, :n],
                                      P.clipped_surrogate(rho[i, :n], A[i, :n], 0.2,
                                                          dual_clip=3.0))
    # exactly 0 at padding, and the inputs untouched
    assert not rewards[~mask].any() and not term[~mask].any()
    for x, y in zip(given, (logp, logp_ref, A, rho)):
        np.testing.assert_array_equal(x, y)


def test_large_batch_names_a_nan_at_a_valid_position():
    lengths, mask, logp, logp_ref, A, rho, scores = _batch(1e300)
    logp_ref[3, lengths[3] - 1] = np.nan
    with pytest.raises(ValueError, match=rf"logp_ref: non-finite value nan at valid position "
                                         rf"\(3, {lengths[3] - 1}\)"):
        P.kl_shaped_rewards(scores, logp, logp_ref, 0.1, mask)


@pytest.mark.parametrize("shape", SHAPES)
def test_clipped_surrogate_names_a_bad_value_in_the_last_row(shape):
    # NaN only at padding is fine; a bad value at the last row's last token is named at its
    # index in the whole array
    lengths, mask, logp, logp_ref, A, rho, scores = _batch(np.nan, 0, *shape)
    i = shape[0] - 1
    t = lengths[i] - 1  # the last row's last token
    bad_A, bad_rho = A.copy(), rho.copy()
    bad_A[i, t], bad_rho[i, t] = np.inf, -0.5
    with pytest.raises(ValueError, match=rf"^advantages: non-finite value inf at valid "
                                         rf"position \({i}, {t}\)"):
        P.clipped_surrogate(rho, bad_A, 0.2, mask=mask)
    with pytest.raises(ValueError, match=rf"^rho: ratios must be >= 0, got -0.5 at index "
                                         rf"\({i}, {t}\)$"):
        P.clipped_surrogate(bad_rho, A, 0.2, mask=mask)
    # a NaN at padding only: no error, and 0 there
    out = P.clipped_surrogate(rho, A, 0.2, mask=mask)
    assert np.isfinite(out).all() and not out[~mask].any()
