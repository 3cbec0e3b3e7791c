"""The KL term's expected gradient, exactly: every response enumerated, no sampling (notebook
``17_the_kl_term_value_and_gradient``; ``docs/derivations.md``, sections 13 and 14;
``python -m ppo_numpy explain kl-gradient``).

A policy over responses y = (y_1, ..., y_T) from a vocabulary of K tokens is given by its
conditional distributions: ``pi[t][y_1, ..., y_t]`` is the vector pi(. | y_<=t) of the token
at position t + 1 (``pi[0]`` the first token's, shape (K,); ``pi[1]`` shape (K, K), ...). A
categorical policy (T = 1) may be given as the vector itself. Its parameters are one logit
vector z per prefix, pi(. | prefix) = softmax(z): the gradients below are with respect to
all of them, flattened in the order of ``logit_labels`` (prefix by prefix, position by
position), with

    grad_z log pi(y_t | y_<t) = e_{y_t} - pi(. | y_<t)   in the block of the prefix y_<t.

The two targets, for the sequence distributions P (pi_theta), R (pi_ref):

    KL(P || R) = sum_y P(y) sum_t d_t(y),    grad = sum_y P(y) (sum_t d_t) grad log P(y)
    KL(R || P) = -sum_y R(y) sum_t d_t(y),   grad = -sum_y R(y) grad log P(y)

with d_t = log pi(y_t | y_<t) - log pi_ref(y_t | y_<t). A KL term's expected gradient under
sampling from q (pi_theta, or pi_old when it is given; the term's gradient taken with the
sample held fixed) is sum_y q(y) sum_t c_t(y) grad_z log pi(y_t | y_<t), where c_t = d term /
d logp_t:

* in the **loss** (per token, summed over t): c_t the derivative of the form
  (``ppo_numpy.ppo.kl_gradient.form_terms``) at d_t, r_t - 1 = pi_ref / pi - 1 and rho_t =
  pi / pi_old;
* in the **reward** through the returns (no critic, no baseline, PPO's unclipped ratio):
  the rewards -k_s computed from pi_old at rollout time (pi_theta on-policy) are constants,
  the loss is sum_t rho_t G_t with G_t = sum_{s >= t} gamma^(s - t) k_s, and c_t = rho_t G_t.

With Fractions (any probability given as a ``fractions.Fraction``; floats then read as the
decimal they print as) every rational step is exact: r, rho, the k3 estimator's r - 1 and
derivative, the forward KL's gradient, and every expectation built only from them (the plain
k1 and k3 terms in the loss). A log makes a step a float (d, k1, k2, abs, the reverse KL).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from .._checks import as_array, check_scalar, is_exact
from ..ppo.kl import ESTIMATORS, _check_estimator
from ..ppo.kl_gradient import (
    FORMS,
    OPENRLHF_IS_BOUND,
    check_form,
    check_is_bound,
    estimator_terms,
    form_terms,
)

__all__ = ["MAX_RESPONSES", "PLACEMENTS", "SUM_TOL", "Enumeration", "KLTargets",
           "enumerate_responses", "expected_kl_term", "kl_gradient_table", "kl_targets",
           "logit_labels"]

#: where the KL term sits: per token in the loss, or as rewards through the returns
PLACEMENTS = ("loss", "reward")
#: float probabilities must sum to 1 within this (Fractions: exactly)
SUM_TOL = 1e-12
#: at most this many responses (K^T) are enumerated (the gradients of every response and
#: position, (K^T, T, n_logits), are held at once)
MAX_RESPONSES = 1024
#: two gradients are called equal when they differ by at most this, relative to the largest
#: entry of the targets (or 1): the float sums over at most MAX_RESPONSES responses round at
#: about 1e-13 of it; a true gap below this would be reported as equal
EQUAL_TOL = 1e-10


@dataclass(frozen=True)
class Enumeration:
    """Every response of a checked policy triple, with what the expectations need.

    ``N = K^T`` responses in lexicographic order; per response and position ``(N, T)``
    arrays (object arrays of Fractions and floats when ``exact``, else float64):
    ``p``, ``p_ref``, ``p_old`` the probabilities of the token under each policy
    (``p_old`` is ``p`` on-policy), ``d`` = log p - log p_ref, ``rm1`` = p_ref / p - 1,
    ``rho`` = p / p_old, ``d_old`` = log p_old - log p_ref, ``rm1_old`` = p_ref / p_old -
    1; per response ``P``, ``R``, ``Q`` the sequence probabilities under pi_theta, pi_ref
    and pi_old; ``score`` (N, T, n_logits) the gradients grad_z log pi(y_t | y_<t).
    """

    K: int
    T: int
    responses: np.ndarray  # (N, T) int tokens
    p: np.ndarray
    p_ref: np.ndarray
    p_old: np.ndarray
    d: np.ndarray
    rm1: np.ndarray
    rho: np.ndarray
    d_old: np.ndarray
    rm1_old: np.ndarray
    P: np.ndarray
    R: np.ndarray
    Q: np.ndarray
    score: np.ndarray  # (N, T, n_logits)
    exact: bool
    on_policy: bool


class KLTargets(NamedTuple):
    """KL(pi_theta || pi_ref) and KL(pi_ref || pi_theta) of the responses, and their
    gradients with respect to pi_theta's logits (``d`` + name, shape (n_logits,))."""

    kl_reverse: object
    kl_forward: object
    dkl_reverse: np.ndarray
    dkl_forward: np.ndarray


def _log_ratio(a, b):
    """log(a / b), exactly 0 (a Fraction) when a == b in exact arithmetic."""
    if isinstance(a, Fraction) and isinstance(b, Fraction) and a == b:
        return Fraction(0)
    return math.log(a / b)


def _conditionals(probs, name: str, exact: bool) -> list:
    """``probs`` as a list of T checked arrays, ``[t]`` of shape (K,) * (t + 1)."""
    if isinstance(probs, np.ndarray) and probs.ndim == 1:
        tables = [probs]
    elif isinstance(probs, (list, tuple)) and probs and all(
            isinstance(x, (list, tuple, np.ndarray)) for x in probs):
        tables = list(probs)
    elif isinstance(probs, (list, tuple)):
        tables = [probs]
    else:
        raise TypeError(f"{name}: expected the probabilities of a categorical policy (a list "
                        "of K numbers) or the conditionals of an autoregressive one (a list "
                        f"of T arrays), got {type(probs).__name__}")
    out = []
    for t, table in enumerate(tables):
        where = name if len(tables) == 1 else f"{name}[{t}]"
        arr = as_array(table, where, exact=exact)
        K = out[0].shape[0] if out else (arr.shape[0] if arr.ndim else 0)
        if arr.shape != (K,) * (t + 1) or K < 1:
            want = "(K,)" if t == 0 else str((K,) * (t + 1))
            raise ValueError(f"{where}: expected shape {want} (one distribution over the K "
                             f"tokens per prefix of {t} tokens), got shape {arr.shape}")
        _check_distribution(arr, where, exact)
        out.append(arr)
    if out[0].shape[0] ** len(out) > MAX_RESPONSES:
        raise ValueError(f"{name}: K^T = {out[0].shape[0]}^{len(out)} responses to "
                         f"enumerate, more than {MAX_RESPONSES}")
    return out


def _check_distribution(arr: np.ndarray, where: str, exact: bool) -> None:
    """Finite, every probability > 0 (a log is taken of each), each distribution sums to 1."""
    flat = arr.reshape(-1, arr.shape[-1])
    for i, row in enumerate(flat):
        prefix = np.unravel_index(i, arr.shape[:-1]) if arr.ndim > 1 else ()
        after = f" after the prefix {tuple(int(v) + 1 for v in prefix)}" if arr.ndim > 1 else ""
        for k, v in enumerate(row):
            if not (isinstance(v, Fraction) or math.isfinite(v)):
                raise ValueError(f"{where}: probability {v} of token {k + 1}{after} is not "
                                 "finite")
            if v <= 0:
                raise ValueError(f"{where}: probability {v} of token {k + 1}{after}: every "
                                 "probability must be > 0 (the KL and its estimators take "
                                 "the log of each)")
        total = sum(row)
        if (total != 1) if exact else not abs(float(total) - 1) <= SUM_TOL:
            shown = total if exact else f"{float(total):.12g}"
            raise ValueError(f"{where}: the probabilities{after} sum to {shown}, not 1")


def _same_structure(a: list, name_a: str, b: list, name_b: str) -> None:
    if len(a) != len(b) or a[0].shape != b[0].shape:
        raise ValueError(f"{name_b}: {len(b)} position(s) over {b[0].shape[0]} tokens, but "
                         f"{name_a} has {len(a)} over {a[0].shape[0]} (the policies must "
                         "score the same responses)")


def logit_labels(pi) -> list:
    """Names of the logits in the order of the gradients: ``z[k]`` for a categorical
    policy, ``z[k | y1 y2 ...]`` for the logit of token k after a prefix (tokens from 1).

    >>> logit_labels([0.5, 0.5])
    ['z[1]', 'z[2]']
    >>> logit_labels([[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]])
    ['z[1]', 'z[2]', 'z[1 | 1]', 'z[2 | 1]', 'z[1 | 2]', 'z[2 | 2]']
    """
    tables = _conditionals(pi, "pi", is_exact(pi))
    K, T = tables[0].shape[0], len(tables)
    labels = []
    for t in range(T):
        for prefix in itertools.product(range(K), repeat=t):
            given = " | " + " ".join(str(y + 1) for y in prefix) if t else ""
            labels += [f"z[{k + 1}{given}]" for k in range(K)]
    return labels


def enumerate_responses(pi, pi_ref, pi_old=None) -> Enumeration:
    """Check the policies and enumerate every response (see the module docstring).

    Parameters
    ----------
    pi, pi_ref : probabilities (K,) of a categorical policy, or a list of T conditionals
        (``[t]`` of shape (K,) * (t + 1)): pi_theta, the policy being updated, and the
        reference. Every probability > 0; each distribution sums to 1 (exactly for
        Fractions, within :data:`SUM_TOL` for floats).
    pi_old : same structure, optional
        The policy that sampled the responses. ``None``: pi_theta itself (on-policy).

    Returns
    -------
    Enumeration

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> e = enumerate_responses([F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)])
    >>> e.responses.tolist(), e.rm1.tolist(), [round(x, 10) for x in e.d[:, 0]]
    ([[0], [1]], [[Fraction(1, 1)], [Fraction(-1, 3)]], [-0.6931471806, 0.4054651081])
    """
    exact = any(is_exact(x) for x in (pi, pi_ref, pi_old))
    pol = _conditionals(pi, "pi", exact)
    ref = _conditionals(pi_ref, "pi_ref", exact)
    _same_structure(pol, "pi", ref, "pi_ref")
    old = pol if pi_old is None else _conditionals(pi_old, "pi_old", exact)
    _same_structure(pol, "pi", old, "pi_old")
    K, T = pol[0].shape[0], len(pol)
    dtype = object if exact else np.float64
    responses = np.array(list(itertools.product(range(K), repeat=T)), dtype=int)  # (N, T)
    N = len(responses)
    n_logits = K * sum(K**t for t in range(T))
    p, p_ref, p_old = (np.empty((N, T), dtype=dtype) for _ in range(3))
    score = np.zeros((N, T, n_logits), dtype=dtype)
    for i, y in enumerate(responses):
        for t in range(T):
            prefix, token = tuple(y[:t]), y[t]
            p[i, t], p_ref[i, t], p_old[i, t] = (tab[t][prefix][token] for tab in (pol, ref, old))
            # the block of the prefix y_<t: positions before t, then the prefix's rank
            start = K * (sum(K**s for s in range(t)) + _rank(prefix, K))
            # grad_z log pi(y_t | y_<t) = e_{y_t} - pi(. | y_<t)
            score[i, t, start:start + K] = -pol[t][prefix]
            score[i, t, start + token] += 1
    ratio = np.vectorize(_log_ratio, otypes=[dtype])
    d, d_old = ratio(p, p_ref), ratio(p_old, p_ref)
    return Enumeration(
        K=K, T=T, responses=responses, p=p, p_ref=p_ref, p_old=p_old,
        d=d, rm1=p_ref / p - 1, rho=p / p_old, d_old=d_old, rm1_old=p_ref / p_old - 1,
        P=np.prod(p, axis=1), R=np.prod(p_ref, axis=1), Q=np.prod(p_old, axis=1),
        score=score, exact=exact, on_policy=pi_old is None)


def _rank(prefix: tuple, K: int) -> int:
    """The prefix's index among the K^t prefixes of its length (base-K digits)."""
    rank = 0
    for y in prefix:
        rank = rank * K + int(y)
    return rank


def _expect(weights, c, score) -> np.ndarray:
    """sum_y sum_t weights(y) c_t(y) score(y, t): an expected gradient (n_logits,)."""
    return (weights[:, None, None] * c[:, :, None] * score).sum(axis=(0, 1))


def targets_kernel(e: Enumeration) -> KLTargets:
    """:func:`kl_targets` of an enumeration."""
    D = e.d.sum(axis=1)            # log P(y) - log R(y)
    grad_logP = e.score.sum(axis=1)  # (N, n_logits)
    # KL(P || R) = sum_y P D;  grad = sum_y P D grad log P
    kl_rev = (e.P * D).sum()
    dkl_rev = (e.P[:, None] * D[:, None] * grad_logP).sum(axis=0)
    # KL(R || P) = -sum_y R D;  grad = -sum_y R grad log P
    kl_fwd = -(e.R * D).sum()
    dkl_fwd = -(e.R[:, None] * grad_logP).sum(axis=0)
    return KLTargets(kl_rev, kl_fwd, dkl_rev, dkl_fwd)


def kl_targets(pi, pi_ref) -> KLTargets:
    """KL(pi_theta || pi_ref), KL(pi_ref || pi_theta) and their gradients w.r.t. the logits.

    Parameters as in :func:`enumerate_responses`.

    Examples
    --------
    pi_theta = (1/4, 3/4), pi_ref = (1/2, 1/2): the forward KL's gradient is pi_theta -
    pi_ref, exactly; the reverse KL's is pi * (log(pi / pi_ref) - KL), a float:

    >>> from fractions import Fraction as F
    >>> t = kl_targets([F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)])
    >>> t.dkl_forward.tolist(), round(t.kl_reverse, 10), [round(g, 10) for g in t.dkl_reverse]
    ([Fraction(-1, 4), Fraction(1, 4)], 0.1308120359, [-0.2059898041, 0.2059898041])
    """
    return targets_kernel(enumerate_responses(pi, pi_ref))


def _check_gamma(gamma, exact: bool):
    """gamma checked, in the arithmetic of the enumeration (0.9 is 9/10 when exact)."""
    g = check_scalar(gamma, "gamma", low=0, high=1)
    if not exact:
        return float(g)
    return g if isinstance(g, Fraction) else Fraction(str(g))


def term_kernel(e: Enumeration, estimator: str, placement: str, form: str | None,
                gamma=1, bound=None):
    """:func:`expected_kl_term` of an enumeration, arguments checked: (value, gradient)."""
    q = e.P if e.on_policy else e.Q
    value, c = per_response_terms(e, estimator, placement, form, gamma, bound)
    return (q * value.sum(axis=1)).sum(), _expect(q, c, e.score)


def per_response_terms(e: Enumeration, estimator: str, placement: str, form: str | None,
                       gamma=1, bound=None):
    """(value_t, c_t = d term / d logp_t), each (N, T), of every response and position."""
    if placement == "loss":
        k, dk = estimator_terms(e.d, e.rm1, estimator)
        value, c = form_terms(k, dk, e.d, e.rho, form, bound)
    else:
        # the rewards -k_s of the sampling policy are constants: loss = sum_t rho_t G_t,
        # G_t = sum_{s >= t} gamma^(s - t) k_s
        value, _ = estimator_terms(e.d_old, e.rm1_old, estimator)
        G = np.empty_like(value)
        carry = 0
        for t in range(e.T - 1, -1, -1):
            carry = value[:, t] + gamma * carry
            G[:, t] = carry
        c = e.rho * G
    return value, c


def _check_term(estimator, placement, form):
    _check_estimator(estimator)
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ValueError(f"placement: expected one of {', '.join(PLACEMENTS)}, got "
                         f"{placement!r}")
    if placement == "reward":
        if form not in (None, "plain"):
            raise ValueError(f"form: a KL in the reward is a constant of the loss (it has no "
                             f"gradient of its own), so it has no form; got {form!r}")
        return None
    return check_form(form)


def expected_kl_term(pi, pi_ref, estimator="k3", placement="loss", form="plain", *,
                     pi_old=None, gamma=1, bound=OPENRLHF_IS_BOUND):
    """The exact expectation of a KL term's value and of its gradient w.r.t. the logits.

    Parameters
    ----------
    pi, pi_ref, pi_old
        As in :func:`enumerate_responses`; the responses are sampled from pi_old when it
        is given, else from pi_theta.
    estimator : {"k1", "k2", "k3", "abs"}
    placement : {"loss", "reward"}
        Per token in the loss (summed over t), or as rewards -k_t through the returns with
        ``gamma`` (no critic; see the module docstring).
    form : {"plain", "ratio", "straight_through", "importance"}
        The loss's gradient form (:mod:`ppo_numpy.ppo.kl_gradient`); ``None`` or ``"plain"``
        for a reward (a constant has no form).
    gamma : float in [0, 1]
        The reward placement's discount. Default 1.
    bound : float >= 1 or None
        The ``importance`` form's bound on pi_theta / pi_old. Default 10 (OpenRLHF's).

    Returns
    -------
    value : E_q[sum_t value_t], the term's value (the loss) or the penalties summed (reward)
    grad : array (n_logits,), E_q[sum_t c_t grad_z log pi(y_t | y_<t)] (Fractions where
        exact)

    Examples
    --------
    The plain k3 in the loss, on-policy: its value's expectation is KL(pi || pi_ref) =
    0.1308..., its gradient's is pi - pi_ref = grad KL(pi_ref || pi), exactly:

    >>> from fractions import Fraction as F
    >>> v, g = expected_kl_term([F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)], "k3", "loss")
    >>> round(v, 10), g.tolist()
    (0.1308120359, [Fraction(-1, 4), Fraction(1, 4)])
    """
    form = _check_term(estimator, placement, form)
    e = enumerate_responses(pi, pi_ref, pi_old)
    return term_kernel(e, estimator, placement, form, _check_gamma(gamma, e.exact),
                       check_is_bound(bound))


def _gap(g, target):
    """max_k |g_k - target_k|: a Fraction when every entry is exact."""
    return max(abs(a - b) for a, b in zip(g, target))


def _equal(gap, scale) -> bool:
    if isinstance(gap, (Fraction, int)):
        return gap == 0
    return gap <= EQUAL_TOL * max(1.0, float(scale))


def gradient_of(grad, targets: KLTargets):
    """Which target ``grad`` equals: ``"KL(pi||ref)"`` (the reverse KL's), ``"KL(ref||pi)"``
    (the forward KL's), ``"both"`` (pi_theta = pi_ref: both are 0) or ``"neither"``; and the
    two gaps, max_k |grad_k - target_k| (exact where everything is)."""
    scale = max(abs(float(x)) for x in (*targets.dkl_reverse, *targets.dkl_forward))
    gap_rev, gap_fwd = _gap(grad, targets.dkl_reverse), _gap(grad, targets.dkl_forward)
    rev, fwd = _equal(gap_rev, scale), _equal(gap_fwd, scale)
    name = "both" if rev and fwd else "KL(pi||ref)" if rev else "KL(ref||pi)" if fwd \
        else "neither"
    return name, gap_rev, gap_fwd


def kl_gradient_table(pi, pi_ref, pi_old=None, *, gamma=1, bound=OPENRLHF_IS_BOUND) -> list:
    """Every estimator x placement x form x sampler: the expected value and gradient, and
    which KL's gradient it is, with the gaps.

    Parameters as in ``expected_kl_term``; with ``pi_old`` the rows sampled from pi_old
    follow those sampled from pi_theta.

    Returns
    -------
    list of dict, one per row: ``estimator``, ``placement``, ``form`` (``None`` in the
    reward), ``sampler`` (``"pi_theta"`` or ``"pi_old"``), ``value``, ``grad`` (array),
    ``gradient_of`` (``"KL(pi||ref)"``, ``"KL(ref||pi)"``, ``"both"`` or ``"neither"``),
    ``gap_reverse``, ``gap_forward`` (max-abs differences to the two targets' gradients).
    The two targets: ``kl_targets``.

    Examples
    --------
    On-policy, pi_theta = (1/4, 3/4), pi_ref = (1/2, 1/2):

    >>> from fractions import Fraction as F
    >>> rows = kl_gradient_table([F(1, 4), F(3, 4)], [F(1, 2), F(1, 2)])
    >>> for r in rows:
    ...     if r["estimator"] == "k3":
    ...         gap = round(float(r["gap_reverse"]), 6)
    ...         print(r["placement"], r["form"], r["gradient_of"], gap)
    loss plain KL(ref||pi) 0.04401
    loss ratio KL(pi||ref) 0.0
    loss straight_through KL(pi||ref) 0.0
    loss importance KL(pi||ref) 0.0
    reward None neither 0.25
    """
    e_theta = enumerate_responses(pi, pi_ref)
    gamma = _check_gamma(gamma, e_theta.exact)
    bound = check_is_bound(bound)
    targets = targets_kernel(e_theta)
    samplers = [("pi_theta", e_theta)]
    if pi_old is not None:
        samplers.append(("pi_old", enumerate_responses(pi, pi_ref, pi_old)))
    rows = []
    for sampler, e in samplers:
        for placement in PLACEMENTS:
            for estimator in ESTIMATORS:
                for form in FORMS if placement == "loss" else (None,):
                    value, grad = term_kernel(e, estimator, placement, form, gamma, bound)
                    name, gap_rev, gap_fwd = gradient_of(grad, targets)
                    rows.append(dict(estimator=estimator, placement=placement, form=form,
                                     sampler=sampler, value=value, grad=grad,
                                     gradient_of=name, gap_reverse=gap_rev,
                                     gap_forward=gap_fwd))
    return rows
