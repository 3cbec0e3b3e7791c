"""Group baselines: advantages from a group of responses to the same prompt (issue 13).

The critic-free members of the PPO family replace the value head V(s_t) by a
baseline computed from other responses. Each prompt is answered several times;
the responses to one prompt form a *group* (``groups`` holds one integer prompt
id per row: rows with equal ids are one group, in any order). With s_i the
score of response i, g(i) its group, n_g the group's size and mean_g its mean:

    GRPO          A_i = (s_i - mean_g(i)) / (std_g(i) + std_eps)   (B,)
    Dr. GRPO      A_i =  s_i - mean_g(i)                            (B,)
    RLOO          A_i =  s_i - (sum_g(i) - s_i) / (n_g(i) - 1)      (B,)
    REINFORCE++   A_t = whiten(G_t)                                 (B, T)
    RF++-baseline A_t = whiten(s_i - mean_g(i) + G_t)               (B, T)
    ReMax         A_t = G_t - b_i                                   (B, T)
    OPO           A_i =  s_i - sum_g(n_j s_j) / sum_g(n_j)          (B,)
    GPG           A_i =  alpha (s_i - mean_g(i)) / f_norm           (B,)
    Pass@k        A_i = (s_(1) - s_(2)) / (std_g + std_eps), best  (B,)
    GDPO          A_t = whiten(sum_k w_k GRPO(s^k)_i)               (B, T)

with G_t = sum_{l >= 0} gamma^l r~_{t+l} the return-to-go of the per-token
(KL-shaped) rewards over the response tokens (padding between response tokens
is skipped, as in :func:`ppo_numpy.gae`), ``whiten`` the batch whitening of
:func:`ppo_numpy.whiten`, and b_i the score of a greedy response to the same
prompt. OPO weighs each score by its response's length n_j; GPG's alpha is B over
the number of nonzero scores; Pass@k gives the best response of a group its lead
over the second best (0 elsewhere); GDPO normalises K reward components s^k apart
(verl 0.9.1's estimators, read for issue 27: each docstring names its function).
Sequence-level advantages are broadcast over a response's tokens by the
loss; token-level outputs are exactly 0 at padding.

What each framework does (a group of one, equal scores, std_eps, ddof, dtype) is in
each docstring and in ``docs/conventions.md`` (section "Group baselines").
Sources, read for issue 13: verl ``verl/trainer/ppo/core_algos.py`` at
012be9d9, TRL ``trl/trainer/grpo_trainer.py`` at d2b69d76 and the string
``scale_rewards`` of TRL PR #3935 (fe44806), TRL ``trl/trainer/rloo_trainer.py``
at 13b4eb95, OpenRLHF ``openrlhf/trainer/ppo_utils/experience_maker.py`` at
89308a0b. The issue names verl b178a3c, TRL f2cd577 and OpenRLHF 3c3be62; those
commits were not available, so the versions above are the ones read.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from .._checks import (
    as_array,
    check_bounds,
    check_choice,
    check_finite,
    check_scalar,
    finite_entries,
    is_exact,
    prepare,
    rectangular,
    scalar_for,
    where_valid,
)
from .._renames import renamed_keyword
from ..ppo.gae import _backward_recursion as _returns_to_go  # G_t = r~_t + gamma G_{t+1}
from ..ppo.whitening import whiten

__all__ = ["SCALES", "SINGLETONS", "gdpo_advantages", "gpg_advantages", "grpo_advantages",
           "grpo_passk_advantages", "opo_advantages", "reinforce_plus_plus_advantages",
           "reinforce_plus_plus_baseline_advantages", "remax_advantages", "returns_to_go",
           "rloo_advantages"]

SCALES = ("group", "batch", "none")
SINGLETONS = ("error", "zero", "raw")


# --- checks at the edge ---------------------------------------------------------------------


def _check_scores(scores, name, *, exact=None):
    """``scores`` as a (B,) float64 (or exact) array, every entry finite; never to be written
    into (it may be the caller's)."""
    if type(scores) is np.ndarray and scores.dtype == np.float64 and exact is not True:
        s = scores  # the common case, without as_array's conversions
    else:
        s = as_array(scores, name, exact=exact, copy=False)
    if s.ndim != 1 or s.shape[0] == 0:
        raise ValueError(f"{name}: expected shape (B,) with B >= 1 (one score per response), "
                         f"got shape {s.shape}")
    ok = finite_entries(s)
    if np.count_nonzero(ok) < s.shape[0]:
        i = int(np.argwhere(~ok)[0][0])
        raise ValueError(f"{name}: non-finite value {s[i]} at row {i} "
                         "(every response needs a finite score)")
    return s


class Groups(NamedTuple):
    """Which rows form which group: ``inverse`` the index of each row's group (B,),
    ``counts`` the group sizes (G,), ``ids`` the prompt ids (G,)."""

    inverse: np.ndarray
    counts: np.ndarray
    ids: np.ndarray


def check_group_ids(groups, B) -> np.ndarray:
    """``groups`` checked: integer prompt ids, shape (B,); never to be written into."""
    g = rectangular(groups, "groups")
    if g.dtype.kind not in "iu":
        what = "bool" if g.dtype.kind == "b" else str(g.dtype)
        raise TypeError(f"groups: expected integer prompt ids (one per response), got {what} "
                        "values; map prompts to integers first")
    if g.shape != (B,):
        raise ValueError(f"groups: expected shape ({B},), one prompt id per score, got shape "
                         f"{g.shape}")
    return g


def group_index(g) -> Groups:
    """Checked prompt ids (B,) -> :class:`Groups` (rows with equal ids form one group)."""
    ids, inverse, counts = np.unique(g, return_inverse=True, return_counts=True)
    return Groups(inverse.reshape(g.shape), counts, ids)


def _groups(groups, B):
    """Integer prompt ids (B,) -> :class:`Groups`."""
    return group_index(check_group_ids(groups, B))


def _singletons(grp, singleton, fix):
    """Rows whose group has one response (bool (B,)); raises for ``singleton="error"``."""
    single = grp.counts[grp.inverse] == 1
    if singleton == "error" and np.any(single):
        i = int(np.argmax(single))
        raise ValueError(
            f"groups: prompt id {grp.ids[grp.inverse[i]]} has a single response (row {i}); a "
            f"group baseline needs >= 2 responses per prompt. {fix}")
    return single


# --- kernels (checked inputs) ---------------------------------------------------------------


def _group_sums(x, inverse, n_groups):
    """sum_{j in g} x_j for each group g, (G,), in the arithmetic of ``x``, added in row order."""
    if x.dtype == object:
        sums = np.array([Fraction(0)] * n_groups, dtype=object)
    else:
        sums = np.zeros(n_groups, dtype=x.dtype)
    np.add.at(sums, inverse, x)
    return sums


def _flat_groups(s, inverse, n_groups):
    """Rows whose group's scores are all equal (bool (B,)).

    Why: the float mean of equal scores can miss them by one rounding (three times
    0.1 sums to 0.30000000000000004), and that 1e-17, divided by a std of ~1e-17
    plus std_eps = 1e-6, is not 0. Such rows get an advantage of exactly 0.
    """
    if s.dtype == object:  # exact: s - mean is already 0
        return np.zeros(s.shape, dtype=bool)
    lo = np.full(n_groups, np.inf, dtype=s.dtype)
    hi = np.full(n_groups, -np.inf, dtype=s.dtype)
    np.minimum.at(lo, inverse, s)
    np.maximum.at(hi, inverse, s)
    return (lo == hi)[inverse]


def _check_groups(groups, B):
    """Integer prompt ids (B,) -> (index of each row's group (B,), group sizes (G,), ids (G,))."""
    grp = _groups(groups, B)
    return grp.inverse, grp.counts, grp.ids


def _token_inputs(arrays, mask, scores_like, exact=None):
    """``prepare`` for (B, T) token arrays, with a (B,) score array of the same B."""
    out, m = prepare(arrays, mask, ranks=(2,), exact=exact)
    B = out[0].shape[0]
    name, s = scores_like
    if s.shape != (B,):
        first = next(iter(arrays))
        raise ValueError(f"{name}: expected shape ({B},), one score per row of {first} "
                         f"(shape {out[0].shape}), got shape {s.shape}")
    return out, m


# --- public functions -----------------------------------------------------------------------


def returns_to_go(rewards, mask=None, gamma=1.0):
    """Discounted returns-to-go G_t = sum_{l >= 0} gamma^l r~_{t+l} of per-token rewards.

    The sum runs over the response tokens of the row from t on (padding between
    response tokens is skipped, as in :func:`ppo_numpy.gae`). Equal to
    :func:`ppo_numpy.gae` with values 0 and lambda 1.

    Parameters
    ----------
    rewards : array (T,) or (B, T)
        Per-token rewards r~_t (e.g. :func:`ppo_numpy.kl_shaped_rewards`).
    mask : array of 0/1, optional
        1 for response tokens; the output is exactly 0 at padding.
    gamma : float in [0, 1]
        Discount factor. Default 1.0.

    Returns
    -------
    float64 array (exact Fractions for Fraction input), same shape.

    Examples
    --------
    The running example's rewards [0, 0, 1]: G = [1, 1, 1] with gamma 1, [0.81, 0.9, 1]
    with gamma 0.9:

    >>> [float(g) for g in returns_to_go([0, 0, 1])]
    [1.0, 1.0, 1.0]
    >>> [round(float(g), 12) for g in returns_to_go([0, 0, 1], gamma=0.9)]
    [0.81, 0.9, 1.0]
    """
    gamma = check_scalar(gamma, "gamma", low=0, high=1)
    (r,), m = prepare({"rewards": rewards}, mask)
    return _returns_to_go(r, m, scalar_for(gamma, r))


def grpo_advantages(scores, groups, *, scale="group", std_eps=1e-6, ddof=1, singleton="error",
                    dtype=np.float64, **renamed):
    """GRPO advantages: each score minus its group's mean, divided by a standard deviation.

        scale="group":  A_i = (s_i - mean_g(i)) / (std_g(i) + std_eps)
        scale="batch":  A_i = (s_i - mean_g(i)) / (std(s) + std_eps)
        scale="none":   A_i =  s_i - mean_g(i)                    (Dr. GRPO)

    std_g is the standard deviation of the group's scores with divisor n_g - ddof;
    std(s) that of all B scores around their batch mean (not of the centred
    scores). std_eps is added to the standard deviation, outside the square root, in
    all three frameworks.

    Parameters
    ----------
    scores : array (B,)
        One score per response (verl: ``token_level_rewards.sum(-1)``, the score
        itself unless ``algorithm.use_kl_in_reward``; TRL: the weighted sum of the
        reward functions; OpenRLHF: the reward).
    groups : array of int (B,)
        Prompt id of each response; rows with equal ids are one group, in any order
        (verl groups by ``uid``; TRL and OpenRLHF by blocks of ``num_generations`` /
        ``n_samples_per_prompt`` consecutive rows: pass ``np.arange(B) // n``).
    scale : {"group", "batch", "none"}
        What to divide by. Default ``"group"``.
    std_eps : float >= 0
        Added to the standard deviation. Default 1e-6 (verl). TRL: 1e-4; OpenRLHF
        ``group_norm``: 1e-9. (``eps=``, its old spelling, still works with a
        DeprecationWarning.)
    ddof : {1, 0}
        Divisor n - ddof of the variances. Default 1 (``torch.std``, all three).
    singleton : {"error", "zero", "raw"}
        A group with one response. ``"error"`` (default): ValueError. ``"zero"``: its
        advantage is 0 (its own mean is its baseline; TRL, and OpenRLHF ``dr_grpo``).
        ``"raw"``: its mean is taken as 0 and its std as 1, so A = s / (1 + std_eps),
        or s with ``scale="none"`` (verl). OpenRLHF ``group_norm`` and TRL before
        the string ``scale_rewards`` give NaN (``torch.std`` of one value).
    dtype : {numpy.float64, numpy.float32}
        Arithmetic precision. Default float64. float32: scores are rounded to
        float32 and every step is float32 (TRL's reward tensor, verl's
        ``token_level_rewards``); agreement with them is then to float32 rounding
        (the order of the sums differs), and the result is returned as float64.

    Returns
    -------
    float64 array (B,). ``scale="none"`` stays exact for Fraction input.

    Notes
    -----
    A group whose scores are all equal has std 0: every framework gives it
    advantage 0 (0 / std_eps). With ``std_eps=0`` that is 0 / 0 and raises here.

    Framework options: TRL ``GRPOConfig.scale_rewards`` = "group" (default) /
    "batch" / "none" (before PR #3935 a bool: True = "group", False = "none"),
    eps 1e-4, groups of ``num_generations`` consecutive rows (``GRPOTrainer.
    _generate_and_score_completions``); verl ``algorithm.adv_estimator=grpo``,
    ``algorithm.norm_adv_by_std_in_grpo`` True = "group", False = "none", eps 1e-6
    (``compute_grpo_outcome_advantage``); OpenRLHF ``--advantage_estimator
    group_norm`` = "group" with eps 1e-9, ``dr_grpo`` = "none"
    (``compute_advantages_and_returns``).

    Examples
    --------
    scores [1, 0, 0, 1], groups [0, 0, 1, 1]: each group has mean 1/2 and (ddof 1)
    std sqrt((1/4 + 1/4) / 1) = 0.7071...; with std_eps 0, A = +-0.5 / 0.7071 = +-0.7071:

    >>> [round(float(a), 6) for a in grpo_advantages([1, 0, 0, 1], [0, 0, 1, 1], std_eps=0)]
    [0.707107, -0.707107, -0.707107, 0.707107]
    >>> [float(a) for a in grpo_advantages([1, 0, 0, 1], [0, 0, 1, 1], scale="none")]
    [0.5, -0.5, -0.5, 0.5]

    Groups may be interleaved; a group of equal scores gets 0:

    >>> [float(a) for a in grpo_advantages([1, 3, 0, 3], [0, 1, 0, 1], scale="none")]
    [0.5, 0.0, -0.5, 0.0]
    """
    std_eps = renamed_keyword("grpo_advantages", renamed, "eps", "std_eps", std_eps, 1e-6)
    s, std_eps = check_grpo_arguments(scores, scale, std_eps, ddof, singleton, dtype)
    grp = _groups(groups, s.shape[0])
    centred, std = grpo_centred(s, grp, scale == "group", ddof, singleton)
    return grpo_scaled(s, centred, std, scale, std_eps, ddof, groups)


def check_grpo_arguments(scores, scale, std_eps, ddof, singleton, dtype):
    """The arguments of :func:`grpo_advantages` but ``groups`` checked: ``(s, std_eps)``, the
    scores in the arithmetic of ``dtype`` (exact Fractions kept for ``scale="none"``)."""
    check_choice(scale, "scale", SCALES)
    check_choice(singleton, "singleton", SINGLETONS)
    std_eps = check_scalar(std_eps, "std_eps", low=0, allow_exact=False)
    if isinstance(ddof, bool) or ddof not in (0, 1):
        raise ValueError(f"ddof: must be 0 or 1, got {ddof!r}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype: expected numpy.float64 or numpy.float32, got {dtype!r}")
    s = _check_scores(scores, "scores", exact=None if scale == "none" else False)
    if s.dtype != object:
        s = s.astype(dt, copy=False)
    return s, std_eps


def grpo_centred(s, grp, group_std, ddof, singleton):
    """``(s_i - mean_g(i), std_g(i) or None)`` of :func:`grpo_advantages` on checked scores
    ``s`` and :class:`Groups` ``grp`` (``group_std``: the std of each group too)."""
    single = _singletons(grp, singleton, "Pass singleton='zero' (TRL) or 'raw' (verl).")
    zero = s.dtype.type(0) if s.dtype != object else Fraction(0)
    n = grp.counts if s.dtype == object else grp.counts.astype(s.dtype)
    # mean_g = (sum_{j in g} s_j) / n_g
    mean = (_group_sums(s, grp.inverse, len(grp.counts)) / n)[grp.inverse]
    if singleton == "raw":
        # verl: a group of one has mean 0 (and std 1)
        mean = np.where(single, zero, mean)
    # s_i - mean_g(i), exactly 0 in a group of equal scores
    centred = np.where(_flat_groups(s, grp.inverse, len(grp.counts)) & ~single, zero, s - mean)
    if singleton == "zero":
        centred = np.where(single, zero, centred)
    if not group_std:
        return centred, None
    # std_g = sqrt(sum_{j in g} (s_j - mean_g)^2 / (n_g - ddof))
    sq = _group_sums(centred * centred, grp.inverse, len(grp.counts))
    with np.errstate(divide="ignore", invalid="ignore"):
        std = np.sqrt(sq / (n - ddof))[grp.inverse]
    # a group of one: std undefined with ddof 1; "raw" takes it as 1 ("zero" has A = 0)
    return centred, np.where(single, s.dtype.type(1), std)


def grpo_scaled(s, centred, std, scale, std_eps, ddof, groups):
    """The advantages of :func:`grpo_advantages` from :func:`grpo_centred`'s results: the
    centred scores divided by ``std + std_eps`` (the batch's std for ``scale="batch"``, nothing
    for ``"none"``); ``groups`` as given, to name a prompt id in an error."""
    if scale == "none":
        return centred if s.dtype == object else centred.astype(np.float64)
    if scale == "group":
        where = "the group of prompt id {} has equal scores"
    else:
        B = s.shape[0]
        if B - ddof < 1:
            raise ValueError(f"scores: scale='batch' needs at least {ddof + 1} scores for a "
                             f"standard deviation with ddof={ddof}, got {B}")
        # std(s) around the batch mean
        dev = s - s.sum(dtype=s.dtype) / s.dtype.type(B)
        std = np.full(B, np.sqrt((dev * dev).sum(dtype=s.dtype) / s.dtype.type(B - ddof)))
        where = "every score of the batch is the same (row 0: prompt id {})"
    std_eps = s.dtype.type(std_eps)
    if std_eps == 0 and np.count_nonzero(std == 0):
        i = int(np.argmax(std == 0))
        raise ValueError(f"scores: {where.format(np.asarray(groups)[i])} (std 0) and std_eps is "
                         "0, so the advantage is 0 / 0; pass std_eps > 0")
    # (s_i - mean_g(i)) / (std + std_eps)
    return (centred / (std + std_eps)).astype(np.float64)


def rloo_advantages(scores, groups, *, singleton="error"):
    """RLOO advantages: each score minus the mean of the *other* responses of its group.

        A_i = s_i - (sum_{j in g(i), j != i} s_j) / (n_g(i) - 1)
            = n / (n - 1) * (s_i - mean_g(i))

    Parameters
    ----------
    scores : array (B,)
        One score per response. TRL's ``RLOOTrainer`` (legacy) leaves one out of
        ``score - kl_coef * sum_t KL_t`` (the KL enters the score first); verl's
        ``rloo`` of ``token_level_rewards.sum(-1)``; OpenRLHF's ``rloo`` of the
        reward, its KL then added per token.
    groups : array of int (B,)
        Prompt id of each response, any order (verl by ``uid``; OpenRLHF blocks of
        ``n_samples_per_prompt`` rows; TRL legacy stacks ``rloo_k`` copies of the
        prompt batch, so row j * P + p answers prompt p: pass ``np.arange(B) % P``).
    singleton : {"error", "zero", "raw"}
        A group with one response has no other response. ``"error"`` (default):
        ValueError. ``"zero"``: advantage 0. ``"raw"``: the score itself (verl:
        mean 0, no leave-one-out rescaling). OpenRLHF and TRL divide by
        n - 1 = 0 and give NaN.

    Returns
    -------
    float64 array (B,); exact Fractions for Fraction input.

    Notes
    -----
    Framework options: verl ``algorithm.adv_estimator=rloo``
    (``compute_rloo_outcome_advantage``); OpenRLHF ``--advantage_estimator rloo``
    (``compute_advantages_and_returns``); TRL ``RLOOTrainer``, ``RLOOConfig.rloo_k``,
    optional ``normalize_advantage`` (whitening with std + 1e-8 afterwards).

    Examples
    --------
    scores [1, 0, 0, 1], groups [0, 0, 1, 1]: the other response of each pair is the
    baseline, A = [1 - 0, 0 - 1, 0 - 1, 1 - 0]:

    >>> [float(a) for a in rloo_advantages([1, 0, 0, 1], [0, 0, 1, 1])]
    [1.0, -1.0, -1.0, 1.0]

    A group of three, [3, 0, 0]: baselines (0 + 0) / 2, (3 + 0) / 2, (3 + 0) / 2:

    >>> [float(a) for a in rloo_advantages([3, 0, 0], [7, 7, 7])]
    [3.0, -1.5, -1.5]
    """
    check_choice(singleton, "singleton", SINGLETONS)
    s = _check_scores(scores, "scores")
    return rloo_kernel(s, _groups(groups, s.shape[0]), singleton)


def rloo_kernel(s, grp, singleton):
    """:func:`rloo_advantages` of checked scores ``s`` and :class:`Groups` ``grp``."""
    single = _singletons(grp, singleton,
                         "Pass singleton='zero' or 'raw' (verl: the score itself).")
    sums = _group_sums(s, grp.inverse, len(grp.counts))[grp.inverse]
    # n_g - 1 others; a group of one gets 1 here and is replaced below
    others = np.maximum(grp.counts - 1, 1)[grp.inverse]
    if s.dtype == object:
        others = np.array([Fraction(int(k)) for k in others], dtype=object)
    # A_i = s_i - (sum_g - s_i) / (n_g - 1), exactly 0 in a group of equal scores
    A = np.where(_flat_groups(s, grp.inverse, len(grp.counts)), s * 0, s - (sums - s) / others)
    if np.any(single):
        A = np.where(single, s if singleton == "raw" else s * 0, A)
    return A


def reinforce_plus_plus_advantages(rewards, mask, gamma=1.0, *, ddof=1, std_eps=1e-8,
                                   eps_mode="add", **renamed):
    """REINFORCE++ advantages: returns-to-go of the token rewards, whitened over the batch.

        G_t = sum_{l >= 0} gamma^l r~_{t+l},    A_t = (G_t - mean(G)) / sqrt(var(G) + std_eps)

    mean and var over every response token of the batch (:func:`ppo_numpy.whiten`).
    No baseline besides the whitening's mean; the KL penalty is inside r~_t.

    Parameters
    ----------
    rewards : array (T,) or (B, T)
        Per-token KL-shaped rewards r~_t (score at the last token).
    mask : array of 0/1, or None
        1 for response tokens (None: all). The output is exactly 0 at padding.
    gamma : float in [0, 1]
        Discount factor. Default 1.0 (verl ``algorithm.gamma``, OpenRLHF ``--gamma``).
    ddof : {1, 0}
        Variance divisor n - ddof. Default 1 (verl ``masked_whiten``); OpenRLHF 0.
    std_eps : float >= 0
        Default 1e-8 (both). (``eps=``, its old spelling, still works with a
        DeprecationWarning.)
    eps_mode : {"add", "floor"}
        ``"add"`` (default, verl): divide by sqrt(var + std_eps). ``"floor"`` (OpenRLHF):
        by sqrt(max(var, std_eps)).

    Returns
    -------
    float64 array, same shape; exactly 0 at padding.

    Notes
    -----
    verl ``algorithm.adv_estimator=reinforce_plus_plus``
    (``compute_reinforce_plus_plus_outcome_advantage``): ``ddof=1, std_eps=1e-8,
    eps_mode="add"``. OpenRLHF ``--advantage_estimator reinforce``
    (``get_cumulative_returns`` then the normalisation in
    ``compute_advantages_and_returns``): ``ddof=0, std_eps=1e-8, eps_mode="floor"``;
    ``--no_advantage_std_norm`` only subtracts the mean. The three agree for masks
    without holes. At a hole verl restarts the sum (tokens before it do not see
    rewards after it) and OpenRLHF counts it as a step of reward 0 (an extra factor
    gamma); here holes are skipped (``docs/conventions.md`` section 12).

    Examples
    --------
    Two responses, rewards [0, 1] and [0, 0, -1], gamma 1: G = [1, 1 | -1, -1, -1],
    mean -1/5, deviations [6/5, 6/5, -4/5, -4/5, -4/5], squared sum 24/5; with ddof 0
    var = 24/25, std = 0.9798 (std_eps 0 for round numbers):

    >>> A = reinforce_plus_plus_advantages([[0, 1, 0], [0, 0, -1]], [[1, 1, 0], [1, 1, 1]],
    ...                                    ddof=0, std_eps=0)
    >>> [[round(float(a), 6) for a in row] for row in A]
    [[1.224745, 1.224745, 0.0], [-0.816497, -0.816497, -0.816497]]
    """
    std_eps = renamed_keyword("reinforce_plus_plus_advantages", renamed, "eps", "std_eps",
                              std_eps, 1e-8)
    # A_t = whiten(G_t) over the response tokens
    return whiten(returns_to_go(rewards, mask, gamma), mask, ddof=ddof, std_eps=std_eps,
                  eps_mode=eps_mode)


def reinforce_plus_plus_baseline_advantages(scores, groups, mask, *, token_rewards=None,
                                            singleton="error", ddof=1, std_eps=1e-8,
                                            eps_mode="add", score_clip=None, **renamed):
    """REINFORCE++-baseline: score minus group mean, on every response token, whitened.

        c_i = s_i - mean_g(i),    A_t = whiten(c_i + G_t(token_rewards))

    G_t is the undiscounted return-to-go of ``token_rewards`` (0 when None);
    whitening over every response token of the batch (:func:`ppo_numpy.whiten`).

    Parameters
    ----------
    scores : array (B,)
        One score per response.
    groups : array of int (B,)
        Prompt id of each response, any order.
    mask : array of 0/1 (B, T)
        1 for response tokens. A row without response tokens still counts in its
        group's mean (as in verl) and is 0 everywhere.
    token_rewards : array (B, T), optional
        Per-token rewards *without* the score, e.g. -beta KL_t; their returns-to-go
        are added to c_i (OpenRLHF). None (default): c_i alone (verl).
    singleton : {"error", "zero", "raw"}
        A group of one: ``"error"`` (default), ``"zero"`` (c = 0: its own mean;
        OpenRLHF) or ``"raw"`` (c = s: mean 0; verl).
    ddof, std_eps, eps_mode :
        The whitening, as in :func:`reinforce_plus_plus_advantages`. Default verl's
        ``ddof=1, std_eps=1e-8, eps_mode="add"``; OpenRLHF ``ddof=0, eps_mode="floor"``.
    score_clip : float > 0 or (low, high), optional
        Clip c_i to ``[-score_clip, score_clip]`` or ``[low, high]`` (OpenRLHF's
        ``--reward_clip_range``, default (-10, 10)). None (default): no clip (verl).

    Returns
    -------
    float64 array (B, T); exactly 0 at padding.

    Notes
    -----
    verl ``algorithm.adv_estimator=reinforce_plus_plus_baseline``
    (``compute_reinforce_plus_plus_baseline_outcome_advantage``): the score is
    ``token_level_rewards.sum(-1)``, so with ``algorithm.use_kl_in_reward`` the
    *whole-response* KL penalty is in s_i and the same c_i is on every token: pass
    ``scores = rewards.sum(-1)`` and no ``token_rewards``. OpenRLHF
    ``--advantage_estimator reinforce_baseline`` (``compute_advantages_and_returns``):
    c_i is clipped to ``--reward_clip_range`` (-10, 10) and put at the last token,
    the per-token KL added, returns-to-go taken with gamma 1 and whitened:
    ``token_rewards=-beta * KL, score_clip=(-10, 10), ddof=0, eps_mode="floor"``.

    Examples
    --------
    scores [1, 0, 0, 1], groups [0, 0, 1, 1], two tokens each: c = [1/2, -1/2, -1/2, 1/2]
    on 8 tokens, mean 0, every squared deviation 1/4; ddof 1: var = 2/7, A = c / 0.5345:

    >>> A = reinforce_plus_plus_baseline_advantages([1, 0, 0, 1], [0, 0, 1, 1],
    ...                                             np.ones((4, 2)), std_eps=0)
    >>> [round(float(a), 6) for a in A[:, 0]]
    [0.935414, -0.935414, -0.935414, 0.935414]
    """
    std_eps = renamed_keyword("reinforce_plus_plus_baseline_advantages", renamed, "eps",
                              "std_eps", std_eps, 1e-8)
    check_choice(singleton, "singleton", SINGLETONS)
    s = _check_scores(scores, "scores", exact=False)
    grp = _groups(groups, s.shape[0])
    if mask is None:
        raise ValueError("mask: required, (B, T) with 1 for the response tokens the advantage "
                         "covers")
    if token_rewards is None:
        # no token rewards: G = 0; the zeros have the mask's shape (checked as "mask")
        (G,), m = _token_inputs({"mask": as_array(mask, "mask") * 0}, mask, ("scores", s))
    else:
        (r,), m = _token_inputs({"token_rewards": token_rewards}, mask, ("scores", s),
                                exact=False)
        G = _returns_to_go(r, m, 1.0)
    single = _singletons(grp, singleton, "Pass singleton='zero' (OpenRLHF) or 'raw' (verl).")
    mean = (_group_sums(s, grp.inverse, len(grp.counts)) / grp.counts)[grp.inverse]
    # c_i = s_i - mean_g(i); a group of one: 0 ("zero") or the score ("raw", verl)
    c = np.where(_flat_groups(s, grp.inverse, len(grp.counts)), 0.0, s - mean)
    c = np.where(single, 0.0 if singleton == "zero" else s, c)
    if score_clip is not None:
        c = np.clip(c, *check_bounds(score_clip, "score_clip", allow_exact=False))
    # (whiten zeroes the padding of c_i + G_t)
    return whiten(c[:, None] + G, m, ddof=ddof, std_eps=std_eps, eps_mode=eps_mode)


def remax_advantages(rewards, baseline_scores, mask, *, gamma=1.0):
    """ReMax advantages: returns-to-go of the token rewards minus a greedy response's score.

        A_t = G_t - b_i,    G_t = sum_{l >= 0} gamma^l r~_{t+l}

    b_i is the score of the greedy (argmax-decoded) response to the prompt of
    response i, on every response token. No whitening.

    Parameters
    ----------
    rewards : array (B, T)
        Per-token KL-shaped rewards r~_t of the sampled responses.
    baseline_scores : array (B,)
        b_i, the greedy response's score (repeated for each sample of a prompt).
    mask : array of 0/1 (B, T), or None
        1 for response tokens; the output is exactly 0 at padding.
    gamma : float in [0, 1]
        Discount. Default 1.0: verl's ``remax`` does not discount.

    Returns
    -------
    float64 array (B, T) (exact Fractions for Fraction input); 0 at padding.

    Notes
    -----
    verl ``algorithm.adv_estimator=remax`` (``compute_remax_outcome_advantage``;
    the baseline is the reward function's score of a ``do_sample=False``
    generation, summed over its tokens, in ``RayPPOTrainer.fit``): the KL
    penalty (``use_kl_in_reward``) is in r~_t, not in b_i. verl's output at
    padding is the return-to-go there (nonzero before a left-padded response);
    here it is 0.

    Examples
    --------
    rewards [[0, 1], [0, 0]], greedy scores [0.5, 0.5]: G = [[1, 1], [0, 0]],
    A = [[0.5, 0.5], [-0.5, -0.5]]:

    >>> A = remax_advantages([[0, 1], [0, 0]], [0.5, 0.5], None)
    >>> [[float(a) for a in row] for row in A]
    [[0.5, 0.5], [-0.5, -0.5]]
    """
    gamma = check_scalar(gamma, "gamma", low=0, high=1)
    exact = is_exact(rewards) or is_exact(baseline_scores)
    b = _check_scores(baseline_scores, "baseline_scores", exact=exact)
    (r,), m = _token_inputs({"rewards": rewards}, mask, ("baseline_scores", b), exact=exact)
    G = _returns_to_go(r, m, scalar_for(gamma, r))
    # A_t = G_t - b_i on the response tokens
    return where_valid(m, G - b[:, None])


# --- verl 0.9.1's newer outcome estimators (issue 27) ---------------------------------------
# Source: volcengine/verl 0.9.1 verl/trainer/ppo/core_algos.py (compute_opo_outcome_advantage,
# compute_gpg_outcome_advantage, compute_grpo_passk_outcome_advantage,
# compute_gdpo_outcome_advantage) and verl/trainer/ppo/ray_trainer.py (compute_advantage).


def _check_lengths(lengths, B):
    """Response lengths n_i (B,): integers >= 0, as int64 (never the caller's array)."""
    n = rectangular(lengths, "lengths")
    if n.dtype == bool or n.dtype.kind not in "iuf" or (
            n.dtype.kind == "f" and not np.all(np.isfinite(n) & (n == np.round(n)))):
        raise TypeError(f"lengths: expected integer token counts, got {n.dtype} values "
                        f"{n.tolist()[:4]}")
    if n.shape != (B,):
        raise ValueError(f"lengths: expected shape ({B},), one token count per score, got "
                         f"shape {n.shape}")
    if np.any(n < 0):
        i = int(np.argmax(n < 0))
        raise ValueError(f"lengths: a token count is >= 0, got {n[i]} at row {i}")
    return n.astype(np.int64)


def opo_advantages(scores, groups, lengths, *, singleton="error", empty="error"):
    """OPO advantages: each score minus its group's length-weighted mean score.

        b_g = (sum_{j in g} n_j s_j) / (sum_{j in g} n_j),    A_i = s_i - b_g(i)

    n_j is the number of response tokens of response j: a long response weighs more in
    the baseline (the optimal baseline of On-Policy RL with Optimal reward baseline, OPO,
    arXiv 2505.23585, for a sequence-level reward and a token-sum loss).

    Parameters
    ----------
    scores : array (B,)
        One score per response (verl: ``token_level_rewards.sum(-1)``).
    groups : array of int (B,)
        Prompt id of each response, any order (verl groups by ``uid``).
    lengths : array of int (B,)
        n_i >= 0, the response lengths (verl: ``response_mask.sum(-1)``).
    singleton : {"error", "zero", "raw"}
        A group of one: ``"error"`` (default), ``"zero"`` (its own baseline: A = 0) or
        ``"raw"`` (baseline 0, A = s: verl).
    empty : {"error", "nan"}
        A group of two or more whose lengths sum to 0 (every token rejected) has no
        baseline, 0 / 0: ``"error"`` (default) raises a ValueError; ``"nan"`` gives its
        responses the advantage NaN (verl 0.9.1, which divides 0 by 0 in torch; no token of
        the group is in the mask, so no loss term reads it).

    Returns
    -------
    float64 array (B,); exact Fractions for Fraction input.

    Notes
    -----
    verl ``algorithm.adv_estimator=opo`` (``compute_opo_outcome_advantage``): the
    lengths are the response mask's row sums; a group of one gets baseline 0. With equal
    lengths OPO is Dr. GRPO (``grpo_advantages(scale="none")``).

    Examples
    --------
    One group, scores [1, 0], lengths [3, 1]: b = (3 * 1 + 1 * 0) / 4 = 3/4, so
    A = [1/4, -3/4] (Dr. GRPO would give [1/2, -1/2]):

    >>> [float(a) for a in opo_advantages([1, 0], [0, 0], [3, 1])]
    [0.25, -0.75]

    Group 0 without tokens (every one rejected), group 1 with lengths [2, 1]: b_1 =
    (2 * 2 + 1 * 1) / 3 = 5/3, and group 0's baseline is 0 / 0:

    >>> [round(float(a), 6) for a in opo_advantages([1, 0, 2, 1], [0, 0, 1, 1],
    ...                                             [0, 0, 2, 1], empty="nan")]
    [nan, nan, 0.333333, -0.666667]
    """
    check_choice(singleton, "singleton", SINGLETONS)
    check_choice(empty, "empty", ("error", "nan"), "rule for a group without tokens")
    s = _check_scores(scores, "scores")
    grp = _groups(groups, s.shape[0])
    n = _check_lengths(lengths, s.shape[0])
    G = len(grp.counts)
    single = _singletons(grp, singleton, "Pass singleton='zero' or 'raw' (verl: baseline 0).")
    n_s = n.astype(object) if s.dtype == object else n.astype(np.float64)
    total = _group_sums(n_s, grp.inverse, G)
    no_tokens = (total == 0) & (grp.counts > 1)
    if np.any(no_tokens) and empty == "error":
        g = int(np.argmax(no_tokens))
        raise ValueError(f"lengths: the responses of prompt id {grp.ids[g]} have 0 tokens in "
                         "all, so the length-weighted baseline is 0 / 0 (empty='nan' gives "
                         "them NaN, as verl does)")
    # b_g = sum_j n_j s_j / sum_j n_j   (a group of one with 0 tokens: replaced below)
    weighted = _group_sums(n_s * s, grp.inverse, G)
    safe = np.where(total == 0, 1, total) if s.dtype == object else np.maximum(total, 1)
    baseline = (weighted / safe)[grp.inverse]
    # A_i = s_i - b_g(i), exactly 0 in a group of equal scores
    A = np.where(_flat_groups(s, grp.inverse, G), s * 0, s - baseline)
    if np.any(single):
        A = np.where(single, s if singleton == "raw" else s * 0, A)
    if np.any(no_tokens):
        # b_g = 0 / 0 for a group without tokens (empty="nan")
        A = np.where(no_tokens[grp.inverse], np.nan, A)
    return A


def gpg_advantages(scores, groups, *, f_norm=1.0, singleton="error"):
    """GPG advantages: the group-centred score, scaled up by the share of zero scores.

        alpha = B / max(#{j : s_j != 0}, 1),    A_i = alpha (s_i - mean_g(i)) / f_norm

    B is the batch size and the count runs over the whole batch (Group Policy Gradient,
    arXiv 2504.02546: the scale that undoes the averaging over responses that carry no
    reward). No division by a standard deviation.

    Parameters
    ----------
    scores : array (B,)
        One score per response (verl: ``token_level_rewards.sum(-1)``).
    groups : array of int (B,)
        Prompt id of each response, any order.
    f_norm : float > 0
        A constant divisor. Default 1.0 (verl's; ``compute_advantage`` passes no other).
    singleton : {"error", "zero", "raw"}
        A group of one: ``"error"`` (default), ``"zero"`` (A = 0) or ``"raw"`` (mean 0,
        A = alpha s / f_norm: verl).

    Returns
    -------
    float64 array (B,); exact Fractions for Fraction input.

    Notes
    -----
    verl ``algorithm.adv_estimator=gpg`` (``compute_gpg_outcome_advantage``): alpha is
    recomputed from the batch (the ``alpha`` argument is overwritten), the count is of
    the nonzero *scores* (``torch.count_nonzero``, not of responses with a nonzero
    advantage), ``f_norm`` 1.0.

    Examples
    --------
    Scores [1, 0, 0, 0] in two groups: one nonzero score of four, alpha = 4; group
    means 1/2 and 0, so A = 4 * [1/2, -1/2, 0, 0]:

    >>> [float(a) for a in gpg_advantages([1, 0, 0, 0], [0, 0, 1, 1])]
    [2.0, -2.0, 0.0, 0.0]
    """
    check_choice(singleton, "singleton", SINGLETONS)
    f_norm = check_scalar(f_norm, "f_norm", low=0, low_open=True)
    s = _check_scores(scores, "scores")
    grp = _groups(groups, s.shape[0])
    G = len(grp.counts)
    single = _singletons(grp, singleton, "Pass singleton='zero' or 'raw' (verl: mean 0).")
    # alpha = B / max(number of nonzero scores, 1)
    B, nonzero = s.shape[0], max(int(np.count_nonzero(s != 0)), 1)
    alpha = Fraction(B, nonzero) if s.dtype == object else B / nonzero
    counts = grp.counts.astype(object) if s.dtype == object else grp.counts
    mean = (_group_sums(s, grp.inverse, G) / counts)[grp.inverse]
    # s_i - mean_g(i), exactly 0 in a group of equal scores; a group of one: mean 0 ("raw")
    centred = np.where(_flat_groups(s, grp.inverse, G), s * 0, s - mean)
    if np.any(single):
        centred = np.where(single, s if singleton == "raw" else s * 0, centred)
    f = scalar_for(f_norm, s) if s.dtype == object else f_norm
    # A_i = alpha (s_i - mean_g(i)) / f_norm
    return alpha * centred / f


def grpo_passk_advantages(scores, groups, *, scale="group", std_eps=1e-6, ddof=1, **renamed):
    """Pass@k advantages: the best response of each group gets its lead over the second best.

        A_i = (s_(1) - s_(2)) / (std_g + std_eps)   for i the best response of its group
        A_i = 0                                 for the others

    s_(1) >= s_(2) are the two highest scores of the group, std_g its standard deviation
    (divisor n_g - ddof); ``scale="none"`` drops the division. Only the response that
    decides the group's pass@k gets a signal (Pass@k training, arXiv 2503.19595). When
    the best score is tied every advantage of the group is 0, whichever row is "best".

    Parameters
    ----------
    scores : array (B,)
        One score per response (verl: ``token_level_rewards.sum(-1)``).
    groups : array of int (B,)
        Prompt id of each response, any order; every group needs >= 2 responses
        (ValueError otherwise, as in verl).
    scale : {"group", "none"}
        Divide by std_g + std_eps (default; verl ``norm_adv_by_std_in_grpo=True``) or not.
    std_eps : float >= 0
        Added to the std. Default 1e-6 (verl). (``eps=``, its old spelling, still works
        with a DeprecationWarning.)
    ddof : {1, 0}
        Divisor n - ddof of the variance. Default 1 (``torch.std``).

    Returns
    -------
    float64 array (B,); exact Fractions for Fraction input with ``scale="none"``.

    Notes
    -----
    verl ``algorithm.adv_estimator=grpo_passk`` (``compute_grpo_passk_outcome_advantage``,
    ``torch.topk(rewards, 2)``): reads ``norm_adv_by_std_in_grpo`` from the algorithm
    config; a group of one raises.

    Examples
    --------
    One group [1, 0.5, 0]: the best leads by 1/2; std (ddof 1) = 1/2, so with std_eps 0
    its advantage is 1 and the others' 0:

    >>> [float(a) for a in grpo_passk_advantages([1, 0.5, 0], [0, 0, 0], std_eps=0)]
    [1.0, 0.0, 0.0]
    >>> [float(a) for a in grpo_passk_advantages([0, 2, 1, 1], [0, 0, 1, 1], scale="none")]
    [0.0, 2.0, 0.0, 0.0]
    """
    std_eps = renamed_keyword("grpo_passk_advantages", renamed, "eps", "std_eps", std_eps, 1e-6)
    check_choice(scale, "scale", ("group", "none"))
    std_eps = check_scalar(std_eps, "std_eps", low=0, allow_exact=False)
    if isinstance(ddof, bool) or ddof not in (0, 1):
        raise ValueError(f"ddof: must be 0 or 1, got {ddof!r}")
    s = _check_scores(scores, "scores", exact=None if scale == "none" else False)
    grp = _groups(groups, s.shape[0])
    _singletons(grp, "error", "Pass@k needs at least 2 samples per group (verl raises too).")
    A = s * 0
    for g in range(len(grp.counts)):
        rows = np.flatnonzero(grp.inverse == g)
        vals = s[rows]
        order = sorted(range(len(rows)), key=lambda k: vals[k], reverse=True)  # stable
        best, second = vals[order[0]], vals[order[1]]
        lead = best - second
        if scale == "group" and lead != 0:
            # std_g = sqrt(sum_j (s_j - mean_g)^2 / (n_g - ddof))
            mean = vals.sum() / len(rows)
            std = float(np.sqrt(((vals - mean) ** 2).sum() / (len(rows) - ddof)))
            lead = lead / (std + std_eps)
        A[rows[order[0]]] = lead
    return A


def gdpo_advantages(components, groups, mask, *, weights=None, std_eps=1e-6, singleton="error",
                    whiten_eps=1e-8, dtype=np.float64, **renamed):
    """GDPO advantages: GRPO on each reward component apart, a weighted sum, whitened.

        A^k_i = (s^k_i - mean_g(i)(s^k)) / (std_g(i)(s^k) + std_eps)     per component k
        S_i   = sum_k w_k A^k_i,        A_t = whiten(S_i)  over every response token

    (Group reward-Decoupled normalisation Policy Optimisation, arXiv 2601.05242: a
    component with a large spread no longer drowns the others, as it does when the
    components are summed before one GRPO normalisation.) The whitening is
    :func:`ppo_numpy.whiten` with ddof 1 and ``whiten_eps`` inside the square root.

    Parameters
    ----------
    components : array (B, K)
        K >= 1 reward components of each response (verl: the entries
        ``algorithm.gdpo_reward_keys`` of the reward function's dict).
    groups : array of int (B,)
        Prompt id of each response, any order.
    mask : array of 0/1 (B, T)
        1 for response tokens; the output is exactly 0 at padding.
    weights : array (K,), optional
        w_k (verl ``algorithm.gdpo_reward_weights``); None: all 1.
    std_eps : float >= 0
        The per-component GRPO's std_eps, added to the std. Default 1e-6 (verl).
        (``eps=``, its old spelling, still works with a DeprecationWarning.)
    singleton : {"error", "zero", "raw"}
        A group of one, as in :func:`grpo_advantages` (verl: ``"raw"``).
    whiten_eps : float >= 0
        The whitening's std_eps. Default 1e-8 (verl ``masked_whiten``).
    dtype : {numpy.float64, numpy.float32}
        The precision of the per-component GRPO (verl: float32 components).

    Returns
    -------
    float64 array (B, T); 0 at padding.

    Notes
    -----
    verl ``algorithm.adv_estimator=gdpo`` (``compute_gdpo_outcome_advantage``): the
    per-component GRPO always divides by the std (``compute_advantage`` does not pass
    ``norm_adv_by_std_in_grpo`` to it); the components come from the reward function's
    dict, so the KL penalty of ``use_kl_in_reward`` (in ``token_level_rewards``) does not
    enter. With one component, GDPO is GRPO whitened over the tokens.

    Examples
    --------
    Two responses to one prompt, one token each, components [[1, 0], [0, 4]]: each
    component gives A = [+0.7071, -0.7071] or the reverse (std_eps 0), the sum is [0, 0]:
    the two rewards cancel, whatever their scale (GRPO on the summed scores [1, 4] would
    favour the second):

    >>> A = gdpo_advantages([[1, 0], [0, 4]], [0, 0], [[1], [1]], std_eps=0)
    >>> [float(a) for a in A[:, 0]]
    [0.0, 0.0]

    One component: GRPO gives [+0.7071, -0.7071], whose two tokens have mean 0 and
    (ddof 1) variance 0.5 + 0.5 = 1, so the whitening leaves them:

    >>> A = gdpo_advantages([[1], [0]], [0, 0], [[1], [1]], std_eps=0, whiten_eps=0)
    >>> [round(float(a), 6) for a in A[:, 0]]
    [0.707107, -0.707107]
    """
    std_eps = renamed_keyword("gdpo_advantages", renamed, "eps", "std_eps", std_eps, 1e-6)
    check_choice(singleton, "singleton", SINGLETONS)
    c = as_array(components, "components", exact=False)
    if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0:
        raise ValueError(f"components: expected shape (B, K) with B, K >= 1 (K reward "
                         f"components per response), got shape {c.shape}")
    K = c.shape[1]
    if weights is None:
        w = np.ones(K)
    else:
        w = as_array(weights, "weights", exact=False)
        if w.shape != (K,):
            raise ValueError(f"weights: expected shape ({K},), one weight per component, "
                             f"got shape {w.shape}")
        check_finite(w, "weights", np.ones(K, dtype=bool))
    std_eps = check_scalar(std_eps, "std_eps", low=0, allow_exact=False)
    whiten_eps = check_scalar(whiten_eps, "whiten_eps", low=0, allow_exact=False)
    if mask is None:
        raise ValueError("mask: required, (B, T) with 1 for the response tokens")
    # S_i = sum_k w_k GRPO(s^k)_i
    S = np.zeros(c.shape[0])
    for k in range(K):
        A_k = grpo_advantages(c[:, k], groups, std_eps=std_eps, singleton=singleton,
                              dtype=dtype)
        S = S + w[k] * A_k
    (G,), m = _token_inputs({"mask": as_array(mask, "mask") * 0}, mask, ("components", S))
    # A_t = whiten(S_i) over the response tokens, ddof 1 (0 at padding)
    return whiten(G + S[:, None], m, ddof=1, std_eps=whiten_eps)
