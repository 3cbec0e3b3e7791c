"""A Bengio-style MLP language model with a policy head and a value head, backward by hand.

For position j of a (B, L) batch, with C = ``context``, D = ``d_embed``, H = ``d_hidden``:

    e_i      = E_tok[y_i] + E_pos[i]                         token + position embedding (D,)
    x_j      = [e_{j-C+1}, ..., e_j]                          the last C embeddings, concatenated
                                                              (zeros before the sequence start)
    h_j      = tanh(x_j W_1 + b_1)                            (H,)
    logits_j = h_j W_pi + b_pi + bias                         next-token scores (K,)
    V_j      = h_j . w_v + b_v                                value of the state y_{<=j}

With ``value_hidden`` H_v > 0 the critic has its own tanh layer on the same window
(the embeddings stay shared): g_j = tanh(x_j W1_v + b1_v) (H_v,), V_j = g_j . w_v + b_v.
The policy's features h are shaped by the policy loss and do not encode what the
return depends on, e.g. how many tokens so far are right (docs/training.md, "What the
critic buys").

``bias`` keeps PAD and BOS from being generated (:mod:`ppo_numpy.models.base`).
Every forward intermediate has a name and :meth:`MLPPolicy.backward` computes
its gradient ``d<name>`` in reverse order.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_int
from .base import ToyPolicy, check_rng, linear_backward


class MLPPolicy(ToyPolicy):
    """Token + position embeddings of the last ``context`` tokens -> tanh layer -> two heads.

    Parameters
    ----------
    vocab_size : int
        K.
    context : int
        C, how many tokens (the current one included) each position sees.
    d_embed : int
        D, embedding width.
    d_hidden : int
        H, hidden width.
    rng : np.random.Generator
        Draws the initial parameters.
    max_len : int
        Longest sequence (prompt + response) the position table covers. Default 64.
    value_hidden : int
        H_v: 0 (default) for a value head on the policy's features h; > 0 for a critic
        with its own tanh layer of that width on the window x.

    Attributes
    ----------
    params : dict[str, np.ndarray]
        ``E_tok (K, D)``, ``E_pos (max_len, D)``, ``W1 (C*D, H)``, ``b1 (H,)``,
        ``W_pi (H, K)``, ``b_pi (K,)``, ``w_v (H,)``, ``b_v ()``; with ``value_hidden``
        H_v > 0 also ``W1_v (C*D, H_v)``, ``b1_v (H_v,)``, and ``w_v`` is (H_v,).

    Notes
    -----
    The initialisation is non-trivial on purpose (every bias random, nothing
    zero) so that a wrong backward cannot hide behind zeros; W1 is scaled by
    1/sqrt(C*D) so tanh is not saturated, the heads by 0.3/sqrt(H) so the
    first policy is close to, but not exactly, uniform.

    Examples
    --------
    >>> m = MLPPolicy(6, context=3, d_embed=4, d_hidden=8, rng=np.random.default_rng(0),
    ...               max_len=10)
    >>> m.n_params
    231
    >>> logits, values, cache = m.forward(np.array([[1, 3, 4, 2], [1, 5, 5, 5]]))
    >>> logits.shape, values.shape
    ((2, 4, 6), (2, 4))
    """

    def __init__(self, vocab_size, context, d_embed, d_hidden, rng, *, max_len=64,
                 value_hidden=0):
        super().__init__(vocab_size)
        check_rng(rng)
        self.context = C = check_int(context, "context")
        self.d_embed = D = check_int(d_embed, "d_embed")
        self.d_hidden = H = check_int(d_hidden, "d_hidden")
        self.max_len = check_int(max_len, "max_len")
        self.value_hidden = Hv = check_int(value_hidden, "value_hidden", 0)
        K = self.vocab_size
        self.params = {
            "E_tok": rng.normal(0.0, 1.0, (K, D)),
            "E_pos": rng.normal(0.0, 0.5, (self.max_len, D)),
            "W1": rng.normal(0.0, 1.0 / np.sqrt(C * D), (C * D, H)),
            "b1": rng.normal(0.0, 0.1, (H,)),
            "W_pi": rng.normal(0.0, 0.3 / np.sqrt(H), (H, K)),
            "b_pi": rng.normal(0.0, 0.1, (K,)),
            "w_v": rng.normal(0.0, 0.3 / np.sqrt(Hv or H), (Hv or H,)),
            "b_v": np.array(rng.normal(0.0, 0.1)),
        }
        if Hv:
            # drawn after the others: value_hidden = 0 draws exactly what it always did
            self.params["W1_v"] = rng.normal(0.0, 1.0 / np.sqrt(C * D), (C * D, Hv))
            self.params["b1_v"] = rng.normal(0.0, 0.1, (Hv,))

    def forward(self, tokens, params=None):
        """Logits (B, L, K), values (B, L) and the cache for :meth:`backward`.

        ``logits[:, j]`` scores the token after ``tokens[:, :j+1]``; ``values[:, j]``
        is V of that state. Vectorised over the batch; no loop over positions.

        Each sequence goes through ``np.matmul`` as its own (L, .) matrix (a
        stacked 3-d product), so its result does not depend on the other rows
        of the batch: a minibatch recomputes bit-identical logits.
        """
        return self._forward(self.check_tokens(tokens), self.resolve_params(params))

    def _forward(self, tokens, p, values=True):
        """:meth:`forward` on checked int64 tokens (kept in the cache) and resolved params;
        ``values=False``: the logits alone (``ToyPolicy``)."""
        B, L = tokens.shape
        C, D = self.context, self.d_embed
        if L > self.max_len:
            raise ValueError(f"tokens: length {L} exceeds max_len {self.max_len}")
        # e_i = E_tok[y_i] + E_pos[i]
        emb = p["E_tok"][tokens] + p["E_pos"][:L]  # (B, L, D)
        emb_pad = np.concatenate([np.zeros((B, C - 1, D)), emb], axis=1)  # (B, C-1+L, D)
        # x_j = [e_{j-C+1}, ..., e_j]: slot s of position j is emb_pad[j + s]
        window = np.stack([emb_pad[:, s : s + L] for s in range(C)], axis=2)  # (B, L, C, D)
        x = window.reshape(B, L, C * D)  # (B, L, C*D)
        # h = tanh(x W1 + b1)
        hpre = x @ p["W1"] + p["b1"]  # (B, L, H)
        h = np.tanh(hpre)  # (B, L, H)
        if not values:
            return self.policy_head(h, p), None, None
        # the critic's own layer (value_hidden > 0): g = tanh(x W1_v + b1_v)
        g = np.tanh(x @ p["W1_v"] + p["b1_v"]) if self.value_hidden else None  # (B, L, H_v)
        # logits = h W_pi + b_pi + bias;  V = h . w_v + b_v  (or g . w_v + b_v)
        logits, values = self.heads(h, p, g)  # (B, L, K), (B, L)
        cache = {"tokens": tokens, "x": x, "h": h, "g": g, "params": p}
        return logits, values, cache

    def backward(self, cache, dlogits, dvalues):
        """Gradients of a scalar loss w.r.t. every parameter, from dloss/dlogits, dloss/dvalues.

        Parameters
        ----------
        cache : dict from :meth:`forward`
        dlogits : array (B, L, K)
        dvalues : array (B, L)

        Returns
        -------
        dict with the keys and shapes of ``params``.
        """
        dlogits, dvalues = self.check_upstream(cache, dlogits, dvalues)
        tokens, x, h, p = cache["tokens"], cache["x"], cache["h"], cache["params"]
        B, L = tokens.shape
        C, D = self.context, self.d_embed
        # heads: logits = h W_pi + b_pi, V = h . w_v + b_v (one small (H, L) @ (L, K)
        # product per sequence: see base.wgrad)
        g = cache["g"]
        head_grads, dh = self.heads_backward(h, p, dlogits, dvalues, g)  # dh (B, L, H)
        critic = {}
        if g is not None:
            # V = g . w_v + b_v, g = tanh(gpre): dgpre = (1 - g^2) dV w_v
            dgpre = (1.0 - g**2) * (dvalues[..., None] * p["w_v"])  # (B, L, H_v)
            # gpre = x W1_v + b1_v
            critic["W1_v"], critic["b1_v"], dx_v = linear_backward(x, p["W1_v"], dgpre)
        # h = tanh(hpre): dhpre = (1 - h^2) dh
        dhpre = (1.0 - h**2) * dh  # (B, L, H)
        # hpre = x W1 + b1
        dW1, db1, dx = linear_backward(x, p["W1"], dhpre)  # dx (B, L, C*D)
        if g is not None:
            dx = dx + dx_v  # x feeds both layers
        dwindow = dx.reshape(B, L, C, D)  # (B, L, C, D)
        # slot s of position j came from emb_pad[j + s]
        demb_pad = np.zeros((B, C - 1 + L, D))
        for s in range(C):
            demb_pad[:, s : s + L] += dwindow[:, :, s]
        demb = demb_pad[:, C - 1 :]  # (B, L, D)
        # e_i = E_tok[y_i] + E_pos[i]
        dE_tok, dE_pos = self.embedding_backward(tokens, demb, p)
        return {"E_tok": dE_tok, "E_pos": dE_pos, "W1": dW1, "b1": db1, **head_grads, **critic}
