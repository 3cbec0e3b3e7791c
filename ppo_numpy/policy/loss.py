"""The combined PPO loss of a toy policy and its gradient for every parameter, by hand.

    loss = L_pi + c_v L_V - c_H H + kl_coef KL

each term aggregated over the response tokens with the same ``agg`` mode:
L_pi from :func:`ppo_policy_loss`, L_V from :func:`value_loss`, H from
:func:`entropy_from_logits`, KL (optional, "KL in the loss" as in GRPO) from
:func:`kl_estimate`. The backward pass chains the hand-written pieces:

    dlogp, dvalues, dz       ppo_numpy.loss_grads (d loss / d inputs of each term)
    logp_t = z_t[y_t] - logsumexp(z_t)   =>   dz_t += dlogp_t (onehot(y_t) - softmax(z_t))
    z = logits / temperature             =>   dlogits = dz / temperature
    logits, values -> params             model.backward
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._validation import check_scalar, where_valid
from ..aggregation import aggregate_kernel, aggregation_weights
from ..kl import _check_estimator, kl_estimate_kernel
from ..loss_grads import entropy_grad_kernel, kl_estimate_grad_kernel
from ..loss_options import PolicyLossOptions, resolve
from ..objective import policy_loss_kernel
from ..rollout import Rollout
from ..value_loss import ValueLoss, check_value_clip
from .sampling import _check_prompts, check_temperature, evaluate_kernel

BATCH_FIELDS = ("prompts", "responses", "mask", "logp_old", "old_values", "advantages",
                "returns")


def as_rollout(batch, model, *, kl: bool = False) -> Rollout:
    """``batch`` (a :class:`~ppo_numpy.rollout.Rollout`, a mapping or an object with the
    :data:`BATCH_FIELDS` as attributes, and ``logp_ref`` when ``kl``) as a checked Rollout
    whose tokens are checked against ``model``'s vocabulary."""
    names = BATCH_FIELDS + (("logp_ref",) if kl else ())
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


def ppo_loss_and_grads(model, batch, *, epsilon=0.2, agg="token-mean", c_v=0.5, c_H=0.0,
                       value_clip=None, temperature=1.0, epsilon_high=None, dual_clip=None,
                       norm=None, log_ratio_clamp=None, kl_coef=0.0, kl_estimator="k3",
                       params=None, options=None, **more_options):
    """PPO loss of ``model`` on ``batch``, its gradient w.r.t. every parameter, and statistics.

    Parameters
    ----------
    model : a toy policy (:class:`BigramPolicy`, :class:`MLPPolicy`)
    batch : Rollout, or a mapping (or object with attributes)
        ``prompts (B, P)``, ``responses (B, T)``, ``mask (B, T)``, ``logp_old (B, T)``,
        ``old_values (B, T)``, ``advantages (B, T)``, ``returns (B, T)``; and
        ``logp_ref (B, T)`` when ``kl_coef > 0``. A mapping is checked into a
        :class:`~ppo_numpy.rollout.Rollout` (once).
    epsilon, epsilon_high, dual_clip, log_ratio_clamp
        Clipping options of :func:`ppo_policy_loss`.
    options : PolicyLossOptions, optional
        ``epsilon``, ``agg``, ``epsilon_high``, ``dual_clip``, ``norm``, ``log_ratio_clamp``
        in one object (then give none of those keywords).
    **more_options
        Other fields of :class:`~ppo_numpy.PolicyLossOptions` (``importance_level``,
        ``delta``, ``loss_type``, ...). Its own KL term (``kl_coef`` there) is the
        ``kl_coef`` of this function: give one or the other.
    agg : str
        Aggregation mode of every term. Default ``"token-mean"``.
    norm : float, optional
        Divisor of ``agg="seq-mean-token-sum-norm"``.
    c_v : float >= 0
        Weight of the value loss. Default 0.5.
    c_H : float >= 0
        Weight of the entropy bonus (subtracted). Default 0.
    value_clip : float >= 0, optional
        ``clip_range`` of :func:`value_loss`. Default ``None``.
    temperature : float > 0
        The rollout temperature; logp are of softmax(logits / temperature).
    kl_coef : float >= 0
        Weight of a KL-to-reference term in the loss. Default 0 (off).
    kl_estimator : str
        Its estimator (see :func:`kl_estimate`). Default ``"k3"``.
    params : dict, optional
        Evaluate at these parameters instead of ``model.params``.

    Returns
    -------
    loss : float
    grads : dict, the keys and shapes of ``model.params``
    stats : dict of float
        The statistics of :func:`ppo_policy_loss`, plus ``policy_loss``,
        ``value_loss``, ``entropy``, ``kl`` (0.0 when off) and ``loss``.

    Examples
    --------
    With rho = 1 (logp_old from the model itself) and zero advantages, the
    policy loss is 0 and only c_v L_V remains:

    >>> from ppo_numpy.policy import BigramPolicy, evaluate
    >>> model = BigramPolicy(5, np.random.default_rng(0))
    >>> x, y, m = np.array([[1, 3]]), np.array([[4, 2]]), np.array([[1.0, 1.0]])
    >>> ev = evaluate(model, x, y, m)
    >>> batch = dict(prompts=x, responses=y, mask=m, logp_old=ev.logp, old_values=ev.values,
    ...              advantages=np.zeros((1, 2)), returns=ev.values + 1.0)
    >>> loss, grads, stats = ppo_loss_and_grads(model, batch, c_v=0.5)
    >>> round(loss, 12), stats["ratio_mean"], sorted(grads)  # 0.5 * 1/2 (V - (V + 1))^2
    (0.25, 1.0, ['W', 'v'])
    """
    opts = resolve(options, epsilon=epsilon, agg=agg, epsilon_high=epsilon_high,
                   dual_clip=dual_clip, norm=norm, log_ratio_clamp=log_ratio_clamp,
                   **more_options)
    c_v = check_scalar(c_v, "c_v", low=0, allow_exact=False)
    c_H = check_scalar(c_H, "c_H", low=0, allow_exact=False)
    kl_coef = check_scalar(kl_coef, "kl_coef", low=0, allow_exact=False)
    value_clip = check_value_clip(value_clip)
    temperature = check_temperature(temperature)
    if kl_coef > 0:
        _check_estimator(kl_estimator)
    rollout = as_rollout(batch, model, kl=kl_coef > 0 or opts.kl_coef > 0)
    return loss_and_grads_kernel(model, rollout, opts, c_v=c_v, c_H=c_H, value_clip=value_clip,
                                 temperature=temperature, kl_coef=kl_coef,
                                 kl_estimator=kl_estimator, params=params)


def loss_and_grads_kernel(model, batch: Rollout, opts: PolicyLossOptions, *, c_v=0.5, c_H=0.0,
                          value_clip=None, temperature=1.0, kl_coef=0.0, kl_estimator="k3",
                          params=None):
    """:func:`ppo_loss_and_grads` of a checked :class:`Rollout` and checked options
    (unchecked kernel: the training loop calls it on its minibatches)."""
    m = batch.mask
    ev = evaluate_kernel(model, batch.prompts, batch.responses, m, temperature, params)
    agg, norm = opts.agg, opts.norm_for(m.shape[-1])

    # forward: each term aggregated with agg
    pl = policy_loss_kernel(ev.logp, batch.logp_old, batch.advantages, m, opts,
                            batch.logp_ref if opts.kl_coef > 0 else None)
    policy_loss, stats = pl.loss, pl.stats()
    vl = ValueLoss(ev.values, batch.old_values, batch.returns, value_clip)
    L_V = float(aggregate_kernel(where_valid(m, vl.loss), m, agg, norm))
    H = float(aggregate_kernel(ev.entropy, m, agg, norm))
    # loss = L_pi + c_v L_V - c_H H (+ kl_coef KL)
    loss = policy_loss + c_v * L_V - c_H * H
    kl = 0.0
    w = aggregation_weights(m, agg, norm)
    if kl_coef > 0:
        kl_t = where_valid(m, kl_estimate_kernel(ev.logp, batch.logp_ref, kl_estimator))
        kl = float(aggregate_kernel(kl_t, m, agg, norm))
        loss += kl_coef * kl

    # backward: d loss / d logp, d loss / d values, d loss / d z
    dlogp = pl.dlogp
    if kl_coef > 0:
        dlogp = dlogp + kl_coef * kl_estimate_grad_kernel(ev.logp, batch.logp_ref, kl_estimator,
                                                          m, None, w)
    dvalues = c_v * where_valid(m, w * vl.dv + 0.0)  # (B, T)
    dz = logits_grad_from_logp(ev.logq, ev.responses, dlogp)  # (B, T, K)
    if c_H > 0:
        dz -= c_H * entropy_grad_kernel(ev.logq, m, w)
    grads = response_backward(model, ev, dz, dvalues)

    stats = {**stats, "policy_loss": policy_loss, "value_loss": L_V, "entropy": H, "kl": kl,
             "loss": float(loss)}
    return float(loss), grads, stats
