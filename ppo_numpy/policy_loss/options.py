"""The options of the policy loss: one checked object, :class:`PolicyLossOptions`
(docs/conventions.md, "How to pass the loss options").

Every policy-loss function takes the options as keywords (``epsilon`` and ``agg`` by name in
the signatures, every other field through ``**options``); inside the package they travel as
one checked :class:`PolicyLossOptions` (``ppo_numpy.policy_loss.objective.loss_options`` makes
it from a call's keywords).
The fields a member of the family reads are checked by that member
(:mod:`ppo_numpy.family.losses`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .._checks import check_choice, check_scalar
from ..family.losses import LOSSES
from ..ppo.aggregation import check_mode, mode_norm
from ..ppo.clipping import check_dual_clip, clip_bounds
from ..ppo.kl import _check_estimator, check_kl_clamp
from ..ppo.kl_gradient import OPENRLHF_IS_BOUND, check_form, check_is_bound
from ..ppo.ratio import check_clamp, check_level

__all__ = ["ALGORITHMS", "DEFAULTS", "OPTION_NAMES", "PolicyLossOptions",
           "SEQUENCE_GRADIENTS"]

#: the gradients of the sequence-level loss (PolicyLossOptions.sequence_gradient)
SEQUENCE_GRADIENTS = ("sequence", "token")
#: algorithms known by their own name that are a member of the table with other options:
#: ``loss_type=name`` is the member ``"clip"`` with these fields (GSPO: the sequence ratio;
#: LUSPO: GSPO aggregated by "luspo", TRL 1.16.0 ``loss_type="luspo"``; Dr. GRPO: the sum
#: over tokens divided by B T, TRL's ``loss_type="dr_grpo"``)
ALGORITHMS = {
    "gspo": {"importance_level": "sequence"},
    "luspo": {"importance_level": "sequence", "agg": "luspo"},
    "dr_grpo": {"agg": "dr_grpo"},
}


@dataclass(frozen=True)
class PolicyLossOptions:
    """How the clipped surrogate becomes a loss: clip range, dual clip, clamp, aggregation.

    Two attributes are read off the fields once, when the object is made: ``eps_high`` (the
    upper clip width, ``epsilon_high`` or else ``epsilon``) and ``is_ppo`` (token ratio, the
    clipped surrogate, no delta, no cap, no KL term: the objective's own loss, whose
    statistics leave out the critic-free family's).

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
        The member of the policy-loss family, a name of the table
        :data:`ppo_numpy.family.losses.LOSSES`: ``"clip"`` (default) the clipped surrogate;
        ``"cispo"`` CISPO, -sg(w_t) A_t logp_t with the importance weight w_t bounded as
        ``cispo_clip`` says and not differentiated; ``"vespo"`` VESPO (TRL), -sg(phi_i) A_t
        logp_t with phi the Gamma weight of the sequence's summed log-ratio
        (``is_weights`` enter phi, not the term); verl 0.9.1's ``"sapo"`` (also TRL's),
        ``"geo_mean"`` (GMPO), ``"gpg"``, ``"clip_cov"``, ``"kl_cov"``, ``"dppo_tv"``,
        ``"dppo_kl"``, ``"dro"``: each formula in its member's module (for ``geo_mean`` the
        epsilons bound the token log-ratio, for DPPO the change of probability or its binary
        KL). An algorithm's own name (``ALGORITHMS``) is the ``"clip"`` member with the
        fields that make it: ``"gspo"`` (``importance_level="sequence"``), ``"luspo"`` (and
        ``agg="luspo"``), ``"dr_grpo"`` (``agg="dr_grpo"``); one of those fields given another
        value than the name's and than its default is a ValueError; the object holds
        ``loss_type="clip"`` with those fields.
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
        ``unbiased_gradient``). These two are per token at either ``importance_level``:
        neither reads the sequence ratio (verl adds its KL loss apart from the policy loss
        of any ``loss_mode``; OpenRLHF weights it by the token ratio whatever
        ``policy_loss_type``).
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
    >>> gspo = PolicyLossOptions(loss_type="gspo")
    >>> gspo.loss_type, gspo.importance_level
    ('clip', 'sequence')
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
        if isinstance(self.loss_type, str) and self.loss_type in ALGORITHMS:
            # an algorithm's own name: the clip member with its fields (ALGORITHMS)
            for name, value in ALGORITHMS[self.loss_type].items():
                given = getattr(self, name)
                if given not in (value, _FIELD_DEFAULTS[name]):
                    raise ValueError(f"{name}: loss_type={self.loss_type!r} sets {name}="
                                     f"{value!r}; got {given!r}")
                set_(self, name, value)
            set_(self, "loss_type", "clip")
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
        check_choice(self.loss_type, "loss_type", (*LOSSES, *ALGORITHMS), "loss type")
        set_(self, "kl_coef", check_scalar(self.kl_coef, "kl_coef", low=0, allow_exact=False))
        _check_estimator(self.kl_estimator, "kl_estimator")
        set_(self, "kl_clamp", check_kl_clamp(self.kl_clamp, "kl_clamp"))
        if self.kl_agg is not None:
            check_mode(self.kl_agg, "kl_agg")
        check_form(self.kl_gradient, "kl_gradient")
        if self.kl_ratio_level is not None:
            check_level(self.kl_ratio_level, "kl_ratio_level")
        set_(self, "kl_is_bound", check_is_bound(self.kl_is_bound, "kl_is_bound"))
        # each member checks the fields it reads, and the combinations it cannot take when
        # it is the loss chosen (ppo_numpy.family.losses.entry)
        for name, loss in LOSSES.items():
            if loss.check is not None:
                loss.check(self, name == self.loss_type)
        # two readings of the fields, resolved once (attributes, not fields: see the class's
        # docstring)
        set_(self, "eps_high", self.epsilon if self.epsilon_high is None else self.epsilon_high)
        set_(self, "is_ppo", self.importance_level == "token" and self.loss_type == "clip"
             and self.delta is None and self.log_ratio_max is None and self.kl_coef == 0)

    def bounds(self, like=None):
        """``(1 - epsilon, 1 + epsilon_high)`` in the arithmetic of ``like`` (float by default)."""
        return clip_bounds(self.epsilon, self.epsilon_high, like=like)


#: the field names of :class:`PolicyLossOptions`, the keywords of every policy-loss function


OPTION_NAMES = tuple(f.name for f in fields(PolicyLossOptions))
_FIELD_DEFAULTS = {f.name: f.default for f in fields(PolicyLossOptions)}
DEFAULTS = PolicyLossOptions()
