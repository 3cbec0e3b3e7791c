"""The probability ratio rho_t (docs/objective.md; notebook ``01_probability_ratio``).

    rho_t(theta) = pi_theta(y_t | x, y_<t) / pi_theta_old(y_t | x, y_<t)
                 = exp(logp_t - logp_old_t)

Computed from log-probabilities, never from probabilities, so tiny
probabilities do not underflow before the division.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_choice, check_scalar, prepare, where_valid


def check_clamp(clamp, name="log_ratio_clamp"):
    """A clamp checked: ``None`` (off) or a real number > 0."""
    return None if clamp is None else check_scalar(clamp, name, low=0, low_open=True)


def log_ratio(logp, logp_old, clamp=None):
    """log rho_t = logp_t - logp_old_t, clamped to [-c, c] when ``clamp`` = c is given.

    The one place the log-ratio clamp is applied: the ratio, the policy loss's
    statistics and its gradient all take it from here. Returns ``(log_rho, passes)``
    with ``passes`` the bool array where d log_rho / d logp = 1 (|logp - logp_old| <= c:
    the bound passes the gradient, as PyTorch's ``clamp``), or ``None`` without a clamp.

    Unchecked kernel: float64 arrays of one shape, ``clamp`` from :func:`check_clamp`.

    >>> log_rho, passes = log_ratio(np.array([0.0, 0.0]), np.array([-0.1, -30.0]), 20.0)
    >>> [round(float(v), 12) for v in log_rho], passes.tolist()
    ([0.1, 20.0], [True, False])
    """
    x = logp - logp_old
    if clamp is None:
        return x, None
    return np.clip(x, -clamp, clamp), np.abs(x) <= clamp


LEVELS = ("token", "sequence")


def check_level(level, name="level"):
    return check_choice(level, name, LEVELS, "level")


def sequence_log_ratio(log_rho, m):
    """GSPO's sequence log-ratio: the token mean of log rho over each response, broadcast to
    every position of its row (unchecked kernel).

        log s_i = (1 / n_i) sum_t m_{i,t} (logp_{i,t} - logp_old_{i,t})
        n_i = max(sum_t m_{i,t}, 1)

    ``log_rho`` (..., T) and the bool ``m`` of its shape. A row without response tokens gets 0.
    Its derivative with respect to logp_{i,t} is m_{i,t} / n_i (:func:`sequence_mean_grad`).
    """
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    return np.broadcast_to(np.where(m, log_rho, 0.0).sum(axis=-1, keepdims=True) / n,
                           log_rho.shape)


def sequence_mean_grad(g, m):
    """d loss / d logp from g = d loss / d log s per position of :func:`sequence_log_ratio`:
    m_t / n_i times the row sum of g (every token of a row shares the sequence's gradient)."""
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    return np.where(m, np.where(m, g, 0.0).sum(axis=-1, keepdims=True) / n, 0.0)


def probability_ratio(logp, logp_old, mask=None, *, log_ratio_clamp=None, level="token"):
    """Per-token probability ratio rho_t = exp(logp_t - logp_old_t), or GSPO's sequence ratio.

    Parameters
    ----------
    logp : array (T,) or (B, T)
        log pi_theta(y_t | x, y_<t) of the taken tokens under the current policy.
    logp_old : array, same shape
        log pi_theta_old(y_t | x, y_<t) recorded when the data was collected.
    mask : array of 0/1, same shape, optional
        1 for response tokens, 0 for padding. ``None``: all tokens are valid.
    log_ratio_clamp : float > 0, optional
        Clamp ``logp - logp_old`` to ``[-c, c]`` before ``exp`` (some frameworks
        do this to avoid overflow). ``None`` (default): no clamp.
    level : {"token", "sequence"}
        ``"token"`` (default, PPO): one ratio per token. ``"sequence"`` (GSPO; TRL's
        ``importance_sampling_level="sequence"``, verl's ``loss_mode="gspo"``, OpenRLHF's
        ``policy_loss_type="gspo"``): s_i = exp((1/n_i) sum_t (logp_t - logp_old_t)),
        the exp of the token mean of the log-ratio over response i, at every one of its
        positions. For a one-token response the two are equal.

    Returns
    -------
    rho : float64 array, same shape; exactly 0 at padding.

    Examples
    --------
    A token whose probability rose from 0.5 to 0.6, and one that is unchanged:

    >>> import numpy as np
    >>> rho = probability_ratio(np.log([0.6, 0.3]), np.log([0.5, 0.3]))
    >>> [round(float(v), 12) for v in rho]
    [1.2, 1.0]

    The sequence ratio of token log-ratios [0.3, 0.1] is exp(0.2) at both tokens:

    >>> s = probability_ratio([[0.3, 0.1, 0.0]], [[0.0, 0.0, 0.0]], [[1, 1, 0]], level="sequence")
    >>> [round(float(v), 6) for v in s[0]], round(float(np.exp(0.2)), 6)
    ([1.221403, 1.221403, 0.0], 1.221403)
    """
    check_level(level)
    (logp, logp_old), m = prepare({"logp": logp, "logp_old": logp_old}, mask, exact=False)
    log_rho, _ = log_ratio(logp, logp_old, check_clamp(log_ratio_clamp))
    if level == "sequence":
        log_rho = sequence_log_ratio(log_rho, m)
    return where_valid(m, np.exp(log_rho))
