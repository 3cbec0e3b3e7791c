"""KL coefficient controllers: how beta moves during training.

Adaptive controller of Ziegler et al. (2019), "Fine-Tuning Language Models from
Human Preferences", section 2.2 (also TRL's ``AdaptiveKLController``):

    e_t = clip( KL_t / KL_target - 1, -0.2, 0.2 ),
    beta_{t+1} = beta_t (1 + K_beta e_t),   K_beta = n_steps / horizon

``current_kl`` is the KL to the reference of the latest batch, measured as the
mean over sequences of the per-token KL summed over each response.
"""

from __future__ import annotations

from .._checks import check_scalar


class FixedKLController:
    """beta that never changes.

    >>> c = FixedKLController(0.05)
    >>> c.update(current_kl=3.0, n_steps=64), c.value
    (0.05, 0.05)
    """

    def __init__(self, beta):
        self.value = check_scalar(beta, "beta", low=0, allow_exact=False)

    def update(self, current_kl, n_steps):
        check_scalar(current_kl, "current_kl")
        check_scalar(n_steps, "n_steps", low=0)
        return self.value

    def __repr__(self):
        return f"FixedKLController(beta={self.value})"


class AdaptiveKLController:
    """Proportional controller pushing the measured KL towards ``target``.

    Parameters
    ----------
    init_beta : float >= 0
        Starting beta.
    target : float > 0
        KL_target, in nats per sequence.
    horizon : float > 0
        Steps (sequences) over which a full error would change beta by 100%.

    Examples
    --------
    KL 6 against target 4: error = clip(6/4 - 1, -0.2, 0.2) = 0.2;
    with 256 sequences and horizon 10000, beta = 0.1 * (1 + 0.2 * 0.0256) = 0.100512.

    >>> c = AdaptiveKLController(0.1, target=4.0, horizon=10000)
    >>> round(c.update(6.0, 256), 12)
    0.100512

    KL 3.6 against target 4: error = -0.1, beta = 0.100512 * (1 - 0.00256):

    >>> round(c.update(3.6, 256), 12)
    0.10025468928
    """

    def __init__(self, init_beta, target, horizon):
        self.value = check_scalar(init_beta, "init_beta", low=0, allow_exact=False)
        self.target = check_scalar(target, "target", low=0, low_open=True, allow_exact=False)
        self.horizon = check_scalar(horizon, "horizon", low=0, low_open=True, allow_exact=False)

    def update(self, current_kl, n_steps):
        current_kl = check_scalar(current_kl, "current_kl", allow_exact=False)
        n_steps = check_scalar(n_steps, "n_steps", low=0, allow_exact=False)
        # e_t = clip(KL_t / KL_target - 1, -0.2, 0.2)
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        # beta_{t+1} = beta_t (1 + K_beta e_t)
        self.value = self.value * (1.0 + error * n_steps / self.horizon)
        return self.value

    def __repr__(self):
        return (f"AdaptiveKLController(beta={self.value}, target={self.target}, "
                f"horizon={self.horizon})")
