"""The outputs of one optimizer step split over ranks and micro-batches (notebook 16).

For a batch laid out by :mod:`ppo_numpy.step.layout` and a convention of
:mod:`ppo_numpy.step.normalisers` (micro-batch (r, k) has the loss
L_{r,k} = sum_{i in (r,k)} sum_t m l / (d_i D_{r,k}), P ranks):

* ``step/losses`` (M,): L_{r,k} for every micro-batch, rank-major then micro-batch order:
  the scalar each micro-batch's backward starts from;
* ``step/dlogp`` (B, T): the gradient the optimizer applies, as a function of the
  log-probabilities: each rank's sum over its micro-batches of d L_{r,k} / d logp, averaged
  over the ranks, (1/P) sum_r sum_k d L_{r,k} / d logp (each row is in one micro-batch);
* ``step/full_batch``: whether every token weighs in that gradient what it weighs under the
  same convention on one rank with one micro-batch (``Normaliser.alone``), so that the
  step's gradient is the full-batch gradient whatever the per-token terms: decided in exact
  arithmetic;
* ``step/deviation``: the largest ``abs(w_step / w_full - 1)`` over the response tokens,
  0.0 when ``step/full_batch``.

Without a layout (one rank, one micro-batch) and with the ``"global"`` convention of an
aggregation mode, ``step/losses`` is the one-batch loss and ``step/dlogp`` the one-batch
gradient, computed by the same operations (:func:`ppo_numpy.policy_loss_and_grad`).

Every weight is constant along a row (a row is in one micro-batch, and every divisor is a
row's or a micro-batch's), so a term coupling the tokens of a row (GSPO's sequence ratio)
needs only the gradient of the row's summed terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .._checks import as_mask, check_is_weights, check_rank, prepare, rectangular
from ..policy_loss.kernel import policy_loss_backward, policy_loss_forward, policy_loss_stats
from ..policy_loss.objective import _checked, loss_options
from ..ppo.aggregation import aggregate_kernel, aggregation_weights
from .layout import check_layout
from .normalisers import check_normaliser, micro_batch_divisors

__all__ = ["MicroBatch", "micro_batch_passes", "policy_step", "step_of", "step_outputs",
           "step_outputs_kernel", "step_weights"]

_EXACT = np.empty(0, dtype=object)  # (the arithmetic of micro_batch_divisors: Fractions)
_FLOAT = np.empty(0)


def step_weights(mask, layout=None, normaliser="global", *, exact=False) -> np.ndarray:
    """The weight of each token in the gradient of one step: m_{i,t} / (P d_i D_{r,k}).

    Parameters
    ----------
    mask : array (B, T) of 0/1
        The step's response tokens.
    layout : list over ranks of lists of micro-batches of row indices, optional
        :func:`ppo_numpy.step_layout`; ``None``: one rank, one micro-batch.
    normaliser : Normaliser or str
        The convention (:class:`ppo_numpy.Normaliser`, or a name with its defaults).
        Default ``"global"`` (the global token mean).
    exact : bool
        Fractions instead of float64.

    Returns
    -------
    (B, T) array: d (the applied gradient) / d l_{i,t} for per-token terms l, 0 at padding.

    Examples
    --------
    Two responses of 1 and 3 tokens, one per micro-batch: the global token mean gives every
    token 1/4; the mean of the micro-batches' token means gives the lone token 1/2 and the
    others 1/6 (1/2 of 1/3).

    >>> m = [[1, 0, 0], [1, 1, 1]]
    >>> step_weights(m, [[[0], [1]]], exact=True)[:, 0].tolist()
    [Fraction(1, 4), Fraction(1, 4)]
    >>> step_weights(m, [[[0], [1]]], "micro-batch-mean", exact=True)[:, 0].tolist()
    [Fraction(1, 2), Fraction(1, 6)]
    """
    m = _mask(mask)
    lay = check_layout(layout, m.shape[0])
    norm = check_normaliser(normaliser)
    like = _EXACT if exact else _FLOAT
    divs = micro_batch_divisors(norm, m, lay, like)
    w = np.zeros(m.shape, dtype=object if exact else np.float64)
    P = len(lay)
    for rank, rank_divs in zip(lay, divs):
        for rows, dv in zip(rank, rank_divs):
            w[rows] = _weights(m[rows], dv, P)
    return w


def step_outputs(terms, dterms, mask=None, layout=None, normaliser="global") -> dict:
    """The step's outputs for per-token loss terms l and the gradient of their row sums.

    Parameters
    ----------
    terms : array (B, T)
        l_{i,t}, the per-token loss terms (to be minimised; 0 at padding counts nothing).
    dterms : array (B, T)
        d (sum_t l_{i,t}) / d x_{i,u}: the gradient of each row's summed terms with respect
        to the quantity the gradient is of (log-probabilities, values); for terms that do not
        couple tokens, d l_{i,t} / d x_{i,t}.
    mask : array (B, T) of 0/1, optional
        Response tokens. Default: all.
    layout, normaliser
        As in :func:`step_weights`.

    Returns
    -------
    dict with ``step/losses`` (M,), ``step/dlogp`` (B, T) (the gradient, whatever x is),
    ``step/full_batch`` (bool) and ``step/deviation`` (float): the module docstring.
    Fractions in, Fractions out.

    Examples
    --------
    Terms [[1, pad], [2, 4]], one micro-batch per row; each row's gradient is 1 per token:

    >>> out = step_outputs([[1, 0], [2, 4]], [[1, 1], [1, 1]], [[1, 0], [1, 1]], [[[0], [1]]],
    ...                    "micro-batch-mean")
    >>> out["step/losses"].tolist(), out["step/full_batch"], round(out["step/deviation"], 6)
    ([0.5, 1.5], False, 0.5)

    1/2 of the mean 1 and of the mean 3; the full batch's token mean weighs every token 1/3,
    the step the lone token 1/2: 1.5 times as much.
    """
    (x, dx), m = prepare({"terms": terms, "dterms": dterms}, mask, ranks=(2,))
    lay = check_layout(layout, m.shape[0])
    norm = check_normaliser(normaliser)
    losses, grad = step_outputs_kernel(x, dx, m, lay, norm)
    out = {"step/losses": losses, "step/dlogp": grad}
    out.update(full_batch_check(norm, m, lay))
    return out


def step_outputs_kernel(x, dx, m, lay, norm) -> tuple:
    """``(losses (M,), gradient (B, T))`` of :func:`step_outputs` on checked arrays (0 at
    padding), a checked layout and normaliser (unchecked kernel)."""
    like = _EXACT if x.dtype == object else _FLOAT
    divs = micro_batch_divisors(norm, m, lay, like)
    P = len(lay)
    losses, grad = [], np.zeros_like(dx)
    for rank, rank_divs in zip(lay, divs):
        for rows, dv in zip(rank, rank_divs):
            # L_{r,k} = sum_i sum_t m l / (d_i D_{r,k})
            losses.append(aggregate_kernel(x[rows], m[rows], None, None, dv))
            # (1/P) d L_{r,k} / d x   (the weights are constant along each row)
            grad[rows] = _weights(m[rows], dv, P) * dx[rows]
    return np.array(losses, dtype=x.dtype), grad + 0


def policy_step(logp, logp_old, advantages, mask=None, layout=None, normaliser="global", *,
                logp_ref=None, is_weights=None, epsilon=0.2, **options) -> dict:
    """The policy loss of :func:`ppo_numpy.ppo_policy_loss` over one step's ranks and
    micro-batches: ``step/losses``, ``step/dlogp``, ``step/full_batch``, ``step/deviation``.

    Parameters
    ----------
    logp, logp_old, advantages, mask, logp_ref, is_weights, epsilon, **options
        As in :func:`ppo_numpy.ppo_policy_loss`, except the aggregation: ``agg``, ``norm``
        and ``kl_agg`` are the normaliser's (its ``mode`` and ``norm``; the KL term is
        normalised as the policy term, as TRL and verl do). A (T,) input is one row.
    layout : list over ranks of lists of micro-batches of row indices, optional
        :func:`ppo_numpy.step_layout`; ``None``: one rank, one micro-batch.
    normaliser : Normaliser or str
        The convention; default ``"global"`` (the global token mean).

    Returns
    -------
    dict: the module docstring. Each micro-batch's loss and gradient come from the policy
    loss's own forward and backward on its rows (``divs``: the normaliser's divisors), so
    ``Normaliser("global", agg)`` on the whole batch is exactly the one-batch loss and
    gradient of ``agg``.

    Examples
    --------
    rho = 1, advantages 1 on a response of 1 token and -1 on one of 3; the micro-batch means
    are -1 and +1, each halved:

    >>> import numpy as np
    >>> logp = np.log([[0.5, 1, 1], [0.5, 0.5, 0.5]])
    >>> A, m = [[1.0, 0, 0], [-1.0, -1, -1]], [[1, 0, 0], [1, 1, 1]]
    >>> out = policy_step(logp, logp, A, m, [[[0], [1]]], "micro-batch-mean")
    >>> out["step/losses"].tolist(), out["step/dlogp"][:, 0].tolist()
    ([-0.5, 0.5], [-0.5, 0.16666666666666666])
    >>> policy_step(logp, logp, A, m, [[[0], [1]]])["step/dlogp"][:, 0].tolist()
    [-0.25, 0.25]
    """
    for name in ("agg", "norm", "kl_agg"):
        if name in options:
            raise ValueError(f"{name}: a step aggregates by its normaliser: give "
                             "normaliser=Normaliser(name, mode, norm=...) instead")
    opts = loss_options(epsilon, **options)
    (logp, logp_old, A, *ref), m = _checked(logp, logp_old, advantages, mask, logp_ref)
    w = check_is_weights(is_weights, logp, "logp", m)
    one_row = logp.ndim == 1
    if one_row:
        logp, logp_old, A, m = logp[None], logp_old[None], A[None], m[None]
        ref = [r[None] for r in ref]
        w = None if w is None else w[None]
    lay = check_layout(layout, m.shape[0])
    norm = check_normaliser(normaliser)
    out = policy_step_kernel(logp, logp_old, A, m, lay, norm, opts, *ref, is_weights=w)
    if one_row:
        out["step/dlogp"] = out["step/dlogp"][0]
    return out


def policy_step_kernel(logp, logp_old, A, m, lay, norm, opts, logp_ref=None, *,
                       is_weights=None) -> dict:
    """:func:`policy_step` of checked (B, T) arrays, a checked layout and normaliser
    (unchecked kernel)."""
    passes = micro_batch_passes(logp, logp_old, A, m, lay, norm, opts, logp_ref,
                                is_weights=is_weights)
    out = step_of(passes, logp, len(lay))
    out.update(full_batch_check(norm, m, lay))
    return out


@dataclass
class MicroBatch:
    """One micro-batch's pass: its place in the layout, its rows, the policy loss's forward
    (:class:`ppo_numpy.policy_loss.kernel.PolicyLossForward`: ``loss``, ``policy_loss``,
    ``kl_loss``, every intermediate), its statistics (``None`` unless asked for) and
    d L_{r,k} / d logp on its rows (not yet averaged over the ranks)."""

    rank: int
    index: int
    rows: np.ndarray
    forward: object
    stats: dict | None
    dlogp: np.ndarray


def micro_batch_passes(logp, logp_old, A, m, lay, norm, opts, logp_ref=None, *,
                       is_weights=None, kl_normaliser=None, stats=False) -> list:
    """Every micro-batch's forward and backward, rank-major then micro-batch order, each
    aggregated by the divisors ``norm`` gives it (unchecked kernel: checked (B, T) arrays,
    layout and normaliser). ``kl_normaliser``: the KL term's own convention when it has its
    own ``kl_agg`` (None: it is normalised as the policy term); ``stats``: each pass's
    statistics too (:func:`ppo_numpy.policy_loss.kernel.policy_loss_stats`). Returns a list
    of :class:`MicroBatch`."""
    divs = micro_batch_divisors(norm, m, lay, logp)
    divs_kl = (micro_batch_divisors(kl_normaliser, m, lay, logp)
               if kl_normaliser is not None else None)
    passes = []
    for r, rank in enumerate(lay):
        for k, rows in enumerate(rank):
            ref = None if logp_ref is None else logp_ref[rows]
            w = None if is_weights is None else is_weights[rows]
            dv, dv_kl = divs[r][k], None if divs_kl is None else divs_kl[r][k]
            f = policy_loss_forward(logp[rows], logp_old[rows], A[rows], m[rows], opts, ref,
                                    is_weights=w, divs=dv, divs_kl=dv_kl)
            st = policy_loss_stats(f, A[rows], m[rows], opts) if stats else None
            g = policy_loss_backward(f, A[rows], m[rows], opts, ref, dv, dv_kl)
            passes.append(MicroBatch(r, k, rows, f, st, g))
    return passes


def step_of(passes: list, like: np.ndarray, P: int) -> dict:
    """``step/losses`` and ``step/dlogp`` of the passes: each micro-batch's loss, and its
    gradient on its rows divided by P (DDP / FSDP average the ranks' gradients)."""
    dlogp = np.zeros_like(like)
    for mb in passes:
        dlogp[mb.rows] = mb.dlogp if P == 1 else mb.dlogp / P
    return {"step/losses": np.array([mb.forward.loss for mb in passes]), "step/dlogp": dlogp}


def full_batch_check(norm, m: np.ndarray, lay: list) -> dict:
    """``step/full_batch`` and ``step/deviation``: each row's weight in the step's gradient,
    1 / (P d_i D_{r,k}), against its weight 1 / (d_i' D') under ``norm.alone()`` on the whole
    batch, in exact arithmetic (rows without a token weigh nothing either way). The ratio
    w / w_full = d_i' D' / (P d_i D_{r,k}) is one number per micro-batch where the row
    divisors agree (every convention here), else one per row."""
    has = m.any(axis=-1)
    B, P = m.shape[0], len(lay)
    ((d_full, D_full),), = micro_batch_divisors(norm.alone(), m, [[np.arange(B)]], _EXACT)
    d_full = np.ones(B, dtype=np.int64) if d_full is None else d_full
    ratios = set()
    for rank, rank_divs in zip(lay, micro_batch_divisors(norm, m, lay, _EXACT)):
        for rows, (d, D) in zip(rank, rank_divs):
            keep = has[rows]
            if not keep.any():
                continue
            d = np.ones(len(rows), dtype=np.int64) if d is None else d
            mine, full = d[keep], d_full[rows][keep]
            if np.array_equal(mine, full):
                ratios.add(Fraction(D_full) / (P * Fraction(D)))
            else:
                ratios.update(Fraction(a) * D_full / (P * Fraction(b) * D)
                              for a, b in zip(full.tolist(), mine.tolist()))
    deviation = max((abs(float(q - 1)) for q in ratios), default=0.0)
    return {"step/full_batch": all(q == 1 for q in ratios), "step/deviation": deviation}


def _weights(m_rows: np.ndarray, divs, P: int) -> np.ndarray:
    """m / (d_i D) / P: a micro-batch's weights in the step's gradient."""
    w = aggregation_weights(m_rows, None, None, divs)
    return w if P == 1 else w / P


def _mask(mask) -> np.ndarray:
    """A (B, T) mask of 0/1 as a new bool array."""
    arr = rectangular(mask, "mask")
    check_rank(arr, "mask", (2,))
    return as_mask(arr, arr, "mask")
