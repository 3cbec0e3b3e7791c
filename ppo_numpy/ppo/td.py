"""TD errors delta_t of the objective (docs/objective.md; notebook ``04_td_errors``).

    delta_t = r~_t + gamma V(s_{t+1}) - V(s_t),   V(s_{T+1}) = 0

s_{t+1} is the state after the response token y_t. After the last response
token there is no next state: its value is 0, whatever the value head says
about the padding that follows.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_scalar, prepare, scalar_for, where_valid, zero_like

__all__ = ["td_errors"]

__all__ = ["has_holes", "td_errors", "td_errors_kernel"]


def next_valid_values(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """V(s_{t+1}) for each position: the value at the next response token, 0 after the last.

    Padding between response tokens (a mask with holes, e.g. a multi-turn
    conversation with the user's turns masked out) is skipped: the next state
    of a response token is the next *response* token. For the usual contiguous
    mask this is simply ``values[t + 1]`` inside the response and 0 after it.
    """
    T = values.shape[-1]
    # index of the next valid position strictly after t (T when there is none)
    pos = np.where(mask, np.arange(T), T)
    nxt = np.minimum.accumulate(pos[..., ::-1], axis=-1)[..., ::-1]
    nxt = np.concatenate([nxt[..., 1:], np.full(nxt.shape[:-1] + (1,), T)], axis=-1)
    # V(s_{T+1}) = 0: index T reads a 0 appended to each row
    padded = np.concatenate([values, np.full(values.shape[:-1] + (1,), zero_like(values))],
                            axis=-1)
    return np.take_along_axis(padded, nxt, axis=-1)


def late_starts(mask: np.ndarray) -> int:
    """Number of runs of response tokens that start after t = 0 in a bool mask: positions t
    where mask[t - 1] = 0 and mask[t] = 1 (padding just before a token)."""
    if mask.ndim != 2 or not mask.flags.c_contiguous:
        return np.count_nonzero(mask[..., 1:] > mask[..., :-1])
    # why: on the flat mask one contiguous pass (the 2-D slices cost twice as much); it also
    # counts row i + 1 starting with a token after row i ends in padding, taken off again
    flat = mask.reshape(-1)
    across = np.count_nonzero(mask[1:, 0] > mask[:-1, -1])
    return np.count_nonzero(flat[1:] > flat[:-1]) - across


def has_holes(mask: np.ndarray, late: int | None = None) -> bool:
    """True when some row of a bool mask has padding between two response tokens (``late``:
    ``late_starts(mask)`` when already counted)."""
    # a run of response tokens starts at t = 0 or late; every row with a response token has
    # one run, a row with a hole has more
    late = late_starts(mask) if late is None else late
    runs = late + np.count_nonzero(mask[..., :1])
    return runs > np.count_nonzero(mask.any(axis=-1))


def td_errors_kernel(r: np.ndarray, v: np.ndarray, gamma, m: np.ndarray) -> np.ndarray:
    """:func:`td_errors` on checked arrays (unchecked kernel): ``r``, ``v`` 0 at padding,
    ``gamma`` in their arithmetic (:func:`scalar_for`), ``m`` a bool mask. A new array."""
    # V(s_{t+1}): the value at the next response token, 0 after the last
    v_next = next_valid_values(v, m)
    # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
    delta = r + gamma * v_next - v
    # padding just before a response token sees a next value: 0 there
    return where_valid(m, delta)


def td_errors(rewards, values, gamma=1.0, mask=None):
    """TD errors delta_t = r_t + gamma V(s_{t+1}) - V(s_t), with V(s_{T+1}) = 0.

    Parameters
    ----------
    rewards : array (T,) or (B, T)
        Per-token rewards r~_t (e.g. from :func:`kl_shaped_rewards`).
    values : array, same shape
        V(s_t): the value of the state *before* response token y_t.
    gamma : float in [0, 1]
        Discount factor. Default 1.0 (usual for RLHF).
    mask : array of 0/1, optional
        1 for response tokens. V(s_{t+1}) is the value at the next response
        token, and 0 after the last one; padding is ignored whatever it holds.

    Returns
    -------
    delta : float64 array (exact Fractions for Fraction input), same shape;
    exactly 0 at padding.

    Examples
    --------
    The running example at beta = 0 (docs/objective.md): rewards [0, 0, 1],
    values [0.5, 0.6, 0.7], gamma 1:
    delta = [0 + 0.6 - 0.5, 0 + 0.7 - 0.6, 1 + 0 - 0.7].

    >>> [round(float(d), 12) for d in td_errors([0, 0, 1], [0.5, 0.6, 0.7])]
    [0.1, 0.1, 0.3]
    """
    gamma = check_scalar(gamma, "gamma", low=0, high=1)
    (r, v), m = prepare({"rewards": rewards, "values": values}, mask)
    return td_errors_kernel(r, v, scalar_for(gamma, v), m)
