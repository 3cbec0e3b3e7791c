"""The KL term of the loss: its per-token value and its gradient, in each form the frameworks
differentiate it (notebook ``17_the_kl_term_value_and_gradient``; ``docs/derivations.md``,
sections 13 and 14).

The same estimate KL_t of :mod:`ppo_numpy.ppo.kl` enters the loss with different gradients. With
d = logp - logp_ref, r = pi_ref / pi_theta = exp(-d), rho = pi_theta / pi_old =
exp(logp - logp_old), k one of the estimators and k' = dk/dd:

    form               value     d value / d logp      source
    plain              k         k'                    verl 0.9.1 kl_loss_type="low_var_kl" (k3)
    ratio              k rho     rho (k' + k)          TRL 1.16 use_bias_correction_kl (default)
    straight_through   k         d      (k2's)         verl 0.9.1 kl_loss_type="k3+"
    importance         k         sg(min(rho, c)) d     OpenRLHF 0.11.2 unbiased_gradient, c = 10

``ratio``: TRL ``grpo_trainer.py`` multiplies k3 by ``coef_1 = exp(logp - logp_old)``, a
differentiable ratio (1 in value on-policy, not in gradient). ``straight_through``: verl
``core_algos.kl_penalty`` returns ``k2 - sg(k2) + sg(k)`` for a name ending in ``+``.
``importance``: OpenRLHF ``models/utils.py`` ``compute_approx_kl`` returns
``sg(k) + w k2 - sg(w k2)`` with ``w = sg(min(rho, KL_IS_WEIGHT_CLIP))``, ``KL_IS_WEIGHT_CLIP =
10.0`` (and ``w = 1`` without ``log_probs_old``). On-policy (rho = 1) the last three give every
sampled token the same gradient, d, whose expectation is the gradient of KL(pi_theta ||
pi_ref); the plain k3 gives 1 - r, whose expectation is the gradient of KL(pi_ref || pi_theta).
"""

from __future__ import annotations

import numpy as np

from .._checks import check_choice, check_scalar, prepare, where_valid
from .kl import _check_estimator, check_kl_clamp, kl_estimate_grad_kernel, kl_estimate_kernel

__all__ = ["FORMS", "check_form", "check_is_bound", "estimator_terms", "form_terms",
           "kl_term_and_grad", "kl_term_kernel"]

#: the gradient forms of a KL term in the loss (the table of the module docstring)
FORMS = ("plain", "ratio", "straight_through", "importance")

#: OpenRLHF 0.11.2 ``openrlhf/models/utils.py`` ``KL_IS_WEIGHT_CLIP``: the bound of the
#: ``importance`` form's weight
OPENRLHF_IS_BOUND = 10.0


def check_form(form, name="form"):
    """A gradient form checked: one of :data:`FORMS`."""
    return check_choice(form, name, FORMS, "gradient form")


def check_is_bound(bound, name="bound"):
    """The ``importance`` form's upper bound on w = pi_theta / pi_old checked: ``None`` (no
    bound) or a real number >= 1.

    Why >= 1: on-policy every weight is 1, and a bound below 1 would shrink them all.

    >>> check_is_bound(10), check_is_bound(None)
    (10.0, None)
    >>> check_is_bound(0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: bound: must be >= 1 (an upper bound on pi_theta / pi_old; ...), got 0.5
    """
    if bound is None:
        return None
    value = check_scalar(bound, name)
    if value < 1:
        raise ValueError(f"{name}: must be >= 1 (an upper bound on pi_theta / pi_old; "
                         f"on-policy the weight is 1), got {bound}")
    return value


def estimator_terms(d, rm1, estimator: str):
    """(k, dk/dd) of an estimator from d = logp - logp_ref and ``rm1`` = r - 1 = exp(-d) - 1.

    Element-wise on float64 arrays or on object arrays of Fractions and floats (the exact
    enumeration of :mod:`ppo_numpy.grads.kl_exact` passes r - 1 = pi_ref / pi_theta - 1 exactly).
    On floats, with ``rm1 = np.expm1(-d)``, the same numbers as ``kl_estimate_kernel`` and
    ``kl_estimate_grad_kernel`` of :mod:`ppo_numpy.ppo.kl` (tested bit for bit):

        k1 = d,  k2 = d^2 / 2,  k3 = (r - 1) + d,  abs = |d|
        dk1 = 1, dk2 = d,       dk3 = -(r - 1),    dabs = sign(d)  (0 at d = 0)

    pi_theta = 1/2 and pi_ref = 1/4 for the sampled token: d = log 2, r - 1 = -1/2 exactly, so
    k3 = log 2 - 1/2 (a float) and dk3/dd = 1/2 (a Fraction):

    >>> import math
    >>> from fractions import Fraction as F
    >>> k3, dk3 = estimator_terms(np.array([math.log(2)], dtype=object),
    ...                           np.array([F(-1, 2)], dtype=object), "k3")
    >>> round(k3[0], 12), dk3[0]
    (0.19314718056, Fraction(1, 2))
    """
    exact = d.dtype == object
    if estimator == "k1":
        return d, np.full(d.shape, 1, dtype=object) if exact else np.ones_like(d)
    if estimator == "k2":
        return d * d / 2, d
    if estimator == "k3":
        return rm1 + d, -rm1
    # np.sign has no loop for Fractions: (d > 0) - (d < 0) there
    sign = ((d > 0).astype(int) - (d < 0).astype(int)).astype(object) if exact else np.sign(d)
    return abs(d), sign


def form_terms(k, dk, d, rho, form: str, bound=None):
    """(value, d value / d logp) of a form from the estimate ``k``, its derivative ``dk``,
    d = logp - logp_ref and rho = pi_theta / pi_old (the table of the module docstring).

    The one place the four forms are written: the batch function :func:`kl_term_and_grad`
    and the exact enumeration of :mod:`ppo_numpy.grads.kl_exact` both call it. Element-wise on
    float arrays or object arrays; ``bound`` checked (``None``: no bound).

    >>> form_terms(np.array([0.1]), np.array([0.4]), np.array([0.5]), np.array([2.0]), "ratio")
    (array([0.2]), array([1.]))
    """
    if form == "plain":
        return k, dk
    if form == "ratio":
        # k rho, rho = exp(logp - logp_old) differentiable: d(k rho) = rho (k' + k)
        return k * rho, rho * (dk + k)
    if form == "straight_through":
        # k2 - sg(k2) + sg(k): k's value, k2's gradient d
        return k, d
    # sg(k) + sg(w) k2 - sg(w k2), w = min(rho, bound): k's value, w d
    w = rho if bound is None else np.minimum(rho, bound)
    return k, w * d


def kl_term_and_grad(logp, logp_ref, estimator="k3", form="plain", mask=None, *,
                     logp_old=None, bound=OPENRLHF_IS_BOUND, clamp=None):
    """The KL term's per-token value and its derivative d value / d logp, in one form.

    Parameters
    ----------
    logp : array (T,) or (B, T)
        log pi_theta(y_t | x, y_<t) of the sampled tokens (the policy being updated).
    logp_ref : array, same shape
        log pi_ref of the same tokens.
    estimator : {"k1", "k2", "k3", "abs"}
        The estimate k of :func:`ppo_numpy.kl_estimate`. Default ``"k3"``.
    form : {"plain", "ratio", "straight_through", "importance"}
        How it is differentiated (the module docstring's table). Default ``"plain"``, the
        gradient of :func:`ppo_numpy.kl_estimate_grad`.
    mask : array of 0/1, optional
        1 for response tokens; value and derivative are exactly 0 at padding.
    logp_old : array, same shape, optional
        log pi_old of the tokens (the policy that sampled them), for rho = exp(logp -
        logp_old) of ``ratio`` and ``importance``. ``None`` (default): on-policy, rho = 1,
        as TRL (``old_per_token_logps = per_token_logps.detach()``) and OpenRLHF (w = 1).
    bound : float >= 1 or None
        ``importance``: the upper bound c of w = min(rho, c). Default 10.0 (OpenRLHF 0.11.2
        ``KL_IS_WEIGHT_CLIP``); ``None``: no bound.
    clamp : float > 0, optional
        Clip k to [-clamp, clamp] (verl and OpenRLHF: 10). Its derivative is 0 where
        ``abs(k) > clamp`` in ``plain`` and ``ratio``; ``straight_through`` and ``importance`` clamp
        only the value (their gradient is k2's). ``None`` (default): no clamp.

    Returns
    -------
    value, dlogp : float64 arrays, the shape of ``logp``; 0 at padding. Summed with the
    weights of an aggregation they give the term and its gradient (``d`` + name).

    Examples
    --------
    logp - logp_ref = 0.5 on-policy: k3 = exp(-0.5) - 1 + 0.5 = 0.1065..., its plain
    derivative 1 - exp(-0.5) = 0.3935..., and the other three forms all give d = 0.5:

    >>> for form in FORMS:
    ...     v, g = kl_term_and_grad([0.0], [-0.5], "k3", form)
    ...     print(form, round(float(v[0]), 6), round(float(g[0]), 6))
    plain 0.106531 0.393469
    ratio 0.106531 0.5
    straight_through 0.106531 0.5
    importance 0.106531 0.5

    Off-policy, rho = pi_theta / pi_old = e^0.5 = 1.6487...: the ratio form's value and
    gradient are multiplied by it; the importance form's weight is bounded at 1.2:

    >>> v, g = kl_term_and_grad([0.0], [-0.5], "k3", "ratio", logp_old=[-0.5])
    >>> round(float(v[0]), 6), round(float(g[0]), 6)  # 0.1065 e^0.5, 0.5 e^0.5
    (0.175639, 0.824361)
    >>> v, g = kl_term_and_grad([0.0], [-0.5], "k3", "importance", logp_old=[-0.5], bound=1.2)
    >>> round(float(v[0]), 6), round(float(g[0]), 6)  # 1.2 * 0.5
    (0.106531, 0.6)
    """
    _check_estimator(estimator)
    check_form(form)
    bound = check_is_bound(bound)
    clamp = check_kl_clamp(clamp)
    arrays = {"logp": logp, "logp_ref": logp_ref}
    if logp_old is not None:
        arrays["logp_old"] = logp_old
    checked, m = prepare(arrays, mask, exact=False)
    logp, logp_ref = checked[:2]
    log_rho = checked[0] - checked[2] if logp_old is not None else None
    return kl_term_kernel(logp, logp_ref, log_rho, m, estimator, form, bound, clamp)


def kl_term_kernel(logp, logp_ref, log_rho, m, estimator, form, bound=None, clamp=None):
    """:func:`kl_term_and_grad` on checked float64 arrays (unchecked kernel); ``log_rho`` =
    logp - logp_old, or ``None`` for rho = 1. Returns (value, dlogp), 0 at padding."""
    # k and k' of ppo_numpy.ppo.kl (clamped: the derivative 0 where |k| > clamp)
    k = where_valid(m, kl_estimate_kernel(logp, logp_ref, estimator, clamp))
    dk = kl_estimate_grad_kernel(logp, logp_ref, estimator, m, clamp)
    # d = logp - logp_ref;  rho = exp(logp - logp_old), 1 on-policy
    d = logp - logp_ref
    rho = np.ones_like(logp) if log_rho is None else np.exp(log_rho)
    value, dvalue = form_terms(k, dk, d, rho, form, bound)
    return where_valid(m, value), where_valid(m, dvalue + 0.0)
