"""Adam and SGD on a dict of parameter arrays, and global-norm gradient clipping.

Both optimisers update the arrays of the ``params`` dict *in place* (so a model
holding that dict sees the new values) and keep their state as a flat dict of
arrays that :func:`ppo_numpy.models.checkpoint.save_checkpoint` can store.

Adam (Kingma & Ba 2015, Algorithm 1), per parameter array with gradient g:

    m_t = beta1 m_{t-1} + (1 - beta1) g          v_t = beta2 v_{t-1} + (1 - beta2) g^2
    m^_t = m_t / (1 - beta1^t)                    v^_t = v_t / (1 - beta2^t)
    theta_t = theta_{t-1} - lr m^_t / (sqrt(v^_t) + eps)

SGD with momentum mu (PyTorch's form, no dampening): b_t = mu b_{t-1} + g,
theta_t = theta_{t-1} - lr b_t.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_scalar
from .base import check_names


def _check_grads(params, grads):
    check_names("grads", grads, params)
    out = {}
    for name, p in params.items():
        g = np.asarray(grads[name], dtype=np.float64)
        if g.shape != p.shape:
            raise ValueError(f"grads[{name!r}]: shape {g.shape} does not match params {p.shape}")
        if not np.all(np.isfinite(g)):
            raise ValueError(f"grads[{name!r}]: contains NaN or inf")
        out[name] = g
    return out


def _check_params(params):
    if not isinstance(params, dict) or not params:
        raise TypeError("params: expected a non-empty dict of float64 arrays")
    for name, p in params.items():
        if not isinstance(p, np.ndarray) or p.dtype != np.float64:
            raise TypeError(f"params[{name!r}]: expected a float64 np.ndarray (updated in place)")
    return params


def _state_dict(self, slots, scalars):
    """``<slot>/<name>`` copies of this optimiser's per-parameter slots, then its scalars."""
    state = {f"{s}/{n}": a.copy() for s in slots for n, a in getattr(self, s).items()}
    state.update({k: np.array(getattr(self, k)) for k in scalars})
    return state


def _load_state(self, state, slots, scalars):
    """Check names and shapes of ``state`` against this optimiser, then copy it in."""
    want = {f"{s}/{n}": p.shape for s in slots for n, p in self.params.items()}
    want.update({k: () for k in scalars})
    check_names("state", state, want)
    for k, shape in want.items():
        if np.shape(state[k]) != shape:
            raise ValueError(f"state[{k!r}]: shape {np.shape(state[k])}, expected {shape}")
    for s in slots:
        for n in self.params:
            getattr(self, s)[n] = np.array(state[f"{s}/{n}"], dtype=np.float64)
    for k in scalars:
        setattr(self, k, int(state[k]) if k == "t" else float(state[k]))


class Adam:
    """Adam on ``params`` (updated in place).

    Examples
    --------
    The first step moves each coordinate by ``lr * g / (|g| + eps)``, about lr:

    >>> p = {"x": np.array([1.0, -2.0])}
    >>> opt = Adam(p, lr=0.1)
    >>> opt.step({"x": np.array([4.0, -0.5])})
    >>> [round(float(v), 6) for v in p["x"]]
    [0.9, -1.9]
    """

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params = _check_params(params)
        self.lr = check_scalar(lr, "lr", low=0, low_open=True, allow_exact=False)
        if len(betas) != 2:
            raise ValueError(f"betas: expected (beta1, beta2), got {betas!r}")
        self.beta1 = check_scalar(betas[0], "betas[0]", low=0, high=1, allow_exact=False)
        self.beta2 = check_scalar(betas[1], "betas[1]", low=0, high=1, allow_exact=False)
        if self.beta1 == 1 or self.beta2 == 1:
            raise ValueError("betas: each must be < 1")
        self.eps = check_scalar(eps, "eps", low=0, allow_exact=False)
        self.t = 0
        self.m = {n: np.zeros_like(p) for n, p in params.items()}
        self.v = {n: np.zeros_like(p) for n, p in params.items()}

    def step(self, grads, *, check=True) -> None:
        """One update. ``check=False``: ``grads`` are trusted (the training loop's own, made by
        a model's backward: the names, shapes and float64 of ``params``, finite)."""
        g_all = _check_grads(self.params, grads) if check else grads
        self.t += 1
        for name, p in self.params.items():
            g = g_all[name]
            # m_t = beta1 m_{t-1} + (1 - beta1) g;  v_t = beta2 v_{t-1} + (1 - beta2) g^2
            self.m[name] = self.beta1 * self.m[name] + (1 - self.beta1) * g
            self.v[name] = self.beta2 * self.v[name] + (1 - self.beta2) * g * g
            m_hat = self.m[name] / (1 - self.beta1**self.t)
            v_hat = self.v[name] / (1 - self.beta2**self.t)
            # theta_t = theta_{t-1} - lr m^ / (sqrt(v^) + eps)
            p -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)

    def state_dict(self) -> dict:
        """Flat dict of arrays: ``m/<name>``, ``v/<name>``, ``t``, ``lr``, ``beta1``, ``beta2``,
        ``eps`` (copies)."""
        return _state_dict(self, ("m", "v"), ("t", "lr", "beta1", "beta2", "eps"))

    def load_state_dict(self, state) -> None:
        """Restore a :meth:`state_dict` (hyperparameters included); names and shapes checked."""
        _load_state(self, state, ("m", "v"), ("t", "lr", "beta1", "beta2", "eps"))


class SGD:
    """Stochastic gradient descent with optional momentum on ``params`` (updated in place).

    Examples
    --------
    >>> p = {"x": np.array([1.0])}
    >>> opt = SGD(p, lr=0.1, momentum=0.5)
    >>> opt.step({"x": np.array([2.0])}); float(p["x"][0])      # b = 2, x = 1 - 0.2
    0.8
    >>> opt.step({"x": np.array([2.0])}); round(float(p["x"][0]), 12)  # b = 3, x = 0.8 - 0.3
    0.5
    """

    def __init__(self, params, lr, momentum=0.0):
        self.params = _check_params(params)
        self.lr = check_scalar(lr, "lr", low=0, low_open=True, allow_exact=False)
        self.momentum = check_scalar(momentum, "momentum", low=0, allow_exact=False)
        if self.momentum >= 1:
            raise ValueError(f"momentum: must be < 1, got {momentum}")
        self.t = 0
        self.buf = {n: np.zeros_like(p) for n, p in params.items()}

    def step(self, grads, *, check=True) -> None:
        """One update; ``check=False`` as in :meth:`Adam.step`."""
        g_all = _check_grads(self.params, grads) if check else grads
        self.t += 1
        for name, p in self.params.items():
            # b_t = mu b_{t-1} + g;  theta_t = theta_{t-1} - lr b_t
            self.buf[name] = self.momentum * self.buf[name] + g_all[name]
            p -= self.lr * self.buf[name]

    def state_dict(self) -> dict:
        """Flat dict of arrays: ``buf/<name>``, ``t``, ``lr``, ``momentum`` (copies)."""
        return _state_dict(self, ("buf",), ("t", "lr", "momentum"))

    def load_state_dict(self, state) -> None:
        """Restore a :meth:`state_dict` (hyperparameters included); names and shapes checked."""
        _load_state(self, state, ("buf",), ("t", "lr", "momentum"))


def global_norm(grads) -> float:
    """sqrt(sum over every array and entry of g^2).

    >>> global_norm({"a": np.array([3.0]), "b": np.array([[4.0]])})
    5.0
    """
    return float(np.sqrt(sum(float(np.sum(np.square(g))) for g in grads.values())))


def clip_grad_norm(grads, max_norm):
    """Scale all gradients by min(1, max_norm / ||g||), ||g|| the global norm.

    Returns ``(clipped, norm)``: a new dict (the input is not modified) and the
    norm *before* clipping. PyTorch's ``clip_grad_norm_`` divides by
    ``norm + 1e-6``; we divide by ``norm`` so the clipped norm is max_norm exactly
    (up to rounding).

    Examples
    --------
    >>> g = {"a": np.array([3.0]), "b": np.array([4.0])}
    >>> clipped, norm = clip_grad_norm(g, 1.0)
    >>> norm, [round(float(clipped["a"][0]), 12), round(float(clipped["b"][0]), 12)]
    (5.0, [0.6, 0.8])
    >>> clip_grad_norm(g, 10.0)[0]["a"].tolist()   # below the bound: unchanged
    [3.0]
    """
    max_norm = check_scalar(max_norm, "max_norm", low=0, low_open=True, allow_exact=False)
    g = {n: np.asarray(a, dtype=np.float64) for n, a in grads.items()}
    norm = global_norm(g)
    return scale_to_norm(g, max_norm, norm), norm


def scale_to_norm(grads: dict, max_norm: float, norm: float) -> dict:
    """``grads`` times min(1, max_norm / norm), ``norm`` their global norm (unchecked kernel of
    :func:`clip_grad_norm`, for a loop that has the norm already)."""
    if not np.isfinite(norm):
        raise ValueError(f"grads: the global norm is {norm}")
    scale = max_norm / norm if norm > max_norm else 1.0
    return {n: a * scale for n, a in grads.items()}
