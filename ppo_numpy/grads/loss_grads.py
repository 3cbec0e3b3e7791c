"""Hand-written gradients of the core losses with respect to their inputs (a gradient oracle).

Each function differentiates one core function, takes the same arguments and
keyword options, and returns an array shaped like the input it differentiates:

=====================  ==============================================  ==================
function               derivative of                                   w.r.t.
=====================  ==============================================  ==================
aggregate_grad         aggregate(x, mask, mode)                        x (the weights)
policy_loss_grad       ppo_policy_loss(logp, logp_old, A, ...)[0]      logp
value_loss_grad        aggregate(value_loss(V, V_old, R, ...), agg)    values
entropy_grad           aggregate(entropy_from_logits(z, mask), agg)    logits
kl_estimate_grad       kl_estimate(logp, logp_ref, estimator)          logp (per token)
=====================  ==============================================  ==================

Every aggregation mode is linear, aggregate(x) = sum_{i,t} w_{i,t} x_{i,t}, so
each loss gradient is the per-token derivative times the weights w.

Convention at kinks (clip, min, max, abs are not differentiable there; we
return one one-sided derivative, chosen to match PyTorch autograd wherever it
is single-valued). Facts from pytorch/pytorch ``tools/autograd/derivatives.yaml``:
``clamp`` passes the gradient when ``min <= x <= max`` (bounds included);
``maximum``/``minimum`` give ``grad / 2`` to each side at a tie; ``abs`` has
derivative ``sign(x)``, 0 at 0.

* rho exactly on a clip bound (rho = 1 + eps_high with A > 0, rho = 1 - eps with
  A < 0): the bound belongs to the trust region, dterm/drho = A (the derivative
  from inside the range; PyTorch's ``clamp`` + ``max`` formulation gives the same).
* rho exactly at the dual-clip bound (rho = c with A < 0): the dual clip counts
  as inactive, dterm/drho = A (from below). A ``torch.minimum`` tie gives A / 2.
* log_ratio_clamp, kl clamp: the bound belongs to the unclamped side (gradient passes).
* value clipping, the two squared errors equal with V_clip != V (R exactly
  halfway): the unclipped branch, dL/dV = V - R. A ``torch.maximum`` tie gives half.
* ``"abs"`` KL estimator at logp = logp_ref: derivative 0.

These are the same ties that :func:`ppo_policy_loss`'s ``clipfrac_active`` and
``dual_clipfrac`` count as *not* clipped (they use strict inequalities).

All outputs are float64 and exactly 0 at padding. Checked against centered
finite differences of the core functions in ``tests/test_loss_grads.py``.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_is_weights, prepare
from ..policy_loss.kernel import policy_loss_backward, policy_loss_forward, policy_loss_kernel
from ..policy_loss.objective import _check_approx_kl, _checked, loss_options
from ..ppo.aggregation import aggregation_weights, check_mode, mode_norm
from ..ppo.entropy import log_softmax_kernel, prepare_logits
from ..ppo.kl import _check_estimator, check_kl_clamp, kl_estimate_grad_kernel
from ..ppo.value_loss import check_value_clip, check_value_clip_form, value_loss_grad_kernel

__all__ = ["aggregate_grad", "entropy_grad", "kl_estimate_grad", "policy_loss_and_grad",
           "policy_loss_grad", "value_loss_grad"]


def aggregate_grad(per_token, mask=None, mode="token-mean", *, norm=None):
    """Weights w with aggregate(x, mask, mode) = sum_{i,t} w_{i,t} x_{i,t}: d aggregate / d x.

    With n_i = sum_t m_{i,t} and B' the number of rows with a response token:

        token-mean               w = m / sum_{i,t} m
        seq-mean-token-sum       w = m / B'
        seq-mean-token-mean      w = m / (B' n_i)
        seq-mean-token-sum-norm  w = m / (B' norm)

    Parameters
    ----------
    per_token : array (T,) or (B, T)
        The per-token quantity (only its shape and finiteness are used).
    mask : array of 0/1, same shape, optional
        1 for response tokens.
    mode : str
        One of :data:`ppo_numpy.AGGREGATION_MODES`. Default ``"token-mean"``.
    norm : float > 0, optional
        Divisor of ``"seq-mean-token-sum-norm"`` (only that mode); default T.

    Returns
    -------
    float64 array, same shape as ``per_token``; 0 at padding.

    Examples
    --------
    Rows with 3 and 1 response tokens (the example of :func:`aggregate`):

    >>> m = [[1, 1, 1], [1, 0, 0]]
    >>> aggregate_grad([[1, 2, 3], [4, 0, 0]], m, "seq-mean-token-mean").tolist()
    [[0.16666666666666666, 0.16666666666666666, 0.16666666666666666], [0.5, 0.0, 0.0]]
    """
    check_mode(mode)
    (x,), m = prepare({"per_token": per_token}, mask, exact=False)
    return _weights(m, mode, norm)


def _weights(m: np.ndarray, mode: str, norm) -> np.ndarray:
    """:func:`aggregation_weights` with ``norm`` checked (``None``: the mode's default)."""
    return aggregation_weights(m, mode, mode_norm(mode, norm))


def policy_loss_grad(logp, logp_old, advantages, mask=None, epsilon=0.2, agg="token-mean", *,
                     logp_ref=None, is_weights=None, **options):
    """d/d logp of the policy loss of :func:`ppo_policy_loss` (same arguments).

    The loss is -sum_{i,t} w_{i,t} term_{i,t} with term = min(rho A, clip(rho, lo, hi) A)
    (and max(term, c A) for A < 0 under dual clip), w from :func:`aggregate_grad`.
    Per token, with lo = 1 - eps, hi = 1 + eps_high:

        A > 0:  term = A min(rho, hi)           dterm/drho = A [rho <= hi]
        A < 0:  term = A max(rho, lo)           dterm/drho = A [rho >= lo]
                dual clip: term = max(A max(rho, lo), c A),  0 where rho > c
        drho/dlogp = rho                        (0 where |logp - logp_old| > log_ratio_clamp)
        dloss/dlogp = -w dterm/drho rho

and with importance weights (``is_weights``, constants) every token's term, so its
derivative, is scaled by its weight: dloss/dlogp = -w is_w dterm/drho rho. At the sequence
level (GSPO) the token terms share log s_i = (1/n_i) sum_t log rho_t; token t gets its own
weight times the derivative of the unweighted sequence term, is_w_t (1/n_i) sum_t'
(-w_t' dterm_t'/ds_i s_i): verl's per-token form (its ratio sg(s_i) pi_t / sg(pi_t)),
which is not the derivative of the weighted loss value (that one is the row mean of the
weights times the same derivative: TRL's (B, 1) loss times (B, T) weights).

    So the gradient is exactly 0 where the clipped branch is active. At the
    kinks the bound counts as inside the trust region (module docstring). The
    backward pass itself: ``policy_loss_backward``.

    Parameters
    ----------
    logp, logp_old, advantages, mask, epsilon, agg, logp_ref, is_weights, **options
        Exactly as in :func:`ppo_policy_loss` (GSPO, delta, CISPO, a KL term, importance
        weights included).

    Returns
    -------
    dlogp : float64 array, shape of ``logp``; 0 at padding.

    Examples
    --------
    The example of :func:`ppo_policy_loss`: rho = [1.5, 0.5, 1.1], A = [2, -1, 1],
    token-mean. The first two tokens are clipped (gradient 0); the third has
    -(1/3) * 1 * 1.1:

    >>> d = policy_loss_grad(np.log([1.5, 0.5, 1.1]), [0.0, 0.0, 0.0], [2.0, -1.0, 1.0])
    >>> [round(float(v), 12) for v in d]
    [0.0, 0.0, -0.366666666667]

    With importance weights [0.5, 1, 2] the third token's gradient doubles:

    >>> d = policy_loss_grad(np.log([1.5, 0.5, 1.1]), [0.0, 0.0, 0.0], [2.0, -1.0, 1.0],
    ...                      is_weights=[0.5, 1.0, 2.0])
    >>> [round(float(v), 12) for v in d]
    [0.0, 0.0, -0.733333333333]
    """
    opts = loss_options(epsilon, agg, **options)
    (logp, logp_old, A, *ref), m = _checked(logp, logp_old, advantages, mask, logp_ref)
    w = check_is_weights(is_weights, logp, "logp", m)
    f = policy_loss_forward(logp, logp_old, A, m, opts, *ref, is_weights=w)
    return policy_loss_backward(f, A, m, opts, *ref)


def policy_loss_and_grad(logp, logp_old, advantages, mask=None, epsilon=0.2, agg="token-mean",
                         *, logp_ref=None, is_weights=None, approx_kl=True, **options):
    """:func:`ppo_policy_loss` and :func:`policy_loss_grad` of one call: ``(loss, stats, dlogp)``.

    The arguments are checked once and the forward pass is made once: the same numbers,
    bit for bit, as the two calls, for about half the work. ``approx_kl`` as in
    :func:`ppo_policy_loss` (which approx-KL statistics to compute; the loss and gradient
    do not depend on it).

    Examples
    --------
    The example of :func:`ppo_policy_loss`:

    >>> loss, stats, d = policy_loss_and_grad(np.log([1.5, 0.5, 1.1]), [0.0, 0.0, 0.0],
    ...                                       [2.0, -1.0, 1.0])
    >>> round(loss, 12), [round(float(v), 12) for v in d]
    (-0.9, [0.0, 0.0, -0.366666666667])
    """
    opts = loss_options(epsilon, agg, **options)
    approx_kl = _check_approx_kl(approx_kl)
    (logp, logp_old, A, *ref), m = _checked(logp, logp_old, advantages, mask, logp_ref)
    w = check_is_weights(is_weights, logp, "logp", m)
    f, stats, dlogp = policy_loss_kernel(logp, logp_old, A, m, opts, *ref, is_weights=w,
                                         approx_kl=approx_kl)
    return f.loss, stats, dlogp


def value_loss_grad(values, old_values, returns, mask=None, clip_range=None, agg="token-mean",
                    *, norm=None, form="offset"):
    """d/d values of aggregate(value_loss(values, old_values, returns, mask, clip_range), agg).

    Per token, L = 1/2 max((V - R)^2, (V_clip - R)^2), V_clip = V_old + clip(V - V_old, -c, c):

        unclipped branch the larger (or a tie):   dL/dV = V - R
        clipped branch strictly larger:           dL/dV = (V_clip - R) [|V - V_old| <= c]

    and dloss/dV = w dL/dV with w from :func:`aggregate_grad`. The clipped branch
    can only be strictly larger outside the range, where V_clip does not move with V
    (derivative 0), or inside it by rounding (V_old + (V - V_old) need not equal V in
    floating point), where it is V_clip - R ~ V - R.

    Parameters
    ----------
    values, old_values, returns, mask, clip_range, form
        As in :func:`value_loss` (``form="clamp"``: V_clip = clamp(V, V_old - c, V_old + c),
        whose derivative is 1 for V_old - c <= V <= V_old + c).
    agg : str
        Aggregation mode. Default ``"token-mean"``.
    norm : float, optional
        Divisor for ``agg="seq-mean-token-sum-norm"``.

    Returns
    -------
    dvalues : float64 array, shape of ``values``; 0 at padding.

    Examples
    --------
    The example of :func:`value_loss`: V = 1.0, V_old = 0.5, R = 2.0. Unclipped,
    dL/dV = V - R = -1. With c = 0.2 the clipped branch (0.845 > 0.5) is taken and
    V_clip = 0.7 no longer depends on V:

    >>> float(value_loss_grad([1.0], [0.5], [2.0])[0])
    -1.0
    >>> float(value_loss_grad([1.0], [0.5], [2.0], clip_range=0.2)[0])
    0.0
    """
    check_mode(agg, "agg")
    (v, v_old, R), m = prepare(
        {"values": values, "old_values": old_values, "returns": returns}, mask, exact=False)
    dL = value_loss_grad_kernel(v, v_old, R, check_value_clip(clip_range),
                                check_value_clip_form(form))
    # the weights and dL are 0 at padding (prepare zeroes the inputs there)
    return _weights(m, agg, norm) * dL + 0.0


def entropy_grad(logits, mask=None, agg="token-mean", *, norm=None):
    """d/d logits of aggregate(entropy_from_logits(logits, mask), mask, agg).

    With p = softmax(z_t) and H_t = -sum_k p_k log p_k:

        dH_t/dz_{t,k} = -p_k (log p_k + H_t)

    times the aggregation weight w_t. An entropy *bonus* -c_H * H in a loss has
    gradient -c_H times this.

    Parameters
    ----------
    logits : array (T, K) or (B, T, K)
    mask : array of 0/1 of shape logits.shape[:-1], optional
    agg : str
        Aggregation mode. Default ``"token-mean"``.
    norm : float, optional
        Divisor for ``agg="seq-mean-token-sum-norm"``.

    Returns
    -------
    dlogits : float64 array, shape of ``logits``; 0 at padding.

    Examples
    --------
    Uniform logits are the entropy's maximum, so its gradient there is 0. For
    z = [log 2, 0] (p = [2/3, 1/3]) dH/dz_1 = -2/3 (log 2/3 + H) = -(2/9) log 2:

    >>> round(float(np.abs(entropy_grad([[0.0, 0.0, 0.0]])).max()), 12)
    0.0
    >>> d = entropy_grad([[np.log(2.0), 0.0]])
    >>> [round(float(v), 12) for v in d[0]], round(float(-2 / 9 * np.log(2)), 12)
    ([-0.154032706791, 0.154032706791], -0.154032706791)
    """
    check_mode(agg, "agg")
    z, m = prepare_logits(logits, mask)
    w = _weights(m, agg, norm)
    return entropy_grad_kernel(log_softmax_kernel(z), m, w)


def entropy_grad_kernel(logp_all, m, w):
    """dH/dz of log-probabilities ``logp_all`` (..., K), times the weights ``w`` (kernel)."""
    p = np.exp(logp_all)
    H = -(p * logp_all).sum(axis=-1, keepdims=True)  # (..., 1)
    # dH/dz_k = -p_k (log p_k + H)
    dH = -p * (logp_all + H)
    return np.where(m[..., None], w[..., None] * dH, 0.0)


def kl_estimate_grad(logp, logp_ref, estimator="k1", mask=None, *, clamp=None, agg=None,
                     norm=None):
    """d KL_t / d logp_t of :func:`kl_estimate`, per token (or of its aggregate).

    With d = logp - logp_ref and r = exp(-d) = pi_ref / pi_theta:

        k1 = d                    dk1/dlogp = 1
        k2 = d^2 / 2              dk2/dlogp = d
        k3 = (r - 1) + d          dk3/dlogp = 1 - r
        abs = |d|                 dabs/dlogp = sign(d)   (0 at d = 0)

    Each estimator depends on d only, so d KL_t / d logp_ref = -(this). With
    ``clamp`` the derivative is 0 where ``|KL_t| > clamp`` (the bound passes).

    Parameters
    ----------
    logp, logp_ref, estimator, mask, clamp
        As in :func:`kl_estimate`.
    agg : str, optional
        ``None`` (default): the per-token derivative. A mode of :func:`aggregate`:
        the derivative of ``aggregate(kl_estimate(...), mask, agg)`` (a KL term
        put in the loss, as GRPO does).
    norm : float, optional
        Divisor for ``agg="seq-mean-token-sum-norm"``.

    Returns
    -------
    float64 array, shape of ``logp``; 0 at padding.

    Examples
    --------
    For logp - logp_ref = 0.5 (the example of :func:`kl_estimate`),
    1 - exp(-0.5) = 0.393469...:

    >>> {e: round(float(kl_estimate_grad([0.0], [-0.5], e)[0]), 6)
    ...  for e in ("k1", "k2", "k3", "abs")}
    {'k1': 1.0, 'k2': 0.5, 'k3': 0.393469, 'abs': 1.0}
    """
    _check_estimator(estimator)
    (logp, logp_ref), m = prepare({"logp": logp, "logp_ref": logp_ref}, mask, exact=False)
    clamp = check_kl_clamp(clamp)
    w = None
    if agg is not None:
        check_mode(agg, "agg")
        w = _weights(m, agg, norm)
    elif norm is not None:
        raise ValueError(f"norm: only agg='seq-mean-token-sum-norm' divides by norm, got "
                         f"norm={norm!r} with agg=None")
    return kl_estimate_grad_kernel(logp, logp_ref, estimator, m, clamp, w)
