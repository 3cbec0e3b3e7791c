"""TD errors delta_t of the objective (docs/objective.md; notebook ``04_td_errors``).

    delta_t = r~_t + gamma V(s_{t+1}) - V(s_t),   V(s_{T+1}) = 0

s_{t+1} is the state after the response token y_t. After the last response
token there is no next state: its value is 0, whatever the value head says
about the padding that follows.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_scalar, prepare, scalar_for, where_valid, zero_like


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


def has_holes(mask: np.ndarray) -> bool:
    """True when some row of a bool mask has padding between two response tokens."""
    # a run of response tokens starts at t = 0, or at t where mask[t - 1] = 0 and mask[t] = 1;
    # every row with a response token has one run, a row with a hole has more
    runs = np.count_nonzero(mask[..., 1:] > mask[..., :-1]) + np.count_nonzero(mask[..., :1])
    return runs > np.count_nonzero(mask.any(axis=-1))


def _td_errors(r: np.ndarray, v: np.ndarray, gamma, m: np.ndarray, holes=None) -> np.ndarray:
    """td_errors on checked arrays: r, v as :func:`prepare` returns them (this call's own
    copies, 0 at padding), gamma in their arithmetic (:func:`scalar_for`), m a bool mask,
    holes = has_holes(m) if known. Without holes delta is computed in ``r``'s memory."""
    if has_holes(m) if holes is None else holes:
        # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
        return where_valid(m, r + gamma * next_valid_values(v, m) - v)
    # why: without holes the next response token is t + 1, and v is 0 at padding, so
    # V(s_{t+1}) = v[t + 1] (0 after the last token); same operations, same rounding
    zero = zero_like(v)
    delta = r
    # delta_t = r_t + gamma V(s_{t+1}) - V(s_t)
    if gamma == 1:
        delta[..., :-1] += v[..., 1:]
    else:
        delta[..., :-1] += gamma * v[..., 1:]
    delta[..., -1:] += zero
    delta -= v
    # padding just before a run that starts after t = 0 holds gamma v[t + 1]
    np.copyto(delta, zero, where=~m)
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
    return _td_errors(r, v, scalar_for(gamma, v), m)
