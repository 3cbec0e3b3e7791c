"""The value head's loss (notebook ``06_advantages_in_practice``).

    L_V,t = 1/2 max( (V_t - R_t)^2 , (V_clip,t - R_t)^2 ),
    V_clip,t = V_old,t + clip(V_t - V_old,t, -c, c)

R_t are the GAE returns. Value clipping is the PPO2 baselines convention
(taken up by TRL's ``cliprange_value`` and verl's ``cliprange_value``); with
``clip_range=None`` the loss is the plain 1/2 (V_t - R_t)^2.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_scalar, prepare, scalar_for, where_valid


def value_loss(values, old_values, returns, mask=None, clip_range=None):
    """Per-token value loss 1/2 max((V - R)^2, (V_clip - R)^2).

    Parameters
    ----------
    values : array (T,) or (B, T)
        V_t from the value head being trained.
    old_values : array, same shape
        V_old,t recorded at rollout time (the centre of the clip range).
    returns : array, same shape
        Targets R_t (e.g. from :func:`gae`).
    mask : array of 0/1, optional
        1 for response tokens; the output is exactly 0 at padding.
    clip_range : float >= 0, optional
        c. ``None`` (default): no clipping.

    Returns
    -------
    float64 array (exact for Fractions), same shape. Aggregate it with :func:`aggregate`.

    Examples
    --------
    V = 1.0, V_old = 0.5, R = 2.0. Unclipped: 1/2 (1 - 2)^2 = 0.5. With c = 0.2,
    V_clip = 0.7 and 1/2 (0.7 - 2)^2 = 0.845 is larger, so it is taken:

    >>> float(value_loss([1.0], [0.5], [2.0])[0])
    0.5
    >>> round(float(value_loss([1.0], [0.5], [2.0], clip_range=0.2)[0]), 12)
    0.845
    """
    (v, v_old, R), m = prepare(
        {"values": values, "old_values": old_values, "returns": returns}, mask
    )
    half = scalar_for(0.5, v)
    # 1/2 (V_t - R_t)^2
    loss = half * (v - R) ** 2
    if clip_range is not None:
        c = scalar_for(check_scalar(clip_range, "clip_range", low=0), v)
        # V_clip = V_old + clip(V - V_old, -c, c)
        v_clip = v_old + np.minimum(np.maximum(v - v_old, -c), c)
        loss = np.maximum(loss, half * (v_clip - R) ** 2)
    return where_valid(m, loss)
