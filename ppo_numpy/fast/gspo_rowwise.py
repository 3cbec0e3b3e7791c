"""The sequence-level (GSPO) policy loss computed once per response: the fast form.

At ``importance_level="sequence"`` every token of response i shares the ratio s_i. When
it also shares the advantage A_i (GRPO, RLOO, REINFORCE++ give one advantage per
response), the term, its case and its gradient are one number per response:

    log s_i = (1/n_i) sum_t log rho_{i,t},      s_i = exp(log s_i)
    term_i  = min(s_i A_i, clip(s_i, 1 - eps, 1 + eps_high) A_i)
    loss    = -sum_i W_i term_i,                W_i = sum_t w_{i,t}, the row's weight
    d loss / d logp_{i,t} = (m_{i,t} / n_i) (-W_i) [term_i unclipped] A_i s_i

with w the aggregation weights (``aggregation_weights``). The
reference, :func:`ppo_numpy.policy_loss.kernel.policy_loss_kernel` (the clip member of
:mod:`ppo_numpy.family.losses`), is the definition: it runs the same case analysis at every
token. This form does the (B, T) work only for the log-ratios, their row sums, the approx-KL
statistics and the gradient's broadcast, which is what TRL does with its (B, 1) sequence
ratio. Its callers choose it explicitly: :func:`policy_loss_kernel` here (the toy policy's
loss in training) and :func:`policy_loss_and_grad` here (the benchmarks) take it by the rule
of :func:`use_rowwise` and the reference otherwise. The two forms agree to rounding (the same
numbers summed in another order: ``tests/test_gspo_rowwise.py`` bounds the difference by 4
ulps of each output's scale, and the clip counts exactly). With ``is_weights`` (the rollout
correction's per-token weights) the reference is taken.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_shapes
from ..grads import loss_grads
from ..policy_loss import kernel
from ..policy_loss.kernel import APPROX_KL, PolicyLossForward, kl_agg
from ..policy_loss.objective import _check_approx_kl, loss_options
from ..ppo.aggregation import aggregate_kernel, aggregation_weights, divisors
from ..ppo.clipping import UNCLIPPED, clip_case, surrogate_term
from ..ppo.kl import kl_estimate_grad_kernel, kl_estimate_kernel

__all__ = ["ROWWISE_FROM", "gspo_rowwise_kernel", "may_use_rowwise", "policy_loss_and_grad",
           "policy_loss_kernel", "rowwise_advantages", "use_rowwise"]

#: from this many (B, T) entries the sequence level is computed per response
ROWWISE_FROM = 1 << 14


def rowwise_advantages(A, m):
    """A_i (B, 1) when ``A`` is constant over each row's response tokens, else ``None`` (a
    row without tokens has A_i = 0); what ``A`` holds at padding is not read."""
    if A.ndim != 2:
        return None
    first = np.argmax(m, axis=-1)
    A_row = np.where(m.any(axis=-1, keepdims=True), A[np.arange(A.shape[0]), first][:, None],
                     0.0)
    # A_t = A_i at every response token: one comparison, on bools after it
    if not np.greater_equal(A == A_row, m).all():
        return None
    return A_row


def _sequence_clip(opts) -> bool:
    """The options part of the rule of :func:`use_rowwise`: the sequence level with the
    clipped surrogate."""
    return (opts.importance_level == "sequence" and opts.loss_type == "clip"
            and opts.kl_gradient == "plain")


def may_use_rowwise(opts) -> bool:
    """The options under which ``policy_loss_and_grad`` may hand unzeroed inputs to the fast
    form: the rule's (:func:`use_rowwise`) and no KL term in the loss (which would read
    ``logp`` at every token)."""
    return _sequence_clip(opts) and opts.kl_coef == 0


def use_rowwise(A, m, opts):
    """The rule: the sequence level with the clipped surrogate, at least :data:`ROWWISE_FROM`
    entries, and one advantage per response. Returns A_i (B, 1), or ``None`` for the readable
    form."""
    if not _sequence_clip(opts) or A.size < ROWWISE_FROM:
        return None
    return rowwise_advantages(A, m)


def gspo_rowwise_kernel(logp, logp_old, A_row, m, opts, logp_ref=None, *, approx_kl):
    """``(forward, stats, dlogp)`` of the sequence-level loss, one case per response
    (unchecked kernel, as ``policy_loss_kernel``).

    ``A_row`` (B, 1) from ``rowwise_advantages``. The forward record's ``rho`` and
    ``term`` are (B, 1) here: one ratio and one term per response (0 for a row without
    tokens). Without a KL term ``logp`` and ``logp_old`` may hold anything at padding: the
    log-ratios are zeroed there and nothing else reads them (the forward record's ``logp``
    is then the argument as given). ``approx_kl``: the estimators of the approx-KL
    statistics, a tuple as ``policy_loss_stats`` takes. Three arrays of the batch's size are
    made: the log-ratios, the token terms of the approx-KL statistics, and d loss / d logp
    written over those terms.
    """
    lo, hi = opts.bounds()
    n_tok = _row_counts(m)  # (B, 1), the one count of the mask
    has = n_tok > 0
    n_i = np.maximum(n_tok, 1)
    # log rho_t = logp_t - logp_old_t, 0 at padding   (clamped with log_ratio_clamp)
    with np.errstate(over="ignore", invalid="ignore"):  # garbage at padding
        log_ratio = logp - logp_old
    padding = ~m
    np.copyto(log_ratio, 0.0, where=padding)
    log_rho = log_ratio
    if opts.log_ratio_clamp is not None:
        log_rho = np.clip(log_ratio, -opts.log_ratio_clamp, opts.log_ratio_clamp)
    # log s_i = (1/n_i) sum_t log rho_{i,t}   (B, 1)
    log_w_raw = log_rho.sum(axis=-1, keepdims=True) / n_i
    log_w = log_w_raw if opts.log_ratio_max is None else np.minimum(log_w_raw,
                                                                     opts.log_ratio_max)
    # (log_w_raw: the uncapped log s_i, whose finiteness policy_loss_and_grad reads)
    s = np.where(has, np.exp(log_w), 0.0)
    # term_i = min(s_i A_i, clip(s_i) A_i)   (B, 1)
    term = surrogate_term(s, A_row, lo, hi, opts.dual_clip, opts.delta)
    # W_i = sum_t w_{i,t} = n_i / (d_i D)
    d, D = divisors(m, opts.agg, opts.norm, n_tokens=n_tok[:, 0])
    W = n_tok / D if d is None else n_tok / (np.maximum(d, 1)[:, None] * D)
    policy_loss = -float((W * term).sum())
    kl, kl_loss = None, 0.0
    if opts.kl_coef > 0:
        if logp_ref is None:
            raise ValueError("logp_ref: the KL term of the loss (kl_coef > 0) needs the "
                             "reference log-probabilities")
        kl = np.where(m, kl_estimate_kernel(logp, logp_ref, opts.kl_estimator, opts.kl_clamp),
                      0.0)
        kl_loss = float(aggregate_kernel(kl, m, *kl_agg(opts)))
    loss = policy_loss + opts.kl_coef * kl_loss if opts.kl_coef > 0 else policy_loss
    f = PolicyLossForward(logp, log_ratio, log_rho, log_w, s, lo, hi, surrogate=term,
                          term=term, kl=kl, policy_loss=policy_loss, kl_loss=kl_loss, loss=loss,
                          extra={"log_w_raw": log_w_raw})
    # the approx-KL statistics, token by token as policy_loss_stats computes them (the same
    # operations on the same array: the same bits); buf then holds the gradient
    buf = np.empty(log_rho.shape)
    kl_sums = _approx_kl(log_rho, m, buf, approx_kl)

    # backward: d loss / d log s_i = -W_i [unclipped_i] A_i s_i   (B, 1)
    case = clip_case(s, A_row, lo, hi, opts.dual_clip, opts.delta)
    dlog_w = -W * np.where(case == UNCLIPPED, A_row, 0.0) * s
    if opts.log_ratio_max is not None:
        dlog_w = dlog_w * (log_w_raw <= opts.log_ratio_max)
    # log s_i = (1/n_i) sum_t m_t log rho_t: each token gets 1/n_i of it (+ 0.0: no -0.0)
    dlogp = buf
    np.copyto(dlogp, dlog_w / n_i + 0.0)
    np.copyto(dlogp, 0.0, where=padding)
    if opts.log_ratio_clamp is not None:
        np.copyto(dlogp, 0.0, where=np.abs(log_ratio) > opts.log_ratio_clamp)
    if opts.kl_coef > 0:
        mode, norm = kl_agg(opts)
        dlogp = dlogp + opts.kl_coef * kl_estimate_grad_kernel(
            logp, logp_ref, opts.kl_estimator, m, opts.kl_clamp, aggregation_weights(m, mode, norm))
        dlogp += 0.0
    return f, _rowwise_stats(f, A_row, n_tok, opts, kl_sums), dlogp


def _row_counts(m):
    """Response tokens per row of a bool mask, (B, 1) int64 (``m.sum(axis=-1, keepdims=True)``).

    Why: the mask's bytes summed into 32-bit counts take half the time of the sum of bools,
    which widens every entry to 64 bits (T < 2^32 tokens per row)."""
    return m.view(np.uint8).sum(axis=-1, dtype=np.uint32, keepdims=True).astype(np.int64)


def _approx_kl(log_rho, m, buf, which) -> dict:
    """Sums over the tokens of k1 = -log rho, k2 = (log rho)^2 / 2, k3 = rho - 1 - log rho
    (``log_rho`` 0 at padding), those named in ``which``, with the operations of
    ``policy_loss_stats``; ``buf`` a scratch array of ``log_rho``'s shape."""
    sums = {}
    if "k1" in which:
        # (the same rule for a sum of exactly 0 as policy_loss_stats: its sign)
        sums["k1"] = -log_rho.sum()
        if sums["k1"] == 0:
            sums["k1"] = np.where(m, -log_rho, 0.0).sum()
    if "k2" in which:
        np.square(log_rho, out=buf)
        buf /= 2
        sums["k2"] = buf.sum()
    if "k3" in which:
        np.expm1(log_rho, out=buf)
        buf -= log_rho
        sums["k3"] = buf.sum()
    return sums


def _rowwise_stats(f, A_row, n_tok, opts, kl_sums) -> dict:
    """``policy_loss_stats`` from one ratio per response: the token
    fractions count each response's tokens; the approx-KL ones are the token sums
    ``kl_sums`` of :func:`_approx_kl`."""
    n = int(n_tok.sum())
    s = f.rho
    lo, hi = f.lo, f.hi
    has = n_tok > 0

    def frac(flags):  # (B, 1) flags: the fraction of the tokens of the rows they mark
        return float(n_tok[flags & has].sum() / n)

    s_u = s if opts.delta is None else np.minimum(s, opts.delta)
    stats = {
        "clipfrac_active": frac(f.term < s_u * A_row),
        "clipfrac_outside": frac((s > hi) | (s < lo)),
        "dual_clipfrac": 0.0 if opts.dual_clip is None else frac(
            f.term > surrogate_term(s, A_row, lo, hi, None, opts.delta)),
        **{f"approx_kl_{k}": float(total / n) for k, total in kl_sums.items()},
        "ratio_mean": float((n_tok * s).sum() / n),
        "ratio_min": float(s[has].min()),
        "ratio_max": float(s[has].max()),
    }
    if not opts.is_ppo:
        stats["clipfrac_low"] = frac((s_u < lo) & (A_row < 0))
        stats["clipfrac_high"] = frac((s_u > hi) & (A_row > 0))
        stats["kl_ref"] = float(f.kl.sum() / n) if f.kl is not None else 0.0
    return stats


def policy_loss_kernel(logp, logp_old, A, m, opts, logp_ref=None, *, is_weights=None,
                       approx_kl=APPROX_KL, divs=None):
    """``(forward, stats, dlogp)`` as :func:`ppo_numpy.policy_loss.kernel.policy_loss_kernel`,
    by the row-wise form when the rule of :func:`use_rowwise` says so (and no ``is_weights``
    nor ``divs``, a micro-batch's share of a step: the per-response form has no place for
    them), else by the reference (unchecked kernel)."""
    rowwise = is_weights is None and divs is None
    A_row = use_rowwise(A, m, opts) if rowwise else None
    if A_row is not None:
        return gspo_rowwise_kernel(logp, logp_old, A_row, m, opts, logp_ref,
                                   approx_kl=approx_kl)
    return kernel.policy_loss_kernel(logp, logp_old, A, m, opts, logp_ref,
                                     is_weights=is_weights, approx_kl=approx_kl, divs=divs)


def policy_loss_and_grad(logp, logp_old, advantages, mask=None, epsilon=0.2, agg="token-mean",
                         *, logp_ref=None, is_weights=None, approx_kl=True, **options):
    """:func:`ppo_numpy.policy_loss_and_grad` (the same arguments and results, to rounding) by
    the row-wise form where the rule of :func:`use_rowwise` applies, else the reference: the
    fast form the benchmarks time against TRL's."""
    opts = loss_options(epsilon, agg, **options)
    approx_kl = _check_approx_kl(approx_kl)
    if is_weights is None and logp_ref is None and may_use_rowwise(opts):
        fast = _sequence_level_fast(logp, logp_old, advantages, mask, opts, approx_kl)
        if fast is not None:
            return fast
    return loss_grads.policy_loss_and_grad(logp, logp_old, advantages, mask, epsilon, agg,
                                           logp_ref=logp_ref, is_weights=is_weights,
                                           approx_kl=approx_kl, **options)


def _sequence_level_fast(logp, logp_old, advantages, mask, opts, approx_kl):
    """``(loss, stats, dlogp)`` of the row-wise form when it applies
    to these arguments, else ``None`` (then the caller checks and computes them as usual).

    The inputs' shapes and mask are checked here; their values on the results (one read fewer
    of each batch-sized input, no copy to zero the padding, which the fast form never reads):
    A_i finite for every row, and A_t = A_i at every response token, say that the advantages
    are finite there; finite row sums of the log-ratios, that the log-probabilities are. When
    any of this fails (NaN, inf, or an overflow of finite values) the answer is ``None``, and
    the caller's full check names the argument, or the readable form computes the overflow.
    """
    (logp, logp_old, A), m = check_shapes(
        {"logp": logp, "logp_old": logp_old, "advantages": advantages}, mask, exact=False)
    A_row = use_rowwise(A, m, opts)
    if A_row is None or not np.isfinite(A_row).all():
        return None
    # (garbage at padding, and a non-finite entry, whose result the check below discards)
    with np.errstate(over="ignore", invalid="ignore"):
        f, stats, dlogp = gspo_rowwise_kernel(logp, logp_old, A_row, m, opts,
                                                           approx_kl=approx_kl)
        # the log-ratios before a clamp (which would bound an infinite one), 0 at padding
        sums = f.extra["log_w_raw"] if opts.log_ratio_clamp is None else f.log_ratio.sum()
        if not np.isfinite(sums).all():
            return None
    return f.loss, stats, dlogp
