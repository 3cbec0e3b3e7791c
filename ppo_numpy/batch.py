"""One batch type for rollout data, validated once when it is made (notebook ``09``).

A :class:`Rollout` holds what one PPO iteration knows about B sampled responses:
the response mask, the log-probabilities and values at rollout time, the
reference log-probabilities, the scores, and later the advantages and returns.
The sampler makes one, the training loop adds to it and cuts minibatches from
it, the toy policy's loss reads it, and the oracle's presets read a case into
one. Its arrays are checked when it is made (shapes, real numbers, finite where
the mask is 1) and never again: code inside the package trusts them.

======================  ===========  ===============================================
field                   shape        what
======================  ===========  ===============================================
mask                    (B, T) bool  1 for response tokens (EOS included), 0 for padding
logp                    (B, T)       log pi_theta(y_t | x, y_<t), the policy being trained
logp_old                (B, T)       log pi_theta_old(y_t | x, y_<t), at rollout time
logp_ref                (B, T)       log pi_ref(y_t | x, y_<t), the frozen reference
logp_rollout            (B, T)       log pi_rollout(y_t | x, y_<t), the inference engine's
                                     log-probs of the sampled tokens (vLLM, SGLang), for
                                     the corrections of ppo_numpy.mismatch.correction
values                  (B, T)       V(s_t) of the value head being trained
old_values              (B, T)       V(s_t) at rollout time
advantages, returns     (B, T)       A_hat_t and R_t
scores                  (B,)         the reward model's score of each response
baseline_scores         (B,)         the score of a greedy response to the same prompt (ReMax)
groups                  (B,) int     prompt ids: equal ids, one group (critic-free methods)
reward_components       (B, K)       K reward components per response (GDPO normalises each)
prompts                 (B, P) int   token ids of the prompts
responses               (B, T) int   token ids of the responses (PAD after EOS)
temperature             float        the sampling temperature of logp_old
======================  ===========  ===============================================

Every field but ``mask`` is optional (``None``). The (B, T) float fields are
float64 copies and exactly 0 at padding, whatever was given there (NaN or inf
included), unless the rollout was made by :meth:`Rollout.keeping_padding`
(the presets of frameworks that read a position past the mask).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ._checks import as_array, as_mask, check_finite, check_scalar, where_valid

__all__ = ["TOKEN_FIELDS", "Rollout"]

#: the (B, T) float fields
TOKEN_FIELDS = ("logp", "logp_old", "logp_ref", "logp_rollout", "values", "old_values",
                "advantages", "returns")


def _int_array(x, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        if not (arr.dtype.kind == "f" and arr.size and np.all(arr == np.round(arr))):
            raise TypeError(f"{name}: expected integers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} axes, got shape {arr.shape}")
    return arr.astype(np.int64)


@dataclass(frozen=True, eq=False)
class Rollout:
    """A batch of rollout data, checked on construction (module docstring: the fields).

    Parameters
    ----------
    mask : array (B, T) of 0/1 or bool
    logp, logp_old, logp_ref, logp_rollout : array (B, T), optional
    values, old_values, advantages, returns : array (B, T), optional
    scores, baseline_scores : array (B,), optional
    groups : int array (B,), optional
    reward_components : array (B, K), optional
    prompts : int array (B, P), optional
    responses : int array (B, T), optional
    temperature : float > 0
        Default 1.

    Raises
    ------
    ValueError, TypeError
        Naming the field: a shape that is not the mask's, a non-number, NaN or inf
        where the mask is 1, a mask value other than 0 and 1.

    Examples
    --------
    >>> r = Rollout(mask=[[1, 1, 0]], logp_old=[[-1.0, -2.0, float("nan")]], scores=[1.0])
    >>> r.logp_old.tolist(), r.mask.tolist(), r.B, r.T
    ([[-1.0, -2.0, 0.0]], [[True, True, False]], 1, 3)
    >>> Rollout(mask=[[1, 1]], logp_old=[[-1.0, -2.0, -3.0]])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: logp_old: shape (1, 3) does not match mask shape (1, 2) (no broadcasting: ...)
    """

    mask: np.ndarray
    logp: np.ndarray | None = None
    logp_old: np.ndarray | None = None
    logp_ref: np.ndarray | None = None
    logp_rollout: np.ndarray | None = None
    values: np.ndarray | None = None
    old_values: np.ndarray | None = None
    advantages: np.ndarray | None = None
    returns: np.ndarray | None = None
    scores: np.ndarray | None = None
    baseline_scores: np.ndarray | None = None
    groups: np.ndarray | None = None
    reward_components: np.ndarray | None = None
    prompts: np.ndarray | None = None
    responses: np.ndarray | None = None
    temperature: float = 1.0

    def __post_init__(self):
        self._check(zero_padding=True)

    @classmethod
    def keeping_padding(cls, **fields) -> Rollout:
        """Checked like the constructor, but the padding of the (B, T) fields is kept as given
        (it must then be finite wherever a caller reads it: see :meth:`on`)."""
        out = cls._trusted(**fields)
        out._check(zero_padding=False)
        return out

    @classmethod
    def _trusted(cls, **fields) -> Rollout:
        """A rollout of arrays already checked (no checks, no copies): package use only."""
        out = object.__new__(cls)
        for f in dataclasses.fields(cls):
            object.__setattr__(out, f.name, fields.get(f.name, f.default))
        return out

    def _check(self, zero_padding: bool) -> None:
        raw = np.asarray(self.mask) if self.mask is not None else None
        if raw is None or raw.ndim != 2:
            shape = None if raw is None else raw.shape
            raise ValueError(f"mask: expected shape (B, T), got {shape}")
        if raw.shape[1] == 0:
            raise ValueError(f"mask: no time steps, got shape {raw.shape} (T must be >= 1)")
        m = as_mask(raw, raw, "mask")
        set_ = object.__setattr__
        set_(self, "mask", m)
        for name in TOKEN_FIELDS:
            x = getattr(self, name)
            if x is None:
                continue
            # no copy here when where_valid below makes the new array
            arr = as_array(x, name, exact=False, copy=not zero_padding)
            if arr.shape != m.shape:
                raise ValueError(f"{name}: shape {arr.shape} does not match mask shape "
                                 f"{m.shape} (no broadcasting: pass arrays of the same shape)")
            check_finite(arr, name, m)
            set_(self, name, where_valid(m, arr) if zero_padding else arr)
        for name in ("scores", "baseline_scores"):
            if getattr(self, name) is None:
                continue
            s = as_array(getattr(self, name), name, exact=False)
            if s.shape != m.shape[:1]:
                raise ValueError(f"{name}: expected shape {m.shape[:1]} (one score per "
                                 f"response), got shape {s.shape}")
            check_finite(s, name, np.ones(s.shape, dtype=bool))
            set_(self, name, s)
        if self.groups is not None:
            g = _int_array(self.groups, "groups", 1)
            if g.shape != m.shape[:1]:
                raise ValueError(f"groups: expected shape {m.shape[:1]} (one prompt id per "
                                 f"response), got shape {g.shape}")
            set_(self, "groups", g)
        if self.reward_components is not None:
            c = as_array(self.reward_components, "reward_components", exact=False)
            if c.ndim != 2 or c.shape[0] != m.shape[0] or c.shape[1] == 0:
                raise ValueError(f"reward_components: expected shape ({m.shape[0]}, K) with "
                                 f"K >= 1 (K components per response), got shape {c.shape}")
            check_finite(c, "reward_components", np.ones(c.shape, dtype=bool))
            set_(self, "reward_components", c)
        if self.prompts is not None:
            p = _int_array(self.prompts, "prompts", 2)
            if p.shape[0] != m.shape[0]:
                raise ValueError(f"prompts: {p.shape[0]} rows but mask has {m.shape[0]}")
            set_(self, "prompts", p)
        if self.responses is not None:
            y = _int_array(self.responses, "responses", 2)
            if y.shape != m.shape:
                raise ValueError(f"responses: shape {y.shape} does not match mask shape "
                                 f"{m.shape}")
            set_(self, "responses", y)
        set_(self, "temperature", check_scalar(self.temperature, "temperature", low=0,
                                               low_open=True, allow_exact=False))

    @property
    def B(self) -> int:
        return self.mask.shape[0]

    @property
    def T(self) -> int:
        return self.mask.shape[1]

    def rows(self, idx) -> Rollout:
        """The minibatch of rows ``idx`` (an index array or a slice), not checked again."""
        # vars(self): the fields, name -> value
        return self.replace_trusted(**{n: x[idx] for n, x in vars(self).items()
                                       if isinstance(x, np.ndarray)})

    def replace_trusted(self, **fields) -> Rollout:
        """A rollout with ``fields`` replaced or added, not checked: for arrays the package made
        (0 at padding). ``dataclasses.replace`` gives a checked one."""
        return Rollout._trusted(**{**vars(self), **fields})

    def on(self, mask: np.ndarray) -> Rollout:
        """The (B, T) fields with 0 outside ``mask`` (a bool (B, T) array), and that mask."""
        tokens = {n: getattr(self, n) for n in TOKEN_FIELDS if getattr(self, n) is not None}
        return self.replace_trusted(mask=mask, **{n: where_valid(mask, x)
                                                  for n, x in tokens.items()})

    def require(self, *names: str, why: str = "") -> None:
        """Raise ValueError naming the first of ``names`` that this rollout does not have."""
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            raise ValueError(f"batch: missing field(s) {', '.join(missing)}"
                             + (f" ({why})" if why else ""))
