"""The combined PPO loss of a toy policy and its gradient for every parameter, by hand.

    loss = L_pi + kl_coef KL + c_v L_V - c_H H

each term aggregated over the response tokens with the same ``agg`` mode:
L_pi and its optional KL term ("KL in the loss" as in GRPO) from
:func:`ppo_policy_loss`, L_V from :func:`value_loss`, H from :func:`entropy_from_logits`.
The backward pass chains the hand-written pieces:

    dlogp, dvalues, dz       ppo_numpy.grads.loss_grads (d loss / d inputs of each term)
    logp_t = z_t[y_t] - logsumexp(z_t)   =>   dz_t += dlogp_t (onehot(y_t) - softmax(z_t))
    z = logits / temperature             =>   dlogits = dz / temperature
    logits, values -> params             model.backward
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._checks import check_is_weights, check_scalar, where_valid
from ..batch import Rollout
from ..fast.gspo_rowwise import policy_loss_kernel
from ..grads.loss_grads import entropy_grad_kernel
from ..mismatch.correction import rollout_importance_weights
from ..policy_loss.objective import loss_options
from ..policy_loss.options import PolicyLossOptions
from ..ppo.aggregation import aggregate_kernel, aggregation_weights
from ..ppo.value_loss import check_value_clip, value_loss_grad_kernel, value_loss_kernel
from .sampling import _check_prompts, check_temperature, evaluate_kernel

BATCH_FIELDS = ("prompts", "responses", "mask", "logp_old", "old_values", "advantages",
                "returns")


def as_rollout(batch, model, *, kl: bool = False, rollout: bool = False) -> Rollout:
    """``batch`` (a :class:`~ppo_numpy.batch.Rollout`, a mapping or an object with the
    :data:`BATCH_FIELDS` as attributes, ``logp_ref`` when ``kl``, ``logp_rollout`` when
    ``rollout``) as a checked Rollout whose tokens are checked against ``model``'s
    vocabulary."""
    names = (BATCH_FIELDS + (("logp_ref",) if kl else ())
             + (("logp_rollout",) if rollout else ()))
    if isinstance(batch, Rollout):
        r = batch
        r.require(*names, why=f"the loss needs {', '.join(names)}")
    else:
        def field(name):
            has = name in batch if isinstance(batch, Mapping) else hasattr(batch, name)
            if not has:
                raise KeyError(f"batch: missing field {name!r} (needs {', '.join(names)})")
            return batch[name] if isinstance(batch, Mapping) else getattr(batch, name)

        r = Rollout(**{name: field(name) for name in names})
    _check_prompts(model, r.prompts)
    model.check_tokens(r.responses, "responses")
    return r


def logits_grad_from_logp(logq, responses, dlogp):
    """d loss / d z from d loss / d logp, where logp_t = log softmax(z_t)[y_t].

        dz_{t,k} = dlogp_t ([k = y_t] - softmax(z_t)_k)

    Parameters
    ----------
    logq : array (B, T, K), log softmax(z)
    responses : int array (B, T), the tokens y_t
    dlogp : array (B, T)

    Returns
    -------
    dz : array (B, T, K)

    Examples
    --------
    Two equally likely tokens, y = 0, dlogp = 1: dz = [1 - 1/2, -1/2].

    >>> logits_grad_from_logp(np.log([[[0.5, 0.5]]]), np.array([[0]]), np.array([[1.0]])).tolist()
    [[[0.5, -0.5]]]
    """
    dz = -dlogp[..., None] * np.exp(logq)  # (B, T, K)
    onehot = np.zeros_like(dz)
    np.put_along_axis(onehot, responses[..., None], 1.0, axis=-1)
    dz += dlogp[..., None] * onehot
    return dz


def response_backward(model, ev, dz, dvalues=0.0):
    """The parameter gradients from d loss / d z (B, T, K) and d loss / d V (B, T) at the
    response positions of the evaluation ``ev``: z = logits / temperature, and the response
    tokens are predicted at the positions P - 1 ... of the model's (B, P + T - 1) input."""
    B, L = ev.cache["tokens"].shape
    P = ev.prompt_length
    dlogits = np.zeros((B, L, model.vocab_size))
    # z = logits / temperature; positions P - 1 ... of the (B, P + T - 1, K) logits predict y
    dlogits[:, P - 1 :] = dz / ev.temperature
    dvalues_full = np.zeros((B, L))
    dvalues_full[:, P - 1 :] = dvalues
    return model.backward(ev.cache, dlogits, dvalues_full)


def ppo_loss_and_grads(model, batch, *, c_v=0.5, c_H=0.0, value_clip=None, temperature=1.0,
                       params=None, is_weights=None, rollout_is=None, **options):
    """PPO loss of ``model`` on ``batch``, its gradient w.r.t. every parameter, and statistics.

    Parameters
    ----------
    model : a toy policy (:class:`BigramPolicy`, :class:`MLPPolicy`, :class:`TransformerPolicy`)
    batch : Rollout, or a mapping (or object with attributes)
        ``prompts (B, P)``, ``responses (B, T)``, ``mask (B, T)``, ``logp_old (B, T)``,
        ``old_values (B, T)``, ``advantages (B, T)``, ``returns (B, T)``; and
        ``logp_ref (B, T)`` when ``kl_coef > 0``. A mapping is checked into a
        :class:`~ppo_numpy.batch.Rollout` (once).
    c_v : float >= 0
        Weight of the value loss. Default 0.5.
    c_H : float >= 0
        Weight of the entropy bonus (subtracted). Default 0.
    value_clip : float >= 0, optional
        ``clip_range`` of :func:`value_loss`. Default ``None``.
    temperature : float > 0
        The rollout temperature; logp are of softmax(logits / temperature).
    params : dict, optional
        Evaluate at these parameters instead of ``model.params``.
    is_weights : array (B, T), >= 0, optional
        Importance weights of the policy loss's tokens (as in :func:`ppo_policy_loss`):
        constants, no gradient through them. The value loss and entropy are not weighted.
    rollout_is : dict or True, optional
        Compute ``is_weights`` from the batch's ``logp_old`` and ``logp_rollout`` with
        :func:`ppo_numpy.rollout_importance_weights` and these keywords (``True``: its
        defaults, token-level truncation at 2). Needs ``logp_rollout`` in the batch; not
        together with ``is_weights``.
    **options
        The policy loss's options, as in :func:`ppo_policy_loss`: ``epsilon`` (0.2),
        ``agg`` (``"token-mean"``: the aggregation of every term), ``epsilon_high``,
        ``dual_clip``, ``norm``, ``log_ratio_clamp``, ``kl_coef`` (a KL-to-reference term
        in the loss, default 0: off) and ``kl_estimator`` (``"k3"``), ... (every field of
        :class:`~ppo_numpy.PolicyLossOptions`).

    Returns
    -------
    loss : float
    grads : dict, the keys and shapes of ``model.params``
    stats : dict of float
        The statistics of :func:`ppo_policy_loss`, plus ``policy_loss`` (the clipped
        surrogate's loss alone), ``value_loss``, ``entropy``, ``kl`` (the aggregated KL_t of
        the KL term, 0.0 when off) and ``loss``.

    Examples
    --------
    With rho = 1 (logp_old from the model itself) and zero advantages, the
    policy loss is 0 and only c_v L_V remains:

    >>> from ppo_numpy.models import BigramPolicy, evaluate
    >>> model = BigramPolicy(5, np.random.default_rng(0))
    >>> x, y, m = np.array([[1, 3]]), np.array([[4, 2]]), np.array([[1.0, 1.0]])
    >>> ev = evaluate(model, x, y, m)
    >>> batch = dict(prompts=x, responses=y, mask=m, logp_old=ev.logp, old_values=ev.values,
    ...              advantages=np.zeros((1, 2)), returns=ev.values + 1.0)
    >>> loss, grads, stats = ppo_loss_and_grads(model, batch, c_v=0.5)
    >>> round(loss, 12), stats["ratio_mean"], sorted(grads)  # 0.5 * 1/2 (V - (V + 1))^2
    (0.25, 1.0, ['W', 'v'])

    A rollout correction needs the inference engine's log-probs:

    >>> ppo_loss_and_grads(model, batch, rollout_is=dict(level="sequence"))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: rollout_is: the rollout correction needs logp_rollout (...) in the batch; ...
    """
    opts = loss_options(**options)
    c_v = check_scalar(c_v, "c_v", low=0, allow_exact=False)
    c_H = check_scalar(c_H, "c_H", low=0, allow_exact=False)
    value_clip = check_value_clip(value_clip)
    temperature = check_temperature(temperature)
    correction = _rollout_is_options(rollout_is, is_weights)
    if correction is not None and not _has_field(batch, "logp_rollout"):
        raise ValueError("rollout_is: the rollout correction needs logp_rollout (the inference "
                         "engine's log-probs) in the batch; it has none")
    rollout = as_rollout(batch, model, kl=opts.kl_coef > 0, rollout=correction is not None)
    if correction is not None:
        w = rollout_importance_weights(rollout.logp_old, rollout.logp_rollout, rollout.mask,
                                       **correction)
    else:
        w = check_is_weights(is_weights, rollout.logp_old, "logp_old", rollout.mask)
    return loss_and_grads_kernel(model, rollout, opts, c_v=c_v, c_H=c_H, value_clip=value_clip,
                                 temperature=temperature, params=params, is_weights=w)


def _has_field(batch, name: str) -> bool:
    """Whether ``batch`` (a Rollout, a mapping or an object) holds a non-None ``name``."""
    if isinstance(batch, Mapping):
        return batch.get(name) is not None
    return getattr(batch, name, None) is not None


def _rollout_is_options(rollout_is, is_weights):
    """``rollout_is`` as the keywords of :func:`rollout_importance_weights` (None: off)."""
    if rollout_is is None or rollout_is is False:
        return None
    if is_weights is not None:
        raise ValueError("rollout_is: give either rollout_is (weights computed from "
                         "logp_rollout) or is_weights, not both")
    if rollout_is is True:
        return {}
    if not isinstance(rollout_is, Mapping):
        raise TypeError(f"rollout_is: expected a dict of rollout_importance_weights keywords "
                        f"or True, got {type(rollout_is).__name__}")
    return dict(rollout_is)


def loss_and_grads_kernel(model, batch: Rollout, opts: PolicyLossOptions, *, c_v=0.5, c_H=0.0,
                          value_clip=None, temperature=1.0, params=None, is_weights=None,
                          divs=None):
    """:func:`ppo_loss_and_grads` of a checked :class:`Rollout` and checked options
    (unchecked kernel: the training loop calls it on its minibatches). ``divs``: the
    ``(d, D)`` every term aggregates with instead of those of ``agg`` on these rows (a
    micro-batch's share of a step, ``ppo_numpy.training.accumulation``)."""
    m = batch.mask
    ev = evaluate_kernel(model, batch.prompts, batch.responses, m, temperature, params)
    agg, norm = opts.agg, opts.norm

    # 1. forward: each term aggregated with agg
    pl, stats, dlogp = policy_loss_kernel(ev.logp, batch.logp_old, batch.advantages, m, opts,
                                          batch.logp_ref if opts.kl_coef > 0 else None,
                                          is_weights=is_weights, divs=divs)
    L_V = float(aggregate_kernel(where_valid(m, value_loss_kernel(
        ev.values, batch.old_values, batch.returns, value_clip)), m, agg, norm, divs))
    H = float(aggregate_kernel(ev.entropy, m, agg, norm, divs))
    # loss = L_pi (+ kl_coef KL) + c_v L_V - c_H H
    loss = pl.loss + c_v * L_V - c_H * H

    # 2. backward: d loss / d logp (dlogp), d loss / d values, d loss / d z
    w = aggregation_weights(m, agg, norm, divs)
    dvalues = c_v * where_valid(m, w * value_loss_grad_kernel(
        ev.values, batch.old_values, batch.returns, value_clip) + 0.0)  # (B, T)
    dz = logits_grad_from_logp(ev.logq, ev.responses, dlogp)  # (B, T, K)
    if c_H > 0:
        dz -= c_H * entropy_grad_kernel(ev.logq, m, w)
    # 3. the parameters' gradients
    grads = response_backward(model, ev, dz, dvalues)

    stats = {**stats, "policy_loss": pl.policy_loss, "value_loss": L_V, "entropy": H,
             "kl": pl.kl_loss, "loss": float(loss)}
    return float(loss), grads, stats
