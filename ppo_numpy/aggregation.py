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
  huggingface/trl ``trl/trainer/grpo_trainer.py``). verl's mode of the same
  name divides by ``norm`` only, not by the number of sequences
  (volcengine/verl ``verl/trainer/ppo/core_algos.py``, ``agg_loss``): its
  value is B' times this one.

Names follow verl's ``loss_agg_mode``.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_scalar, prepare, scalar_for

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def check_mode(mode, name="mode"):
    if mode not in MODES:
        raise ValueError(f"{name}: unknown aggregation mode {mode!r}; valid ones are "
                         f"{', '.join(MODES)}")


def mode_norm(mode, norm, T):
    """The divisor ``norm`` of ``"seq-mean-token-sum-norm"`` (default T), checked.

    ``norm`` given with another mode is an error: it would be silently ignored.
    """
    if mode != "seq-mean-token-sum-norm":
        if norm is not None:
            raise ValueError(f"norm: only mode 'seq-mean-token-sum-norm' divides by norm, "
                             f"got norm={norm!r} with mode {mode!r}")
        return None
    return T if norm is None else check_scalar(norm, "norm", low=0, low_open=True)


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
    norm = mode_norm(mode, norm, x.shape[-1])
    if x.ndim == 1:
        x, m = x[None], m[None]
    n_tokens = m.sum(axis=-1)
    rows = n_tokens > 0
    if not np.any(rows):
        raise ValueError("mask: no response token to aggregate over")
    n_seq = int(rows.sum())
    row_sums = x.sum(axis=-1)
    if mode == "token-mean":
        return row_sums.sum() / scalar_for(int(n_tokens.sum()), x)
    if mode == "seq-mean-token-sum":
        return row_sums.sum() / scalar_for(n_seq, x)
    if mode == "seq-mean-token-mean":
        per_seq = row_sums[rows] / np.array([scalar_for(int(n), x) for n in n_tokens[rows]],
                                            dtype=x.dtype)
        return per_seq.sum() / scalar_for(n_seq, x)
    return row_sums.sum() / (scalar_for(n_seq, x) * scalar_for(norm, x))
