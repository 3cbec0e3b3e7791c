"""How much of the return a state can predict: the true value V^pi(s_t) by Monte Carlo.

The learned critic is judged against two references (``docs/training.md``, "What the
critic buys"):

* a constant V (the batch mean of R): explained variance 0, value loss Var(R) / 2;
* the true value of the policy, V^pi(s_t) = E[R_t | s_t], which no critic can beat:
  its explained variance is the ceiling of what the state shows of the return.

:func:`monte_carlo_values` estimates V^pi(s_t) at every state of a batch by sampling
``n`` continuations of the response from that state with the policy and averaging
their returns R_t = sum_{s >= t} r~_s (gamma 1, the KL-shaped rewards of the run: the
score at the last token, -beta KL_s on every token).
"""

from __future__ import annotations

import numpy as np

from .._checks import check_int
from ..models.base import check_rng
from ..models.sampling import evaluate_kernel, sample
from ..ppo.kl import kl_estimate_kernel, kl_shaped_rewards_kernel


def shaped_rewards(policy, reference, task, prompts, responses, mask, beta):
    """The KL-shaped rewards r~_t = -beta k1_t + [t = T] score of responses (B, T)."""
    m = np.asarray(mask, dtype=bool)
    logp = evaluate_kernel(policy, prompts, responses, m, 1.0).logp
    logp_ref = evaluate_kernel(reference, prompts, responses, m, 1.0).logp
    scores = task.score(prompts, responses, m)
    return kl_shaped_rewards_kernel(scores, kl_estimate_kernel(logp, logp_ref, "k1"), m,
                                    float(beta))


def returns_to_go(rewards):
    """R_t = sum_{s >= t} r~_s (gamma 1) of (B, T) rewards, 0 at padding if they are.

    >>> returns_to_go(np.array([[0.0, -0.1, 1.0]])).round(12).tolist()
    [[0.9, 0.9, 1.0]]
    """
    return np.cumsum(rewards[:, ::-1], axis=1)[:, ::-1]


def monte_carlo_values(policy, reference, task, prompts, responses, mask, beta, rng, n=64):
    """V^pi(s_t) of every state of a batch, each the mean return of ``n`` continuations.

    Parameters
    ----------
    policy, reference : toy policies
        pi_theta (which continues the responses) and pi_ref (for the KL in r~_t).
    task : a :class:`~ppo_numpy.training.tasks.Task`
    prompts : int array (B, P)
    responses : int array (B, T) with T = ``task.max_new_tokens``
    mask : array of 0/1 (B, T), right-padded
    beta : float >= 0
    rng : np.random.Generator
    n : int >= 1
        Continuations per state.

    Returns
    -------
    float64 array (B, T): at a response token t, the mean over ``n`` samples of
    R_t for responses that agree with ``responses[i, :t]`` and continue from there with
    the policy; 0 at padding. Its variance of estimation is Var(R_t | s_t) / n.
    """
    check_rng(rng)
    n = check_int(n, "n")
    x = np.asarray(prompts)
    y = np.asarray(responses)
    m = np.asarray(mask, dtype=bool)
    B, T = y.shape
    if T != task.max_new_tokens:
        raise ValueError(f"responses: expected {task.max_new_tokens} columns, got {T}")
    P = x.shape[1]
    values = np.zeros((B, T))
    for t in range(T):
        rows = np.flatnonzero(m[:, t])
        if rows.size == 0:
            break
        # the state s_t: prompt + the t response tokens before y_t, n copies of each
        start = np.repeat(np.concatenate([x[rows], y[rows, :t]], axis=1), n, axis=0)
        cont = sample(policy, start, rng, T - t)
        full = np.concatenate([start[:, P:], cont.responses], axis=1)  # (n rows, T)
        full_mask = np.concatenate([np.ones((len(start), t), dtype=bool), cont.mask], axis=1)
        r = shaped_rewards(policy, reference, task, start[:, :P], full, full_mask, beta)
        values[rows, t] = r[:, t:].sum(axis=1).reshape(rows.size, n).mean(axis=1)
    return values
