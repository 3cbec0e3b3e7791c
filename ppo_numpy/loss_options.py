"""The options of the policy loss, checked once: one small object instead of five keywords.

:func:`ppo_numpy.ppo_policy_loss`, :func:`ppo_numpy.policy_loss_grad`,
:func:`ppo_numpy.ppo_loss_and_grads`, the presets and the training loop take
either these keywords or ``options=PolicyLossOptions(...)``; inside the package
the options travel as this object, validated where it was made.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .aggregation import check_mode, mode_norm
from .clipping import check_dual_clip, clip_bounds
from .ratio import check_clamp


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
        Divisor of ``agg="seq-mean-token-sum-norm"`` (only that mode; default T).

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

    def __post_init__(self):
        clip_bounds(self.epsilon, self.epsilon_high)
        object.__setattr__(self, "dual_clip", check_dual_clip(self.dual_clip))
        object.__setattr__(self, "log_ratio_clamp", check_clamp(self.log_ratio_clamp))
        check_mode(self.agg, "agg")
        # the mode's own default (T) is resolved per batch: mode_norm(mode, norm, T)
        mode_norm(self.agg, self.norm, 1)

    def bounds(self, like=None):
        """``(1 - epsilon, 1 + epsilon_high)`` in the arithmetic of ``like`` (float by default)."""
        return clip_bounds(self.epsilon, self.epsilon_high, like=like)

    def norm_for(self, T: int):
        """The divisor of ``"seq-mean-token-sum-norm"`` for a batch of width T (else None)."""
        return mode_norm(self.agg, self.norm, T)


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
        return PolicyLossOptions(**keywords)
    if not isinstance(options, PolicyLossOptions):
        raise TypeError(f"options: expected a PolicyLossOptions, got {type(options).__name__}")
    given = {k: v for k, v in keywords.items() if v != getattr(DEFAULTS, k)}
    if given:
        listed = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise ValueError("options: pass the loss options either as keywords or as options, "
                         f"not both (got {listed} too)")
    return options


FIELDS = tuple(f.name for f in fields(PolicyLossOptions))
