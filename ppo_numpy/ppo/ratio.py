"""The probability ratio rho_t (docs/objective.md; notebook ``01_probability_ratio``).

    rho_t(theta) = pi_theta(y_t | x, y_<t) / pi_theta_old(y_t | x, y_<t)
                 = exp(logp_t - logp_old_t)

Computed from log-probabilities, never from probabilities, so tiny
probabilities do not underflow before the division.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_choice, check_scalar, prepare

__all__ = ["LEVELS", "probability_ratio"]


def check_clamp(clamp, name="log_ratio_clamp"):
    """A clamp checked: ``None`` (off) or a real number > 0."""
    return None if clamp is None else check_scalar(clamp, name, low=0, low_open=True)


LEVELS = ("token", "sequence")


def check_level(level, name="level"):
    return check_choice(level, name, LEVELS, "level")


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
    c = check_clamp(log_ratio_clamp)
    # log rho_t = logp_t - logp_old_t   (clamped to [-c, c] before exp)
    log_rho = logp - logp_old if c is None else np.clip(logp - logp_old, -c, c)
    if level == "sequence":
        # GSPO: log s_i = (1/n_i) sum_t log rho_{i,t}  (log rho is 0 at padding)   (B, 1)
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        log_rho = log_rho.sum(axis=-1, keepdims=True) / n
    # rho_t = exp(log rho_t), exactly 0 at padding
    return np.where(m, np.exp(log_rho), 0.0)
