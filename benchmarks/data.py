"""The synthetic batch every benchmark uses: float64, right-padded responses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Batch:
    """One (B, T) batch. Shapes: ``scores`` (B,), every other array (B, T)."""

    scores: np.ndarray
    logp: np.ndarray
    logp_old: np.ndarray
    logp_ref: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    advantages: np.ndarray
    rho: np.ndarray
    mask: np.ndarray

    @property
    def shape(self):
        return self.mask.shape


def make_batch(B: int, T: int, seed: int = 0) -> Batch:
    """A reproducible batch: response lengths uniform in [T/2, T] (row 0 has length T).

    Right padding, as the RLHF frameworks lay out responses; the mask is bool;
    log-probabilities are negative and within about 0.3 of each other, so some
    ratios fall outside a clip range of 0.2 and both branches are exercised.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(1, T // 2), T + 1, size=B)
    lengths[0] = T
    mask = np.arange(T)[None, :] < lengths[:, None]
    logp_old = -rng.exponential(1.0, size=(B, T))
    logp = logp_old + rng.normal(0.0, 0.15, size=(B, T))
    logp_ref = logp_old + rng.normal(0.0, 0.1, size=(B, T))
    values = rng.normal(0.0, 1.0, size=(B, T))
    rewards = rng.normal(0.0, 0.1, size=(B, T))
    advantages = rng.normal(0.0, 1.0, size=(B, T))
    rho = np.exp(logp - logp_old)
    scores = rng.normal(0.0, 1.0, size=B)
    return Batch(scores=scores, logp=logp, logp_old=logp_old, logp_ref=logp_ref, values=values,
                 rewards=rewards, advantages=advantages, rho=rho, mask=mask)
