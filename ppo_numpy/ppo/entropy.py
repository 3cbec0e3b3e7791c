"""Per-token entropy of the policy (an exploration bonus and a health signal).

    H_t = -sum_k p_k log p_k,   p = softmax(z_t)
        = logsumexp(z_t) - sum_k p_k z_k

computed with the maximum subtracted, so large logits do not overflow.
"""

from __future__ import annotations

import numpy as np

from .._checks import as_array, as_mask, check_finite, where_valid

__all__ = ["entropy_from_logits", "entropy_kernel", "log_softmax", "log_softmax_kernel",
           "prepare_logits"]


def log_softmax(logits):
    """Stable log softmax over the last axis: z - max(z) - log sum exp(z - max(z)).

    >>> [round(float(v), 6) for v in log_softmax(np.array([0.0, 0.0]))]
    [-0.693147, -0.693147]
    """
    z = as_array(logits, "logits", exact=False)
    if z.ndim == 0:
        raise ValueError("logits: expected at least one axis (the vocabulary), got a scalar")
    _check_vocab(z)
    return log_softmax_kernel(z)


def log_softmax_kernel(z: np.ndarray) -> np.ndarray:
    """:func:`log_softmax` of a float64 array (unchecked kernel)."""
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def entropy_kernel(logq: np.ndarray) -> np.ndarray:
    """H = -sum_k p_k log p_k from log-probabilities ``logq`` (..., K) (unchecked kernel)."""
    return -(np.exp(logq) * logq).sum(axis=-1)


def _check_vocab(z):
    if z.shape[-1] == 0:
        raise ValueError(f"logits: empty vocabulary (K = 0 on the last axis), got shape {z.shape}")


def prepare_logits(logits, mask=None):
    """Checked float64 copy of ``logits`` (T, K) or (B, T, K), 0 at padding, and the bool mask.

    NaN or inf are allowed only at padding (mask 0), where they are replaced by 0.
    """
    z = as_array(logits, "logits", exact=False)
    if z.ndim not in (2, 3):
        raise ValueError(f"logits: expected shape (T, K) or (B, T, K), got shape {z.shape}")
    _check_vocab(z)
    m = as_mask(mask, z[..., 0], "logits[..., 0]")
    check_finite(z, "logits", np.broadcast_to(m[..., None], z.shape))
    return np.where(m[..., None], z, 0.0), m


def entropy_from_logits(logits, mask=None):
    """Entropy of softmax(logits) over the vocabulary, per token.

    Parameters
    ----------
    logits : array (T, K) or (B, T, K)
        Unnormalised next-token scores.
    mask : array of 0/1 of shape logits.shape[:-1], optional
        1 for response tokens; the output is exactly 0 at padding.

    Returns
    -------
    float64 array of shape logits.shape[:-1], in nats.

    Examples
    --------
    Uniform over 4 tokens gives log 4; a near-certain token gives about 0:

    >>> [round(float(h), 6) for h in entropy_from_logits([[0.0, 0.0, 0.0, 0.0], [50.0, 0, 0, 0]])]
    [1.386294, 0.0]
    """
    z, m = prepare_logits(logits, mask)
    return where_valid(m, entropy_kernel(log_softmax_kernel(z)))
