"""What a member of the policy-loss family gives the table (:mod:`ppo_numpy.family.losses`).

A member is one module holding its forward, its gradient and its statistics. It hands the table
a :class:`Loss` of plain functions on checked arrays (unchecked kernels):

``forward(logp, logp_old, f, A, m, opts, is_weights) -> (surrogate, weights, extra)``
    The per-token term to maximise, 0 at padding; the weights that multiply it in the loss
    (usually ``is_weights`` itself; ``None``: all 1); a dict of the intermediates its
    gradient and statistics read (or ``None``). ``f`` is the forward record so far: the ratio
    the loss uses (``log_ratio``, ``log_rho``, ``log_w``, ``rho``:
    ``ppo_numpy.ppo.ratio.loss_ratio``) and the clip range ``lo``, ``hi``.
``backward(f, dterm, A, m, opts) -> dlogp``
    d loss / d logp of the policy term from the forward record ``f`` (now with its
    ``surrogate``, ``is_weights`` = the weights above, and ``extra``) and ``dterm`` = d loss /
    d term (minus the aggregation weights); the weights included.
``clipped(f, A, m, opts) -> (active, dual)``, optional
    Bool flags of the tokens whose gradient the loss's rule cuts (``clipfrac_active``) and of
    those a dual clip bounds (``dual_clipfrac``), ``None`` for none. Default: none.
``stats(f, A, m, opts) -> dict``, optional
    The member's own statistics, added after the common ones (replacing one of the same name).
``check(opts, selected) -> None``, optional
    Checks the option fields the member reads (always: a bad value is an error even when
    another loss type is chosen) and, when ``selected``, the combinations it cannot take;
    raises ValueError naming the field.

What wraps every member (the ratio's clamp, sequence level and cap; aggregation; the KL term;
the statistics every loss logs) is written once in :mod:`ppo_numpy.policy_loss.kernel`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Loss", "no_clip_options"]


@dataclass(frozen=True)
class Loss:
    """A member of the policy-loss family: its forward, gradient and statistics (module
    docstring)."""

    forward: Callable
    backward: Callable
    clipped: Callable | None = None
    stats: Callable | None = None
    check: Callable | None = None


def no_clip_options(opts, *, sequence: bool = False) -> None:
    """The selected loss takes no dual_clip or delta (those bound the clipped surrogate) and,
    unless ``sequence``, only the token level; ValueError naming the option otherwise."""
    if opts.dual_clip is not None or opts.delta is not None:
        raise ValueError(f"loss_type: {opts.loss_type!r} takes no dual_clip or delta")
    if opts.importance_level == "sequence" and not sequence:
        raise ValueError(f"importance_level: 'sequence' is for loss types 'clip', 'cispo' and "
                         f"'sapo', not {opts.loss_type!r}")
