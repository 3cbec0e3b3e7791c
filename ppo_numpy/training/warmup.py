"""Supervised warm-up on a task's prior: what makes the frozen reference pi_ref a language model.

Before PPO starts, the policy is fitted by maximum likelihood to responses
drawn from the task's prior (:meth:`Task.sample_prior`), then copied and
frozen as pi_ref. The KL penalty then pulls the policy back towards something
meaningful: the prior's habits (stopping early, echoing the prompt), which
the reward asks it to unlearn.

    L_CE = -(1 / n) sum_{i,t} m_{i,t} log pi_theta(y_{i,t} | x_i, y_{i,<t}),   n = sum m

    dL_CE / dz_{i,t} = m_{i,t} (softmax(z_{i,t}) - onehot(y_{i,t})) / n

where z_{i,t} are the logits that predict y_{i,t} (``logits[:, P - 1 + t]`` of the
forward pass over prompt + response, as in ``ppo_numpy.models.sampling``).
"""

from __future__ import annotations

import numpy as np

from ..models.loss import logits_grad_from_logp, response_backward
from ..models.optim import Adam
from ..models.sampling import evaluate, evaluate_kernel, sample


def cross_entropy_and_grads(model, prompts, responses, mask, params=None):
    """Token-mean cross-entropy of the responses under ``model``, and its parameter gradients.

    Parameters
    ----------
    model : a toy policy (``ppo_numpy.models``)
    prompts : int array (B, P)
    responses : int array (B, T)
    mask : array of 0/1 (B, T); 1 for response tokens (EOS included)
    params : dict, optional
        Evaluate at these parameters instead of ``model.params`` (for gradient checks).

    Returns
    -------
    loss : float
    grads : dict, same keys and shapes as ``model.params``

    Examples
    --------
    A bigram table of zeros is uniform over the K - 2 tokens it may generate
    (PAD and BOS never), so the loss is log(K - 2) whatever the responses:

    >>> import numpy as np
    >>> from ppo_numpy.models.bigram import BigramPolicy
    >>> model = BigramPolicy(6, np.random.default_rng(0))
    >>> zeros = {name: np.zeros_like(p) for name, p in model.params.items()}
    >>> loss, grads = cross_entropy_and_grads(model, np.array([[1, 3]]), np.array([[4, 2]]),
    ...                                       np.array([[1, 1]]), params=zeros)
    >>> round(loss, 12) == round(float(np.log(4)), 12)
    True
    """
    ev = evaluate(model, prompts, responses, mask, params=params)
    m = ev.mask
    n = m.sum()
    if n == 0:
        raise ValueError("mask: no response token to fit")
    # L_CE = -(1/n) sum m log pi(y_t)
    loss = float(-(m * ev.logp).sum() / n)
    # dL/dlogp_t = -m_t / n;  dL/dz_t = dlogp_t (onehot(y_t) - softmax(z_t))
    dz = logits_grad_from_logp(ev.logq, ev.responses, -m / n)  # (B, T, K)
    return loss, response_backward(model, ev, dz)


def warm_up(model, task, rng, steps, lr, batch_size):
    """Fit ``model`` to ``task``'s prior by ``steps`` Adam steps; returns the losses per step.

    Each step draws ``batch_size`` prompts and prior responses from ``rng``.
    ``model.params`` is updated in place.
    """
    optimizer = Adam(model.params, lr=lr)
    losses = []
    for _ in range(steps):
        prompts = task.sample_prompts(rng, batch_size)
        responses, mask = task.sample_prior(prompts, rng)
        loss, grads = cross_entropy_and_grads(model, prompts, responses, mask)
        optimizer.step(grads)
        losses.append(loss)
    return losses


#: the value head's parameters in the toy policies (those a model has): the MLP's and the
#: transformer's ``w_v, b_v`` and their critic layer ``W1_v, b1_v``, the bigram's table ``v``
CRITIC_PARAMS = ("W1_v", "b1_v", "w_v", "b_v", "v")


def warm_up_value(model, task, rng, steps, lr, batch_size, gamma=1.0):
    """Fit the value head alone to the returns of ``model``'s own rollouts; the losses per step.

    Run right after the reference is frozen, when pi_theta = pi_ref: the KL penalty is 0
    on every token, so the return of response token t is gamma^(n - 1 - t) score, for a
    response of n tokens. Each step samples ``batch_size`` prompts and responses and takes
    an Adam step on the token-mean value loss 1/2 (V - R)^2 over the parameters in
    :data:`CRITIC_PARAMS` only: the policy's parameters, the logits and so pi_theta are
    unchanged. (verl's ``trainer.critic_warmup`` also trains the critic alone first.)
    """
    names = [name for name in CRITIC_PARAMS if name in model.params]
    optimizer = Adam({name: model.params[name] for name in names}, lr=lr)
    losses = []
    for _ in range(steps):
        prompts = task.sample_prompts(rng, batch_size)
        rollout = sample(model, prompts, rng, task.max_new_tokens)
        m = rollout.mask
        scores = task.score(prompts, rollout.responses, m)
        # R_t = gamma^(n - 1 - t) score: the score at the last token, no KL (pi = pi_ref)
        to_go = m.sum(axis=1, keepdims=True) - 1 - np.arange(m.shape[1])  # (B, T)
        R = np.where(m, float(gamma) ** np.maximum(to_go, 0) * scores[:, None], 0.0)
        ev = evaluate_kernel(model, prompts, rollout.responses, m, 1.0)
        n = m.sum()
        # L = (1/n) sum m 1/2 (V - R)^2;  dL/dV = m (V - R) / n
        err = np.where(m, ev.values - R, 0.0)
        losses.append(float(0.5 * (err**2).sum() / n))
        grads = response_backward(model, ev, np.zeros_like(ev.logits), err / n)
        optimizer.step({name: grads[name] for name in names})
    return losses
