"""What every toy policy shares: the params dict, checks of its inputs, the special-token bias.

A policy maps a (B, L) batch of token ids to next-token logits (B, L, K) and
values (B, L) in one vectorised forward pass, and back-propagates (dlogits,
dvalues) to a gradient dict with the keys and shapes of ``params``.
"""

from __future__ import annotations

import copy

import numpy as np

from .vocab import NEVER_GENERATED, check_tokens, check_vocab_size

# exp(NEVER_LOGIT / temperature - max) underflows to exactly 0.0 in float64 for any
# temperature below ~1e6, so PAD and BOS get probability 0 without the NaN that
# -inf would give in p log p.
NEVER_LOGIT = -1e9


def check_rng(rng) -> None:
    """TypeError unless ``rng`` is an ``np.random.Generator`` (what every random draw takes)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")


def wgrad(x, dy):
    """sum_b x_b^T dy_b for x (B, L, M), dy (B, L, N): the gradient of a weight W in y = x W.

    One small (M, L) @ (L, N) product per sequence, summed: a single (M, B*L) @ (B*L, N)
    product is multithreaded by OpenBLAS and was measured 10-100x slower on a loaded 2-core
    machine (python -m ppo_numpy gradient-report).
    """
    return (x.transpose(0, 2, 1) @ dy).sum(axis=0)  # (M, N)


def linear_backward(x, W, dy):
    """dW (M, N), db (N,) and dx (B, L, M) of y = x W + b for x (B, L, M), from dy (B, L, N)."""
    return wgrad(x, dy), dy.sum(axis=(0, 1)), dy @ W.T


def check_names(name, given, expected, note="") -> None:
    """ValueError naming ``name`` unless ``given`` has exactly the keys of ``expected``."""
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    if missing or unexpected:
        raise ValueError(f"{name}: missing {missing}, unexpected {unexpected}{note}")


class Parameterised:
    """A model whose parameters are ``self.params``, a dict of float64 arrays."""

    def resolve_params(self, params=None) -> dict:
        """``self.params`` if ``params`` is None, else ``params`` after checking it has exactly
        the names and shapes of ``self.params``."""
        own = self.params
        if params is None:
            return own
        check_names("params", params, own, f" (expected exactly {sorted(own)})")
        for name, ref in own.items():
            if np.shape(params[name]) != ref.shape:
                raise ValueError(f"params[{name!r}]: shape {np.shape(params[name])} does not "
                                 f"match the model's {ref.shape}")
        return params

    @property
    def n_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in self.params.items())
        return f"{type(self).__name__}({self.n_params} parameters: {shapes})"


class ToyPolicy(Parameterised):
    """Base class: ``params`` (dict of float64 arrays), ``vocab_size``, input checks.

    Subclasses set ``self.params`` and implement ``forward(tokens, params=None)``
    and ``backward(cache, dlogits, dvalues)``; the package's own models also implement
    ``_forward(tokens, p, values=True)``, the same pass on tokens checked already (which
    sampling calls at every step: its tokens are checked once, at the edge); with
    ``values=False`` it computes the policy's logits alone (values and cache ``None``: the
    critic is skipped, no result changed), what a sampling or greedy step reads. The models
    with token and position embeddings and a policy and a value head on a hidden state
    (``MLPPolicy``, ``TransformerPolicy``) share :meth:`heads`, :meth:`policy_head`,
    :meth:`heads_backward` and :meth:`embedding_backward`.
    """

    def __init__(self, vocab_size):
        self.vocab_size = check_vocab_size(vocab_size)
        self.params: dict[str, np.ndarray] = {}
        # added to every logit vector: 0 for generated tokens, NEVER_LOGIT for PAD and BOS
        self.logit_bias = np.zeros(self.vocab_size)
        self.logit_bias[list(NEVER_GENERATED)] = NEVER_LOGIT

    def with_params(self, params):
        """A shallow copy of this policy that uses ``params`` (checked keys and shapes)."""
        clone = copy.copy(self)
        clone.params = self.resolve_params(params)
        return clone

    def check_tokens(self, tokens, name="tokens") -> np.ndarray:
        return check_tokens(tokens, self.vocab_size, name)

    def _forward(self, tokens, p, values=True):
        """:meth:`forward` on checked int64 tokens and resolved params ``p``. This default (for
        a subclass that implements only ``forward``) calls ``forward``, which checks again,
        and computes the values whatever ``values`` says."""
        return self.forward(tokens, params=p)

    def check_upstream(self, cache, dlogits, dvalues):
        """Check the shapes of the gradients arriving at the heads; return them as float64."""
        B, L = cache["tokens"].shape
        dlogits = np.asarray(dlogits, dtype=np.float64)
        dvalues = np.asarray(dvalues, dtype=np.float64)
        if dlogits.shape != (B, L, self.vocab_size):
            raise ValueError(f"dlogits: expected shape {(B, L, self.vocab_size)}, "
                             f"got {dlogits.shape}")
        if dvalues.shape != (B, L):
            raise ValueError(f"dvalues: expected shape {(B, L)}, got {dvalues.shape}")
        return dlogits, dvalues

    def heads(self, h, p, g=None):
        """The policy and value heads on the last hidden state h (B, L, H).

            logits = h W_pi + b_pi + bias,    V = h . w_v + b_v

        or V = g . w_v + b_v when the critic's own features g (B, L, H_v) are given.
        Returns logits (B, L, K) and values (B, L).
        """
        v_in = h if g is None else g
        return self.policy_head(h, p), v_in @ p["w_v"] + p["b_v"]

    def policy_head(self, h, p):
        """The logits h W_pi + b_pi + bias (B, L, K) of :meth:`heads` alone."""
        return h @ p["W_pi"] + p["b_pi"] + self.logit_bias

    @staticmethod
    def heads_backward(h, p, dlogits, dvalues, g=None):
        """Gradients of the heads' parameters ``W_pi, b_pi, w_v, b_v`` and dh (B, L, H).

        With the critic's own features ``g`` (as in :meth:`heads`) the value head reads g,
        so dh holds the policy head's part only; the caller back-propagates
        dg = dV w_v through its critic.
        """
        v_in = h if g is None else g
        grads = {"W_pi": wgrad(h, dlogits),  # (H, K)
                 "b_pi": dlogits.sum(axis=(0, 1)),  # (K,)
                 "w_v": (v_in * dvalues[..., None]).sum(axis=(0, 1)),  # (H,) or (H_v,)
                 "b_v": np.array(dvalues.sum())}  # ()
        dh = dlogits @ p["W_pi"].T  # (B, L, H)
        if g is None:
            dh = dh + dvalues[..., None] * p["w_v"]
        return grads, dh

    @staticmethod
    def embedding_backward(tokens, de, p):
        """dE_tok (K, D) and dE_pos (max_len, D) of the embedding e_j = E_tok[y_j] + E_pos[j],
        from de (B, L, D)."""
        dE_tok = np.zeros_like(p["E_tok"])  # (K, D)
        np.add.at(dE_tok, tokens, de)
        dE_pos = np.zeros_like(p["E_pos"])  # (max_len, D)
        dE_pos[: tokens.shape[1]] = de.sum(axis=0)
        return dE_tok, dE_pos
