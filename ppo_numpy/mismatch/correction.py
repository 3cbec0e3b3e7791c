"""The third policy: corrections for the mismatch between the sampler and the trainer.

The responses were sampled by an inference engine (vLLM, SGLang), whose log-probabilities
``logp_rollout`` of the sampled tokens differ from the trainer's ``logp_old`` for the same
weights (other kernels, precision, batch shapes). The objective's ratio pi_theta / pi_old
assumes the samples came from pi_old; they came from pi_rollout. Two corrections:

* :func:`rollout_importance_weights`: importance weights w = pi_old / pi_rollout, per token
  or per response, truncated or masked, that multiply each token's loss term
  (``is_weights=`` of :func:`ppo_numpy.ppo_policy_loss`);
* :func:`rollout_rejection_mask`: verl's rejection sampling, a keep-mask from a divergence
  estimate (token, or a response's sum, mean or max) compared with a threshold.

Both read the log-ratio

    log w_t = logp_old_t - logp_rollout_t   (= log pi_old(y_t) / pi_rollout(y_t))

How TRL 1.16, verl 0.9.1 and OpenRLHF 0.11.2 each correct, with numbers that tell them
apart: ``docs/conventions.md``, section 14. ``python -m ppo_numpy explain rollout-is``
prints the steps for one response.
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import check_choice, check_scalar, prepare

__all__ = ["CRITERIA", "DIVERGENCES", "IS_LEVELS", "IS_MODES", "SAFETY_BOUND",
           "rollout_divergence_gate", "rollout_importance_weights", "rollout_rejection_mask"]

#: the levels of :func:`rollout_importance_weights`
IS_LEVELS = ("token", "sequence", "geometric")
#: what :func:`rollout_importance_weights` does with a weight outside its bounds
IS_MODES = ("truncate", "mask")
#: verl 0.9.1's rejection criteria (``rollout_rs``), in its order
CRITERIA = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
            "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
#: verl's bound on the log-ratio before exp (``rollout_corr_helper.SAFETY_BOUND``)
SAFETY_BOUND = 20.0
#: the divergences of :func:`rollout_divergence_gate` (OpenRLHF's ``is_correction_gating``)
DIVERGENCES = ("binary_kl", "tv")
#: the bound OpenRLHF 0.11.2 clamps both probabilities to, [c, 1 - c], before a divergence
PROB_CLAMP = 1e-6


def _bound(value, name: str, *, positive: bool):
    """``None``, or a finite real number > 0 (``positive``) or >= 0, as a float."""
    if value is None:
        return None
    return check_scalar(value, name, low=0, low_open=positive, allow_exact=False)


def _log_ratio(logp_old, logp_rollout, mask):
    """(log w (B, T) float64 0 at padding, bool mask (B, T), the input's shape)."""
    (lp_old, lp_roll), m = prepare({"logp_old": logp_old, "logp_rollout": logp_rollout}, mask,
                                   exact=False)
    shape = lp_old.shape
    # log w_t = logp_old_t - logp_rollout_t   (0 at padding: prepare zeroes both there)
    return (lp_old - lp_roll).reshape(-1, shape[-1]), m.reshape(-1, shape[-1]), shape


def rollout_importance_weights(logp_old, logp_rollout, mask=None, *, level="token",
                               mode="truncate", clip_max=2.0, clip_min=None,
                               batch_normalize=False, log_ratio_bound=None):
    """Importance weights pi_old / pi_rollout for the sampler-trainer mismatch, (B, T).

    With log w_t = logp_old_t - logp_rollout_t and n_i the response tokens of row i:

        level="token":      w_t = exp(log w_t)
        level="sequence":   w_t = exp(sum_t' log w_t')         (one weight per response)
        level="geometric":  g_i = exp((1/n_i) sum_t' log w_t')  (the ratios' geometric mean)
                            w_t = exp(log w_t) if clip_min <= g_i <= clip_max, else 0

    then, for ``"token"`` and ``"sequence"``,

        mode="truncate":    w_t = clip(w_t, clip_min, clip_max)     (TIS)
        mode="mask":        w_t = w_t if clip_min <= w_t <= clip_max, else 0   (MIS, IcePop)

    a bound ``None`` being no bound on that side. ``level="geometric"`` is OpenRLHF 0.11.2's
    sequence gate (``is_correction_level="seq"``, ``is_correction_gating="ratio"``,
    ``is_correction_mode="mask"``): the statistic is g_i, a response outside the band is
    dropped, and a kept one keeps its *unclamped token* ratios; it takes ``mode="mask"``
    only (OpenRLHF refuses the sequence level with ``clip``).

    Parameters
    ----------
    logp_old : array (T,) or (B, T)
        The trainer's log pi_old of the sampled tokens.
    logp_rollout : array, same shape
        The inference engine's log pi_rollout of the same tokens.
    mask : array of 0/1, same shape, optional
        1 for response tokens. Whatever the log-probs hold at padding (NaN included) is
        ignored.
    level : {"token", "sequence", "geometric"}
        Default ``"token"``.
    mode : {"truncate", "mask"}
        Default ``"truncate"``.
    clip_max : float > 0, optional
        Upper bound. Default 2.0 (verl's ``rollout_is_threshold``); ``None``: none.
    clip_min : float >= 0, optional
        Lower bound, <= ``clip_max``. Default ``None``: none.
    batch_normalize : bool
        Divide the weights, after truncation or masking, by their mean: over the response
        tokens (token and geometric levels) or over the responses (sequence level: one weight
        each), unless that mean is <= 1e-8, as verl's ``rollout_is_batch_normalize`` does.
        verl divides the token sum by (count + 1e-8): a relative difference below 1e-8.
        Default ``False``.
    log_ratio_bound : float > 0, optional
        Clamp the log-ratio to [-b, b] before exp: each token's (token and geometric
        levels) or the sequence's sum (sequence level). verl always uses 20
        (``SAFETY_BOUND``); TRL and OpenRLHF none. Default ``None``: none.

    Returns
    -------
    w : float64 array, the shape of ``logp_old``; exactly 0 at padding. No gradient flows
    through it (frameworks detach it): pass it as ``is_weights=``.

    Examples
    --------
    Token ratios [4, 1/2, 1/2] (their product 1) and a one-token response with ratio 8:

    >>> import numpy as np
    >>> lp_old = np.log([[0.8, 0.2, 0.4], [0.8, 0.5, 0.5]])
    >>> lp_roll = np.log([[0.2, 0.4, 0.8], [0.1, 0.5, 0.5]])
    >>> m = [[1, 1, 1], [1, 0, 0]]
    >>> rollout_importance_weights(lp_old, lp_roll, m).round(12).tolist()  # TIS, max 2
    [[2.0, 0.5, 0.5], [2.0, 0.0, 0.0]]
    >>> rollout_importance_weights(lp_old, lp_roll, m, mode="mask").round(12).tolist()
    [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]]
    >>> rollout_importance_weights(lp_old, lp_roll, m, level="sequence",
    ...                            clip_max=3.0).round(12).tolist()
    [[1.0, 1.0, 1.0], [3.0, 0.0, 0.0]]

    OpenRLHF's gate, band [0.5, 5]: the first response's geometric mean is 1, so it keeps
    its token ratios, 4 included; the second's is 8, outside the band:

    >>> rollout_importance_weights(lp_old, lp_roll, m, level="geometric", mode="mask",
    ...                            clip_min=0.5, clip_max=5.0).round(12).tolist()
    [[4.0, 0.5, 0.5], [0.0, 0.0, 0.0]]
    """
    check_choice(level, "level", IS_LEVELS, "level")
    check_choice(mode, "mode", IS_MODES, "mode")
    clip_max = _bound(clip_max, "clip_max", positive=True)
    clip_min = _bound(clip_min, "clip_min", positive=False)
    if clip_max is not None and clip_min is not None and clip_min > clip_max:
        raise ValueError(f"clip_min: must be <= clip_max, got clip_min={clip_min} > "
                         f"clip_max={clip_max}")
    if not isinstance(batch_normalize, (bool, np.bool_)):
        raise TypeError(f"batch_normalize: expected True or False, got "
                        f"{type(batch_normalize).__name__} {batch_normalize!r}")
    b = _bound(log_ratio_bound, "log_ratio_bound", positive=True)
    if level == "geometric" and mode != "mask":
        raise ValueError(f"mode: level='geometric' (OpenRLHF's sequence gate) drops whole "
                         f"responses and takes mode='mask' only, got mode={mode!r}")
    log_w, m, shape = _log_ratio(logp_old, logp_rollout, mask)
    lo = -np.inf if clip_min is None else clip_min
    hi = np.inf if clip_max is None else clip_max

    stat, w = is_statistic_kernel(log_w, m, level, b)
    if level == "geometric":
        # keep the response if lo <= g_i <= hi, with its token ratios
        w = np.where((stat >= lo) & (stat <= hi), w, 0.0)
    elif mode == "truncate":
        w = np.minimum(np.maximum(w, lo), hi)
    else:
        w = np.where((w >= lo) & (w <= hi), w, 0.0)
    w = np.where(m, w, 0.0)  # (B, T), exactly 0 at padding

    if batch_normalize:
        has = m.any(axis=-1)
        if level == "sequence":
            # the mean of one weight per response (the rows with a token)
            first = np.argmax(m, axis=-1)
            per_row = w[np.arange(w.shape[0]), first]
            mean = per_row[has].sum() / max(np.count_nonzero(has), 1)
        else:
            mean = w.sum() / max(np.count_nonzero(m), 1)
        if mean > 1e-8:
            w = w / mean
    return w.reshape(shape) + 0.0


def is_statistic_kernel(log_w, m, level: str, b=None):
    """``(statistic, w)`` of checked log-ratios ``log_w`` (B, T), 0 at padding (kernel).

    The statistic is what a level compares with the bounds: the token ratio (B, T), the
    sequence ratio exp(sum_t log w_t) (B, 1) or the geometric mean exp(mean_t log w_t)
    (B, 1); ``w`` is the weight before the bounds: the statistic itself, or the token ratios
    at the geometric level. ``b``: the log-ratio bound (each token's, or the sum's).
    """
    if level == "sequence":
        # log w_i = sum_t log w_t   (B, 1), clamped to [-b, b] before exp
        log_w = log_w.sum(axis=-1, keepdims=True)
    if b is not None:
        log_w = np.clip(log_w, -b, b)
    w = np.exp(log_w)  # (B, T), or (B, 1) at the sequence level
    if level != "geometric":
        return w, w
    # g_i = exp((1/n_i) sum_t log w_t)   (B, 1)
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    return np.exp(log_w.sum(axis=-1, keepdims=True) / n), w


def rollout_rejection_mask(logp_old, logp_rollout, mask=None, *, criterion, low=None,
                           high=None):
    """verl 0.9.1's rejection sampling (``rollout_rs``): True where a token is kept, (B, T).

    With log w_t = logp_old_t - logp_rollout_t clamped to [-20, 20] (verl's
    ``SAFETY_BOUND``, always applied) and the per-token estimators

        k1_t = -log w_t,    k2_t = (log w_t)^2 / 2,    k3_t = (w_t - 1) - log w_t

    a criterion reads one statistic per token (``token_k*``) or per response over its tokens
    (``seq_sum_k*``: the sum, ``seq_mean_k*``: the mean, ``seq_max_k*``: the max) and keeps

        k1 criteria:        log(low) <= statistic <= log(high)
        k2, k3 criteria:    statistic <= high

    A sequence criterion keeps or drops all of a response's tokens. The mask is False at
    padding. verl chains several criteria (``"token_k1,seq_max_k2"``) by AND: combine the
    masks of single calls with ``&``.

    Note the k1 statistic is -log w = log(pi_rollout / pi_old): ``low`` and ``high`` bound
    pi_rollout / pi_old, the *inverse* of the importance weight, so a token is kept when
    1/high <= w <= 1/low. With the one-bound default low = 1/high the band is symmetric and
    the two readings agree.

    Parameters
    ----------
    logp_old, logp_rollout, mask
        As in :func:`rollout_importance_weights`.
    criterion : str
        One of ``CRITERIA`` (required).
    low : float > 0, optional
        k1 criteria only: the lower bound; ``None``: 1 / high (verl's single threshold).
        verl's ``"low_upper"`` string is ``low=..., high=...``. The k2 and k3 criteria take
        an upper bound only (verl refuses a ``"low_upper"`` threshold for them).
    high : float > 0
        The threshold (required, ``rollout_rs_threshold``); for k1, >= ``low`` (so >= 1
        without ``low``: verl refuses 1/high > high too).

    Returns
    -------
    keep : bool array, the shape of ``logp_old``; False at padding.

    Notes
    -----
    verl's ``seq_mean`` divides by (count + 1e-8) and its k3 is exp(x) - 1 - x; here the mean
    divides by the count and k3 is expm1(x) - x: the two differ by rounding, which can decide
    only a statistic within about 1e-8 (relative) of the threshold.

    Examples
    --------
    Token ratios w = [4, 1/2, 1/2] and a one-token response with w = 8. token_k1 with high 1.5
    (low 2/3) keeps neither 4 nor 1/2; seq_sum_k1 reads the first response's sum, log 1 = 0,
    and keeps it:

    >>> import numpy as np
    >>> lp_old = np.log([[0.8, 0.2, 0.4], [0.8, 0.5, 0.5]])
    >>> lp_roll = np.log([[0.2, 0.4, 0.8], [0.1, 0.5, 0.5]])
    >>> m = [[1, 1, 1], [1, 0, 0]]
    >>> rollout_rejection_mask(lp_old, lp_roll, m, criterion="token_k1", high=1.5).tolist()
    [[False, False, False], [False, False, False]]
    >>> rollout_rejection_mask(lp_old, lp_roll, m, criterion="seq_sum_k1", high=1.5).tolist()
    [[True, True, True], [False, False, False]]

    seq_max_k2 with high 1: the first response's largest k2 is (log 4)^2 / 2 = 0.96, the
    second's (log 8)^2 / 2 = 2.16:

    >>> rollout_rejection_mask(lp_old, lp_roll, m, criterion="seq_max_k2", high=1.0).tolist()
    [[True, True, True], [False, False, False]]
    """
    check_choice(criterion, "criterion", CRITERIA, "rejection criterion")
    if high is None:
        raise ValueError(f"high: criterion {criterion!r} needs a threshold (verl's "
                         "rollout_rs_threshold), got None")
    high = _bound(high, "high", positive=True)
    k1 = criterion.endswith("k1")
    if k1 and low is None:
        if high < 1:
            raise ValueError(f"high: a k1 criterion with one bound keeps [1/high, high], "
                             f"which needs high >= 1, got {high} (or give low too)")
        low = 1.0 / high
    elif k1:
        low = _bound(low, "low", positive=True)
        if low > high:
            raise ValueError(f"low: must be <= high, got low={low} > high={high}")
    elif low is not None:
        raise ValueError(f"low: criterion {criterion!r} takes an upper bound only (high), "
                         f"got low={low!r}")
    log_w, m, shape = _log_ratio(logp_old, logp_rollout, mask)
    log_w = np.clip(log_w, -SAFETY_BOUND, SAFETY_BOUND)
    estimator = criterion[-2:]
    if estimator == "k1":
        # k1_t = -log w_t = log(pi_rollout / pi_old)
        stat = -log_w
    elif estimator == "k2":
        # k2_t = (log w_t)^2 / 2
        stat = np.square(log_w) / 2
    else:
        # k3_t = (w_t - 1) - log w_t
        stat = np.expm1(log_w) - log_w
    stat = np.where(m, stat, 0.0)
    if criterion.startswith("seq_sum"):
        stat = stat.sum(axis=-1, keepdims=True)
    elif criterion.startswith("seq_mean"):
        stat = stat.sum(axis=-1, keepdims=True) / np.maximum(m.sum(axis=-1, keepdims=True), 1)
    elif criterion.startswith("seq_max"):
        # the estimators k2, k3 are >= 0: the max over the response tokens
        stat = np.where(m, stat, -np.inf).max(axis=-1, keepdims=True)
    if k1:
        keep = (stat >= math.log(low)) & (stat <= math.log(high))
    else:
        keep = stat <= high
    return (keep & m).reshape(shape)


def rollout_divergence_gate(logp_old, logp_rollout, mask=None, *, divergence, high, low=0.0,
                            level="token"):
    """OpenRLHF 0.11.2's divergence gate: token ratios where a divergence is small, (B, T).

    With the sampled token's probabilities under the rollout and the trainer's old policy,
    p_t = clip(exp(logp_rollout_t), c, 1 - c) and q_t = clip(exp(logp_old_t), c, 1 - c),
    c = 1e-6 (``PROB_CLAMP``, OpenRLHF's clamp that keeps the logs finite):

        binary_kl:  d_t = p_t log(p_t / q_t) + (1 - p_t) log((1 - p_t) / (1 - q_t))
        tv:         d_t = |p_t - q_t|

    (the KL and the total variation between the two Bernoulli distributions "this token or
    another"). ``level="token"`` reads d_t, ``"sequence"`` the mean of d over the response's
    tokens (one statistic per response). A unit with ``low`` <= statistic <= ``high`` keeps
    the token ratios w_t = exp(logp_old_t - logp_rollout_t) (unclamped); one outside gets 0.
    ``low`` is 0 by default, as OpenRLHF 0.11.2 makes one threshold [0, h]
    (``openrlhf/models/loss.py``, ``cli/train_ppo_ray.py``): a divergence is >= 0 in exact
    arithmetic, but the binary KL of two nearly equal probabilities rounds below 0, and
    OpenRLHF then drops the token (``docs/conventions.md`` section 14); a negative ``low``
    keeps such tokens.

    Parameters
    ----------
    logp_old, logp_rollout, mask
        As in :func:`rollout_importance_weights`.
    divergence : {"binary_kl", "tv"}
        ``is_correction_gating`` (required).
    high : float > 0
        The bound (OpenRLHF's ``is_correction_threshold`` HIGH, required).
    low : float <= high
        The lower bound (OpenRLHF's LOW; 0 for one threshold). Default 0.0.
    level : {"token", "sequence"}
        ``is_correction_level`` ``"token"`` or ``"seq"``. Default ``"token"``.

    Returns
    -------
    w : float64 array, the shape of ``logp_old``; 0 at padding and where the gate drops.

    Examples
    --------
    Token probabilities 0.5 -> 0.6 under the rollout (trainer 0.5: w = 5/6, tv 0.1) and
    0.2 -> 0.2 (w = 1, tv 0):

    >>> import numpy as np
    >>> lp_old, lp_roll = np.log([[0.5, 0.2]]), np.log([[0.6, 0.2]])
    >>> rollout_divergence_gate(lp_old, lp_roll, divergence="tv", high=0.05).round(12).tolist()
    [[0.0, 1.0]]
    >>> rollout_divergence_gate(lp_old, lp_roll, divergence="tv", high=0.06,
    ...                         level="sequence").round(12).tolist()  # mean tv 0.05
    [[0.833333333333, 1.0]]
    """
    check_choice(divergence, "divergence", DIVERGENCES, "divergence")
    check_choice(level, "level", ("token", "sequence"), "level")
    if high is None:
        raise ValueError("high: the divergence gate needs an upper bound (OpenRLHF's "
                         "is_correction_threshold), got None")
    high = _bound(high, "high", positive=True)
    low = check_scalar(low, "low", allow_exact=False)
    if low > high:
        raise ValueError(f"low: must be <= high, got {low} > {high}")
    (lp_old, lp_roll), m = prepare({"logp_old": logp_old, "logp_rollout": logp_rollout}, mask,
                                   exact=False)
    shape = lp_old.shape
    lp_old, lp_roll, m = (a.reshape(-1, shape[-1]) for a in (lp_old, lp_roll, m))
    # p_t, q_t: the sampled token's probabilities, clamped to [c, 1 - c]
    p = np.clip(np.exp(lp_roll), PROB_CLAMP, 1 - PROB_CLAMP)
    q = np.clip(np.exp(lp_old), PROB_CLAMP, 1 - PROB_CLAMP)
    if divergence == "binary_kl":
        # d_t = p log(p / q) + (1 - p) log((1 - p) / (1 - q))
        d = p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))
    else:
        # d_t = |p - q|
        d = np.abs(p - q)
    d = np.where(m, d, 0.0)
    if level == "sequence":
        # the mean over the response's tokens, at each of them
        d = d.sum(axis=-1, keepdims=True) / np.maximum(m.sum(axis=-1, keepdims=True), 1)
    # w_t = exp(logp_old_t - logp_rollout_t) where low <= the unit's statistic <= high
    w = np.where(m & (d >= low) & (d <= high), np.exp(lp_old - lp_roll), 0.0)
    return w.reshape(shape) + 0.0
