"""A bigram policy: the next token and the value depend on the previous token only.

    logits[b, j] = W[y_j] + bias,   values[b, j] = v[y_j]

with W a (K, K) table of next-token scores and v a (K,) table of values. Its
gradients can be written on paper: each row W[a] collects the logit gradients
of every position whose token is a,

    dW[a, k] = sum_{b, j : y_{b,j} = a} dlogits[b, j, k]
    dv[a]    = sum_{b, j : y_{b,j} = a} dvalues[b, j]

``bias`` is the constant of :mod:`ppo_numpy.models.base` that keeps PAD and BOS
from being generated.
"""

from __future__ import annotations

import numpy as np

from .base import ToyPolicy, check_rng


class BigramPolicy(ToyPolicy):
    """Tabular policy pi(y_{t+1} | y_t) = softmax(W[y_t]) and value V(s_t) = v[y_t].

    Parameters
    ----------
    vocab_size : int
        K (special tokens included).
    rng : np.random.Generator
        Initial tables W ~ N(0, init_scale^2), v ~ N(0, init_scale^2).
    init_scale : float
        Default 0.5 (non-zero, so an all-zero backward cannot pass a gradient check).

    Examples
    --------
    >>> m = BigramPolicy(4, np.random.default_rng(0))
    >>> m
    BigramPolicy(20 parameters: W (4, 4), v (4,))
    >>> logits, values, cache = m.forward(np.array([[1, 3, 3]]))
    >>> logits.shape, values.shape
    ((1, 3, 4), (1, 3))
    >>> bool(np.all(logits[0, 1] == m.params["W"][3] + m.logit_bias))
    True
    """

    def __init__(self, vocab_size, rng, *, init_scale=0.5):
        super().__init__(vocab_size)
        check_rng(rng)
        K = self.vocab_size
        self.params = {
            "W": rng.normal(0.0, init_scale, (K, K)),
            "v": rng.normal(0.0, init_scale, (K,)),
        }

    def forward(self, tokens, params=None):
        """Logits (B, L, K), values (B, L) and the cache for :meth:`backward`.

        ``logits[:, j]`` scores the token after ``tokens[:, j]``; ``values[:, j]``
        is V of the state ending at ``tokens[:, j]``.
        """
        return self._forward(self.check_tokens(tokens), self.resolve_params(params))

    def _forward(self, tokens, p, values=True):
        """:meth:`forward` on checked int64 tokens (kept in the cache) and resolved params;
        ``values=False``: the logits alone (``ToyPolicy``)."""
        logits = p["W"][tokens] + self.logit_bias  # (B, L, K)
        if not values:
            return logits, None, None
        values = p["v"][tokens]  # (B, L)
        return logits, values, {"tokens": tokens}

    def backward(self, cache, dlogits, dvalues):
        """Gradients of a scalar loss w.r.t. W and v, given dloss/dlogits and dloss/dvalues."""
        dlogits, dvalues = self.check_upstream(cache, dlogits, dvalues)
        tokens = cache["tokens"]
        K = self.vocab_size
        # dW[a] = sum over positions with token a of dlogits
        dW = np.zeros((K, K))
        np.add.at(dW, tokens, dlogits)
        # dv[a] = sum over positions with token a of dvalues
        dv = np.bincount(tokens.ravel(), weights=dvalues.ravel(), minlength=K)
        return {"W": dW, "v": dv}
