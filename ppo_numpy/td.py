"""TD errors delta_t of the objective (docs/objective.md; notebook ``04_td_errors``).

    delta_t = r~_t + gamma V(s_{t+1}) - V(s_t),   V(s_{T+1}) = 0

s_{t+1} is the state after the response token y_t. After the last response
token there is no next state: its value is 0, whatever the value head says
about the padding that follows.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_scalar, prepare, scalar_for, zero_like

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
    zero = values[..., :1] * 0
    padded = np.concatenate([values, zero], axis=-1)
    return np.take_along_axis(padded, nxt, axis=-1)


def late_starts(mask: np.ndarray) -> int:
    """Number of runs of response tokens that start after t = 0 in a bool mask: positions t
    where mask[t - 1] = 0 and mask[t] = 1 (padding just before a token)."""
    return np.count_nonzero(mask[..., 1:] > mask[..., :-1])


def has_holes(mask: np.ndarray) -> bool:
    """True when some row of a bool mask has padding between two response tokens."""
    # a run of response tokens starts at t = 0 or late; every row with a response token has
    # one run, a row with a hole has more
    runs = late_starts(mask) + np.count_nonzero(mask[..., :1])
    return runs > np.count_nonzero(mask.any(axis=-1))


def td_errors_kernel(r: np.ndarray, v: np.ndarray, gamma, m: np.ndarray, holes=None, *,
                     overwrite_r=False):
    """:func:`td_errors` on checked arrays (unchecked kernel): ``r``, ``v`` 0 at padding,
    ``gamma`` in their arithmetic (:func:`scalar_for`), ``m`` a bool mask,
    ``holes`` = :func:`has_holes` (m) when known. ``overwrite_r=True``: ``r`` is the
    caller's own, and delta is computed in it (one array fewer to allocate)."""
    # V(s_{t+1}) for t < T: the next response token's value (:func:`next_valid_values`);
    # without holes simply v[t + 1], as v is 0 at padding (a view: no copy)
    holes = has_holes(m) if holes is None else holes
    v_next = next_valid_values(v, m)[..., :-1] if holes else v[..., 1:]
    zero = v.flat[0] * 0 if v.size else 0  # V(s_{T+1}) = 0, in the arithmetic of v
    delta = r if overwrite_r else np.empty_like(v)
    # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
    np.add(r[..., :-1], v_next if gamma == 1 else gamma * v_next, out=delta[..., :-1])
    np.add(r[..., -1], zero if gamma == 1 else gamma * zero, out=delta[..., -1])
    delta -= v
    # at padding r and v are 0, and so is the next value, except at padding just before a
    # response token (left padding, holes): only then is there anything to zero
    if holes or late_starts(m):
        np.copyto(delta, zero_like(v), where=~m)
    return delta


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
    return td_errors_kernel(r, v, scalar_for(gamma, v), m, overwrite_r=True)
