"""The PPO objective (docs/objective.md) and the policy loss frameworks minimise (notebook 09).

    L_PPO = E_{(x,y) ~ pi_old} [ sum_{t=1}^{T} min(rho_t A_t, clip(rho_t, 1-eps, 1+eps) A_t) ]

estimated by the mean over the batch's prompt-response pairs of the sum over
each response's tokens. :func:`ppo_objective` is that number exactly (to be
maximised). :func:`ppo_policy_loss` is its negative under a chosen
aggregation (frameworks usually average over tokens instead of summing) and
returns the statistics frameworks log.

The loss options are keywords, the one way to pass them: ``epsilon`` and ``agg`` by
name in the signatures, every other field of :class:`~ppo_numpy.PolicyLossOptions` through
``**options`` (:mod:`ppo_numpy.policy_loss.options`). The public functions here check their
arguments once and call the kernel of :mod:`ppo_numpy.policy_loss.kernel`, which looks the
member ``loss_type`` names up in the family's table (:mod:`ppo_numpy.family.losses`).

``is_weights=`` (B, T), optional, on every policy-loss function: importance weights for
the mismatch between the sampler and the trainer (:mod:`ppo_numpy.mismatch.correction`),
which multiply each token's term before aggregation, term_t = w_t surrogate_t, as
constants (no gradient flows through them). The KL term is not weighted (TRL multiplies
the policy term and adds beta KL_t after; verl's KL loss is apart).
"""

from __future__ import annotations

import warnings

from .._checks import check_choice, check_is_weights, prepare
from .kernel import APPROX_KL, policy_loss_forward, policy_loss_stats
from .options import DEFAULTS, OPTION_NAMES, PolicyLossOptions

__all__ = ["PolicyLossOptions", "loss_options", "ppo_objective", "ppo_policy_loss"]


def loss_options(epsilon=0.2, agg="token-mean", **options) -> PolicyLossOptions:
    """The checked :class:`PolicyLossOptions` of a call's keywords.

    An unknown keyword is a TypeError that names it and the valid ones. ``options=`` (a
    :class:`PolicyLossOptions` passed whole) is deprecated: it still works, with a
    DeprecationWarning, when no other option is given.

    >>> loss_options(epsilon=0.1).epsilon
    0.1
    >>> loss_options(epsilon_hi=0.3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: epsilon_hi: not a policy-loss option; valid ones are epsilon, epsilon_high, ...
    """
    if "options" in options:
        whole = options.pop("options")
        if whole is not None:
            warnings.warn("options=PolicyLossOptions(...) is deprecated: pass the options as "
                          "keywords (ppo_policy_loss(..., epsilon=0.1, agg='grpo'))",
                          DeprecationWarning, stacklevel=3)
            if not isinstance(whole, PolicyLossOptions):
                raise TypeError(f"options: expected a PolicyLossOptions, got "
                                f"{type(whole).__name__}")
            given = {k: v for k, v in dict(epsilon=epsilon, agg=agg, **options).items()
                     if v != getattr(DEFAULTS, k, None)}
            if given:
                listed = ", ".join(f"{k}={v!r}" for k, v in given.items())
                raise ValueError("options: pass the loss options as keywords, not both ways "
                                 f"(got {listed} too)")
            return whole
    for name in options:
        if name not in OPTION_NAMES:
            raise TypeError(f"{name}: not a policy-loss option; valid ones are "
                            f"{', '.join(OPTION_NAMES)}")
    if epsilon == 0.2 and agg == "token-mean" and not options:
        return DEFAULTS  # checked once, when this module was imported
    return PolicyLossOptions(epsilon=epsilon, agg=agg, **options)


def ppo_objective(logp, logp_old, advantages, mask=None, epsilon=0.2, **clip_options):
    """L_PPO (docs/objective.md): mean over sequences of the summed clipped surrogate.

    Parameters
    ----------
    logp, logp_old : array (T,) or (B, T)
        Log-probabilities of the taken tokens under pi_theta and pi_theta_old.
    advantages : array, same shape
        A_hat_t.
    mask : array of 0/1, optional
        1 for response tokens.
    epsilon : float >= 0
        Clip width. Default 0.2.
    **clip_options
        ``epsilon_high``, ``dual_clip``: see :func:`clipped_surrogate`.

    Returns
    -------
    float, to be maximised. The mean is over the rows with at least one
    response token (``aggregate``'s ``"seq-mean-token-sum"``).

    Examples
    --------
    Before any update rho = 1, so L_PPO is the mean over sequences of the summed
    advantages: ((0.46575 + 0.385 + 0.3) + 1.0) / 2 = 1.075375.

    >>> A = [[0.46575, 0.385, 0.3], [1.0, 0.0, 0.0]]
    >>> m = [[1, 1, 1], [1, 0, 0]]
    >>> logp = [[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0]]
    >>> round(ppo_objective(logp, logp, A, m), 12)
    1.075375
    """
    # the loss of ppo_policy_loss, which it must equal, with agg="seq-mean-token-sum"
    opts = loss_options(epsilon, "seq-mean-token-sum", **clip_options)
    (logp, logp_old, A), m = _checked(logp, logp_old, advantages, mask)
    return -policy_loss_forward(logp, logp_old, A, m, opts).loss


def _check_approx_kl(approx_kl) -> tuple:
    """The estimators of ``approx_kl=``: True (all of :data:`APPROX_KL`), False (none) or a
    tuple of some of "k1", "k2", "k3"; returned as a tuple in that order."""
    if approx_kl is True or approx_kl is False:
        return APPROX_KL if approx_kl else ()
    if isinstance(approx_kl, str) or not isinstance(approx_kl, (tuple, list)):
        raise TypeError(f"approx_kl: expected True, False or a tuple of 'k1', 'k2', 'k3', got "
                        f"{approx_kl!r}")
    chosen = {check_choice(k, "approx_kl", APPROX_KL, "estimator") for k in approx_kl}
    return tuple(k for k in APPROX_KL if k in chosen)


def _checked(logp, logp_old, advantages, mask, logp_ref=None):
    """The arrays of a public call checked once: float64 (even for Fractions: rho needs exp),
    0 at padding; ``logp_ref`` last when given."""
    arrays = {"logp": logp, "logp_old": logp_old, "advantages": advantages}
    if logp_ref is not None:
        arrays["logp_ref"] = logp_ref
    return prepare(arrays, mask, exact=False)


def ppo_policy_loss(logp, logp_old, advantages, mask=None, epsilon=0.2, agg="token-mean", *,
                    logp_ref=None, is_weights=None, approx_kl=True, **options):
    """Policy loss -aggregate(min(rho A, clip(rho) A)) and the statistics frameworks log.

    Parameters
    ----------
    logp, logp_old, advantages : array (T,) or (B, T)
        As in :func:`ppo_objective`.
    mask : array of 0/1, optional
        1 for response tokens.
    epsilon : float >= 0
        Clip width (the lower one if ``epsilon_high`` is given). Default 0.2.
    agg : str
        Aggregation mode of :func:`aggregate`. Default ``"token-mean"``;
        ``"seq-mean-token-sum"`` gives exactly ``-ppo_objective``.
    logp_ref : array, same shape, optional
        log pi_ref of the tokens, for a KL term in the loss (``kl_coef > 0``).
    is_weights : array, same shape, >= 0, optional
        Importance weights w_t for the sampler-trainer mismatch
        (:func:`ppo_numpy.rollout_importance_weights`): the loss is
        -aggregate(w_t min(...)), w_t a constant of the gradient. With
        ``importance_level="sequence"`` and weights that vary along a response, the
        gradient at token t is w_t times the derivative of the (unweighted) sequence term
        at t: verl's per-token form (0.9.1 ``compute_policy_loss_gspo`` writes the ratio
        sg(s_i) pi_t / sg(pi_t), so token t's weight reaches token t only), equal to it when
        the advantage and the aggregation weight are constant along the response. It is not
        the derivative of the loss value, whose gradient is the row mean of the weights
        times that derivative (TRL's (B, 1) loss times (B, T) weights: pass the row means as
        ``is_weights`` for that form). The statistics are of the unweighted surrogate.
        ``None`` (default): all 1.
    approx_kl : bool or tuple of "k1", "k2", "k3"
        Which ``approx_kl_*`` statistics to compute: True (default) all three, False none,
        or a tuple of some (verl logs k1 only: ``approx_kl=("k1",)``). Only the statistics
        change; the loss and the gradient do not (verl logs one estimator, TRL none).
    **options
        Any other field of :class:`PolicyLossOptions`: ``epsilon_high``, ``dual_clip``
        (see :func:`clipped_surrogate`), ``norm`` (the divisor of the modes that take one),
        ``log_ratio_clamp`` (see :func:`probability_ratio`), and the critic-free family's
        ``importance_level`` (GSPO), ``log_ratio_max``, ``delta``, ``loss_type`` (CISPO,
        VESPO, and SAPO, GMPO, GPG, Clip-Cov, KL-Cov, DPPO, DRO: each its module of
        :mod:`ppo_numpy.family.losses`), ``cispo_clip``, ``vespo_k_pos`` (and VESPO's other
        shapes), ``kl_coef``, ``kl_estimator``, ``kl_clamp``, ``kl_agg``,
        ``sapo_tau_pos``, ``sapo_tau_neg``, ``cov_ratio``, ``cov_bounds``, ``cov_seed``,
        ``kl_cov_coef``, ``dppo_ratio_max``, ``dro_beta``; ``agg="luspo"`` with
        ``importance_level="sequence"`` is TRL's LUSPO.

    Returns
    -------
    loss : float
        To be minimised.
    stats : dict of float
        Token means over the response tokens:

        * ``clipfrac_active``: fraction where the clipped branch is active, i.e.
          the min picks clip(rho) A, strictly below rho A (TRL's and verl's
          ``clipfrac``: ``pg_losses2 > pg_losses``; the dual clip only raises a
          term, and is counted in ``dual_clipfrac``);
        * ``clipfrac_outside``: fraction with rho outside [1 - eps, 1 + eps_high],
          whatever the sign of A (some trainers log this);
        * ``dual_clipfrac``: fraction where the dual clip bound is active;
        * ``approx_kl_k1``, ``approx_kl_k2``, ``approx_kl_k3``: estimates of
          KL(pi_old || pi_theta) from the old samples, with r = rho:
          -log rho, (log rho)^2 / 2 and (rho - 1) - log rho;
        * ``ratio_mean``, ``ratio_min``, ``ratio_max``;
        * with any option of the critic-free family also ``clipfrac_low`` and
          ``clipfrac_high`` (TRL's ``clip_ratio/low_mean``, ``high_mean``: A < 0 with
          min(rho, delta) < 1 - eps, A > 0 with it > 1 + eps_high) and ``kl_ref``
          (the token mean of the KL term's KL_t, 0 without one). Under
          ``importance_level="sequence"`` the ratio statistics are of the sequence
          ratio (at every token of its response), the ``approx_kl`` ones of the token
          log-ratios.

    Examples
    --------
    rho = [1.5, 0.5, 1.1] with A = [2, -1, 1]: the first two are clipped
    (2.4 < 3.0, -0.8 < -0.5), so the token-mean loss is -(2.4 - 0.8 + 1.1)/3 = -0.9.

    >>> import numpy as np
    >>> loss, stats = ppo_policy_loss(np.log([1.5, 0.5, 1.1]), [0.0, 0.0, 0.0], [2.0, -1.0, 1.0])
    >>> round(loss, 12), round(stats["clipfrac_active"], 6)
    (-0.9, 0.666667)

    GSPO: one response with token log-ratios [0.3, 0.1] and A = 1 has the sequence ratio
    exp(0.2) = 1.2214 > 1.2, clipped at both tokens: the loss is -1.2.

    >>> loss, stats = ppo_policy_loss([0.3, 0.1], [0.0, 0.0], [1.0, 1.0],
    ...                               importance_level="sequence")
    >>> round(loss, 12), stats["clipfrac_active"]
    (-1.2, 1.0)

    Importance weights [0.5, 1, 2] on the first example: -(0.5 * 2.4 - 0.8 + 2 * 1.1)/3:

    >>> loss, _ = ppo_policy_loss(np.log([1.5, 0.5, 1.1]), [0.0, 0.0, 0.0], [2.0, -1.0, 1.0],
    ...                           is_weights=[0.5, 1.0, 2.0])
    >>> round(loss, 12)
    -0.866666666667
    """
    opts = loss_options(epsilon, agg, **options)
    (logp, logp_old, A, *ref), m = _checked(logp, logp_old, advantages, mask, logp_ref)
    w = check_is_weights(is_weights, logp, "logp", m)
    f = policy_loss_forward(logp, logp_old, A, m, opts, *ref, is_weights=w)
    return f.loss, policy_loss_stats(f, A, m, opts, approx_kl=_check_approx_kl(approx_kl))
