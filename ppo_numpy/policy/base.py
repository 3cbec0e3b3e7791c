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


def resolve_params(own: dict, params=None) -> dict:
    """``own`` if ``params`` is None, else ``params`` after checking it has exactly the names
    and shapes of ``own`` (a model's ``params``)."""
    if params is None:
        return own
    missing = sorted(set(own) - set(params))
    unexpected = sorted(set(params) - set(own))
    if missing or unexpected:
        raise ValueError(f"params: missing {missing}, unexpected {unexpected} "
                         f"(expected exactly {sorted(own)})")
    for name, ref in own.items():
        if np.shape(params[name]) != ref.shape:
            raise ValueError(f"params[{name!r}]: shape {np.shape(params[name])} does not "
                             f"match the model's {ref.shape}")
    return params


class ToyPolicy:
    """Base class: ``params`` (dict of float64 arrays), ``vocab_size``, input checks.

    Subclasses set ``self.params`` and implement ``forward(tokens, params=None)``
    and ``backward(cache, dlogits, dvalues)``.
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

    def resolve_params(self, params=None) -> dict:
        """``self.params`` if ``params`` is None, else ``params`` with names and shapes checked."""
        return resolve_params(self.params, params)

    def check_tokens(self, tokens, name="tokens") -> np.ndarray:
        return check_tokens(tokens, self.vocab_size, name)

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

    @property
    def n_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k} {v.shape}" for k, v in self.params.items())
        return f"{type(self).__name__}({self.n_params} parameters: {shapes})"
