"""A one-hidden-layer reward model on (position, token) features, backward by hand
(notebook ``12_reward_model_overoptimisation``).

For a prompt x of P tokens and a response y of T tokens with mask m (1 for
response tokens, EOS included; 0 at padding), with H = ``d_hidden``:

    a    = b_1 + sum_p W_x[p, x_p] + sum_t m_t W_y[t, y_t]      (H,)  first layer
    h    = tanh(a)                                               (H,)
    r    = h . w_2                                               scalar reward r(x, y)

The first layer is a linear map of the one-hot (position, token) features of
the prompt and of the response's unmasked tokens: with onehot_x (B, P, K) and
m * onehot_y (B, T, K) flattened to (B, P K) and (B, T K), the sums above are
``onehot_x @ W_x`` and ``(m onehot_y) @ W_y`` (W reshaped to (P K, H), (T K, H)),
and the backward is the transposed product, dW_x = onehot_x^T da: the
scatter-add of the gather W_x[p, x_p], as one matrix product (several times
faster than ``np.add.at`` here). There is no output bias: the Bradley-Terry
loss sees only differences of r, so a bias would get a gradient of exactly 0.

``score`` is what PPO receives: ``offset + scale * r``, an affine map fixed by
:meth:`RewardModel.calibrate` (not trained) that puts the proxy on the gold
score's scale over the reference policy's responses.
"""

from __future__ import annotations

import numpy as np

from .._checks import as_mask, check_int, check_scalar
from ..models.base import Parameterised, check_rng
from ..models.vocab import check_tokens, check_vocab_size


def _one_hot(tokens, K):
    """float64 (B, L, K) with a 1 at each token id."""
    return (tokens[..., None] == np.arange(K)).astype(np.float64)


class RewardModel(Parameterised):
    """r(x, y) = w_2 . tanh(b_1 + sum_p W_x[p, x_p] + sum_t m_t W_y[t, y_t]).

    Parameters
    ----------
    vocab_size : int
        K.
    prompt_length : int
        P, the (fixed) number of prompt tokens, BOS included.
    max_new_tokens : int
        T, the longest response; shorter (right-padded) batches are accepted.
    d_hidden : int
        H.
    rng : np.random.Generator
        Draws the initial parameters.
    init_std : float > 0
        Standard deviation of the initial W_x, W_y and b_1. Default 0.1.

    Attributes
    ----------
    params : dict[str, np.ndarray]
        ``W_x (P, K, H)``, ``W_y (T, K, H)``, ``b1 (H,)``, ``w2 (H,)``.
    offset, scale : float
        The affine map of :meth:`score` (0 and 1 until :meth:`calibrate`).

    Examples
    --------
    (P + T) K H + 2 H = (2 + 4) * 6 * 3 + 2 * 3 = 114 parameters:

    >>> rm = RewardModel(6, 2, 4, 3, np.random.default_rng(0))
    >>> rm.n_params
    114
    >>> r, cache = rm.forward(np.array([[1, 3], [1, 4]]), np.array([[3, 2, 0, 0], [5, 5, 5, 5]]),
    ...                       np.array([[1, 1, 0, 0], [1, 1, 1, 1]]))
    >>> r.shape
    (2,)
    """

    def __init__(self, vocab_size, prompt_length, max_new_tokens, d_hidden, rng, *,
                 init_std=0.1):
        self.vocab_size = K = check_vocab_size(vocab_size)
        self.prompt_length = P = check_int(prompt_length, "prompt_length")
        self.max_new_tokens = T = check_int(max_new_tokens, "max_new_tokens")
        self.d_hidden = H = check_int(d_hidden, "d_hidden")
        check_rng(rng)
        s = check_scalar(init_std, "init_std", low=0, low_open=True, allow_exact=False)
        self.params = {
            "W_x": rng.normal(0.0, s, (P, K, H)),
            "W_y": rng.normal(0.0, s, (T, K, H)),
            "b1": rng.normal(0.0, s, (H,)),
            "w2": rng.normal(0.0, 1.0 / np.sqrt(H), (H,)),
        }
        self.offset = 0.0
        self.scale = 1.0

    def _inputs(self, prompts, responses, mask):
        x = check_tokens(prompts, self.vocab_size, "prompts")
        y = check_tokens(responses, self.vocab_size, "responses")
        if x.shape[1] != self.prompt_length:
            raise ValueError(f"prompts: expected {self.prompt_length} tokens per prompt, "
                             f"got shape {x.shape}")
        if not 1 <= y.shape[1] <= self.max_new_tokens:
            raise ValueError(f"responses: expected 1 to {self.max_new_tokens} columns, "
                             f"got shape {y.shape}")
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"responses: {y.shape[0]} rows but prompts has {x.shape[0]}")
        m = as_mask(mask, y, "responses").astype(np.float64)
        return x, y, m

    def forward(self, prompts, responses, mask, params=None):
        """Rewards r (B,) and the cache for :meth:`backward`.

        Parameters
        ----------
        prompts : int array (B, P)
        responses : int array (B, T'), T' <= T
        mask : array of 0/1 (B, T')
            Tokens with mask 0 (padding) contribute nothing.
        params : dict, optional
            Evaluate at these parameters instead of ``self.params``.
        """
        p = self.resolve_params(params)
        x, y, m = self._inputs(prompts, responses, mask)
        (B, P), T = x.shape, y.shape[1]
        K, H = self.vocab_size, self.d_hidden
        phi_x = _one_hot(x, K).reshape(B, P * K)  # (B, P K)
        phi_y = (_one_hot(y, K) * m[..., None]).reshape(B, T * K)  # (B, T K), 0 at padding
        # a = b_1 + sum_p W_x[p, x_p] + sum_t m_t W_y[t, y_t]
        a = (p["b1"] + phi_x @ p["W_x"].reshape(P * K, H)
             + phi_y @ p["W_y"][:T].reshape(T * K, H))  # (B, H)
        # h = tanh(a)
        h = np.tanh(a)  # (B, H)
        # r = h . w_2
        r = h @ p["w2"]  # (B,)
        cache = {"phi_x": phi_x, "phi_y": phi_y, "h": h, "params": p}
        return r, cache

    def backward(self, cache, dr):
        """Gradients of a scalar loss w.r.t. every parameter, from d loss / d r (B,).

        Returns a dict with the keys and shapes of ``params``.
        """
        phi_x, phi_y, h, p = cache["phi_x"], cache["phi_y"], cache["h"], cache["params"]
        B, H = h.shape
        dr = np.asarray(dr, dtype=np.float64)
        if dr.shape != (B,):
            raise ValueError(f"dr: expected shape {(B,)}, got {dr.shape}")
        # r = h . w_2
        dw2 = h.T @ dr  # (H,)
        dh = dr[:, None] * p["w2"]  # (B, H)
        # h = tanh(a): da = (1 - h^2) dh
        da = (1.0 - h**2) * dh  # (B, H)
        db1 = da.sum(axis=0)
        # a = ... + phi_x W_x + phi_y W_y: dW = phi^T da (rows of unseen (position, token) get 0)
        dW_x = (phi_x.T @ da).reshape(p["W_x"].shape)  # (P, K, H)
        dW_y = np.zeros_like(p["W_y"])
        T = phi_y.shape[1] // self.vocab_size
        dW_y[:T] = (phi_y.T @ da).reshape(T, self.vocab_size, H)  # (T', K, H)
        return {"W_x": dW_x, "W_y": dW_y, "b1": db1, "w2": dw2}

    def reward(self, prompts, responses, mask, params=None) -> np.ndarray:
        """The raw reward r(x, y) of each response: float64 (B,)."""
        return self.forward(prompts, responses, mask, params)[0]

    def score(self, prompts, responses, mask) -> np.ndarray:
        """The proxy score PPO is trained on: ``offset + scale * r(x, y)``, float64 (B,).

        Same signature as :meth:`ppo_numpy.training.tasks.Task.score`, so it can
        replace the task's rule.
        """
        return self.offset + self.scale * self.reward(prompts, responses, mask)

    __call__ = score

    def calibrate(self, prompts, responses, mask, gold) -> tuple[float, float]:
        """Set ``offset`` and ``scale`` so that :meth:`score` has the mean and the standard
        deviation of ``gold`` over these responses; return them.

            scale = std(gold) / std(r),    offset = mean(gold) - scale * mean(r)

        Used with responses of the reference policy, it puts proxy and gold on one
        scale where the reward model was trained; elsewhere they may part.
        """
        r = self.reward(prompts, responses, mask)
        g = np.asarray(gold, dtype=np.float64)
        if g.shape != r.shape:
            raise ValueError(f"gold: shape {g.shape} does not match the {r.shape[0]} responses")
        if not np.all(np.isfinite(g)):
            raise ValueError("gold: contains NaN or inf")
        sd_r, sd_g = float(r.std()), float(g.std())
        if sd_r == 0.0 or sd_g == 0.0:
            raise ValueError("calibrate: the rewards or the gold scores are constant over these "
                             "responses; cannot match their spread")
        self.scale = sd_g / sd_r
        self.offset = float(g.mean()) - self.scale * float(r.mean())
        return self.offset, self.scale
