"""What every preset shares: the :class:`Preset` type, reading a case into a checked
:class:`~ppo_numpy.batch.Rollout`, checking the parameters once, and the small
compositions of core kernels that several pipelines use.

Inside a pipeline nothing is checked again: the case was checked when it was read
and the parameters when the preset was called; each function here zeroes its
inputs outside the mask it is given (a framework may read a position past the
response, e.g. TRL's slot after the last token) and calls the core kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from numbers import Real
from types import SimpleNamespace

import numpy as np

from ..._checks import as_array, as_mask, check_bounds, check_choice, check_scalar, where_valid
from ...batch import Rollout
from ...family.advantages import _group_sums, grpo_advantages
from ...mismatch.correction import (
    CRITERIA,
    rollout_divergence_gate,
    rollout_importance_weights,
    rollout_rejection_mask,
)
from ...policy_loss.kernel import policy_loss_kernel
from ...policy_loss.options import PolicyLossOptions
from ...ppo.aggregation import aggregate_kernel, aggregation_weights
from ...ppo.gae import gae_kernel
from ...ppo.kl import kl_estimate_grad_kernel, kl_estimate_kernel, kl_shaped_rewards_kernel
from ...ppo.value_loss import (
    check_value_clip,
    check_value_clip_form,
    clipped_wins,
    value_loss_grad_kernel,
    value_loss_kernel,
)
from ...ppo.whitening import masked_mean_kernel, whiten_kernel

INPUT_NAMES = ("logp", "logp_old", "logp_ref", "values", "old_values", "scores", "mask")
#: the inputs of the critic-free presets: no values; prompt ids and (ReMax) greedy scores
GROUP_INPUT_NAMES = ("logp", "logp_old", "logp_ref", "scores", "groups", "baseline_scores",
                     "mask")
#: the optional input of every preset: the inference engine's log-probs (the rollout correction)
ROLLOUT_INPUT = "logp_rollout"
#: the inputs with one value per response, shape (B,); the others are (B, T)
PER_RESPONSE_NAMES = ("scores", "groups", "baseline_scores")
#: inputs a case may carry, read when present: K reward components per response (B, K)
#: (verl's gdpo)
OPTIONAL_INPUT_NAMES = ("reward_components",)

FLOAT32_ROUNDING = 2.0**-24
"""u_32: the relative error of one rounding to float32."""

FLOAT64_RTOL, FLOAT64_ATOL = 1e-9, 1e-12
"""The oracle's own float64 tolerance (``ppo_numpy.oracle.compare.TOLERANCES``)."""


def float32_roundings(k: int) -> dict:
    """A float64 tolerance for a framework that rounds some quantities to float32 ``k`` times.

    One rounding to float32 of a factor or a ratio gives a relative error of at most
    u_32 = 2^-24 (~6e-8); ``k`` roundings in a product or a sum of non-negative terms
    at most ~k u_32 (to first order). That is added to the float64 rtol of the oracle's
    table; atol and the other dtypes keep the table's values (their rtol, 1e-4 and
    5e-2, is larger).
    """
    return {"float64": (FLOAT64_RTOL + k * FLOAT32_ROUNDING, FLOAT64_ATOL)}


@dataclass(frozen=True)
class Preset:
    """One framework's convention: defaults, sources, and the pipeline that applies them.

    Attributes
    ----------
    name : str
        ``"seed"``, ``"trl"``, ``"trl-0.11"``, ``"verl"``, ``"openrlhf"``,
        ``"deepspeed-chat"`` or ``"lm-human-preferences"``.
    description : str
        One sentence: which trainer, which version.
    defaults : dict
        The framework's default hyperparameters, under ppo_numpy's names
        (``gamma``, ``lam``, ``beta``, ``epsilon``, ``value_clip``, ...).
        Each may be overridden per call.
    sources : tuple of str
        ``"owner/repo: path (function)"`` for every file the pipeline follows.
    pipeline : callable
        ``pipeline(rollout, params) -> dict`` on a checked case and checked
        parameters; call the preset instead.
    conventions : dict
        The framework's value of each convention switch that is not a
        hyperparameter (``score_position``, ``whiten_ddof``, ``value_clip_form``,
        ...): overridable like ``defaults`` and passed to the pipeline with them,
        kept apart so that golden manifests written before a switch existed still
        list the same ``defaults``. :mod:`ppo_numpy.oracle.switches` says what
        each one means and which alternatives the diagnosis tries.
    tolerances : dict
        ``{dtype: (rtol, atol)}`` where the framework's own arithmetic implies a
        wider tolerance than :data:`ppo_numpy.oracle.compare.TOLERANCES` (see
        ``float32_roundings``); ``compare`` uses it against this preset.
    tolerance_note : str
        Why, in one sentence with the framework's source.
    input_names : tuple of str
        The inputs a case must have: :data:`INPUT_NAMES` (PPO with a value head) or
        :data:`GROUP_INPUT_NAMES` (the critic-free presets).
    """

    name: str
    description: str
    defaults: dict
    sources: tuple
    pipeline: Callable = field(repr=False, compare=False)
    conventions: dict = field(default_factory=dict)
    tolerances: dict = field(default_factory=dict)
    tolerance_note: str = ""
    input_names: tuple = INPUT_NAMES
    #: {output: a sentence the comparison adds to that output's failure line} (an output
    #: that is an exception to a rule of the comparison, e.g. one that reads the padding)
    output_notes: dict = field(default_factory=dict)

    @property
    def parameters(self) -> dict:
        """``defaults`` and ``conventions`` together: every parameter the call accepts."""
        return {**self.defaults, **self.conventions}

    def __call__(self, case: dict, **overrides) -> dict:
        """Run the pipeline on ``case`` with ``defaults`` updated by ``overrides``.

        Returns a dict with ``rewards``, ``advantages``, ``returns``, ``dlogp``,
        ``dvalues`` (B, T) arrays, ``policy_loss`` and ``value_loss`` floats and
        one ``"stat/<name>"`` float per statistic the framework logs.
        """
        if not isinstance(case, dict):
            raise TypeError(f"case: expected a dict of arrays, got {type(case).__name__}")
        if "inputs" in case:
            overrides = {**dict(case.get("params") or {}), **overrides}
            case = case["inputs"]
        known = self.parameters
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}; "
                f"valid ones are {', '.join(known)}")
        params = check_params({**known, **overrides})
        return self.pipeline(read_case(case, self.input_names), params)


def read_case(case: dict, names=INPUT_NAMES) -> Rollout:
    """The inputs ``names`` of ``case`` as a checked Rollout, padding kept as given."""
    missing = [n for n in names if n not in case]
    if missing:
        raise ValueError(f"case: missing input(s) {', '.join(missing)}; a case needs "
                         f"{', '.join(names)}")
    logp = as_array(case["logp"], "logp", exact=False)
    if logp.ndim != 2:
        raise ValueError(f"logp: presets take a (B, T) batch, got shape {logp.shape}")
    m = as_mask(case["mask"], logp, "logp")
    empty = ~m.any(axis=-1)
    if np.any(empty):
        raise ValueError(f"mask: row {int(np.argmax(empty))} has no response token")
    # the Rollout checks each array's type, shape and finiteness where the mask is 1
    # (logp_rollout, the inference engine's log-probs, and reward_components are optional
    # inputs of every preset)
    optional = {n: case[n] for n in (ROLLOUT_INPUT, *OPTIONAL_INPUT_NAMES)
                if case.get(n) is not None}
    return Rollout.keeping_padding(mask=m, **{n: case[n] for n in names if n != "mask"},
                                   **optional)


def check_params(p: dict) -> dict:
    """Every parameter a preset takes, checked once (the names of the core functions)."""
    p = dict(p)
    # (name, upper bound): gamma and lam in [0, 1], the others non-negative
    for name, high in (("gamma", 1), ("lam", 1), ("beta", None), ("vf_coef", None),
                       ("ratio_threshold", None), ("whiten_eps", None)):
        if name in p:
            p[name] = check_scalar(p[name], name, low=0, high=high, allow_exact=False)
    if "value_clip" in p:
        p["value_clip"] = check_value_clip(p["value_clip"])
    for name in ("score_clip", "reward_clip_range"):
        if p.get(name) is not None:
            check_bounds(p[name], name)
    if "value_clip_form" in p:
        p["value_clip_form"] = check_value_clip_form(p["value_clip_form"], "value_clip_form")
    choices = {"score_position": SCORE_POSITIONS, "whiten_mask": ("mask", "all"),
               "gae_holes": ("skip", "decay"), "whiten_eps_mode": ("add", "floor"),
               "kl_in": ("reward", "loss"), "singleton": ("zero", "raw")}
    for name, allowed in choices.items():
        if name in p and p[name] not in allowed:
            raise ValueError(f"{name}: expected one of {', '.join(map(repr, allowed))}, got "
                             f"{p[name]!r}")
    for name in ("whiten_ddof", "std_ddof"):
        if name in p and (isinstance(p[name], bool) or p[name] not in (0, 1)):
            raise ValueError(f"{name}: must be 0 or 1, got {p[name]!r}")
    if "std_eps" in p:
        p["std_eps"] = check_scalar(p["std_eps"], "std_eps", low=0, allow_exact=False)
    if "std_eps_placement" in p:
        check_choice(p["std_eps_placement"], "std_eps_placement", STD_EPS_PLACEMENTS,
                     "placement")
    if p.get("log_ratio_clamp") is not None and "std_eps" in p:
        # (a critic-free preset's clamp; the PPO presets' is checked by PolicyLossOptions)
        p["log_ratio_clamp"] = check_scalar(p["log_ratio_clamp"], "log_ratio_clamp", low=0,
                                            low_open=True, allow_exact=False)
    for name in ("shift_mean", "use_kl_loss"):
        if name in p and not isinstance(p[name], (bool, np.bool_)):
            raise ValueError(f"{name}: must be True or False, got {p[name]!r}")
    if p.get("kl_clamp") is not None:
        p["kl_clamp"] = check_scalar(p["kl_clamp"], "kl_clamp", low=0, low_open=True,
                                     allow_exact=False)
    return p


SCORE_POSITIONS = ("last-token", "after-last", "last-column")
"""Where the score is added: the last response token, the slot after it, the last column."""


# ---------------------------------------------------------------------------------------
# The core kernels on one mask: inputs zeroed outside it


def mean_rows(x) -> float:
    return float(np.mean(x))


def masked_mean(x, m) -> float:
    return masked_mean_kernel(where_valid(m, x), m)


def masked_var(x, m, ddof) -> float:
    """Variance over the masked entries, divisor n - ddof (TRL/verl ``masked_var``: ddof 1).

    Fewer than ddof + 1 entries is an error, as in TRL and verl (their ``masked_var`` raises
    for a mask that sums to 1)."""
    n = int(m.sum())
    if n <= ddof:
        raise ValueError(f"mask: a variance with divisor n - {ddof} needs at least {ddof + 1} "
                         f"valid elements, got {n}")
    mu = masked_mean(x, m)
    return masked_mean((x - mu) ** 2, m) * n / (n - ddof)


def aggregate(x, m, mode) -> float:
    """``aggregate(x, m, mode)`` (the default norm T for ``"seq-mean-token-sum-norm"``)."""
    return aggregate_kernel(where_valid(m, x), m, mode)


def probability_ratio(logp, logp_old, m):
    """rho = exp(logp - logp_old), 0 outside ``m``."""
    log_rho = where_valid(m, logp) - where_valid(m, logp_old)
    return where_valid(m, np.exp(log_rho))


def kl_estimate(logp, logp_ref, estimator, m, clamp=None):
    """Per-token KL of ``estimator``, 0 outside ``m``."""
    # (the kernel gives 0 where both inputs are 0)
    return kl_estimate_kernel(where_valid(m, logp), where_valid(m, logp_ref), estimator, clamp)


def kl_shaped_rewards(scores, logp, logp_ref, beta, m, estimator="k1", *, kl_clamp=None,
                      score_offset=0, score_clip=None):
    kl = kl_estimate(logp, logp_ref, estimator, m, kl_clamp)
    bounds = None if score_clip is None else check_bounds(score_clip, "score_clip")
    return kl_shaped_rewards_kernel(scores, kl, m, float(beta), score_offset, bounds)


def shaped_rewards(x: Rollout, beta, m, estimator, position, *, kl_clamp=None,
                   score_clip=None):
    """:func:`kl_shaped_rewards` with the score at ``position`` (:data:`SCORE_POSITIONS`).

    ``"last-column"`` adds it at column T - 1 whatever the mask (what
    ``rewards[:, -1] += score`` does on right-padded rows: the score lands on padding).
    """
    if position != "last-column":
        return kl_shaped_rewards(x.scores, x.logp_old, x.logp_ref, beta, m, estimator,
                                 kl_clamp=kl_clamp, score_clip=score_clip,
                                 score_offset=0 if position == "last-token" else 1)
    rewards = kl_shaped_rewards(np.zeros_like(x.scores), x.logp_old, x.logp_ref, beta, m,
                                estimator, kl_clamp=kl_clamp)
    rewards[:, -1] = rewards[:, -1] + clip_scores(x.scores, score_clip)
    return rewards


def clip_scores(scores, score_clip):
    """``scores`` clipped to ``[-c, c]`` (``score_clip = c``) or ``[low, high]``; as they are
    for ``None``."""
    if score_clip is None:
        return scores
    return np.clip(scores, *check_bounds(score_clip, "score_clip"))


def gae_over(rewards, values, m, p):
    """GAE over ``m`` with the preset's ``gamma`` and ``lam``, holes skipped
    (``p["gae_holes"] == "skip"``) or run through as states of value 0 and reward 0
    (``"decay"``: the zero-filled arrays over every column, re-masked)."""
    if p["gae_holes"] == "skip":
        return gae(rewards, values, p["gamma"], p["lam"], m)
    advantages, returns = gae(where_valid(m, rewards), where_valid(m, values), p["gamma"],
                              p["lam"], np.ones_like(m))
    return advantages, where_valid(m, returns)


def whiten_advantages(a, m, p):
    """Whiten advantages with the preset's switches ``whiten_ddof``, ``whiten_eps``,
    ``whiten_eps_mode``, ``whiten_mask`` and ``shift_mean`` (every preset that whitens its
    advantages has the five); 0 outside ``m``."""
    over = m if p["whiten_mask"] == "mask" else np.ones_like(m)
    return where_valid(m, whiten(a, over, p["shift_mean"], ddof=p["whiten_ddof"],
                                 eps=p["whiten_eps"], eps_mode=p["whiten_eps_mode"]))


def gae(rewards, values, gamma, lam, m):
    """Advantages and returns over the positions of ``m``."""
    return gae_kernel(where_valid(m, rewards), where_valid(m, values), float(gamma),
                      float(lam), m)


def whiten(x, m, shift_mean=True, *, ddof=1, eps=1e-8, eps_mode="add"):
    return whiten_kernel(where_valid(m, x), m, shift_mean, ddof, eps, eps_mode)


def loss_options(p: dict, agg: str = "token-mean", kl=None, norm=None) -> PolicyLossOptions:
    """The policy-loss options of a preset's parameters: ``epsilon`` and, where the framework
    has them, ``epsilon_high``, ``dual_clip``, ``log_ratio_clamp``; with ``kl = (coef,
    estimator, clamp)`` the KL term ``coef * aggregate(KL(logp || logp_ref), agg)`` in the
    loss instead of the rewards (verl ``use_kl_loss``); ``norm`` the divisor of the modes that
    take one (:func:`verl_trainer_agg`)."""
    coef, estimator, clamp = kl or (0.0, "k3", None)
    return PolicyLossOptions(epsilon=p["epsilon"], epsilon_high=p.get("epsilon_high"),
                             dual_clip=p.get("dual_clip"),
                             log_ratio_clamp=p.get("log_ratio_clamp"), agg=agg, norm=norm,
                             kl_coef=coef, kl_estimator=estimator, kl_clamp=clamp)


def losses(x: Rollout, advantages, returns, p: dict, agg: str = "token-mean", *, mask,
           value_mask=None, value_agg="token-mean", kl=None, is_weights=None, norm=None,
           value_norm=None):
    """Policy loss (the :func:`loss_options` of ``p`` and ``kl``, aggregated by ``agg`` over
    ``mask``), its stats and gradient; value loss (``p["value_clip"]``, ``p["value_clip_form"]``,
    aggregated by ``value_agg`` over ``value_mask``, default ``mask``) and its gradient;
    ``norm``, ``value_norm``: the divisors of the modes that take one (None: the mode's).

    The stats are the policy loss's, ``"value_clipfrac"``: the token mean over the value
    mask of "the clipped value error is strictly larger" (TRL/verl ``vf_clipfrac``; 0 without
    a value clip), ``"loss_without_kl"``: the policy loss before the KL term of ``kl``,
    ``"kl_loss"``: that term's aggregate before its coefficient (0.0 without one);
    ``is_weights``: the rollout correction's weights on the policy term."""
    pl, pl_stats, dlogp = policy_loss_kernel(
        where_valid(mask, x.logp), where_valid(mask, x.logp_old), where_valid(mask, advantages),
        mask, loss_options(p, agg, kl, norm), where_valid(mask, x.logp_ref),
        is_weights=None if is_weights is None else where_valid(mask, is_weights))
    vm = mask if value_mask is None else value_mask
    PolicyLossOptions(agg=value_agg, norm=value_norm)  # checks the mode's name and norm
    v, v_old, R = (where_valid(vm, a) for a in (x.values, x.old_values, returns))
    c, form = p["value_clip"], p["value_clip_form"]
    # the inputs are 0 outside vm, and so are the loss and its weights there
    vloss = float(aggregate_kernel(value_loss_kernel(v, v_old, R, c, form), vm, value_agg,
                                   value_norm))
    dL = value_loss_grad_kernel(v, v_old, R, c, form)
    dvalues = aggregation_weights(vm, value_agg, value_norm) * dL + 0.0
    wins = clipped_wins(v, v_old, R, c, form)
    stats = {**pl_stats, "value_clipfrac": masked_mean(wins.astype(np.float64), vm),
             "loss_without_kl": pl.policy_loss, "kl_loss": pl.kl_loss}
    # why: with kl, a loss of -0.0 is 0.0 even for coef 0 (the kernel then adds no KL term)
    policy_loss = pl.loss + 0.0 if kl else pl.loss
    return policy_loss, stats, dlogp, vloss, dvalues


def result(rewards, advantages, returns, policy_loss, value_loss_, dlogp, dvalues,
           stats: dict) -> dict:
    out = {"rewards": rewards, "advantages": advantages, "returns": returns,
           "policy_loss": float(policy_loss), "value_loss": float(value_loss_),
           "dlogp": dlogp, "dvalues": dvalues}
    out.update({f"stat/{k}": float(v) for k, v in stats.items()})
    return out


# ---------------------------------------------------------------------------------------
# Checks of a case against a framework's layout


def require_prefix(name: str, m: np.ndarray, why: str) -> None:
    """Raise unless every row is ones from column 0, then zeros (right padding, no holes)."""
    prefix = np.arange(m.shape[-1])[None, :] < m.sum(axis=-1)[:, None]
    bad = np.any(m != prefix, axis=-1)
    if np.any(bad):
        raise ValueError(f"{name}: mask row {int(np.argmax(bad))} is not a prefix of ones "
                         f"(response from column 0, then padding); {why}")


def slot_after(m: np.ndarray) -> np.ndarray:
    """The mask extended by one column after each row's last token (none if the row is full)."""
    return np.arange(m.shape[-1])[None, :] < np.minimum(m.sum(axis=-1) + 1, m.shape[-1])[:, None]


def require_finite(name: str, arrays: dict, where: np.ndarray, why: str) -> None:
    for key, arr in arrays.items():
        bad = where & ~np.isfinite(arr)
        if np.any(bad):
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"{name}: {key} is {arr[idx]} at padding position {idx}, which "
                             f"{why}; it must be finite there")


def require_choice(name: str, p: dict, key: str, allowed) -> None:
    """ValueError unless the parameter ``p[key]`` is one of ``allowed``, the framework's
    options (:func:`~ppo_numpy._checks.check_choice` for strings; ``allowed`` may also
    hold the bools of an older option, as TRL's ``scale_rewards``)."""
    value = p[key]
    if isinstance(value, (bool, np.bool_)) and value in [a for a in allowed
                                                          if isinstance(a, bool)]:
        return
    check_choice(value, f"{name}: {key}", tuple(a for a in allowed if isinstance(a, str)),
                 "option")


def check_estimator(name: str, estimator, allowed: tuple) -> None:
    if estimator not in allowed:
        raise ValueError(f"{name}: kl_estimator {estimator!r} is not one the framework offers; "
                         f"valid ones are {', '.join(allowed)}")


# ---------------------------------------------------------------------------------------
# The critic-free presets


def broadcast(sequence_values, m):
    """One value per response (B,) at every response token of its row (B, T), 0 at padding."""
    return np.where(m, np.asarray(sequence_values, dtype=np.float64)[:, None], 0.0)


def at_last_token(scores, m):
    """The scores (B,) at each row's last response token, 0 elsewhere (B, T)."""
    out = np.zeros(m.shape)
    last = m.shape[-1] - 1 - np.argmax(m[:, ::-1], axis=-1)
    out[np.arange(m.shape[0]), last] = scores
    return out


def group_std(scores, groups, *, dtype=np.float64, ddof=1):
    """Per response, the standard deviation (divisor n - ``ddof``) of its group's scores; 0 for
    a group of one (the ``reward_std`` TRL and OpenRLHF log)."""
    return np.sqrt(_group_var(scores, groups, dtype, ddof)).astype(np.float64)


def _group_var(scores, groups, dtype, ddof):
    """Per response, its group's score variance (divisor n - ddof) in ``dtype``; 0 for a
    group of one."""
    s = np.asarray(scores, dtype=dtype)
    ids, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    mean = (_group_sums(s, inverse, len(ids)) / counts.astype(dtype))[inverse]
    sq = _group_sums((s - mean) ** 2, inverse, len(ids))
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (sq / (counts - ddof).astype(dtype))[inverse]
    return np.where(counts[inverse] > 1, var, dtype(0)).astype(dtype)


STD_EPS_PLACEMENTS = ("std", "var")
"""Where the group advantage's eps goes: added to the std, or inside the square root."""


def group_advantages(scores, groups, p: dict, *, scale="group", singleton="zero",
                     dtype=np.float64):
    """(s_i - mean_g) / (std + eps) with the preset's ``std_ddof``, ``std_eps`` and
    ``std_eps_placement`` (``"std"``: std + eps; ``"var"``: sqrt(var + eps)); ``scale`` and
    ``singleton`` as for :func:`ppo_numpy.family.advantages.grpo_advantages`, which computes
    the frameworks' own form (eps > 0 added to the std). The other forms: the centred scores
    divided in ``dtype``; without eps a group of equal scores gives NaN (0 / 0), as in
    torch."""
    eps, ddof, placement = p["std_eps"], p["std_ddof"], p["std_eps_placement"]
    if scale == "none" or (placement == "std" and eps > 0):
        return grpo_advantages(scores, groups, scale=scale, eps=eps, ddof=ddof,
                               singleton=singleton, dtype=dtype)
    centred = grpo_advantages(scores, groups, scale="none", singleton=singleton,
                              dtype=dtype).astype(dtype)
    if scale == "group":
        var = _group_var(scores, groups, dtype, ddof)
        _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
        var = np.where(counts[inverse] > 1, var, dtype(1))  # a group of one: std 1 (verl)
    else:
        s = np.asarray(scores, dtype=dtype)
        var = np.full(s.shape, np.sum((s - np.mean(s)) ** 2, dtype=dtype)
                      / dtype(s.shape[0] - ddof), dtype=dtype)
    e = dtype(eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = np.sqrt(var + e) if placement == "var" else np.sqrt(var) + e
        return (centred / denom).astype(np.float64)


def policy_result(advantages, pl, dlogp, stats: dict, **arrays) -> dict:
    """The outputs of a critic-free preset: advantages (B, T), the loss and its gradient."""
    out = {**arrays, "advantages": advantages, "policy_loss": float(pl.loss), "dlogp": dlogp}
    out.update({f"stat/{k}": float(v) for k, v in stats.items()})
    return out


# ---------------------------------------------------------------------------------------
# The rollout correction (the third policy, pi_rollout): each framework's options, read and
# applied. A correction switched on needs ``logp_rollout`` in the case.


def need_rollout(name: str, x: Rollout, option: str) -> None:
    """ValueError naming ``option`` unless the case carries ``logp_rollout``."""
    if x.logp_rollout is None:
        raise ValueError(f"{name}: {option} needs logp_rollout (the inference engine's "
                         f"log-probs of the sampled tokens) in the case; it has none")


def _optional_bound(p: dict, key: str, name: str, *, positive: bool):
    value = p[key]
    if value is None:
        return None
    return check_scalar(value, f"{name}: {key}", low=0, low_open=positive, allow_exact=False)


def _flag(p: dict, key: str, name: str) -> bool:
    if not isinstance(p[key], (bool, np.bool_)):
        raise TypeError(f"{name}: {key}: expected True or False, got {p[key]!r}")
    return bool(p[key])


# -- TRL 1.16.0 (GRPOConfig: vllm_importance_sampling_*, off_policy_mask_threshold)

TRL_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def trl_uses_vllm(name: str, x: Rollout, p: dict) -> bool:
    """``use_vllm``: None means "the case carries logp_rollout" (vLLM gave the log-probs)."""
    if p["use_vllm"] is None:
        return x.logp_rollout is not None
    if _flag(p, "use_vllm", name):
        need_rollout(name, x, "use_vllm=True")
    return bool(p["use_vllm"])


def trl_check_is_options(name: str, p: dict) -> None:
    """GRPOConfig's own checks of the vLLM correction's options, made whatever the case
    (trl 1.16.0 grpo_config.py ``__post_init__`` refuses the configuration itself, vLLM or
    not): clip_min < clip_max, and a ``*_truncate`` mode with a bound."""
    if not _flag(p, "vllm_importance_sampling_correction", name):
        lo = _optional_bound(p, "vllm_importance_sampling_clip_min", name, positive=False)
        hi = _optional_bound(p, "vllm_importance_sampling_clip_max", name, positive=True)
    else:
        lo = _optional_bound(p, "vllm_importance_sampling_clip_min", name, positive=False)
        hi = _optional_bound(p, "vllm_importance_sampling_clip_max", name, positive=True)
        mode = check_choice(p["vllm_importance_sampling_mode"],
                            f"{name}: vllm_importance_sampling_mode", TRL_IS_MODES, "mode")
        if mode.endswith("truncate") and lo is None and hi is None:
            raise ValueError(f"{name}: vllm_importance_sampling_mode={mode!r} needs "
                             f"vllm_importance_sampling_clip_min or _clip_max (TRL 1.16.0's "
                             f"GRPOConfig refuses two None bounds)")
    if lo is not None and hi is not None and lo >= hi:
        raise ValueError(f"{name}: vllm_importance_sampling_clip_min must be < "
                         f"vllm_importance_sampling_clip_max, got {lo} >= {hi} (TRL 1.16.0's "
                         f"GRPOConfig refuses it)")


def trl_is_weights(name: str, x: Rollout, m, p: dict):
    """TRL's vLLM importance-sampling ratio (B, T), or None when it is off.

    exp(logp_old - logp_rollout) per token, or exp of its sum over the response for the
    ``sequence_*`` modes, no bound on the log-ratio (the convention ``is_log_ratio_bound``:
    None); ``*_truncate`` clamps it to [clip_min, clip_max], ``*_mask`` sets it to 0
    outside (a bound None: none on that side). trl 1.16.0 grpo_trainer.py
    ``_generate_and_score_completions``."""
    if not (trl_uses_vllm(name, x, p) and _flag(p, "vllm_importance_sampling_correction",
                                                  name)):
        return None
    mode = check_choice(p["vllm_importance_sampling_mode"],
                        f"{name}: vllm_importance_sampling_mode", TRL_IS_MODES, "mode")
    lo = _optional_bound(p, "vllm_importance_sampling_clip_min", name, positive=False)
    hi = _optional_bound(p, "vllm_importance_sampling_clip_max", name, positive=True)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{name}: vllm_importance_sampling_clip_min must be <= "
                         f"vllm_importance_sampling_clip_max, got {lo} > {hi}")
    level, how = mode.split("_")
    if how == "truncate" and lo is None and hi is None:
        raise ValueError(f"{name}: vllm_importance_sampling_mode={mode!r} needs "
                         f"vllm_importance_sampling_clip_min or _clip_max (TRL 1.16.0's "
                         f"torch.clamp refuses two None bounds)")
    return rollout_importance_weights(x.logp_old, x.logp_rollout, m, level=level, mode=how,
                                      clip_max=hi, clip_min=lo,
                                      log_ratio_bound=p["is_log_ratio_bound"])


def trl_off_policy_mask(name: str, x: Rollout, m, A, p: dict, use_vllm: bool):
    """TRL's off-policy sequence mask (DeepSeek-V3.2), (B, 1) of 0/1, or None when off: keep a
    response with A >= 0 or with mean_t (logp_sampling_t - logp_t) <= threshold, the sampling
    log-probs being logp_rollout under vLLM and logp_old otherwise, logp the *current* ones
    (trl 1.16.0 grpo_trainer.py ``get_off_policy_mask``)."""
    if p["off_policy_mask_threshold"] is None:
        return None
    delta = check_scalar(p["off_policy_mask_threshold"], f"{name}: off_policy_mask_threshold",
                         low=0, allow_exact=False)
    sampling = x.logp_rollout if use_vllm else x.logp_old
    kl = where_valid(m, sampling) - where_valid(m, x.logp)  # (0 at padding)
    mean_kl = kl.sum(axis=-1, keepdims=True) / np.maximum(m.sum(axis=-1, keepdims=True), 1)
    # A: one advantage per response, at its first token
    a = A[np.arange(A.shape[0]), np.argmax(m, axis=-1)][:, None]
    return ((a >= 0) | (mean_kl <= delta)).astype(np.float64)


# -- verl 0.9.1 (algorithm.rollout_correction)

VERL_IS_LEVELS = (None, "token", "sequence")
VERL_BYPASS_LOSSES = ("ppo_clip", "reinforce")


def _positive(text, what: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number or a 'lower_upper' string, got "
                         f"{text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what}: thresholds must be positive and finite, got {text!r}")
    return value


def verl_is_threshold(name: str, spec):
    """verl's ``rollout_is_threshold``: a number (upper bound, TIS: truncate) or a
    ``"lower_upper"`` string (IcePop: mask outside [lower, upper]) -> (mode, lower, upper)."""
    what = f"{name}: rollout_is_threshold"
    if isinstance(spec, (bool, np.bool_)) or not isinstance(spec, (str, Real)):
        raise TypeError(f"{what}: expected a number or a 'lower_upper' string, got {spec!r}")
    if isinstance(spec, str) and "_" in spec:
        lower, upper = (_positive(t, what) for t in spec.strip().split("_", 1))
        if lower > upper:
            raise ValueError(f"{what}: lower must be <= upper, got {spec!r}")
        return "mask", lower, upper
    return "truncate", None, _positive(spec, what)


def verl_rs_thresholds(name: str, criteria: list, spec) -> list:
    """verl's ``rollout_rs_threshold``: one entry (shared) or one per criterion, each a number
    or (k1 criteria) a ``"lower_upper"`` string -> [(low, high)]."""
    what = f"{name}: rollout_rs_threshold"
    if spec is None:
        raise ValueError(f"{what}: rollout_rs needs a threshold, got None")
    parts = ([str(spec)] if isinstance(spec, Real) and not isinstance(spec, bool)
             else [t.strip() for t in str(spec).split(",") if t.strip()])
    if len(parts) == 1:
        parts = parts * len(criteria)
    if len(parts) != len(criteria):
        raise ValueError(f"{what}: expected 1 or {len(criteria)} thresholds, got {spec!r}")
    out = []
    for criterion, part in zip(criteria, parts):
        if "_" in part:
            if not criterion.endswith("k1"):
                raise ValueError(f"{what}: {criterion} takes an upper bound only, got {part!r}")
            low, high = (_positive(t, what) for t in part.split("_", 1))
            if low > high:
                raise ValueError(f"{what}: lower must be <= upper, got {part!r}")
            out.append((low, high))
        else:
            high = _positive(part, what)
            out.append((1.0 / high if criterion.endswith("k1") else None, high))
    return out


def verl_rollout_correction(name: str, x: Rollout, m, p: dict, logp_old=None):
    """verl's ``compute_rollout_correction_and_rejection_mask`` on the preset's options:
    (IS weights (B, T) or None, the response mask after rejection).

    The log-ratio is ``logp_old - logp_rollout`` (``logp_old``: the bypass mode passes the
    current log-probs). IS (``rollout_is`` token / sequence): exp of the log-ratio (its sum
    for sequence) clamped to [-20, 20] (``is_log_ratio_bound``), truncated at the threshold or
    masked (a "lower_upper" threshold), then divided by the batch mean with
    ``rollout_is_batch_normalize``. Rejection (``rollout_rs``, comma-separated criteria, all
    must pass): :func:`ppo_numpy.rollout_rejection_mask`. Either needs logp_rollout."""
    old = x.logp_old if logp_old is None else logp_old
    level, rs = p["rollout_is"], p["rollout_rs"]
    if level not in VERL_IS_LEVELS:
        raise ValueError(f"{name}: rollout_is: expected None, 'token' or 'sequence', got "
                         f"{level!r}")
    batch_normalize = _flag(p, "rollout_is_batch_normalize", name)
    w = None
    if level is not None and p["rollout_is_threshold"] is not None:
        need_rollout(name, x, f"rollout_is={level!r}")
        mode, lower, upper = verl_is_threshold(name, p["rollout_is_threshold"])
        w = rollout_importance_weights(old, x.logp_rollout, m, level=level, mode=mode,
                                       clip_max=upper, clip_min=lower,
                                       batch_normalize=batch_normalize,
                                       log_ratio_bound=p["is_log_ratio_bound"])
        if not np.any(w[m] > 0):
            # why: verl 0.9.1 compute_is_metrics' effective sample size 1 / mean(w^2)
            # raises ZeroDivisionError when the mask mode drops every weight
            raise ValueError(f"{name}: rollout_is_threshold {p['rollout_is_threshold']!r} "
                             f"masks every weight of the batch (verl's metrics divide by 0)")
    keep = m
    if rs is not None:
        need_rollout(name, x, f"rollout_rs={rs!r}")
        if not isinstance(rs, str):
            raise TypeError(f"{name}: rollout_rs: expected a comma-separated string, got {rs!r}")
        criteria = list(dict.fromkeys(c.strip() for c in rs.split(",") if c.strip()))
        if not criteria:
            raise ValueError(f"{name}: rollout_rs: no criterion in {rs!r}")
        for c in criteria:
            check_choice(c, f"{name}: rollout_rs", CRITERIA, "criterion")
        for c, (low, high) in zip(criteria, verl_rs_thresholds(name, criteria,
                                                               p["rollout_rs_threshold"])):
            keep = keep & rollout_rejection_mask(old, x.logp_rollout, m, criterion=c,
                                                 low=low, high=high)
    return w, keep


def verl_bypass(name: str, x: Rollout, p: dict):
    """``bypass_mode``: (is it on, the loss type); the caller then uses logp_rollout as
    logp_old and computes the correction from the current log-probs inside the loss."""
    if not _flag(p, "bypass_mode", name):
        return False, None
    need_rollout(name, x, "bypass_mode=True")
    return True, check_choice(p["rollout_loss_type"], f"{name}: rollout_loss_type",
                              VERL_BYPASS_LOSSES, "loss type")


def verl_correction_before_advantages(name, x: Rollout, m, p: dict) -> dict:
    """verl 0.9.1's ``algorithm.rollout_correction`` before the advantages (decoupled mode,
    ``ray_trainer.py`` ``compute_rollout_correction_and_add_to_batch``, then
    ``compute_advantage``): {"mask": the response mask after rejection, "xm": the inputs on
    it (None: unchanged), "is_weights", "bypass", "stats"}.

    * Decoupled (``bypass_mode=False``, the default): the IS weights (``rollout_is``: None
      by default in verl's trainer YAML; the dataclass's default is "sequence") and the
      rejection (``rollout_rs``, default None) of logp_old against logp_rollout. The rejected
      tokens leave the response mask *before* the advantages: they get advantage 0, the
      estimators that read the mask (reinforce_plus_plus and its whitening) see holes, and
      the loss aggregates over the kept tokens only. verl skips the whole correction when
      the batch has no ``rollout_log_probs``; here an option switched on without
      ``logp_rollout`` is an error.
    * ``bypass_mode=True``: logp_old is replaced by logp_rollout (two policies), and the
      correction is computed inside the loss from the current log-probs (``verl_bypass_loss``).
    """
    bypass, _ = verl_bypass(name, x, p)
    out = {"mask": m, "xm": None, "is_weights": None, "bypass": bypass, "stats": {}}
    if bypass:
        out["xm"] = x.on(m).replace_trusted(logp_old=np.where(m, x.logp_rollout, 0.0))
        return out
    w, keep = verl_rollout_correction(name, x, m, p)
    out["is_weights"] = w
    if x.logp_rollout is not None:
        # verl's rollout_corr/kl: the token mean of logp_rollout - logp_old
        out["stats"]["rollout_corr/kl"] = masked_mean(x.on(m).logp_rollout - x.on(m).logp_old, m)
    if keep is not m:
        if not np.any(keep):
            raise ValueError(f"{name}: rollout_rs rejects every token of the batch (verl's "
                             f"loss would divide by zero)")
        out["mask"], out["xm"] = keep, x.on(keep)
    return out


def verl_trainer_agg(mode: str, batch_mask) -> tuple:
    """verl 0.9.1's ``agg_loss`` as its trainer calls it, one optimizer step of one
    micro-batch on one rank: the ``(mode, norm)`` of :mod:`ppo_numpy.aggregation` that divide
    as it divides.

    The trainer gives the loss two counts of the mini-batch (``workers/utils/losses.py``
    ``ppo_loss`` and ``value_loss`` pass them to ``agg_loss``): ``batch_num_tokens``, the sum
    of the batch's response mask ``batch_mask`` (``workers/engine/fsdp/transformer_impl.py``
    ``forward_backward_batch``: after a decoupled rejection, which replaces the mask, and
    before a bypass-mode one, which the policy loss applies inside), and ``global_batch_size``
    = ``ppo_mini_batch_size * rollout.n`` (``trainer/ppo/ray_trainer.py`` ``_update_actor``):
    B, every row, a row whose tokens were all rejected included. With m the loss's own mask
    (after every rejection), n_i its row counts and N the sum of ``batch_mask``:

    ========================  ==============================  ==========================
    verl's ``loss_agg_mode``  what the trainer's agg_loss is   here
    ========================  ==============================  ==========================
    token-mean                sum m l / N                      ``("dapo", N)``
    seq-mean-token-sum        (1/B) sum_i sum_t m l            ``("luspo", None)``
    seq-mean-token-mean       (1/B) sum_i (1/n_i) sum_t m l    ``("grpo", None)``
    seq-mean-token-sum-norm   sum m l / (B T)                  ``("dr_grpo", None)``: T
    ========================  ==============================  ==========================

    (``loss_scale_factor`` unset: T, the padded length.) Without a rejection every row has a
    token, m is ``batch_mask`` and each is the mode of verl's name; ``agg_loss`` called
    without the counts divides by the kept tokens and the rows that kept one instead.

    >>> m = np.array([[True, True], [False, False]])   # row 1 rejected whole
    >>> verl_trainer_agg("token-mean", np.ones((2, 2), bool)), verl_trainer_agg(
    ...     "seq-mean-token-mean", m)
    (('dapo', 4), ('grpo', None))
    """
    if mode == "token-mean":
        return "dapo", int(np.count_nonzero(batch_mask))
    return {"seq-mean-token-sum": ("luspo", None), "seq-mean-token-mean": ("grpo", None),
            "seq-mean-token-sum-norm": ("dr_grpo", None)}[mode]


def verl_bypass_loss(name, x: Rollout, xm: Rollout, A, m, opts, p: dict, dual_clip):
    """verl 0.9.1 ``compute_policy_loss_bypass_mode``: old = rollout; the IS weights and the
    rejection of logp (the current policy, no gradient) against logp_rollout, the loss over
    the kept tokens. ``rollout_loss_type`` (verl's ``rollout_correction.loss_type``)
    ``"ppo_clip"`` (default): the vanilla loss with ratio pi_theta / pi_rollout and no IS
    weights (the ratio is the correction); ``"reinforce"``: -A w logp with the IS weights w,
    aggregated by ``loss_agg_mode`` (gradient -A w times the aggregation weight).

    ``opts`` carries the trainer's aggregation (:func:`verl_trainer_agg` of the unrejected
    mask ``m``). A rejection of every token leaves the policy term 0 (verl's ``agg_loss``
    sums nothing over the trainer's counts) and its statistics 0 (``masked_mean`` over no
    token divides 0 by 1e-8); the KL loss over ``m`` stays. The statistics are the loss's:
    ``clipfrac_active``, ``dual_clipfrac`` and ``approx_kl_k1`` for ppo_clip,
    ``approx_kl_k1`` alone for reinforce (verl logs only ``actor/ppo_kl`` there)."""
    _, loss_type = verl_bypass(name, x, p)
    w, keep = verl_rollout_correction(name, x, m, p, logp_old=x.on(m).logp)
    xk = xm.on(keep)
    A = np.where(keep, A, 0.0)
    # why: verl 0.9.1 apply_bypass_mode sets loss_mode="bypass_mode" whatever the actor's, and
    # compute_policy_loss_bypass_mode calls compute_policy_loss_vanilla for ppo_clip
    opts = replace(opts, importance_level="token", loss_type="clip", log_ratio_max=None,
                   dual_clip=dual_clip, log_ratio_clamp=p["log_ratio_clamp"])
    if not np.any(keep):
        # verl: agg_loss over no token is 0 / N (token-mean) or 0 / B, masked_mean 0 / 1e-8
        pl = SimpleNamespace(loss=0.0, policy_loss=0.0, kl_loss=0.0)
        st = {"approx_kl_k1": 0.0}
        if loss_type == "ppo_clip":
            st.update(clipfrac_active=0.0, dual_clipfrac=0.0)
        dlogp = np.zeros(m.shape)
    elif loss_type == "ppo_clip":
        pl, st, dlogp = policy_loss_kernel(xk.logp, xk.logp_old, A, keep,
                                           replace(opts, kl_coef=0.0), xk.logp_ref)
    else:
        pl, st, dlogp = verl_reinforce_loss(xk, A, keep, opts, w)
    if opts.kl_coef > 0:
        # why: verl 0.9.1 workers/utils/losses.py ppo_loss adds the KL loss over the batch's
        # response mask; the bypass loss's rejection is inside the policy loss only
        kl = where_valid(m, kl_estimate_kernel(xm.logp, xm.logp_ref, opts.kl_estimator,
                                               opts.kl_clamp))
        kl_loss = float(aggregate_kernel(kl, m, opts.agg, opts.norm))
        dlogp = dlogp + opts.kl_coef * kl_estimate_grad_kernel(
            xm.logp, xm.logp_ref, opts.kl_estimator, m, opts.kl_clamp,
            aggregation_weights(m, opts.agg, opts.norm))
        pl = SimpleNamespace(loss=pl.policy_loss + opts.kl_coef * kl_loss,
                             policy_loss=pl.policy_loss, kl_loss=kl_loss)
    return pl, st, dlogp, m


def verl_reinforce_loss(xk: Rollout, A, keep, opts, w):
    """verl's ``compute_policy_loss_reinforce``: loss = agg(-A w logp) (w = 1 without IS),
    d loss / d logp = -A w times the aggregation weight; its one statistic ``actor/ppo_kl``,
    the token mean of logp_rollout - logp (``approx_kl_k1``; no clip fractions: verl 0.9.1
    logs none on this path). (The KL loss is added by the caller, as verl's ppo_loss adds
    it.)"""
    weight = np.where(keep, 1.0 if w is None else w, 0.0)
    term = -A * weight * xk.logp
    policy_loss = float(aggregate_kernel(term, keep, opts.agg, opts.norm))
    dlogp = -aggregation_weights(keep, opts.agg, opts.norm) * A * weight + 0.0
    pl = SimpleNamespace(loss=policy_loss, policy_loss=policy_loss, kl_loss=0.0)
    st = {"approx_kl_k1": masked_mean(xk.logp_old - xk.logp, keep)}
    return pl, st, dlogp


# -- OpenRLHF 0.11.2 (--algo.advantage.is_correction_*)

OPENRLHF_IS_LEVELS = ("off", "token", "seq")
OPENRLHF_IS_MODES = ("mask", "clip")
OPENRLHF_GATINGS = ("ratio", "binary_kl", "tv")


def openrlhf_threshold(name: str, spec) -> tuple:
    """``is_correction_threshold``: [low, high], or one number (an upper bound: low 0)."""
    what = f"{name}: is_correction_threshold"
    values = [spec] if isinstance(spec, Real) else list(spec)
    if len(values) == 1:
        values = [0.0] + values
    if len(values) != 2:
        raise ValueError(f"{what}: expected HIGH or [LOW, HIGH], got {spec!r}")
    low, high = (check_scalar(v, what, allow_exact=False) for v in values)
    if low > high:
        raise ValueError(f"{what}: low must be <= high, got {spec!r}")
    return low, high


def openrlhf_correction(name: str, x: Rollout, m, p: dict, policy_loss_type: str = "ppo"):
    """OpenRLHF's ``PolicyLoss`` correction: the coefficient (B, T) that multiplies each
    token's loss, or None (``is_correction_level="off"``, or GSPO, whose ratio the caller
    takes against logp_rollout instead).

    A gate reads one statistic per unit: the ratio exp(logp_old - logp_rollout) per token or
    its geometric mean per response (``gating="ratio"``), or a divergence d_t of the sampled
    token's two probabilities (``binary_kl``, ``tv``) per token or its mean per response.
    ``mode="mask"``: a unit outside [low, high] gets 0, a kept one its unclamped token ratios;
    ``mode="clip"`` (token level, ratio only): the token ratio clamped to [low, high]."""
    level = check_choice(p["is_correction_level"], f"{name}: is_correction_level",
                         OPENRLHF_IS_LEVELS, "level")
    mode = check_choice(p["is_correction_mode"], f"{name}: is_correction_mode",
                        OPENRLHF_IS_MODES, "mode")
    gating = check_choice(p["is_correction_gating"], f"{name}: is_correction_gating",
                          OPENRLHF_GATINGS, "gating")
    if mode == "clip" and (level == "seq" or gating != "ratio"):
        # (PolicyLoss refuses it whatever the level, "off" included)
        raise ValueError(f"{name}: is_correction_mode='clip' needs is_correction_level="
                         f"'token' and is_correction_gating='ratio' (OpenRLHF 0.11.2)")
    if level == "off":
        return None
    need_rollout(name, x, f"is_correction_level={level!r}")
    low, high = openrlhf_threshold(name, p["is_correction_threshold"])
    if gating != "ratio":
        if low > 0:
            raise ValueError(f"{name}: is_correction_gating={gating!r} takes an upper bound "
                             f"only (a low <= 0), got is_correction_threshold="
                             f"{p['is_correction_threshold']!r}")
        if policy_loss_type != "ppo":
            return None
        # (low: 0 for one threshold, as OpenRLHF makes it; its rounding below 0 drops tokens)
        return rollout_divergence_gate(x.logp_old, x.logp_rollout, m, divergence=gating,
                                       high=high, low=low, level="sequence" if level == "seq"
                                       else "token")
    if low < 0:
        low = None  # (ratios are >= 0: no bound)
    if policy_loss_type != "ppo":
        return None
    return rollout_importance_weights(
        x.logp_old, x.logp_rollout, m, clip_max=high, clip_min=low,
        level="geometric" if level == "seq" else "token",
        mode="truncate" if mode == "clip" else "mask")


def openrlhf_correction_and_stats(name, x: Rollout, xm: Rollout, m, p: dict,
                                  policy_loss_type: str = "ppo"):
    """OpenRLHF 0.11.2's ``PolicyLoss`` correction (``--algo.advantage.is_correction_*``):
    (is_weights or None, the log-probs the ratio is taken against, the statistics).

    * ``policy_loss_type="ppo"``: the coefficient of ``openrlhf_correction`` multiplies each
      token's loss, the ratio stays pi_theta / pi_old; logged: ``vllm_kl`` (token mean of
      logp_rollout - logp_old) and ``is_filter_ratio`` (the fraction of units, tokens or
      responses, outside the band).
    * ``"gspo"`` with a correction on: no coefficient; the sequence ratio is taken against
      logp_rollout, exp(mean_t (logp_t - logp_rollout_t)) (OpenRLHF 0.11.2 ``PolicyLoss``),
      the threshold and gating unused; nothing extra is logged.
    """
    gspo = policy_loss_type == "gspo"
    w = openrlhf_correction(name, x, m, p, policy_loss_type)
    if p["is_correction_level"] == "off":
        return None, xm.logp_old, {}
    if gspo:
        return None, np.where(m, x.logp_rollout, 0.0), {}
    low, high = openrlhf_threshold(name, p["is_correction_threshold"])
    xr = x.on(m)
    raw = np.exp(xr.logp_old - xr.logp_rollout)
    if p["is_correction_mode"] == "clip":
        filtered = m & ((raw < low) | (raw > high))
    else:
        filtered = m & (w == 0)
    if p["is_correction_level"] == "seq":
        ratio = float(np.mean(filtered.any(axis=-1)))
    else:
        ratio = float(filtered.sum() / m.sum())
    stats = {"vllm_kl": masked_mean(xr.logp_rollout - xr.logp_old, m), "is_filter_ratio": ratio}
    return w, xm.logp_old, stats
