"""The options of the policy loss, checked once: one small object instead of five keywords.

:func:`ppo_numpy.ppo_policy_loss`, :func:`ppo_numpy.policy_loss_grad`,
:func:`ppo_numpy.ppo_loss_and_grads`, the presets and the training loop take
either these keywords or ``options=PolicyLossOptions(...)``; inside the package
the options travel as this object, validated where it was made.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._validation import check_choice, check_scalar
from .aggregation import check_mode, mode_norm
from .clipping import check_dual_clip, clip_bounds
from .kl import _check_estimator, check_kl_clamp
from .ratio import check_clamp, check_level

#: the forms of the per-token policy loss
LOSS_TYPES = ("clip", "cispo")
#: how CISPO bounds its importance weight
CISPO_CLIPS = ("range", "max")


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
    log_ratio_max : float, optional
        An upper bound on the log-ratio the loss uses (the sequence log-ratio at
        ``importance_level="sequence"``): verl's GSPO clamps it at 10. ``None``: off.
    delta : float > 0, optional
        TRL's two-sided bound (``GRPOConfig.delta``): the unclipped branch uses
        min(rho, delta). ``None``: off.
    loss_type : {"clip", "cispo"}
        ``"clip"`` (default): the clipped surrogate. ``"cispo"``: CISPO,
        -sg(w_t) A_t logp_t with the importance weight w_t bounded as ``cispo_clip``
        says and not differentiated (its gradient is -w_t A_t per token).
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
    log_ratio_max: float | None = None
    delta: float | None = None
    loss_type: str = "clip"
    cispo_clip: str = "range"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_clamp: float | None = None
    kl_agg: str | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        clip_bounds(self.epsilon, self.epsilon_high)
        set_(self, "dual_clip", check_dual_clip(self.dual_clip))
        set_(self, "log_ratio_clamp", check_clamp(self.log_ratio_clamp))
        check_mode(self.agg, "agg")
        # the mode's own default (T) is resolved per batch: mode_norm(mode, norm, T)
        mode_norm(self.agg, self.norm, 1)
        check_level(self.importance_level, "importance_level")
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
        set_(self, "kl_coef", check_scalar(self.kl_coef, "kl_coef", low=0, allow_exact=False))
        _check_estimator(self.kl_estimator, "kl_estimator")
        set_(self, "kl_clamp", check_kl_clamp(self.kl_clamp, "kl_clamp"))
        if self.kl_agg is not None:
            check_mode(self.kl_agg, "kl_agg")

    def bounds(self, like=None):
        """``(1 - epsilon, 1 + epsilon_high)`` in the arithmetic of ``like`` (float by default)."""
        return clip_bounds(self.epsilon, self.epsilon_high, like=like)

    def norm_for(self, T: int):
        """The divisor of ``"seq-mean-token-sum-norm"`` for a batch of width T (else None)."""
        return mode_norm(self.agg, self.norm, T)

    @property
    def is_ppo(self) -> bool:
        """Token ratio, clipped surrogate, no delta, no KL term: the objective's own loss."""
        return (self.importance_level == "token" and self.loss_type == "clip"
                and self.delta is None and self.log_ratio_max is None and self.kl_coef == 0)


DEFAULTS = PolicyLossOptions()


def resolve(options, **keywords) -> PolicyLossOptions:
    """``options`` itself, or the options the keywords give; both at once is an error.

    >>> resolve(None, epsilon=0.1).epsilon
    0.1
    >>> resolve(PolicyLossOptions(epsilon=0.1), epsilon=0.3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: options: pass the loss options either as keywords or as options, ...=0.3 too)
    """
    if options is None:
        if all(type(v) is type(d := getattr(DEFAULTS, k, resolve)) and v == d
               for k, v in keywords.items()):
            return DEFAULTS  # checked once, when this module was imported
        return PolicyLossOptions(**keywords)
    if not isinstance(options, PolicyLossOptions):
        raise TypeError(f"options: expected a PolicyLossOptions, got {type(options).__name__}")
    given = {k: v for k, v in keywords.items() if v != getattr(DEFAULTS, k)}
    if given:
        listed = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise ValueError("options: pass the loss options either as keywords or as options, "
                         f"not both (got {listed} too)")
    return options

