"""The probability ratio rho_t (docs/objective.md; notebook ``01_probability_ratio``).

    rho_t(theta) = pi_theta(y_t | x, y_<t) / pi_theta_old(y_t | x, y_<t)
                 = exp(logp_t - logp_old_t)

Computed from log-probabilities, never from probabilities, so tiny
probabilities do not underflow before the division.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_choice, check_scalar, prepare

__all__ = ["LEVELS", "loss_ratio", "loss_ratio_backward", "probability_ratio",
           "sequence_log_ratio"]


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
        log_rho = sequence_log_ratio(log_rho, m)
    # rho_t = exp(log rho_t), exactly 0 at padding
    return np.where(m, np.exp(log_rho), 0.0)


def sequence_log_ratio(log_rho, m):
    """GSPO's log s_i = (1/n_i) sum_t log rho_{i,t} (B, 1) of token log-ratios 0 at padding
    (unchecked kernel; n_i at least 1)."""
    n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
    return log_rho.sum(axis=-1, keepdims=True) / n


def loss_ratio(logp, logp_old, m, opts):
    """The ratio the policy loss uses, on checked arrays (unchecked kernel):
    ``(log_ratio, log_rho, log_w, rho)``.

    log_ratio = logp - logp_old; log_rho = log_ratio clamped to [-c, c]
    (``opts.log_ratio_clamp``); log_w = log_rho, or at ``opts.importance_level="sequence"``
    GSPO's log s_i (B, 1), capped at ``opts.log_ratio_max``; rho = exp(log_w) at every
    response token, 0 at padding. On the default path (token level, no clamp, no cap) the
    three logs are one array.
    """
    # log rho_t = logp_t - logp_old_t   (clamped to [-c, c] before exp)
    log_ratio = logp - logp_old
    log_rho = log_ratio
    if opts.log_ratio_clamp is not None:
        log_rho = np.clip(log_ratio, -opts.log_ratio_clamp, opts.log_ratio_clamp)
    log_w = log_rho
    if opts.importance_level == "sequence":
        # GSPO: log s_i = (1/n_i) sum_t log rho_{i,t}, one ratio per response   (B, 1)
        log_w = sequence_log_ratio(log_rho, m)
    if opts.log_ratio_max is not None:
        # capped (verl's GSPO: at 10)
        log_w = np.minimum(log_w, opts.log_ratio_max)
    # rho_t = exp(log w_t) at every response token, 0 at padding
    return log_ratio, log_rho, log_w, np.where(m, np.exp(log_w), 0.0)


def loss_ratio_backward(dlog_w, f, m, opts):
    """d loss / d logp from d loss / d log w (the gradient through rho = exp(log w), (B, T)),
    back through ``loss_ratio``'s cap, sequence level and clamp; ``f`` holds its
    ``log_ratio`` and ``log_rho`` (unchecked kernel). At the bounds of the cap and the clamp
    the gradient passes, as ``torch.clamp``'s does.

    At the sequence level, ``opts.sequence_gradient="sequence"`` (GSPO's paper, TRL) gives
    each token 1/n_i of its row's sum; ``"token"`` (verl's per-token form) gives token t its
    own d log w_t.
    """
    if opts.log_ratio_max is not None:
        # log w = min(log w, max): the bound passes the gradient
        uncapped = (f.log_rho if opts.importance_level == "token"
                    else sequence_log_ratio(f.log_rho, m))
        dlog_w = dlog_w * (uncapped <= opts.log_ratio_max)
    dlog_rho = dlog_w
    if opts.importance_level == "sequence" and opts.sequence_gradient == "sequence":
        # log s_i = (1/n_i) sum_t m_t log rho_t: each token gets 1/n_i of the row's sum
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        dlog_rho = np.where(m, dlog_w.sum(axis=-1, keepdims=True) / n, 0.0)
    elif opts.importance_level == "sequence":
        # token t's ratio sg[s_i] pi_t / sg[pi_t]: d log ratio_t / d logp_t = 1, own token
        dlog_rho = np.where(m, dlog_w, 0.0)
    if opts.log_ratio_clamp is not None:
        # log rho = clip(logp - logp_old, -c, c): the bound passes the gradient
        dlog_rho = dlog_rho * (np.abs(f.log_ratio) <= opts.log_ratio_clamp)
    return dlog_rho
