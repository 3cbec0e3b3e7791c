"""Per-token KL estimators and the KL-shaped rewards r~_t of the objective
(docs/objective.md; notebook ``03_kl_shaped_rewards``).

The policy is pulled back towards a frozen reference model pi_ref by a
per-token penalty, and the reward model's score is added at the last token:

    r~_t = -beta * KL_t + [t == T] * score

KL_t estimates KL(pi_theta || pi_ref) from the sampled token y_t ~ pi_theta.
With ``log_r = logp_ref - logp`` (r = pi_ref / pi_theta), the estimators of
J. Schulman, "Approximating KL Divergence" (2020) are

    k1 = -log r            = logp - logp_ref        unbiased, can be negative
    k2 = (log r)^2 / 2                               biased, always >= 0
    k3 = (r - 1) - log r                             unbiased, always >= 0
    abs = |log r|
"""

from __future__ import annotations

import numpy as np

from .._checks import (
    as_array,
    check_bounds,
    check_choice,
    check_scalar,
    finite_entries,
    prepare,
    scalar_for,
    where_valid,
    zero_like,
)

__all__ = ["ESTIMATORS", "check_kl_clamp", "check_scores", "kl_estimate",
           "kl_estimate_grad_kernel", "kl_estimate_kernel", "kl_shaped_rewards",
           "kl_shaped_rewards_kernel", "last_valid_index"]

ESTIMATORS = ("k1", "k2", "k3", "abs")


def _check_estimator(estimator, name="estimator"):
    return check_choice(estimator, name, ESTIMATORS, "estimator")


def kl_estimate(logp, logp_ref, estimator="k1", mask=None, *, clamp=None):
    """Per-token estimate of KL(pi_theta || pi_ref) from tokens sampled from pi_theta.

    Parameters
    ----------
    logp : array (T,) or (B, T)
        log pi_theta(y_t | x, y_<t) of the sampled tokens.
    logp_ref : array, same shape
        log pi_ref(y_t | x, y_<t) of the same tokens under the reference model.
    estimator : {"k1", "k2", "k3", "abs"}
        See the module docstring. Default ``"k1"``.
    mask : array of 0/1, optional
        1 for response tokens; the output is exactly 0 at padding.
    clamp : float > 0, optional
        Clip the estimate to ``[-clamp, clamp]`` afterwards (verl clamps its
        low-variance KL to [-10, 10]). ``None`` (default): no clamp.

    Returns
    -------
    float64 array, same shape. ``k1``, ``k2`` and ``abs`` stay exact for
    Fraction input; ``k3`` needs ``exp`` and is float.

    Examples
    --------
    Identical policies give 0 for every estimator. For logp - logp_ref = 0.5:

    >>> {e: round(float(kl_estimate([0.0], [-0.5], e)[0]), 6) for e in ESTIMATORS}
    {'k1': 0.5, 'k2': 0.125, 'k3': 0.106531, 'abs': 0.5}

    (k3 = exp(-0.5) - 1 + 0.5 = 0.1065306...). Identical policies give 0:

    >>> [float(kl_estimate([-1.2], [-1.2], e)[0]) for e in ESTIMATORS]
    [0.0, 0.0, 0.0, 0.0]
    """
    _check_estimator(estimator)
    # k3 needs exp: it is never exact
    exact = False if estimator == "k3" else None
    (logp, logp_ref), m = prepare({"logp": logp, "logp_ref": logp_ref}, mask, exact=exact)
    return where_valid(m, kl_estimate_kernel(logp, logp_ref, estimator, check_kl_clamp(clamp)))


def check_kl_clamp(clamp, name="clamp"):
    """A KL clamp checked: ``None`` (off) or a real number > 0."""
    return None if clamp is None else check_scalar(clamp, name, low=0, low_open=True)


def kl_estimate_kernel(logp, logp_ref, estimator: str, clamp=None):
    """:func:`kl_estimate` on checked arrays (0 at padding), ``clamp`` checked (kernel)."""
    # d = logp_t - logp_ref_t = -log r
    d = logp - logp_ref
    if estimator == "k1":
        kl = d  # k1 = -log r
    elif estimator == "k2":
        kl = d**2 / 2  # k2 = (log r)^2 / 2
    elif estimator == "k3":
        kl = np.expm1(-d) + d  # k3 = (r - 1) - log r
    else:
        kl = np.abs(d)  # abs = |log r|
    if clamp is not None:
        c = scalar_for(clamp, kl)
        kl = np.minimum(np.maximum(kl, -c), c)
    return kl


def kl_estimate_grad_kernel(logp, logp_ref, estimator, m, clamp=None, w=None):
    """:func:`kl_estimate_grad` on checked arrays (unchecked kernel); ``w`` the aggregation
    weights or ``None`` (per token). With d = logp - logp_ref and r = exp(-d):

        dk1/dd = 1,   dk2/dd = d,   dk3/dd = 1 - r,   dabs/dd = sign(d)  (0 at d = 0)
    """
    d = logp - logp_ref
    if estimator == "k1":
        dkl = np.ones_like(d)
    elif estimator == "k2":
        dkl = d
    elif estimator == "k3":
        dkl = -np.expm1(-d)  # 1 - r
    else:
        dkl = np.sign(d)
    if clamp is not None:
        # the clamp passes the gradient where |KL_t| <= clamp
        dkl = np.where(np.abs(kl_estimate_kernel(logp, logp_ref, estimator)) <= clamp, dkl, 0.0)
    if w is not None:
        dkl = w * dkl
    return where_valid(m, dkl)


def last_valid_index(mask: np.ndarray) -> np.ndarray:
    """Index of the last 1 in each row of a (B, T) bool mask, as (B,) ints.

    Raises ValueError for a row without any response token.
    """
    has = mask.any(axis=-1)
    if not np.all(has):
        # a (T,) mask is one response; np.argwhere of its 0-d ``has`` has no row to name
        where = "the response" if mask.ndim == 1 else f"row {int(np.argwhere(~has)[0][0])}"
        raise ValueError(f"mask: {where} has no response token, so it has no last token "
                         "to receive the score")
    T = mask.shape[-1]
    return T - 1 - np.argmax(mask[..., ::-1], axis=-1)


def kl_shaped_rewards(scores, logp, logp_ref, beta, mask=None, estimator="k1", *,
                      kl_clamp=None, score_offset=0, score_clip=None):
    """KL-shaped rewards r~_t = -beta * KL_t, plus the score at the last response token.

    Parameters
    ----------
    scores : float for a (T,) response, or array (B,) for a (B, T) batch
        The reward model's score of each whole response.
    logp, logp_ref : array (T,) or (B, T)
        Log-probabilities of the sampled tokens under pi_theta and pi_ref.
    beta : float >= 0
        Weight of the KL penalty.
    mask : array of 0/1, optional
        1 for response tokens. The score goes to the *last* 1 of each row
        (with right padding: the EOS token, or the final token of a
        truncated response).
    estimator : {"k1", "k2", "k3", "abs"}
        Per-token KL estimator (see :func:`kl_estimate`). Default ``"k1"``.
    kl_clamp : float > 0, optional
        Passed to :func:`kl_estimate` as ``clamp``.
    score_offset : {0, 1}
        0 (default, as in the objective): the score goes to the last response token.
        1: it goes one slot *after* the last response token, to the first
        padding position (or to the last token when the row has no room
        left), as TRL's current PPOTrainer does (see ``docs/frameworks.md``).
        That slot is then the one padding position that is not 0.
    score_clip : float > 0 or (low, high), optional
        Clip the scores to ``[-score_clip, score_clip]`` or ``[low, high]``
        before adding them (DeepSpeed-Chat: 5; OpenRLHF: (-10, 10)).
        ``None`` (default): no clipping.

    Returns
    -------
    float64 array (exact Fractions for Fraction input with k1, k2, abs), same
    shape as ``logp``; exactly 0 at padding (except the slot that receives the
    score when ``score_offset=1``).

    Examples
    --------
    With no KL (logp == logp_ref) and score 1, the rewards are [0, 0, 1]:

    >>> [float(v) for v in kl_shaped_rewards(1.0, [-1.0, -2.0, -0.5], [-1.0, -2.0, -0.5], 0.1)]
    [0.0, 0.0, 1.0]

    The running example of docs/objective.md: k1 = logp - logp_ref = [0.5, -0.2, 0.1], beta 0.1:

    >>> r = kl_shaped_rewards(1.0, [-1.0, -2.0, -0.5], [-1.5, -1.8, -0.6], 0.1)
    >>> [round(float(v), 12) for v in r]
    [-0.05, 0.02, 0.99]

    Two response tokens then padding; the score 7, clipped to 5, one slot after:

    >>> r = kl_shaped_rewards(7.0, [-1.0, -2.0, 0.0], [-1.5, -1.8, 0.0], 0.1, [1, 1, 0],
    ...                       score_offset=1, score_clip=5)
    >>> [round(float(v), 12) for v in r]
    [-0.05, 0.02, 5.0]
    """
    _check_estimator(estimator)
    beta = check_scalar(beta, "beta", low=0)
    # k3 needs exp: it is never exact
    exact = False if estimator == "k3" else None
    (logp, logp_ref), m = prepare({"logp": logp, "logp_ref": logp_ref}, mask, exact=exact)
    clamp = check_kl_clamp(kl_clamp)
    s = check_scores(scores, logp)
    if isinstance(score_offset, bool) or score_offset not in (0, 1):
        raise ValueError(f"score_offset: must be 0 or 1, got {score_offset!r}")
    bounds = None if score_clip is None else check_bounds(score_clip, "score_clip")
    kl = kl_estimate_kernel(logp, logp_ref, estimator, clamp)
    return kl_shaped_rewards_kernel(s, kl, m, scalar_for(beta, kl), score_offset, bounds)


def check_scores(scores, logp: np.ndarray) -> np.ndarray:
    """One finite score per response: shape logp.shape[:-1], in the arithmetic of ``logp``."""
    s = as_array(scores, "scores", exact=logp.dtype == object)
    want = logp.shape[:-1]
    if s.shape != want:
        raise ValueError(
            f"scores: expected shape {want} (one score per response) for logp of shape "
            f"{logp.shape}, got shape {s.shape}"
        )
    if not np.all(finite_entries(s)):
        raise ValueError("scores: must be finite")
    return s


def kl_shaped_rewards_kernel(scores, kl, m, beta, score_offset=0, score_bounds=None):
    """:func:`kl_shaped_rewards` on checked arrays (unchecked kernel).

    ``scores`` (B,) or a 0-d array, ``kl`` the per-token estimate, ``m`` the bool mask
    (every row with a response token), ``beta`` in the arithmetic of ``kl``,
    ``score_offset`` 0 or 1, ``score_bounds`` ``(low, high)`` or ``None``.
    """
    s = scores
    if score_bounds is not None:
        low, high = score_bounds
        s = np.minimum(np.maximum(s, scalar_for(low, s)), scalar_for(high, s))
    # r~_t = -beta * KL_t
    rewards = -beta * kl
    rewards += 0  # (+ 0 prints -0.0 as 0.0)
    np.copyto(rewards, zero_like(rewards), where=~m)  # where_valid, in place
    # ... + score at the last response token t = T (or the slot after it)
    T = m.shape[-1]
    last = np.minimum(last_valid_index(m) + score_offset, T - 1)
    # (row, last token) of each response; just the last token of a (T,) one
    at = (np.arange(rewards.shape[0]), last) if rewards.ndim == 2 else last
    rewards[at] = rewards[at] + s
    return rewards
