"""Value loss 1/2 max((V - R)^2, (V_clip - R)^2), V_clip = V_old + clip(V - V_old, -c, c):
clipped and unclipped by hand, including the flat region far from V_old."""

from fractions import Fraction as F

import numpy as np

from ppo_numpy import value_loss
from tests._helpers import assert_close, assert_exact, assert_zero_at_padding

HALF = F(1, 2)


def test_unclipped_by_hand():
    V, R = [F(1), F(3, 2), F(-1)], [F(2), F(1, 2), F(1)]
    want = [HALF * (F(1) - 2) ** 2, HALF * (F(3, 2) - F(1, 2)) ** 2, HALF * (F(-1) - 1) ** 2]
    assert want == [F(1, 2), F(1, 2), F(2)]
    assert_exact(value_loss(V, [F(0)] * 3, R), want, values=V, returns=R)


def test_clipped_by_hand_inside_and_outside_the_range():
    # V_old = 1/2, R = 2, c = 1/5: V_clip in [3/10, 7/10].
    V_old, R, c = F(1, 2), F(2), F(1, 5)
    cases = {
        # V inside the range: V_clip = V, both terms equal 1/2 (3/5 - 2)^2
        F(3, 5): HALF * (F(3, 5) - 2) ** 2,
        # V above the range but nearer R than V_clip = 7/10: the clipped term wins
        F(1): max(HALF * (F(1) - 2) ** 2, HALF * (F(7, 10) - 2) ** 2),
        # V below the range: V_clip = 3/10; the unclipped term is larger
        F(0): max(HALF * (F(0) - 2) ** 2, HALF * (F(3, 10) - 2) ** 2),
        # V far above, past R: unclipped 1/2 (4 - 2)^2 = 2 > 1/2 (13/10)^2
        F(4): max(HALF * (F(4) - 2) ** 2, HALF * (F(7, 10) - 2) ** 2),
    }
    assert list(cases.values()) == [F(49, 50), F(169, 200), F(2), F(2)]
    V = list(cases)
    got = value_loss(V, [V_old] * 4, [R] * 4, clip_range=c)
    assert_exact(got, list(cases.values()), values=V, old_values=V_old, returns=R, clip_range=c)


def test_flat_region_far_from_old_value():
    # For V in (7/10, 33/10) the loss is 1/2 (7/10 - 2)^2 = 169/200 whatever V is:
    # V moved more than c from V_old and the clipped term dominates (no gradient).
    V = [F(71, 100), F(1), F(2), F(3), F(329, 100)]
    got = value_loss(V, [F(1, 2)] * 5, [F(2)] * 5, clip_range=F(1, 5))
    assert_exact(got, [F(169, 200)] * 5, values=V)
    # float input, clip_range 0.2
    got = value_loss([1.0, 2.0, 3.0], [0.5] * 3, [2.0] * 3, clip_range=0.2)
    assert_close(got, [0.5 * 1.3**2] * 3, rtol=1e-14, atol=0)


def test_clip_range_zero_pins_v_clip_to_old_value():
    got = value_loss([F(5)], [F(1)], [F(2)], clip_range=0)
    assert_exact(got, [max(HALF * 9, HALF * 1)])


def test_no_clip_ignores_old_values():
    got = value_loss([1.0, 2.0], [1e6, -1e6], [0.0, 0.0])
    assert_close(got, [0.5, 2.0], rtol=0, atol=0)


def test_float_doc_example_and_dtype():
    got = value_loss([1.0], [0.5], [2.0], clip_range=0.2)
    assert got.dtype == np.float64
    assert_close(got, [0.5 * (0.7 - 2.0) ** 2], rtol=1e-14, atol=0)
    got = value_loss(np.array([1], dtype=np.int32), np.array([0.5], dtype=np.float32), [2])
    assert got.dtype == np.float64
    assert_close(got, [0.5], rtol=0, atol=0)


def test_padding_is_zero_whatever_it_holds():
    V = np.array([[1.0, np.nan], [np.inf, 0.0]])
    V_old = np.array([[0.5, 3.0], [-np.inf, 0.0]])
    R = np.array([[2.0, 1e300], [np.nan, 1.0]])
    mask = np.array([[1, 0], [0, 1]])
    for c in (None, 0.2):
        got = value_loss(V, V_old, R, mask, clip_range=c)
        assert np.all(np.isfinite(got)), got
        assert_zero_at_padding(got, mask, "value loss", clip_range=c)
    got = value_loss(V, V_old, R, mask, clip_range=0.2)
    assert_close(got, [[0.5 * 1.3**2, 0.0], [0.0, 0.5]], rtol=1e-14, atol=0)


# --------------------------------------------------------------------------------------
# The two forms of the clip: V_old + clip(V - V_old, -c, c) and clamp(V, V_old - c, V_old + c)


def test_the_two_forms_differ_by_one_ulp_at_the_bound():
    from ppo_numpy.grads.loss_grads import value_loss_grad
    from ppo_numpy.ppo.value_loss import clipped_values, clipped_wins

    # V_old = -0.1, c = 0.2: the upper bound fl(-0.1 + 0.2) is 0.1. V one ulp below it:
    # V - V_old rounds to 0.2 = c exactly, and V_old + 0.2 = 0.1, one ulp above V; the
    # clamp form keeps V (it is inside). R = 0.09 is below both, so the offset form's
    # clipped error (0.1 - 0.09)^2 is strictly the larger: one form counts a clip
    v = np.nextafter(0.1, 0.0)
    assert -0.1 + 0.2 == 0.1 and v - (-0.1) == 0.2 and v < 0.1
    V, V_old, R = np.array([v]), np.array([-0.1]), np.array([0.09])
    assert clipped_values(V, V_old, 0.2)[0] == 0.1 and bool(clipped_wins(V, V_old, R, 0.2)[0])
    assert clipped_values(V, V_old, 0.2, "clamp")[0] == v
    assert not bool(clipped_wins(V, V_old, R, 0.2, "clamp")[0])
    assert value_loss(V, V_old, R, clip_range=0.2)[0] == 0.5 * (0.1 - 0.09) ** 2
    assert value_loss(V, V_old, R, clip_range=0.2, form="clamp")[0] == 0.5 * (v - 0.09) ** 2
    # inside the range both derivatives are (V_clip - R) or (V - R): within one ulp
    g_off = value_loss_grad(V, V_old, R, clip_range=0.2)[0]
    g_clamp = value_loss_grad(V, V_old, R, clip_range=0.2, form="clamp")[0]
    assert g_off == 0.1 - 0.09 and g_clamp == v - 0.09
    # exactly on the bound both forms give V_clip = V: a tie, not a clip
    on = np.array([0.1])
    for form in ("offset", "clamp"):
        assert clipped_values(on, V_old, 0.2, form)[0] == 0.1
        assert not bool(clipped_wins(on, V_old, R, 0.2, form)[0])


def test_the_form_is_checked():
    import pytest

    with pytest.raises(ValueError, match=r"^form: unknown value clip form 'clip'; "
                                         r"valid ones are offset, clamp"):
        value_loss([1.0], [0.5], [2.0], clip_range=0.2, form="clip")
