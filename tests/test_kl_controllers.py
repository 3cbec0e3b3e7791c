"""beta controllers: the adaptive controller's updates by hand (error clipped to +-0.2 on
both sides), the fixed controller constant."""

import math

import pytest

from ppo_numpy import AdaptiveKLController, FixedKLController


def test_adaptive_updates_by_hand():
    c = AdaptiveKLController(0.1, target=4.0, horizon=10000)
    assert c.value == 0.1
    beta = 0.1
    steps = [
        # (measured KL, n_steps, error = clip(KL / 4 - 1, -0.2, 0.2))
        (6.0, 256, 0.2),     # 6/4 - 1 = 0.5, clipped above
        (4.4, 256, 0.1),     # inside the band
        (1.0, 512, -0.2),    # 1/4 - 1 = -0.75, clipped below
        (3.6, 128, -0.1),    # inside the band
        (4.0, 256, 0.0),     # on target: beta unchanged
        (100.0, 0, 0.2),     # no steps: beta unchanged
    ]
    for kl, n, err in steps:
        beta = beta * (1 + err * n / 10000)
        got = c.update(kl, n)
        assert math.isclose(got, beta, rel_tol=1e-14), (
            f"after KL={kl}, n_steps={n}: expected {beta!r}, got {got!r}")
        assert got == c.value


def test_adaptive_first_update_written_out():
    c = AdaptiveKLController(0.1, target=4.0, horizon=10000)
    # 0.1 * (1 + 0.2 * 256 / 10000) = 0.1 * 1.00512
    assert math.isclose(c.update(6.0, 256), 0.100512, rel_tol=1e-14)


def test_adaptive_clip_is_symmetric_in_the_error_not_in_kl():
    up = AdaptiveKLController(1.0, target=2.0, horizon=100)
    down = AdaptiveKLController(1.0, target=2.0, horizon=100)
    # KL 1000 and KL 0 both saturate: beta * (1 +- 0.2 * 10 / 100)
    assert math.isclose(up.update(1000.0, 10), 1.02, rel_tol=1e-15)
    assert math.isclose(down.update(0.0, 10), 0.98, rel_tol=1e-15)


def test_negative_kl_estimate_is_accepted_and_lowers_beta():
    c = AdaptiveKLController(0.5, target=1.0, horizon=10)
    assert math.isclose(c.update(-0.3, 1), 0.5 * (1 - 0.2 / 10), rel_tol=1e-15)


def test_fixed_controller_is_constant():
    c = FixedKLController(0.05)
    for kl, n in [(3.0, 64), (0.0, 1), (-1.0, 10), (1e6, 10**6)]:
        assert c.update(kl, n) == 0.05
        assert c.value == 0.05


def test_zero_beta_is_allowed_and_stays_zero():
    assert FixedKLController(0.0).update(5.0, 10) == 0.0
    c = AdaptiveKLController(0.0, target=1.0, horizon=10)
    assert c.update(5.0, 10) == 0.0


@pytest.mark.parametrize("cls", [AdaptiveKLController, FixedKLController])
def test_repr_names_beta(cls):
    c = cls(0.25, 1.0, 10) if cls is AdaptiveKLController else cls(0.25)
    assert "0.25" in repr(c) and cls.__name__ in repr(c)
