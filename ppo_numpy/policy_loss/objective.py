"""The PPO objective (docs/objective.md) and the policy loss frameworks minimise (notebook 09).

    L_PPO = E_{(x,y) ~ pi_old} [ sum_{t=1}^{T} min(rho_t A_t, clip(rho_t, 1-eps, 1+eps) A_t) ]

estimated by the mean over the batch's prompt-response pairs of the sum over
each response's tokens. :func:`ppo_objective` is that number exactly (to be
maximised). :func:`ppo_policy_loss` is its negative under a chosen
aggregation (frameworks usually average over tokens instead of summing) and
returns the statistics frameworks log.

The loss options are keywords, the one way to pass them: ``epsilon`` and ``agg`` by
name in the signatures, every other field of :class:`PolicyLossOptions` through
``**options``. Inside the package they travel as one checked :class:`PolicyLossOptions`.

The loss is written in three plain functions on checked arrays, makemore style (every
intermediate has a name, its gradient is ``d<name>``):

* ``policy_loss_forward``: log rho -> rho -> term -> loss (+ the KL term);
* ``policy_loss_backward``: d loss / d logp, back through the same names;
* ``policy_loss_stats``: the statistics frameworks log, computed apart.

``is_weights=`` (B, T), optional, on every policy-loss function: importance weights for
the mismatch between the sampler and the trainer (:mod:`ppo_numpy.mismatch.correction`),
which multiply each token's term before aggregation, term_t = w_t surrogate_t, as
constants (no gradient flows through them). The KL term is not weighted (TRL multiplies
the policy term and adds beta KL_t after; verl's KL loss is apart).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields

import numpy as np

from .. import policy_losses_extra as extra_losses
from .._checks import (
    as_array,
    check_choice,
    check_finite,
    check_same_shape,
    check_scalar,
    prepare,
    where_valid,
)
from ..family.losses import vespo
from ..fast import gspo_rowwise
from ..ppo.aggregation import aggregate_kernel, aggregation_weights, check_mode, mode_norm
from ..ppo.clipping import UNCLIPPED, check_dual_clip, clip_bounds, clip_case, surrogate_term
from ..ppo.kl import _check_estimator, check_kl_clamp, kl_estimate_grad_kernel, kl_estimate_kernel
from ..ppo.kl_gradient import OPENRLHF_IS_BOUND, check_form, check_is_bound, kl_term_kernel
from ..ppo.ratio import check_clamp, check_level

__all__ = ["CISPO_CLIPS", "LOSS_TYPES", "PolicyLossOptions", "loss_options",
           "policy_loss_backward", "policy_loss_forward", "policy_loss_kernel",
           "policy_loss_stats", "ppo_objective", "ppo_policy_loss"]


#: the gradients of the sequence-level loss (PolicyLossOptions.sequence_gradient)
SEQUENCE_GRADIENTS = ("sequence", "token")
#: the forms of the per-token policy loss (the last eight: ppo_numpy.policy_losses_extra)
LOSS_TYPES = ("clip", "cispo", "vespo") + extra_losses.EXTRA_LOSS_TYPES
#: how CISPO bounds its importance weight
CISPO_CLIPS = ("range", "max")
#: VESPO's default (k_pos, lambda_pos, k_neg, lambda_neg) (TRL 1.16.0 GRPOConfig)
VESPO_SHAPES = (2.0, 3.0, 3.0, 2.0)


@dataclass(frozen=True)
class PolicyLossOptions:
    """How the clipped surrogate becomes a loss: clip range, dual clip, clamp, aggregation.

    Attributes
    ----------
    epsilon : float >= 0
        Lower clip width: the range starts at 1 - epsilon. Default 0.2.
    epsilon_high : float >= 0, optional
        Upper clip width (DAPO's clip-higher); ``None``: ``epsilon``.
    dual_clip : float > 1, optional
        For A < 0 the term is bounded below by ``dual_clip * A``; ``None``: off.
    log_ratio_clamp : float > 0, optional
        Clamp logp - logp_old to [-c, c] before exp; ``None``: off.
    agg : str
        Aggregation mode (:data:`ppo_numpy.AGGREGATION_MODES`). Default ``"token-mean"``.
    norm : float > 0, optional
        Divisor of the modes that take one (``"seq-mean-token-sum-norm"``, ``"dr_grpo"``:
        default T; ``"dapo"``: default the batch's token count).
    importance_level : {"token", "sequence"}
        ``"sequence"``: GSPO's sequence ratio (:func:`ppo_numpy.probability_ratio`) in
        place of the token ratio. Default ``"token"``.
    sequence_gradient : {"sequence", "token"}
        The gradient at ``importance_level="sequence"``. ``"sequence"`` (default): of the
        loss as written, the sequence ratio s_i differentiated (GSPO's paper, TRL): token t
        gets (1/n_i) sum_u of the row's d term_u / d log s_i. ``"token"``: verl 0.9.1's
        ``compute_policy_loss_gspo``, which writes token t's ratio as sg[s_i] pi_t /
        sg[pi_t] (the value s_i, its gradient through pi_t alone): token t gets its own
        d term_t / d log s_i. The two agree when the advantage is constant along each
        response; they differ for advantages that vary along it (REINFORCE++, ReMax).
    log_ratio_max : float, optional
        An upper bound on the log-ratio the loss uses (the sequence log-ratio at
        ``importance_level="sequence"``): verl's GSPO clamps it at 10. ``None``: off.
    delta : float > 0, optional
        TRL's two-sided bound (``GRPOConfig.delta``): the unclipped branch uses
        min(rho, delta). ``None``: off.
    loss_type : str
        ``"clip"`` (default): the clipped surrogate. ``"cispo"``: CISPO,
        -sg(w_t) A_t logp_t with the importance weight w_t bounded as ``cispo_clip``
        says and not differentiated (its gradient is -w_t A_t per token). ``"vespo"``:
        VESPO (TRL), -sg(phi_i) A_t logp_t with phi the Gamma weight of the sequence's
        summed log-ratio (``ppo_numpy.family.losses.vespo``); ``is_weights`` enter phi, not
        the term.
        verl 0.9.1's ``"sapo"`` (also TRL's), ``"geo_mean"`` (GMPO), ``"gpg"``,
        ``"clip_cov"``, ``"kl_cov"``, ``"dppo_tv"``, ``"dppo_kl"``, ``"dro"``: the formulas
        in :mod:`ppo_numpy.policy_losses_extra` (for ``geo_mean`` the epsilons bound the
        token log-ratio, for DPPO the change of probability or its binary KL).
    vespo_k_pos : float >= 0
        VESPO's shapes: k for A >= 0 (TRL 1.16.0 ``GRPOConfig``: 2); ``vespo_lambda_pos``
        lambda for A >= 0 (3), ``vespo_k_neg`` and ``vespo_lambda_neg`` for A < 0 (3, 2).
    cispo_clip : {"range", "max"}
        ``"range"`` (verl's ``loss_mode="cispo"``): w = clip(rho, 1 - eps, 1 + eps_high);
        ``"max"`` (TRL's ``loss_type="cispo"``): w = min(rho, epsilon_high), the bound
        ``epsilon_high`` itself and no lower one. Default ``"range"``.
    kl_coef : float >= 0
        beta of a KL-to-reference term in the loss, beta * aggregate(KL_t) (GRPO's KL in
        the loss; needs ``logp_ref``). Default 0 (off).
    kl_estimator : {"k1", "k2", "k3", "abs"}
        Its per-token estimator of KL(pi_theta || pi_ref). Default ``"k3"``.
    kl_clamp : float > 0, optional
        Clamp the per-token KL to [-c, c] (verl's ``low_var_kl``: 10). ``None``: off.
    kl_agg : str, optional
        The KL term's aggregation mode; ``None`` (default): ``agg``, as TRL adds it per
        token to the policy loss.
    kl_gradient : {"plain", "ratio", "straight_through", "importance"}
        How the KL term is differentiated (:mod:`ppo_numpy.ppo.kl_gradient`): ``"plain"``
        (default) the estimator's own derivative (verl's ``low_var_kl``); ``"ratio"`` KL_t
        times the ratio of the current policy to pi_old, *differentiated* (TRL 1.16.0's
        ``use_bias_correction_kl``, its default): the token ratio rho_t = exp(log rho_t), or
        at ``importance_level="sequence"`` the sequence ratio s_i = exp((1/n_i) sum_t
        log rho_t), the one before any ``delta`` or ``log_ratio_max`` (TRL multiplies before
        ``delta`` clamps it); the KL's gradient gains KL_t times the ratio's own gradient,
        even where the ratio is 1. ``"straight_through"`` KL_t's value with k2's gradient
        (verl's ``k3+``); ``"importance"`` KL_t's value with the gradient min(rho,
        kl_is_bound) (logp - logp_ref), the weight a constant (OpenRLHF 0.11.2's
        ``unbiased_gradient``). These two need ``importance_level="token"``.
    kl_ratio_level : {None, "token", "sequence"}
        The level of ``"ratio"``'s ratio; ``None`` (default): ``importance_level``. (TRL's
        VESPO takes its own weight per token but multiplies the KL by the ratio of
        ``importance_sampling_level``.)
    kl_is_bound : float >= 1 or None
        The ``"importance"`` form's upper bound on pi_theta / pi_old. Default 10.0
        (OpenRLHF's ``KL_IS_WEIGHT_CLIP``); ``None``: no bound.
    sapo_tau_pos : float > 0
        SAPO's gate temperature for A > 0. Default 1.0 (verl's ``tau_pos``, TRL's
        ``sapo_temperature_pos``).
    sapo_tau_neg : float > 0
        SAPO's gate temperature for A <= 0. Default 1.05 (verl's ``tau_neg``, TRL's
        ``sapo_temperature_neg``).
    cov_ratio : float > 0
        Clip-Cov's and KL-Cov's fraction of the response tokens selected (at least one).
        Default 0.0002 (verl's ``clip_cov_ratio``, ``kl_cov_ratio``).
    cov_bounds : tuple of float
        Clip-Cov's open interval of the covariance of the candidates. Default (1.0, 5.0)
        (verl's ``clip_cov_lb``, ``clip_cov_ub``).
    cov_seed : int >= 0
        The seed of Clip-Cov's random draw among the candidates. Default 0.
    kl_cov_coef : float >= 0
        KL-Cov's coefficient of abs(log rho) on the selected tokens. Default 0.1 (verl's
        ``ppo_kl_coef``).
    dppo_ratio_max : float > 0
        DPPO's truncation of its constant ratio weight. Default 20.0 (verl's fallback; its
        ``ActorConfig`` passes ``clip_ratio_c`` = 3.0: the ``verl-grpo`` preset does).
    dro_beta : float > 0, optional
        DRO's coefficient of the quadratic log-ratio penalty; needed by ``loss_type="dro"``.

    Examples
    --------
    >>> opts = PolicyLossOptions(epsilon=0.2, epsilon_high=0.28)
    >>> opts.bounds()
    (0.8, 1.28)
    >>> PolicyLossOptions(dual_clip=0.5)
    Traceback (most recent call last):
    ...
    ValueError: dual_clip: must be > 1, got 0.5
    """

    epsilon: float = 0.2
    epsilon_high: float | None = None
    dual_clip: float | None = None
    log_ratio_clamp: float | None = None
    agg: str = "token-mean"
    norm: float | None = None
    importance_level: str = "token"
    sequence_gradient: str = "sequence"
    log_ratio_max: float | None = None
    delta: float | None = None
    loss_type: str = "clip"
    cispo_clip: str = "range"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_clamp: float | None = None
    kl_agg: str | None = None
    kl_gradient: str = "plain"
    kl_ratio_level: str | None = None
    kl_is_bound: float | None = OPENRLHF_IS_BOUND
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    cov_ratio: float = 0.0002
    cov_bounds: tuple = (1.0, 5.0)
    cov_seed: int = 0
    kl_cov_coef: float = 0.1
    dppo_ratio_max: float = 20.0
    dro_beta: float | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        clip_bounds(self.epsilon, self.epsilon_high)
        set_(self, "dual_clip", check_dual_clip(self.dual_clip))
        set_(self, "log_ratio_clamp", check_clamp(self.log_ratio_clamp))
        check_mode(self.agg, "agg")
        # (the mode's own default, T or dapo's token count, is resolved per batch: divisors)
        mode_norm(self.agg, self.norm)
        check_level(self.importance_level, "importance_level")
        check_choice(self.sequence_gradient, "sequence_gradient", SEQUENCE_GRADIENTS,
                     "sequence-level gradient")
        if self.log_ratio_max is not None:
            set_(self, "log_ratio_max", check_scalar(self.log_ratio_max, "log_ratio_max",
                                                     allow_exact=False))
        if self.delta is not None:
            set_(self, "delta", check_scalar(self.delta, "delta", low=0, low_open=True,
                                             allow_exact=False))
        check_choice(self.loss_type, "loss_type", LOSS_TYPES, "loss type")
        check_choice(self.cispo_clip, "cispo_clip", CISPO_CLIPS, "CISPO clip")
        if self.loss_type == "cispo" and (self.dual_clip is not None or self.delta is not None):
            raise ValueError("loss_type: 'cispo' takes no dual_clip or delta (its weight is "
                             "bounded by cispo_clip)")
        shapes = (self.vespo_k_pos, self.vespo_lambda_pos, self.vespo_k_neg,
                  self.vespo_lambda_neg)
        if self.loss_type == "vespo" or shapes != VESPO_SHAPES:
            vespo.check_vespo_params(*shapes)
        if self.loss_type == "vespo" and (self.dual_clip is not None or self.delta is not None
                                          or self.log_ratio_max is not None
                                          or self.importance_level != "token"):
            raise ValueError("loss_type: 'vespo' takes no dual_clip, delta or log_ratio_max, "
                             "and importance_level='token' (it sums the token log-ratios "
                             "into its sequence weight itself)")
        set_(self, "kl_coef", check_scalar(self.kl_coef, "kl_coef", low=0, allow_exact=False))
        _check_estimator(self.kl_estimator, "kl_estimator")
        set_(self, "kl_clamp", check_kl_clamp(self.kl_clamp, "kl_clamp"))
        if self.kl_agg is not None:
            check_mode(self.kl_agg, "kl_agg")
        check_form(self.kl_gradient, "kl_gradient")
        if self.kl_ratio_level is not None:
            check_level(self.kl_ratio_level, "kl_ratio_level")
        set_(self, "kl_is_bound", check_is_bound(self.kl_is_bound, "kl_is_bound"))
        if self.kl_gradient in ("straight_through", "importance") and \
                self.importance_level != "token":
            raise ValueError(f"kl_gradient: {self.kl_gradient!r} is written for "
                             "importance_level='token'; at 'sequence' use 'plain' or "
                             "'ratio' (TRL weights the KL by the sequence ratio)")
        extra_losses.check_extra_options(self)

    def bounds(self, like=None):
        """``(1 - epsilon, 1 + epsilon_high)`` in the arithmetic of ``like`` (float by default)."""
        return clip_bounds(self.epsilon, self.epsilon_high, like=like)

    @property
    def is_ppo(self) -> bool:
        """Token ratio, clipped surrogate, no delta, no KL term: the objective's own loss."""
        return (self.importance_level == "token" and self.loss_type == "clip"
                and self.delta is None and self.log_ratio_max is None and self.kl_coef == 0)


#: the field names of :class:`PolicyLossOptions`, the keywords of every policy-loss function
OPTION_NAMES = tuple(f.name for f in fields(PolicyLossOptions))
DEFAULTS = PolicyLossOptions()


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


#: the approx-KL statistics ``ppo_policy_loss`` reports by default (``approx_kl=True``)
APPROX_KL = ("k1", "k2", "k3")


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


def _checked(logp, logp_old, advantages, mask, logp_ref=None, *, zero_padding=True,
             check_values=True):
    """The arrays of a public call checked once: float64 (even for Fractions: rho needs exp),
    0 at padding; ``logp_ref`` last when given. ``zero_padding=False``, ``check_values=False``:
    as ``prepare``'s (a large array may come back as given, its padding not zeroed; its
    values not checked: the caller checks them)."""
    arrays = {"logp": logp, "logp_old": logp_old, "advantages": advantages}
    if logp_ref is not None:
        arrays["logp_ref"] = logp_ref
    out, m = prepare(arrays, mask, exact=False, zero_padding=zero_padding,
                     check_values=check_values)
    return out, m


def check_is_weights(is_weights, like: np.ndarray, like_name: str, m: np.ndarray):
    """``is_weights`` checked against the checked array ``like`` and its mask ``m``: ``None``,
    or a new float64 array of ``like``'s shape, finite and >= 0 at the response tokens, 0 at
    padding (whatever it held there)."""
    if is_weights is None:
        return None
    w = as_array(is_weights, "is_weights", exact=False)
    check_same_shape(like, like_name, w, "is_weights")
    check_finite(w, "is_weights", m, nonnegative="importance weights")
    return where_valid(m, w)


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
        change; the loss and the gradient do not. Why: k3 needs exp(log rho) - 1 at every
        token, where the loss of the sequence level needs one exp per response (on a CPU
        without AVX-512, NumPy's exp is a scalar call, the larger part of the call's time).
    **options
        Any other field of :class:`PolicyLossOptions`: ``epsilon_high``, ``dual_clip``
        (see :func:`clipped_surrogate`), ``norm`` (the divisor of the modes that take one),
        ``log_ratio_clamp`` (see :func:`probability_ratio`), and the critic-free family's
        ``importance_level`` (GSPO), ``log_ratio_max``, ``delta``, ``loss_type`` (CISPO,
        VESPO, and SAPO, GMPO, GPG, Clip-Cov, KL-Cov, DPPO, DRO:
        :mod:`ppo_numpy.policy_losses_extra`), ``cispo_clip``, ``vespo_k_pos`` (and VESPO's
        other shapes), ``kl_coef``, ``kl_estimator``, ``kl_clamp``, ``kl_agg``,
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


@dataclass(frozen=True)
class PolicyLossForward:
    """The named intermediates of ``policy_loss_forward`` (each a float64 array of the
    batch's shape, 0 at padding, unless said otherwise)."""

    logp: np.ndarray
    log_ratio: np.ndarray     # logp_t - logp_old_t
    log_rho: np.ndarray       # log rho_t: log_ratio, clamped to [-c, c] by log_ratio_clamp
    log_w_raw: np.ndarray     # the log-ratio the loss uses: log rho_t, or GSPO's log s_i (B, 1)
    log_w: np.ndarray         # log_w_raw capped at log_ratio_max
    rho: np.ndarray           # exp(log_w) at every response token
    lo: float                 # 1 - eps
    hi: float                 # 1 + eps_high
    term: np.ndarray          # the per-token objective term (to maximise): is_weights surrogate
    kl: np.ndarray | None     # the KL term's KL_t (kl_coef > 0), else None
    policy_loss: float        # -aggregate(term)
    kl_loss: float            # aggregate(KL_t), 0.0 without a KL term
    loss: float               # policy_loss + kl_coef kl_loss
    surrogate: np.ndarray | None = None   # min(rho A, clip(rho) A) (CISPO's term), unweighted
    is_weights: np.ndarray | None = None  # w_t of is_weights=, None: all 1
    extra: dict | None = None             # the intermediates of policy_losses_extra's losses

    def __post_init__(self):
        if self.surrogate is None:  # no importance weights: the term is the surrogate
            object.__setattr__(self, "surrogate", self.term)


def policy_loss_forward(logp, logp_old, A, m, opts: PolicyLossOptions, logp_ref=None, *,
                        is_weights=None):
    """The policy loss on checked arrays (unchecked kernel), every intermediate named.

    ``logp``, ``logp_old``, ``A`` (and ``logp_ref`` when ``opts.kl_coef > 0``, and
    ``is_weights`` when given) float64 (B, T) or (T,) arrays, 0 at padding; ``m`` the bool
    mask; ``opts`` checked. Returns a ``PolicyLossForward``.

    >>> f = policy_loss_forward(np.log([1.5, 0.5, 1.1]), np.zeros(3), np.array([2.0, -1, 1]),
    ...                         np.ones(3, bool), PolicyLossOptions())
    >>> f.term.round(12).tolist(), round(f.loss, 12)
    ([2.4, -0.8, 1.1], -0.9)
    """
    # the clip range [1 - eps, 1 + eps_high]   (eps_high defaults to eps)
    eps_high = opts.epsilon if opts.epsilon_high is None else opts.epsilon_high
    lo, hi = 1 - opts.epsilon, 1 + eps_high
    # log rho_t = logp_t - logp_old_t   (clamped to [-c, c] before exp, with log_ratio_clamp)
    log_ratio = logp - logp_old
    log_rho = log_ratio
    if opts.log_ratio_clamp is not None:
        log_rho = np.clip(log_ratio, -opts.log_ratio_clamp, opts.log_ratio_clamp)
    log_w_raw = log_rho
    if opts.importance_level == "sequence":
        # GSPO: log s_i = (1/n_i) sum_t log rho_{i,t}, one ratio per response   (B, 1)
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        log_w_raw = log_rho.sum(axis=-1, keepdims=True) / n
    log_w = log_w_raw
    if opts.log_ratio_max is not None:
        # capped (verl's GSPO: at 10)
        log_w = np.minimum(log_w_raw, opts.log_ratio_max)
    # rho_t = exp(log_w), at every response token, 0 at padding
    rho = np.where(m, np.exp(log_w), 0.0)
    extra = None
    if opts.loss_type in extra_losses.EXTRA_LOSS_TYPES:
        # SAPO, GMPO, GPG, Clip-Cov, KL-Cov, DPPO, DRO (GMPO weighs a row by its weights'
        # geometric mean)
        surrogate, is_weights, extra = extra_losses.extra_surrogate(
            logp, logp_old, log_rho, rho, A, m, opts, is_weights)
    elif opts.loss_type == "cispo":
        # CISPO: sg(w_t) A_t logp_t, the weight w_t = clip(rho_t) a constant of the gradient
        surrogate = cispo_weight(rho, lo, hi, opts) * A * logp
    elif opts.loss_type == "vespo":
        # VESPO: sg(phi_i) A_t logp_t, phi of the summed log-ratio (and the is_weights)
        surrogate = vespo_phi(log_rho, A, m, opts, is_weights) * A * logp
    else:
        # min( rho_t A_t , clip(rho_t, 1 - eps, 1 + eps_high) A_t )
        surrogate = surrogate_term(rho, A, lo, hi, opts.dual_clip, opts.delta)
    # term_t = is_weights_t surrogate_t   (the rollout correction, a constant)
    weighted = is_weights is not None and opts.loss_type != "vespo"
    term = is_weights * surrogate if weighted else surrogate
    # loss = -aggregate(term)   (0 at padding: rho and A are)
    policy_loss = -float(aggregate_kernel(term, m, opts.agg, opts.norm))
    kl, kl_loss = None, 0.0
    if opts.kl_coef > 0:
        if logp_ref is None:
            raise ValueError("logp_ref: the KL term of the loss (kl_coef > 0) needs the "
                             "reference log-probabilities")
        # + beta aggregate(KL_t),  KL_t of pi_theta against pi_ref
        if opts.kl_gradient in ("plain", "ratio"):
            kl = where_valid(m, kl_estimate_kernel(logp, logp_ref, opts.kl_estimator,
                                                   opts.kl_clamp))
            if opts.kl_gradient == "ratio":
                # KL_t r_t: the bias correction, r_t = rho_t or s_i (before delta),
                # differentiated
                kl = kl * kl_correction_ratio(log_rho, m, _kl_ratio_level(opts))
        else:
            # the form's value: KL_t (its gradient another one: ppo_numpy.ppo.kl_gradient)
            kl = _kl_term(logp, logp_ref, log_ratio, m, opts)[0]
        kl_loss = float(aggregate_kernel(kl, m, *_kl_agg(opts)))
    loss = policy_loss + opts.kl_coef * kl_loss if opts.kl_coef > 0 else policy_loss
    return PolicyLossForward(logp, log_ratio, log_rho, log_w_raw, log_w, rho, lo, hi, term, kl,
                             policy_loss, kl_loss, loss, surrogate, is_weights, extra)


def _kl_ratio_level(opts: PolicyLossOptions) -> str:
    return opts.kl_ratio_level or opts.importance_level


def kl_correction_ratio(log_rho, m, level: str):
    """The ratio that multiplies KL_t under ``kl_gradient="ratio"``: rho_t = exp(log rho_t)
    (``"token"``) or s_i = exp((1/n_i) sum_t log rho_t) at every token of response i
    (``"sequence"``); 0 at padding."""
    if level == "sequence":
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        log_rho = np.where(m, log_rho, 0.0).sum(axis=-1, keepdims=True) / n
    return np.where(m, np.exp(log_rho), 0.0)


def cispo_weight(rho, lo, hi, opts: PolicyLossOptions):
    """CISPO's importance weight w_t: clip(rho, lo, hi) = clip(rho, 1 - eps, 1 + eps_high)
    (``cispo_clip="range"``, verl) or min(rho, epsilon_high) (``"max"``, TRL)."""
    if opts.cispo_clip == "max":
        # min(rho_t, eps_high): the bound is eps_high itself (hi - 1), no lower one
        eps_high = opts.epsilon if opts.epsilon_high is None else opts.epsilon_high
        return np.minimum(rho, float(eps_high))
    return np.minimum(np.maximum(rho, lo), hi)


def vespo_phi(log_rho, A, m, opts: PolicyLossOptions, is_weights=None):
    """VESPO's phi_{i,t} (B, T) with the options' shapes (:mod:`ppo_numpy.family.losses.vespo`)."""
    two_d = log_rho.ndim == 2
    params = (opts.vespo_k_pos, opts.vespo_lambda_pos, opts.vespo_k_neg, opts.vespo_lambda_neg)
    phi = vespo.vespo_phi_kernel(*(x if two_d or x is None else x[None]
                                   for x in (log_rho, A, m)), params,
                                 is_weights if two_d or is_weights is None else is_weights[None])
    return phi if two_d else phi[0]


def _kl_term(logp, logp_ref, log_ratio, m, opts: PolicyLossOptions):
    """(value, d value / d logp) of the KL term's form ``opts.kl_gradient`` (not plain), its
    ratio rho_t = exp(logp_t - logp_old_t) the token ratio before any clamp (TRL's
    ``coef_1``)."""
    return kl_term_kernel(logp, logp_ref, log_ratio, m, opts.kl_estimator, opts.kl_gradient,
                          opts.kl_is_bound, opts.kl_clamp)


def _kl_agg(opts: PolicyLossOptions):
    """The KL term's (mode, norm): ``kl_agg`` (its own mode's default norm), else the policy
    loss's mode and norm."""
    if opts.kl_agg is None or opts.kl_agg == opts.agg:
        return opts.agg, opts.norm
    return opts.kl_agg, None


def policy_loss_backward(f: PolicyLossForward, A, m, opts: PolicyLossOptions, logp_ref=None):
    """d loss / d logp of ``policy_loss_forward``'s result ``f`` (unchecked kernel).

    Back through the forward's names, each gradient ``d<name>`` shaped like ``<name>``;
    0 at padding. At the kinks of clip, min and the clamps the bound counts as inside
    (``ppo_numpy.grads.loss_grads``).
    """
    # loss = -aggregate(term) = -sum w_t term_t
    dterm = -aggregation_weights(m, opts.agg, opts.norm)
    # term = is_weights surrogate: the weights multiply each token's gradient, at the end,
    # nothing flows through them (at the sequence level: w_t times the derivative of the
    # sequence term, verl's per-token form; see ppo_policy_loss); vespo's are inside phi,
    # and GMPO, GPG, DPPO, DRO weight their own terms
    dsurrogate = dterm
    if opts.loss_type == "vespo":
        # surrogate = sg(phi) A_t logp_t, the weights inside phi: d / d logp = phi A_t
        dlogp = dterm * vespo_phi(f.log_rho, A, m, opts, f.is_weights) * A
    elif opts.loss_type in extra_losses.DIRECT_LOSS_TYPES:
        # GMPO, GPG, DPPO, DRO: their gradient in logp (policy_losses_extra)
        weighted = dterm if f.is_weights is None else dterm * f.is_weights
        dlogp = extra_losses.extra_dlogp(f, weighted, A, m, opts)
    elif opts.loss_type == "cispo":
        # surrogate = sg(w_t) A_t logp_t: d / d logp = w_t A_t (nothing flows through w_t)
        dlogp = dsurrogate * cispo_weight(f.rho, f.lo, f.hi, opts) * A
    else:
        dlog_w_direct = 0.0
        if opts.loss_type in extra_losses.RATIO_LOSS_TYPES:
            # SAPO, Clip-Cov, KL-Cov: d surrogate / d rho their own (and KL-Cov's |log rho|)
            drho, dlog_w_direct = extra_losses.extra_drho(f, dsurrogate, A, opts)
        else:
            # surrogate = rho A where unclipped, a constant where clipped (clip_case)
            case = clip_case(f.rho, A, f.lo, f.hi, opts.dual_clip, opts.delta)
            drho = dsurrogate * np.where(case == UNCLIPPED, A, 0.0)
        # rho = exp(log_w)
        dlog_w = drho * f.rho + dlog_w_direct
        if opts.log_ratio_max is not None:
            # log_w = min(log_w, max): the bound passes the gradient, as torch.clamp does
            dlog_w = dlog_w * (f.log_w_raw <= opts.log_ratio_max)
        dlog_rho = dlog_w
        if opts.importance_level == "sequence" and opts.sequence_gradient == "sequence":
            # log s_i = (1/n_i) sum_t m_t log rho_t: each token gets 1/n_i of the row's sum
            n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
            dlog_rho = np.where(m, dlog_w.sum(axis=-1, keepdims=True) / n, 0.0)
        elif opts.importance_level == "sequence":
            # token t's ratio sg[s_i] pi_t / sg[pi_t]: d log ratio_t / d logp_t = 1, own token
            dlog_rho = np.where(m, dlog_w, 0.0)
        dlogp = dlog_rho
        if opts.log_ratio_clamp is not None:
            # log rho = clip(logp - logp_old, -c, c): the bound passes the gradient
            dlogp = dlogp * (np.abs(f.log_ratio) <= opts.log_ratio_clamp)
    if f.is_weights is not None and opts.loss_type not in (
            "vespo", *extra_losses.DIRECT_LOSS_TYPES):
        # d term_t = w_t d surrogate_t (token level); at the sequence level w_t times the
        # derivative of the sequence term at token t
        dlogp = dlogp * f.is_weights
    if opts.kl_coef > 0:
        # + beta aggregate(KL_t)
        mode, norm = _kl_agg(opts)
        w_kl = aggregation_weights(m, mode, norm)
        if opts.kl_gradient == "plain":
            dkl = kl_estimate_grad_kernel(f.logp, logp_ref, opts.kl_estimator, m, opts.kl_clamp,
                                          w_kl)
        elif opts.kl_gradient == "ratio":
            dkl = _dkl_corrected(f, logp_ref, m, opts, w_kl)
        else:
            # d (form's value) / d logp (ppo_numpy.ppo.kl_gradient), times the weights
            dkl = w_kl * _kl_term(f.logp, logp_ref, f.log_ratio, m, opts)[1]
        dlogp = dlogp + opts.kl_coef * dkl
    return dlogp + 0.0  # (turns -0.0 into 0.0)


def _dkl_corrected(f: PolicyLossForward, logp_ref, m, opts: PolicyLossOptions, w_kl):
    """d aggregate(KL_t r_t) / d logp (``kl_gradient="ratio"``): r_t dKL_t (the KL's own
    gradient, weighted by the ratio) plus KL_t times the ratio's gradient: d rho_t / d logp_t
    = rho_t at the token level; d s_i / d logp_t = s_i / n_i at every token of response i, so each
    token gets s_i / n_i sum_u w_u KL_u. Nonzero even where the ratio is 1."""
    r = kl_correction_ratio(f.log_rho, m, _kl_ratio_level(opts))
    kl = where_valid(m, kl_estimate_kernel(f.logp, logp_ref, opts.kl_estimator, opts.kl_clamp))
    # r_t d KL_t
    dkl = kl_estimate_grad_kernel(f.logp, logp_ref, opts.kl_estimator, m, opts.kl_clamp,
                                  w_kl * r)
    if _kl_ratio_level(opts) == "sequence":
        # d s_i / d logp_t = s_i / n_i: each token of the row gets the row's sum
        n = np.maximum(m.sum(axis=-1, keepdims=True), 1)
        dlog_rho = np.where(m, (w_kl * kl * r).sum(axis=-1, keepdims=True) / n, 0.0)
    else:
        # d rho_t / d logp_t = rho_t
        dlog_rho = w_kl * kl * r
    if opts.log_ratio_clamp is not None:
        # log rho = clip(logp - logp_old, -c, c): the bound passes the gradient
        dlog_rho = dlog_rho * (np.abs(f.log_ratio) <= opts.log_ratio_clamp)
    return dkl + where_valid(m, dlog_rho)


def policy_loss_stats(f: PolicyLossForward, A, m, opts: PolicyLossOptions, *,
                      approx_kl=APPROX_KL) -> dict:
    """The statistics of :func:`ppo_policy_loss` from the forward's names (computed apart from
    the loss: token means over the response tokens); ``approx_kl`` the estimators of the
    ``approx_kl_*`` entries (a tuple from ``_check_approx_kl``)."""
    rho, log_rho = f.rho, f.log_rho
    n = np.count_nonzero(m)
    lo, hi = f.lo, f.hi

    def frac(flags):  # a fraction of the response tokens
        return float(np.count_nonzero(flags & m) / n)

    def mean(x):  # x is 0 at padding
        return float(x.sum() / n)

    # min(rho_t, delta) A_t: the unclipped branch
    rho_unclipped = rho if opts.delta is None else np.minimum(rho, opts.delta)
    if opts.loss_type in extra_losses.EXTRA_LOSS_TYPES:
        clipped = 0.0  # (the loss's own fractions, below)
    elif opts.loss_type == "cispo":
        clipped = frac(cispo_weight(rho, lo, hi, opts) != rho)
    elif opts.loss_type == "vespo":
        clipped = 0.0  # (no clip: phi weighs every token)
    else:
        # counted from the values, as TRL and verl count (pg_losses2 > pg_losses)
        clipped = frac(f.surrogate < rho_unclipped * A)
    dual = 0.0
    if opts.dual_clip is not None:
        dual = frac(f.surrogate > surrogate_term(rho, A, lo, hi, None, opts.delta))
    stats = {
        "clipfrac_active": clipped,
        "clipfrac_outside": frac((rho > hi) | (rho < lo)),
        "dual_clipfrac": dual,
    }
    # KL(pi_old || pi_theta) estimates, token means: k1 = -log rho, k2 = (log rho)^2 / 2,
    # k3 = (rho - 1) - log rho (why: from log rho, not log(rho): rho underflows to 0 for
    # log rho < -745)
    if "k1" in approx_kl:
        # the inputs are 0 at padding, so is log rho: -log rho is -0.0 there, which changes
        # the sum of np.where(m, -log rho, 0.0) only when that sum is 0 (its sign)
        k1 = -log_rho.sum()
        if k1 == 0:
            k1 = np.where(m, -log_rho, 0.0).sum()
        stats["approx_kl_k1"] = float(k1 / n)
    if "k2" in approx_kl:
        stats["approx_kl_k2"] = mean(np.square(log_rho) / 2)
    if "k3" in approx_kl:
        stats["approx_kl_k3"] = mean(np.expm1(log_rho) - log_rho)
    stats.update(ratio_mean=mean(rho), ratio_min=float(rho[m].min()), ratio_max=float(rho.max()))
    if not opts.is_ppo:
        stats["clipfrac_low"] = frac((rho_unclipped < lo) & (A < 0))
        stats["clipfrac_high"] = frac((rho_unclipped > hi) & (A > 0))
        stats["kl_ref"] = mean(f.kl) if f.kl is not None else 0.0
    if opts.loss_type == "vespo":
        # the token mean of phi
        stats["vespo_phi_mean"] = mean(vespo_phi(f.log_rho, A, m, opts, f.is_weights))
    if opts.loss_type in extra_losses.EXTRA_LOSS_TYPES:
        stats.update(extra_losses.extra_stats(f, A, m, opts))
    return stats


def policy_loss_kernel(logp, logp_old, A, m, opts: PolicyLossOptions, logp_ref=None, *,
                       is_weights=None, approx_kl=APPROX_KL):
    """``(forward, stats, dlogp)`` of checked arrays: the forward's names, the statistics and
    d loss / d logp in one call (unchecked kernel: the toy policy's loss, the presets and
    :func:`ppo_numpy.policy_loss_and_grad` use it).

    At the sequence level with one advantage per response, at least
    ``ppo_numpy.fast.gspo_rowwise.ROWWISE_FROM`` entries and no ``is_weights`` it takes the
    fast form of ``ppo_numpy.fast.gspo_rowwise`` (the same numbers to rounding); else the
    readable one (importance weights vary per token: the per-response form has no place for
    them)."""
    A_row = None if is_weights is not None else gspo_rowwise.use_rowwise(A, m, opts)
    if A_row is not None:
        return gspo_rowwise.gspo_rowwise_kernel(logp, logp_old, A_row, m, opts, logp_ref,
                                                approx_kl=approx_kl)
    f = policy_loss_forward(logp, logp_old, A, m, opts, logp_ref, is_weights=is_weights)
    return (f, policy_loss_stats(f, A, m, opts, approx_kl=approx_kl),
            policy_loss_backward(f, A, m, opts, logp_ref))
