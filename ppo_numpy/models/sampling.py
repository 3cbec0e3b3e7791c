"""Sampling responses y ~ pi_theta(. | x) from a toy policy, and re-evaluating them.

For prompts x of P tokens and responses y of T tokens, the model runs over
the sequence [x, y] without its last token (length P + T - 1), and

    z_t      = logits[:, P - 1 + t] / temperature          scores of y_t given x, y_<t
    logp_t   = log softmax(z_t)[y_t]                        log pi_theta(y_t | x, y_<t)
    values_t = values[:, P - 1 + t]                         V(s_t), the state before y_t

Temperature convention: ``logp`` is the log-probability under the *tempered*
distribution softmax(logits / temperature), the one the tokens were drawn
from; :func:`evaluate` must get the same ``temperature`` as :func:`sample`
(TRL and verl divide the training logits by the rollout temperature too).

Bit-for-bit equality of sampled and re-evaluated ``logp`` (so that rho = 1
exactly before the first update): at every step the sampler calls the same
function as :func:`evaluate`, on an array of the same shape (B, P + T - 1)
whose future positions hold PAD. The model is causal, so those positions do
not change position P - 1 + t, and each sequence is its own matrix product
(see :meth:`MLPPolicy.forward`), so a minibatch of rows gives the same bits.
Pitfall: re-evaluating responses trimmed to a different length T changes the
matrix shapes and BLAS may then sum in another order (differences ~1e-16).

A sampling engine that differs from the trainer (``rollout_precision``,
``rollout_temperature`` of :func:`sample`): the tokens are drawn from the engine's

    z^r_t        = round(logits[:, P - 1 + t], precision) / rollout_temperature
    logp_rollout = log softmax(z^r_t)[y_t]                  log pi_rollout(y_t | x, y_<t)

while ``logp_old`` stays the trainer's float64 log softmax(z_t)[y_t]; the rounding is
:func:`ppo_numpy.models.precision.round_to_precision` (bfloat16, float16, float32). The
defaults (float64, the trainer's temperature) are no mismatch: ``logp_rollout`` is then
``logp_old`` itself and the rollout is bit for bit the one without the options.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import as_mask, check_choice, check_int, check_scalar, where_valid
from ..batch import Rollout
from ..ppo.entropy import entropy_kernel, log_softmax_kernel
from .base import check_rng
from .precision import PRECISIONS, round_to_precision
from .vocab import EOS, PAD


@dataclass(frozen=True)
class Evaluation:
    """A forward pass over given responses, with what the backward pass needs.

    ``logp``, ``values``, ``entropy``: (B, T), 0 at padding. ``logits``: (B, T, K),
    the tempered scores z_t = logits / temperature that predict y_t. ``logq``:
    log softmax(z_t) over the vocabulary (B, T, K). ``cache``: the model's forward
    cache over the (B, P + T - 1) sequence; ``prompt_length``: P.
    """

    logp: np.ndarray
    values: np.ndarray
    entropy: np.ndarray
    logits: np.ndarray
    logq: np.ndarray
    responses: np.ndarray
    mask: np.ndarray
    cache: dict
    prompt_length: int
    temperature: float


def _check_prompts(model, prompts):
    x = model.check_tokens(prompts, "prompts")
    if x.shape[1] < 1:
        raise ValueError("prompts: need at least one token (e.g. BOS) per prompt")
    return x


def check_temperature(temperature) -> float:
    """``temperature`` as a float after checking it is finite and > 0."""
    return check_scalar(temperature, "temperature", low=0, low_open=True, allow_exact=False)


def _response_scores(model, prompts, responses, temperature, params=None, values=True):
    """z (B, T, K), log softmax(z), values (B, T) and the model cache for y given x;
    ``values=False``: the policy's alone (values and cache ``None``).

    ``prompts`` and ``responses`` checked already (int64 ids of the vocabulary): the model's
    forward pass runs without checking them again (at every step of :func:`sample`)."""
    P, T = prompts.shape[1], responses.shape[1]
    tokens = np.ascontiguousarray(np.concatenate([prompts, responses], axis=1)[:, :-1])
    # (B, P + T - 1) checked ids: the forward pass without its token check
    logits, v, cache = model._forward(tokens, model.resolve_params(params), values=values)
    # z_t = logits[:, P - 1 + t] / temperature
    z = logits[:, P - 1 : P - 1 + T] / temperature  # (B, T, K)
    logq = log_softmax_kernel(z)  # (B, T, K)
    return z, logq, None if v is None else v[:, P - 1 : P - 1 + T], cache


def sample(model, prompts, rng, max_new_tokens, temperature=1.0, *, rollout_precision="float64",
           rollout_temperature=None):
    """Sample a response to each prompt, token by token, stopping at EOS.

    Parameters
    ----------
    model : a toy policy (:class:`BigramPolicy`, :class:`MLPPolicy`)
    prompts : int array (B, P), P >= 1
        Token ids, the same length for every prompt (usually starting with BOS).
    rng : np.random.Generator
        The only source of randomness: same generator state, same rollout.
    max_new_tokens : int >= 1
        T. A response that has not produced EOS after T tokens is cut there
        (all its T tokens are response tokens).
    temperature : float > 0
        Tokens are drawn from softmax(logits / temperature). Default 1.
    rollout_precision : {"float64", "float32", "float16", "bfloat16"}
        The sampling engine's logits are rounded to this format (module docstring).
        Default ``"float64"``: the trainer's logits.
    rollout_temperature : float > 0, optional
        The sampling engine's temperature. Default ``None``: ``temperature``.

    Returns
    -------
    Rollout
        ``prompts``, ``responses`` (always T columns; after a row's EOS, PAD with mask 0),
        the bool ``mask``, ``logp_old`` and ``old_values`` of the sampled tokens (0 at
        padding), the ``temperature``; and ``logp``, ``values``: the same arrays, since
        at rollout time the policy being trained is pi_theta_old. ``logp_rollout``: the
        sampling engine's log-probs of the sampled tokens (0 at padding); ``logp_old``
        itself when the engine is the trainer (the defaults).

    Notes
    -----
    Vectorised over the batch, a loop over the T positions only; a step runs the model on
    the rows not finished yet (a row's numbers do not depend on the others, so they are the
    bits a pass over the whole batch gives) and the values are read in one pass after the
    loop. Each draw is Gumbel-max: argmax_k(log q_k + g_k) with g_k ~ Gumbel(0, 1) i.i.d.
    is a sample from q (one (B, K) block of Gumbel noise per position, also for finished
    rows, so the generator advances the same way whatever the responses).

    Examples
    --------
    >>> from ppo_numpy.models import BigramPolicy
    >>> model = BigramPolicy(6, np.random.default_rng(0))
    >>> r = sample(model, np.array([[1, 3], [1, 4]]), np.random.default_rng(1), 5)
    >>> r.responses.shape, r.mask.dtype
    ((2, 5), dtype('bool'))
    >>> bool(np.all(r.mask | (r.responses == 0))), r.logp_old is r.logp, r.logp_rollout is r.logp
    (True, True, True)

    An engine at temperature 2 draws the same tokens here (the same Gumbel noise) with other
    log-probs: logp_rollout = log softmax(logits / 2)[y_t]:

    >>> r2 = sample(model, np.array([[1, 3], [1, 4]]), np.random.default_rng(1), 5,
    ...             rollout_temperature=2.0)
    >>> bool(np.any(r2.logp_rollout != r2.logp_old)), bool(np.all(r2.logp_rollout[~r2.mask] == 0))
    (True, True)
    """
    check_rng(rng)
    x = _check_prompts(model, prompts)
    max_new_tokens = check_int(max_new_tokens, "max_new_tokens")
    temperature = check_temperature(temperature)
    check_choice(rollout_precision, "rollout_precision", PRECISIONS, "precision")
    engine_temperature = (temperature if rollout_temperature is None
                          else check_scalar(rollout_temperature, "rollout_temperature", low=0,
                                            low_open=True, allow_exact=False))
    mismatch = rollout_precision != "float64" or engine_temperature != temperature
    B, T, K = x.shape[0], max_new_tokens, model.vocab_size
    responses = np.full((B, T), PAD, dtype=np.int64)
    mask = np.zeros((B, T), dtype=bool)
    logp = np.zeros((B, T))
    logp_rollout = np.zeros((B, T)) if mismatch else logp
    done = np.zeros(B, dtype=bool)
    for t in range(T):
        # the rows still being written; a finished row keeps PAD, mask 0 and logp 0 from here
        live = np.flatnonzero(~done)  # (n,)
        n = live.size
        # the same computation as evaluate() on these rows (a row's numbers do not depend on
        # the other rows); positions > t hold PAD and cannot affect t (the policy alone: the
        # values are read after the loop)
        z, logq, _, _ = _response_scores(model, x[live], responses[live], temperature,
                                         values=False)  # (n, T, K)
        g = rng.gumbel(size=(B, K))[live]  # (n, K): every row's noise drawn, as always
        if mismatch:
            # the engine's log softmax(round(logits) / rollout_temperature); logits = z tau
            # (exact for tau = 1, within an ulp otherwise)
            logq_r = log_softmax_kernel(
                round_to_precision(z[:, t] * temperature, rollout_precision)
                / engine_temperature)  # (n, K)
        else:
            logq_r = logq[:, t]
        y = np.argmax(logq_r + g, axis=-1)  # (n,)
        responses[live, t] = y
        mask[live, t] = True
        logp[live, t] = logq[np.arange(n), t, y]
        if mismatch:
            logp_rollout[live, t] = logq_r[np.arange(n), y]
        done[live] = y == EOS
        if np.all(done):
            break
    # V(s_t) of every response token, from one forward pass over the finished responses: a
    # state's value depends only on the tokens before it, so these are the numbers a pass at
    # step t gives (as evaluate() gives logp_old's)
    values = np.where(mask, _response_scores(model, x, responses, temperature)[2], 0.0)
    # made here from checked inputs: trusted, not checked again
    return Rollout._trusted(prompts=x, responses=responses, mask=mask, logp=logp, values=values,
                            logp_old=logp, old_values=values, logp_rollout=logp_rollout,
                            temperature=temperature)


def evaluate(model, prompts, responses, mask, temperature=1.0, *, params=None):
    """Log-probabilities, values, entropies and logits of given responses under ``model``.

    Parameters
    ----------
    model : a toy policy
    prompts : int array (B, P), P >= 1
    responses : int array (B, T)
    mask : array of 0/1 (B, T)
        1 for response tokens (EOS included).
    temperature : float > 0
        The temperature the responses were sampled at (module docstring).
    params : dict, optional
        Evaluate at these parameters instead of ``model.params``.

    Returns
    -------
    Evaluation
        ``logp``, ``values``, ``entropy`` are exactly 0 where ``mask`` is 0.

    Examples
    --------
    Re-evaluating a rollout gives its log-probabilities bit for bit:

    >>> from ppo_numpy.models import MLPPolicy
    >>> model = MLPPolicy(6, 2, 3, 5, np.random.default_rng(0), max_len=8)
    >>> x = np.array([[1, 3], [1, 5]])
    >>> r = sample(model, x, np.random.default_rng(2), 4, temperature=0.7)
    >>> ev = evaluate(model, x, r.responses, r.mask, temperature=0.7)
    >>> bool(np.array_equal(ev.logp, r.logp)), bool(np.array_equal(ev.values, r.values))
    (True, True)
    """
    x = _check_prompts(model, prompts)
    y = model.check_tokens(responses, "responses")
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"responses: {y.shape[0]} rows but prompts has {x.shape[0]}")
    if y.shape[1] < 1:
        raise ValueError("responses: need at least one column")
    m = as_mask(mask, y, "responses")
    temperature = check_temperature(temperature)
    return evaluate_kernel(model, x, y, m, temperature, params)


def evaluate_kernel(model, x, y, m, temperature, params=None, values=True) -> Evaluation:
    """:func:`evaluate` of checked tokens ``x``, ``y``, bool mask ``m`` (unchecked kernel);
    ``values=False``: the policy's alone (``values`` and ``cache`` None: the training loop's
    reference log-probs)."""
    z, logq, vals, cache = _response_scores(model, x, y, temperature, params, values)
    logp = np.take_along_axis(logq, y[..., None], axis=-1)[..., 0]  # (B, T)
    return Evaluation(
        logp=where_valid(m, logp),
        values=None if vals is None else where_valid(m, vals),
        entropy=where_valid(m, entropy_kernel(logq)),
        logits=z,
        logq=logq,
        responses=y,
        mask=m.astype(np.float64),
        cache=cache,
        prompt_length=x.shape[1],
        temperature=temperature,
    )
