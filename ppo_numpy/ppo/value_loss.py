"""The value head's loss (notebook ``06_advantages_in_practice``).

    L_V,t = 1/2 max( (V_t - R_t)^2 , (V_clip,t - R_t)^2 ),
    V_clip,t = V_old,t + clip(V_t - V_old,t, -c, c)            form="offset" (default)
    V_clip,t = clamp(V_t, V_old,t - c, V_old,t + c)            form="clamp"

R_t are the GAE returns. Value clipping is the PPO2 baselines convention
(taken up by TRL's ``cliprange_value`` and verl's ``cliprange_value``); with
``clip_range=None`` the loss is the plain 1/2 (V_t - R_t)^2.

The two forms are equal in exact arithmetic and differ by rounding: V_old + (V - V_old)
need not round back to V, so a value inside the range or exactly on a bound can be
"clipped" by one ulp in the offset form and not in the clamp form. The default is the
offset form because it is the form of the PPO2 baselines code (openai/baselines
ppo2/model.py: ``OLDVPRED + tf.clip_by_value(vpred - OLDVPRED, -CLIPRANGE, CLIPRANGE)``)
that the objective's value clipping comes from, and OpenRLHF's (openrlhf/models/loss.py
``ValueLoss``); TRL, TRL 0.11, verl, DeepSpeed-Chat and lm-human-preferences clamp V
itself (``form="clamp"``), so their presets pass it.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_choice, check_scalar, prepare, scalar_for

__all__ = ["VALUE_CLIP_FORMS", "clipped_values", "clipped_wins", "value_loss",
           "value_loss_grad_kernel", "value_loss_kernel"]

VALUE_CLIP_FORMS = ("offset", "clamp")


def value_loss(values, old_values, returns, mask=None, clip_range=None, *, form="offset"):
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
    form : {"offset", "clamp"}
        How V_clip is computed (module docstring): ``"offset"`` (default)
        V_old + clip(V - V_old, -c, c); ``"clamp"`` clamp(V, V_old - c, V_old + c).

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
    >>> round(float(value_loss([1.0], [0.5], [2.0], clip_range=0.2, form="clamp")[0]), 12)
    0.845
    """
    (v, v_old, R), m = prepare(
        {"values": values, "old_values": old_values, "returns": returns}, mask
    )
    c = check_value_clip(clip_range)
    form = check_value_clip_form(form)
    # (prepare zeroes v, v_old and R at padding, so the loss is 0 there)
    return value_loss_kernel(v, v_old, R, None if c is None else scalar_for(c, v), form)


def check_value_clip(clip_range):
    """``clip_range`` checked: ``None`` (no clipping) or a real number >= 0."""
    return None if clip_range is None else check_scalar(clip_range, "clip_range", low=0)


def check_value_clip_form(form, name="form"):
    """``form`` checked: ``"offset"`` or ``"clamp"``."""
    return check_choice(form, name, VALUE_CLIP_FORMS, "value clip form")


def clipped_values(v, v_old, c, form="offset"):
    """V_clip of the value loss (unchecked kernel): ``form`` "offset" or "clamp"."""
    if form == "clamp":
        # V_clip = clamp(V, V_old - c, V_old + c)
        return np.minimum(np.maximum(v, v_old - c), v_old + c)
    # V_clip = V_old + clip(V - V_old, -c, c)
    return v_old + np.minimum(np.maximum(v - v_old, -c), c)


def value_loss_kernel(v, v_old, R, c=None, form="offset"):
    """:func:`value_loss` on checked arrays (unchecked kernel): float64 (or exact) arrays of
    one shape, ``c`` >= 0 in their arithmetic or ``None``, ``form`` checked."""
    half = scalar_for(0.5, v)
    # 1/2 (V_t - R_t)^2
    loss = half * (v - R) ** 2
    if c is None:
        return loss
    # 1/2 max( (V_t - R_t)^2 , (V_clip,t - R_t)^2 )
    return np.maximum(loss, half * (clipped_values(v, v_old, c, form) - R) ** 2)


def clipped_wins(v, v_old, R, c, form="offset"):
    """Where the clipped error is strictly the larger (bool; TRL's and verl's ``vf_clipfrac``:
    ``vf_losses2 > vf_losses1``); all False without clipping (unchecked kernel)."""
    if c is None:
        return np.zeros(v.shape, dtype=bool)
    return (clipped_values(v, v_old, c, form) - R) ** 2 > (v - R) ** 2


def value_loss_grad_kernel(v, v_old, R, c=None, form="offset"):
    """dL_t / dV_t of :func:`value_loss_kernel` (unchecked kernel, float64).

    V - R where the unclipped error is the larger or the two tie; (V_clip - R) dV_clip/dV
    where the clipped one wins, dV_clip/dV = 1 inside the range, bounds included (as
    autograd's ``clamp`` gives), 0 outside: outside the range V_clip does not move with V;
    inside it the offset form's V_old + (V - V_old) can differ from V by rounding and win.
    """
    # d/dV of 1/2 (V - R)^2
    dv = v - R
    if c is None:
        return dv
    v_clip = clipped_values(v, v_old, c, form)
    # dV_clip/dV = 1 inside the range (bounds included), 0 outside
    if form == "clamp":
        inside = (v >= v_old - c) & (v <= v_old + c)
    else:
        inside = np.abs(v - v_old) <= c
    return np.where(clipped_wins(v, v_old, R, c, form), (v_clip - R) * inside, dv)
