"""How per-token losses become one number (notebook ``07_loss_aggregation``).

For a per-token quantity l_{i,t} with mask m_{i,t}, n_i = sum_t m_{i,t} tokens in
row i, and B' the number of rows with at least one response token:

* ``"token-mean"``: sum_{i,t} m l / sum_{i,t} m (every token weighs the same;
  TRL, OpenRLHF, verl's default);
* ``"seq-mean-token-sum"``: (1/B') sum_i sum_t m l  (the objective's L_PPO: sum over
  tokens, mean over prompt-response pairs);
* ``"seq-mean-token-mean"``: (1/B') sum_i (1/n_i) sum_t m l  (every sequence
  weighs the same);
* ``"seq-mean-token-sum-norm"``: sum_{i,t} m l / (B' * norm), ``norm`` a
  constant (default: T, the padded length), as in Dr. GRPO (TRL's
  ``loss_type="dr_grpo"`` divides by B * max_completion_length,
  huggingface/trl ``trl/trainer/grpo_trainer.py``). verl 0.9.1's mode of the same
  name divides by the number of sequences times T as well (``agg_loss`` of
  ``verl/trainer/ppo/core_algos.py``, ``loss_scale_factor`` unset); its commits of
  early 2026 divided by ``norm`` only (docs/conformance.md).

Names follow verl's ``loss_agg_mode``. The normalisations of TRL's ``GRPOTrainer``
(``loss_type``, huggingface/trl ``trl/trainer/grpo_trainer.py``, ``_compute_loss``) are
modes too, :data:`TRL_MODES`, with B every row of the batch (a row without tokens
counts):

* ``"grpo"``: (1/B) sum_i (1/max(n_i, 1)) sum_t m l  (the sequence mean of token means);
* ``"bnpo"``: sum m l / sum m, the token mean of the local batch (= ``"token-mean"``);
* ``"dapo"``: sum m l / ``norm``, ``norm`` the token count of the whole (global,
  accumulated) batch; default the local count, where it equals ``"bnpo"``;
* ``"dr_grpo"``: sum m l / (B * ``norm``), ``norm`` a constant length
  (``max_completion_length``); default T;
* ``"luspo"``: (1/B) sum_i sum_t m l, the sequence mean of token *sums* (TRL 1.16.0's
  ``loss_type="luspo"``, ``(per_token_loss * mask).sum(-1).mean()``). At the sequence
  level (GSPO's ratio s_i, the same term l_i at every token of response i) it is
  (1/B) sum_i n_i l_i: each response's sequence loss scaled by its length, LUSPO's
  length-unbiased sequence loss (arXiv 2602.05261).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from .._checks import check_choice, check_scalar, prepare, scalar_for

__all__ = ["MODES", "NORM_MODES", "TRL_MODES", "aggregate", "aggregate_kernel",
           "aggregation_weights",
           "check_mode", "divisors", "mode_norm"]

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
#: TRL GRPOTrainer's ``loss_type`` normalisations (module docstring)
TRL_MODES = ("grpo", "bnpo", "dapo", "dr_grpo", "luspo")
#: the modes that divide by ``norm``
NORM_MODES = ("seq-mean-token-sum-norm", "dapo", "dr_grpo")


def check_mode(mode, name="mode"):
    return check_choice(mode, name, MODES + TRL_MODES, "aggregation mode")


def mode_norm(mode, norm):
    """The divisor ``norm`` of the modes that take one, checked; ``None`` stays ``None``, the
    mode's default, which :func:`divisors` resolves (T, or dapo's token count).

    ``norm`` given with another mode is an error: it would be silently ignored.
    """
    if mode not in NORM_MODES:
        if norm is not None:
            raise ValueError(f"norm: only modes {', '.join(map(repr, NORM_MODES))} divide by "
                             f"norm, got norm={norm!r} with mode {mode!r}")
        return None
    if norm is None:
        return None
    return check_scalar(norm, "norm", low=0, low_open=True)


def aggregate(per_token, mask=None, mode="token-mean", *, norm=None):
    """Reduce a per-token array to a scalar by one of the :data:`MODES`.

    Parameters
    ----------
    per_token : array (T,) or (B, T)
        A per-token quantity (a loss, a surrogate term, a KL estimate).
    mask : array of 0/1, optional
        1 for response tokens. Padding never contributes.
    mode : str
        One of ``"token-mean"`` (default), ``"seq-mean-token-sum"``,
        ``"seq-mean-token-mean"``, ``"seq-mean-token-sum-norm"``.
    norm : float > 0, optional
        Constant divisor of ``"seq-mean-token-sum-norm"``; default T, the padded
        length. Only that mode takes it (ValueError with another).

    Returns
    -------
    float (a Fraction for exact input).

    Examples
    --------
    Rows [1, 2, 3] (3 tokens) and [4, pad, pad] (1 token):

    >>> x, m = [[1, 2, 3], [4, 0, 0]], [[1, 1, 1], [1, 0, 0]]
    >>> [float(aggregate(x, m, mode)) for mode in MODES]
    [2.5, 5.0, 3.0, 1.6666666666666667]

    token-mean 10/4; seq-mean-token-sum (6 + 4)/2; seq-mean-token-mean (2 + 4)/2;
    seq-mean-token-sum-norm 10 / (2 * 3).
    """
    check_mode(mode)
    (x,), m = prepare({"per_token": per_token}, mask)
    return aggregate_kernel(x, m, mode, mode_norm(mode, norm))


def divisors(m: np.ndarray, mode: str, norm=None, like=None, n_tokens=None):
    """The one rule of every mode: aggregate = sum_i (sum_t m x)_i / d_i / D (unchecked kernel).

    Returns ``(d, D)``: ``d`` the (B,) per-row divisors (``None`` where every row
    divides by 1) and ``D`` the overall divisor, with n_i tokens in row i and B'
    rows that have one:

        token-mean               d = None   D = sum_i n_i
        seq-mean-token-sum       d = None   D = B'
        seq-mean-token-mean      d = n_i    D = B'
        seq-mean-token-sum-norm  d = None   D = B' * norm
        grpo                     d = max(n_i, 1)   D = B
        bnpo                     d = None   D = sum_i n_i
        dapo                     d = None   D = norm (default sum_i n_i)
        dr_grpo                  d = None   D = B * norm
        luspo                    d = None   D = B

    :func:`aggregate` divides by them, :func:`aggregation_weights` (the gradient) is
    m / (d D). ``m``: a bool (B, T) mask; ``norm``: checked (:func:`mode_norm`), ``None``
    the mode's default;
    ``like``: an exact array makes ``D`` a Fraction; ``n_tokens``: the (B,) counts
    ``m.sum(axis=-1)`` when already counted.
    """
    like = m if like is None else like  # (scalar_for: a float unless like is exact)
    if norm is None and mode in ("seq-mean-token-sum-norm", "dr_grpo"):
        norm = m.shape[-1]  # the mode's default: T, the padded length
    if mode in ("token-mean", "bnpo") or (mode == "dapo" and norm is None):
        total = int(np.count_nonzero(m) if n_tokens is None else n_tokens.sum())
        if total == 0:
            raise ValueError("mask: no response token to aggregate over")
        return None, scalar_for(total, like)
    n_tokens = m.sum(axis=-1) if n_tokens is None else n_tokens  # (B,)
    n_seq = int(np.count_nonzero(n_tokens))
    if n_seq == 0:
        raise ValueError("mask: no response token to aggregate over")
    B = m.shape[0]
    if mode == "grpo":
        return np.maximum(n_tokens, 1), scalar_for(B, like)
    if mode == "dapo":
        return None, scalar_for(norm, like)
    if mode == "dr_grpo":
        return None, scalar_for(B, like) * scalar_for(norm, like)
    if mode == "luspo":
        return None, scalar_for(B, like)
    if mode == "seq-mean-token-sum":
        return None, scalar_for(n_seq, like)
    if mode == "seq-mean-token-mean":
        return n_tokens, scalar_for(n_seq, like)
    return None, scalar_for(n_seq, like) * scalar_for(norm, like)


def aggregate_kernel(x: np.ndarray, m: np.ndarray, mode: str, norm=None, divs=None):
    """:func:`aggregate` on checked arrays: ``x`` (B, T) or (T,) 0 at padding, ``m`` bool,
    ``mode`` valid, ``norm`` from :func:`mode_norm` (unchecked kernel). ``divs``: the
    float :func:`divisors` of ``m`` if known."""
    if x.ndim == 1:
        x, m = x[None], m[None]
    d, D = divisors(m, mode, norm, like=x) if divs is None else divs
    row_sums = x.sum(axis=-1)
    if d is None:
        return row_sums.sum() / D
    rows = d > 0
    if x.dtype == object:
        # (a divisor may be a Fraction itself: n_i + 1e-8, ppo_numpy.step.normalisers)
        per_seq = row_sums[rows] / np.array([scalar_for(n if isinstance(n, Fraction)
                                                        else int(n), x) for n in d[rows]],
                                            dtype=object)
    else:
        per_seq = row_sums[rows] / d[rows].astype(np.float64)
    return per_seq.sum() / D


def aggregation_weights(m: np.ndarray, mode: str, norm=None, divs=None) -> np.ndarray:
    """The weights w with aggregate(x) = sum_{i,t} w x, i.e. m / (d_i D) of :func:`divisors`:
    d aggregate / d x (unchecked kernel; float64, the shape of ``m``, 0 at padding)."""
    m2 = m[None] if m.ndim == 1 else m
    d, D = divisors(m2, mode, norm) if divs is None else divs
    # (m / D divides the bool mask as the floats 0.0 and 1.0)
    if d is None:
        w = np.true_divide(m2, D)
    else:
        # why: a row without tokens has d = 0 and weights 0 (its m is 0)
        w = np.true_divide(m2, np.maximum(d, 1)[:, None] * D)
    return w.reshape(m.shape)
