"""A tiny decoder-only transformer with a policy head and a value head, backward by hand.

For a (B, L) batch with D = ``d_model``, H = ``n_heads``, d = D / H, F = ``d_mlp``:

    x^0_j     = E_tok[y_j] + E_pos[j]                               (B, L, D)
    for each of the ``n_layers`` pre-LayerNorm blocks l:
      a       = LN(x; g1, b1)      LN(x) = (x - mu) / sqrt(var + eps) * g + b over the D axis
      q, k, v = split(a W_qkv + b_qkv) into H heads of width d       (B, H, L, d) each
      S       = q k^T / sqrt(d),  S_ij = -inf for j > i              causal mask (B, H, L, L)
      P       = softmax_j(S)                                        attention weights
      x'      = x + merge(P v) W_o + b_o                            (B, L, D)
      x''     = x' + GELU(LN(x'; g2, b2) W_fc + b_fc) W_proj + b_proj
    h         = LN(x^{n_layers}; g_f, b_f)                          (B, L, D)
    logits    = h W_pi + b_pi + bias                                (B, L, K)
    V         = h . w_v + b_v                                       (B, L)

With ``value_hidden`` H_v > 0 the value head is a tanh layer on the same h:
g = tanh(h W1_v + b1_v) (B, L, H_v), V = g . w_v + b_v (docs/training.md, "What the
critic buys").

GELU is the tanh form, GELU(u) = u/2 (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))): smooth, so
finite differences never straddle a kink (ReLU's would), and it is PyTorch's
``gelu(approximate="tanh")`` for the cross-check. LayerNorm uses the population variance
and eps = 1e-5 inside the square root. ``bias`` keeps PAD and BOS from being generated
(:mod:`ppo_numpy.models.base`).

Every forward intermediate is named in the cache and :meth:`TransformerPolicy.backward`
computes its gradient ``d<name>`` in reverse order. Every matrix product is a stacked
3-d (or 4-d) product, one (L, .) matrix per sequence (and head), so a row's logits do
not depend on the other rows; the causal mask gives the masked weights exactly 0, so
future tokens (PAD while sampling) do not change earlier positions, bit for bit
(the property ``ppo_numpy.models.sampling`` needs). PAD is an ordinary token to
the model: there is no key-padding mask, so a left-padded prompt is a different
input from the unpadded one (the tasks use fixed-length prompts).
"""

from __future__ import annotations

import numpy as np

from .._checks import check_int
from .base import ToyPolicy, check_rng, linear_backward

LN_EPS = 1e-5
_GELU_C = np.sqrt(2.0 / np.pi)
_GELU_A = 0.044715
#: the parameters of one block, prefixed ``h<l>.`` in ``params``
BLOCK_PARAMS = ("ln1_g", "ln1_b", "W_qkv", "b_qkv", "W_o", "b_o",
                "ln2_g", "ln2_b", "W_fc", "b_fc", "W_proj", "b_proj")


def layer_norm(x, g, b):
    """LN(x) = (x - mu) / sqrt(var + eps) * g + b over the last axis, and its cache.

    >>> y, _ = layer_norm(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2))
    >>> np.round(y, 4).tolist()  # mu 2, var 1: (x - 2) / sqrt(1 + 1e-5)
    [[-1.0, 1.0]]
    """
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    xc = x - mu  # (..., D)
    var = (xc**2).mean(axis=-1, keepdims=True)  # (..., 1)
    rstd = 1.0 / np.sqrt(var + LN_EPS)  # (..., 1)
    xhat = xc * rstd  # (..., D)
    return xhat * g + b, (xhat, rstd, g)


def layer_norm_backward(dy, cache):
    """dx, dg, db of LN from dy (same shape as x).

        dxhat = dy g,   dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))

    (mu and var depend on every x_i; the two means are their contributions.)
    """
    xhat, rstd, g = cache
    dg = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)  # (D,)
    db = dy.reshape(-1, xhat.shape[-1]).sum(axis=0)  # (D,)
    dxhat = dy * g  # (..., D)
    dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))  # (..., D)
    return dx, dg, db


def gelu(u):
    """GELU(u) = u/2 (1 + tanh(c (u + a u^3))), c = sqrt(2/pi), a = 0.044715, and tanh(.).

    >>> float(gelu(np.array(0.0))[0]), round(float(gelu(np.array(10.0))[0]), 12)
    (0.0, 10.0)
    """
    # u * u * u, not u**3: a float power is ~10x slower than two products
    t = np.tanh(_GELU_C * (u + _GELU_A * (u * u * u)))
    return 0.5 * u * (1.0 + t), t


def gelu_backward(du_out, u, t):
    """d/du GELU(u) = (1 + t)/2 + u/2 (1 - t^2) c (1 + 3 a u^2), times the upstream gradient."""
    return du_out * (0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * _GELU_C
                     * (1.0 + 3.0 * _GELU_A * (u * u)))


class TransformerPolicy(ToyPolicy):
    """Token + position embeddings -> ``n_layers`` causal pre-LN blocks -> LN -> two heads.

    Parameters
    ----------
    vocab_size : int
        K.
    rng : np.random.Generator
        Draws the initial parameters.
    d_model : int
        D, the width of the residual stream. Default 32.
    n_heads : int
        H; must divide ``d_model``. Default 4 (head width 8).
    n_layers : int >= 1
        Number of blocks. Default 2.
    d_mlp : int, optional
        F, hidden width of each block's MLP. Default 4 D.
    max_len : int
        Longest sequence the position table covers. Default 24.
    value_hidden : int
        H_v: 0 (default) for a linear value head on h; > 0 for a tanh layer of that
        width between h and the value.

    Attributes
    ----------
    params : dict[str, np.ndarray]
        ``E_tok (K, D)``, ``E_pos (max_len, D)``; per block l, prefixed ``h<l>.``:
        ``ln1_g, ln1_b (D,)``, ``W_qkv (D, 3D)``, ``b_qkv (3D,)``, ``W_o (D, D)``,
        ``b_o (D,)``, ``ln2_g, ln2_b (D,)``, ``W_fc (D, F)``, ``b_fc (F,)``,
        ``W_proj (F, D)``, ``b_proj (D,)``; then ``lnf_g, lnf_b (D,)``,
        ``W_pi (D, K)``, ``b_pi (K,)``, ``w_v (D,)``, ``b_v ()``; with ``value_hidden``
        H_v > 0 also ``W1_v (D, H_v)``, ``b1_v (H_v,)``, and ``w_v`` is (H_v,).

    Notes
    -----
    Initialisation is non-trivial on purpose: every gain is 1 + N(0, 0.1^2) and
    every bias N(0, 0.1^2), nothing is zero, so a wrong backward cannot hide
    behind zeros or unit gains. Weights are N(0, 1/fan_in); the residual
    projections W_o and W_proj are scaled by 1/sqrt(2 n_layers) and the heads
    by 0.3, so the first policy is close to, but not exactly, uniform.

    Examples
    --------
    >>> m = TransformerPolicy(6, np.random.default_rng(0), d_model=8, n_heads=2, n_layers=1,
    ...                       max_len=5)
    >>> m.n_params  # 48 + 40 + (16 + 216 + 72 + 16 + 288 + 264) + 16 + 54 + 9
    1039
    >>> logits, values, cache = m.forward(np.array([[1, 3, 4, 2], [1, 5, 5, 5]]))
    >>> logits.shape, values.shape
    ((2, 4, 6), (2, 4))
    """

    def __init__(self, vocab_size, rng, *, d_model=32, n_heads=4, n_layers=2, d_mlp=None,
                 max_len=24, value_hidden=0):
        super().__init__(vocab_size)
        check_rng(rng)
        self.d_model = D = check_int(d_model, "d_model")
        self.n_heads = H = check_int(n_heads, "n_heads")
        if D % H:
            raise ValueError(f"n_heads: must divide d_model={D}, got {H}")
        self.n_layers = check_int(n_layers, "n_layers")
        self.d_mlp = F = 4 * D if d_mlp is None else check_int(d_mlp, "d_mlp")
        self.max_len = check_int(max_len, "max_len")
        self.value_hidden = Hv = check_int(value_hidden, "value_hidden", 0)
        self.d_head = D // H
        K = self.vocab_size
        out_scale = 1.0 / np.sqrt(2 * self.n_layers)

        def gain(n):
            return 1.0 + rng.normal(0.0, 0.1, (n,))

        def bias(n):
            return rng.normal(0.0, 0.1, (n,))

        p = {"E_tok": rng.normal(0.0, 1.0, (K, D)),
             "E_pos": rng.normal(0.0, 0.5, (self.max_len, D))}
        for layer in range(self.n_layers):
            block = {
                "ln1_g": gain(D), "ln1_b": bias(D),
                "W_qkv": rng.normal(0.0, 1.0 / np.sqrt(D), (D, 3 * D)), "b_qkv": bias(3 * D),
                "W_o": rng.normal(0.0, out_scale / np.sqrt(D), (D, D)), "b_o": bias(D),
                "ln2_g": gain(D), "ln2_b": bias(D),
                "W_fc": rng.normal(0.0, 1.0 / np.sqrt(D), (D, F)), "b_fc": bias(F),
                "W_proj": rng.normal(0.0, out_scale / np.sqrt(F), (F, D)), "b_proj": bias(D),
            }
            p.update({f"h{layer}.{name}": value for name, value in block.items()})
        p.update({
            "lnf_g": gain(D), "lnf_b": bias(D),
            "W_pi": rng.normal(0.0, 0.3 / np.sqrt(D), (D, K)), "b_pi": bias(K),
            "w_v": rng.normal(0.0, 0.3 / np.sqrt(Hv or D), (Hv or D,)),
            "b_v": np.array(rng.normal(0.0, 0.1)),
        })
        if Hv:
            # drawn after the others: value_hidden = 0 draws exactly what it always did
            p["W1_v"] = rng.normal(0.0, 1.0 / np.sqrt(D), (D, Hv))
            p["b1_v"] = bias(Hv)
        self.params = p

    def _split_heads(self, t):
        B, L, _ = t.shape
        return t.reshape(B, L, self.n_heads, self.d_head).transpose(0, 2, 1, 3)  # (B, H, L, d)

    def _merge_heads(self, t):
        B, _, L, _ = t.shape
        return t.transpose(0, 2, 1, 3).reshape(B, L, self.d_model)  # (B, L, D)

    def forward(self, tokens, params=None):
        """Logits (B, L, K), values (B, L) and the cache for :meth:`backward`.

        ``logits[:, j]`` scores the token after ``tokens[:, :j+1]``; ``values[:, j]``
        is V of that state. Vectorised over the batch and the heads; a loop over the
        layers only.
        """
        return self._forward(self.check_tokens(tokens), self.resolve_params(params))

    def _forward(self, tokens, p, values=True):
        """:meth:`forward` on checked int64 tokens (kept in the cache) and resolved params;
        ``values=False``: the logits alone (``ToyPolicy``)."""
        B, L = tokens.shape
        if L > self.max_len:
            raise ValueError(f"tokens: length {L} exceeds max_len {self.max_len}")
        scale = 1.0 / np.sqrt(self.d_head)
        causal = np.tril(np.ones((L, L), dtype=bool))  # (L, L): query i sees keys j <= i
        # x^0 = E_tok[y] + E_pos[j]
        x = p["E_tok"][tokens] + p["E_pos"][:L]  # (B, L, D)
        blocks = []
        for layer in range(self.n_layers):
            w = {name: p[f"h{layer}.{name}"] for name in BLOCK_PARAMS}
            c = {"x": x}
            # a = LN(x; g1, b1)
            c["a"], c["ln1"] = layer_norm(x, w["ln1_g"], w["ln1_b"])  # (B, L, D)
            qkv = c["a"] @ w["W_qkv"] + w["b_qkv"]  # (B, L, 3D)
            q, k, v = np.split(qkv, 3, axis=-1)  # (B, L, D) each
            c["q"], c["k"], c["v"] = (self._split_heads(t) for t in (q, k, v))  # (B, H, L, d)
            # S = q k^T / sqrt(d), -inf above the diagonal; P = softmax over keys
            S = (c["q"] @ c["k"].transpose(0, 1, 3, 2)) * scale  # (B, H, L, L)
            S = np.where(causal, S, -np.inf)  # (B, H, L, L)
            E = np.exp(S - S.max(axis=-1, keepdims=True))  # (B, H, L, L), exactly 0 if masked
            c["P"] = E / E.sum(axis=-1, keepdims=True)  # (B, H, L, L)
            O = c["P"] @ c["v"]  # (B, H, L, d)
            c["O"] = self._merge_heads(O)  # (B, L, D)
            # x' = x + O W_o + b_o
            x1 = x + (c["O"] @ w["W_o"] + w["b_o"])  # (B, L, D)
            c["x1"] = x1
            # x'' = x' + GELU(LN(x') W_fc + b_fc) W_proj + b_proj
            c["a2"], c["ln2"] = layer_norm(x1, w["ln2_g"], w["ln2_b"])  # (B, L, D)
            c["u"] = c["a2"] @ w["W_fc"] + w["b_fc"]  # (B, L, F)
            c["f"], c["tanh"] = gelu(c["u"])  # (B, L, F)
            x = x1 + (c["f"] @ w["W_proj"] + w["b_proj"])  # (B, L, D)
            blocks.append(c)
        # h = LN(x; g_f, b_f)
        h, lnf = layer_norm(x, p["lnf_g"], p["lnf_b"])  # (B, L, D)
        if not values:
            return self.policy_head(h, p), None, None
        # the value head's own layer (value_hidden > 0): g = tanh(h W1_v + b1_v)
        g = np.tanh(h @ p["W1_v"] + p["b1_v"]) if self.value_hidden else None  # (B, L, H_v)
        # logits = h W_pi + b_pi + bias;  V = h . w_v + b_v  (or g . w_v + b_v)
        logits, values = self.heads(h, p, g)  # (B, L, K), (B, L)
        cache = {"tokens": tokens, "blocks": blocks, "h": h, "g": g, "lnf": lnf, "params": p}
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
        tokens, h, p = cache["tokens"], cache["h"], cache["params"]
        scale = 1.0 / np.sqrt(self.d_head)
        # heads: logits = h W_pi + b_pi, V = h . w_v + b_v  (or g . w_v + b_v)
        g = cache["g"]
        grads, dh = self.heads_backward(h, p, dlogits, dvalues, g)  # dh (B, L, D)
        if g is not None:
            # g = tanh(h W1_v + b1_v): dgpre = (1 - g^2) dV w_v
            dgpre = (1.0 - g**2) * (dvalues[..., None] * p["w_v"])  # (B, L, H_v)
            grads["W1_v"], grads["b1_v"], dh_v = linear_backward(h, p["W1_v"], dgpre)
            dh = dh + dh_v  # h feeds both heads
        # h = LN(x; g_f, b_f)
        dx, grads["lnf_g"], grads["lnf_b"] = layer_norm_backward(dh, cache["lnf"])  # (B, L, D)
        for layer in reversed(range(self.n_layers)):
            c = cache["blocks"][layer]
            w = {name: p[f"h{layer}.{name}"] for name in BLOCK_PARAMS}
            g = {}  # g[name] is d(h<layer>.name), e.g. g["W_o"] = dW_o of this block
            # x'' = x' + f W_proj + b_proj: the residual passes dx to x' unchanged
            g["W_proj"], g["b_proj"], df = linear_backward(c["f"], w["W_proj"], dx)  # df (B, L, F)
            # f = GELU(u)
            du = gelu_backward(df, c["u"], c["tanh"])  # (B, L, F)
            # u = a2 W_fc + b_fc
            g["W_fc"], g["b_fc"], da2 = linear_backward(c["a2"], w["W_fc"], du)  # da2 (B, L, D)
            # a2 = LN(x'; g2, b2)
            dx1_ln, g["ln2_g"], g["ln2_b"] = layer_norm_backward(da2, c["ln2"])  # (B, L, D)
            dx1 = dx + dx1_ln  # (B, L, D)
            # x' = x + O W_o + b_o
            g["W_o"], g["b_o"], dO = linear_backward(c["O"], w["W_o"], dx1)  # dO (B, L, D)
            dO = self._split_heads(dO)  # (B, H, L, d): merge's inverse
            # O = P v
            dP = dO @ c["v"].transpose(0, 1, 3, 2)  # (B, H, L, L)
            dv = c["P"].transpose(0, 1, 3, 2) @ dO  # (B, H, L, d)
            # P = softmax(S): dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik); 0 where masked (P = 0)
            dS = c["P"] * (dP - (dP * c["P"]).sum(axis=-1, keepdims=True))  # (B, H, L, L)
            # S = q k^T / sqrt(d)
            dq = (dS @ c["k"]) * scale  # (B, H, L, d)
            dk = (dS.transpose(0, 1, 3, 2) @ c["q"]) * scale  # (B, H, L, d)
            dqkv = np.concatenate([self._merge_heads(t) for t in (dq, dk, dv)],
                                  axis=-1)  # (B, L, 3D)
            # qkv = a W_qkv + b_qkv
            g["W_qkv"], g["b_qkv"], da = linear_backward(c["a"], w["W_qkv"], dqkv)  # da (B, L, D)
            # a = LN(x; g1, b1)
            dx_ln, g["ln1_g"], g["ln1_b"] = layer_norm_backward(da, c["ln1"])  # (B, L, D)
            dx = dx1 + dx_ln  # (B, L, D)
            grads.update({f"h{layer}.{name}": value for name, value in g.items()})
        # x^0 = E_tok[y] + E_pos[j]
        grads["E_tok"], grads["E_pos"] = self.embedding_backward(tokens, dx, p)
        return {name: grads[name] for name in p}
