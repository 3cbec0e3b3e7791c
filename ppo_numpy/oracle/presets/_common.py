"""What every preset shares: the :class:`Preset` type, reading a case into a checked
:class:`~ppo_numpy.batch.Rollout`, checking the parameters once, and the small
compositions of core kernels that several pipelines use.

Inside a pipeline nothing is checked again: the case was checked when it was read
and the parameters when the preset was called; each function here zeroes its
inputs outside the mask it is given (a framework may read a position past the
response, e.g. TRL's slot after the last token) and calls the core kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..._checks import as_array, as_mask, check_bounds, check_choice, check_scalar, where_valid
from ...batch import Rollout
from ...family.advantages import _group_sums, grpo_advantages
from ...fast.gae_blocked import use_blocked
from ...policy_loss.options import PolicyLossOptions
from ...ppo.aggregation import aggregate_kernel, aggregation_weights
from ...ppo.gae import gae_kernel
from ...ppo.kl import kl_estimate_kernel, kl_shaped_rewards_kernel
from ...ppo.kl_gradient import check_form
from ...ppo.value_loss import (
    check_value_clip,
    check_value_clip_form,
    clipped_wins,
    value_loss_grad_kernel,
    value_loss_kernel,
)
from ...ppo.whitening import masked_mean_kernel, whiten_kernel
from ...step.normalisers import NORMALISERS
from . import _third_policy as third_policy
from ._step import STEP_KEYS, policy_step, read_step, value_step

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
    #: the pipeline takes ``step=`` (a case's layout: ``presets/_step.py``) and adds the step's
    #: outputs; a preset without a policy loss does not, and a layout is an error there
    takes_layout: bool = False

    @property
    def parameters(self) -> dict:
        """``defaults`` and ``conventions`` together: every parameter the call accepts."""
        return {**self.defaults, **self.conventions}

    def __call__(self, case: dict, **overrides) -> dict:
        """Run the pipeline on ``case`` with ``defaults`` updated by ``overrides``.

        Returns a dict with ``rewards``, ``advantages``, ``returns``, ``dlogp``,
        ``dvalues`` (B, T) arrays, ``policy_loss`` and ``value_loss`` floats and
        one ``"stat/<name>"`` float per statistic the framework logs; for a case with a
        ``"layout"`` also the step's outputs (``step/losses``, ``step/dlogp``, ...:
        :mod:`ppo_numpy.oracle.presets._step`).
        """
        if not isinstance(case, dict):
            raise TypeError(f"case: expected a dict of arrays, got {type(case).__name__}")
        # a case's step: "layout" (and TRL's "steps_per_generation") beside its inputs
        step_entries = {k: case[k] for k in STEP_KEYS if k in case}
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
        x = read_case(case, self.input_names)
        step = read_step(step_entries, x.mask.shape[0], self.name, self.takes_layout)
        if step is None:
            return self.pipeline(x, params)
        return self.pipeline(x, params, step=step)


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
    if "normaliser" in p:
        check_choice(p["normaliser"], "normaliser", NORMALISERS, "normaliser")
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


def mean_over(x, m) -> float:
    return masked_mean_kernel(where_valid(m, x), m)


def masked_var(x, m, ddof) -> float:
    """Variance over the masked entries, divisor n - ddof (TRL/verl ``masked_var``: ddof 1).

    Fewer than ddof + 1 entries is an error, as in TRL and verl (their ``masked_var`` raises
    for a mask that sums to 1)."""
    n = int(m.sum())
    if n <= ddof:
        raise ValueError(f"mask: a variance with divisor n - {ddof} needs at least {ddof + 1} "
                         f"valid elements, got {n}")
    mu = mean_over(x, m)
    return mean_over((x - mu) ** 2, m) * n / (n - ddof)


def masked_aggregate(x, m, mode) -> float:
    """``aggregate(x, m, mode)`` (the default norm T for ``"seq-mean-token-sum-norm"``)."""
    return aggregate_kernel(where_valid(m, x), m, mode)


def masked_ratio(logp, logp_old, m):
    """rho = exp(logp - logp_old), 0 outside ``m``."""
    log_rho = where_valid(m, logp) - where_valid(m, logp_old)
    return where_valid(m, np.exp(log_rho))


def masked_kl(logp, logp_ref, estimator, m, clamp=None):
    """Per-token KL of ``estimator``, 0 outside ``m``."""
    # (the kernel gives 0 where both inputs are 0)
    return kl_estimate_kernel(where_valid(m, logp), where_valid(m, logp_ref), estimator, clamp)


def masked_shaped_rewards(scores, logp, logp_ref, beta, m, estimator="k1", *, kl_clamp=None,
                      score_offset=0, score_clip=None):
    kl = masked_kl(logp, logp_ref, estimator, m, kl_clamp)
    bounds = None if score_clip is None else check_bounds(score_clip, "score_clip")
    return kl_shaped_rewards_kernel(scores, kl, m, float(beta), score_offset, bounds)


def shaped_rewards(x: Rollout, beta, m, estimator, position, *, kl_clamp=None,
                   score_clip=None):
    """:func:`kl_shaped_rewards` with the score at ``position`` (:data:`SCORE_POSITIONS`).

    ``"last-column"`` adds it at column T - 1 whatever the mask (what
    ``rewards[:, -1] += score`` does on right-padded rows: the score lands on padding).
    """
    if position != "last-column":
        return masked_shaped_rewards(x.scores, x.logp_old, x.logp_ref, beta, m, estimator,
                                 kl_clamp=kl_clamp, score_clip=score_clip,
                                 score_offset=0 if position == "last-token" else 1)
    rewards = masked_shaped_rewards(np.zeros_like(x.scores), x.logp_old, x.logp_ref, beta, m,
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
        return masked_gae(rewards, values, p["gamma"], p["lam"], m)
    advantages, returns = masked_gae(where_valid(m, rewards), where_valid(m, values), p["gamma"],
                              p["lam"], np.ones_like(m))
    return advantages, where_valid(m, returns)


def whiten_advantages(a, m, p):
    """Whiten advantages with the preset's switches ``whiten_ddof``, ``whiten_eps``,
    ``whiten_eps_mode``, ``whiten_mask`` and ``shift_mean`` (every preset that whitens its
    advantages has the five); 0 outside ``m``."""
    over = m if p["whiten_mask"] == "mask" else np.ones_like(m)
    return where_valid(m, masked_whiten(a, over, p["shift_mean"], ddof=p["whiten_ddof"],
                                 eps=p["whiten_eps"], eps_mode=p["whiten_eps_mode"]))


def masked_gae(rewards, values, gamma, lam, m):
    """Advantages and returns over the positions of ``m`` (GAE's fast form on large batches:
    the size rule of ``ppo_numpy.fast.gae_blocked``)."""
    method = "blocked" if use_blocked(values) else "loop"
    return gae_kernel(where_valid(m, rewards), where_valid(m, values), float(gamma),
                      float(lam), m, method)


def masked_whiten(x, m, shift_mean=True, *, ddof=1, eps=1e-8, eps_mode="add"):
    return whiten_kernel(where_valid(m, x), m, shift_mean, ddof, eps, eps_mode)


def preset_loss_options(p: dict, agg: str = "token-mean", kl=None, norm=None) -> PolicyLossOptions:
    """The policy-loss options of a preset's parameters: ``epsilon`` and, where the framework
    has them, ``epsilon_high``, ``dual_clip``, ``log_ratio_clamp``; with ``kl`` (a dict of the
    KL fields of :class:`~ppo_numpy.PolicyLossOptions`: ``kl_coef``, ``kl_estimator``,
    ``kl_clamp``, and where the framework sets them ``kl_gradient``, ``kl_is_bound``,
    ``kl_agg``) the KL term ``kl_coef * aggregate(KL(logp || logp_ref))`` in the loss instead
    of the rewards (verl ``use_kl_loss``); ``norm`` the divisor of the modes that take one
    (:func:`verl_trainer_agg`)."""
    return PolicyLossOptions(epsilon=p["epsilon"], epsilon_high=p.get("epsilon_high"),
                             dual_clip=p.get("dual_clip"),
                             log_ratio_clamp=p.get("log_ratio_clamp"), agg=agg, norm=norm,
                             **(kl or {}))


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
    ``is_weights``: the rollout correction's weights on the policy term (and on the KL term
    under the convention ``is_weights_on_kl``, where the preset has it)."""
    pl, pl_stats, dlogp = third_policy.policy_loss(
        "preset", p, where_valid(mask, x.logp), where_valid(mask, x.logp_old),
        where_valid(mask, advantages), mask, preset_loss_options(p, agg, kl, norm),
        where_valid(mask, x.logp_ref),
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
    stats = {**pl_stats, "value_clipfrac": mean_over(wins.astype(np.float64), vm),
             "loss_without_kl": pl.policy_loss, "kl_loss": pl.kl_loss}
    # why: with kl, a loss of -0.0 is 0.0 even for coef 0 (the kernel then adds no KL term)
    policy_loss = pl.loss + 0.0 if kl else pl.loss
    return policy_loss, stats, dlogp, vloss, dvalues


def step_losses(step, x: Rollout, advantages, returns, p: dict, agg: str = "token-mean", *,
                mask, normaliser, value_normaliser, value_mask=None, kl=None,
                is_weights=None, norm=None, stats=False, kl_normaliser=None):
    """The step of :func:`losses` (same arguments) over ``step``'s layout:
    ``(outputs, passes, value)``: ``step/losses``, ``step/dlogp`` with each micro-batch
    normalised by ``normaliser``, ``step/value_losses``, ``step/dvalues`` by
    ``value_normaliser`` (``presets/_step.py``), the KL term by ``kl_normaliser`` where it
    has its own (None: ``normaliser``); ``passes`` each micro-batch's policy forward (and
    statistics with ``stats``); ``value`` the value loss's per micro-batch
    (``_step.value_step``)."""
    out, passes = policy_step(
        step, where_valid(mask, x.logp), where_valid(mask, x.logp_old),
        where_valid(mask, advantages), mask, preset_loss_options(p, agg, kl, norm), normaliser,
        where_valid(mask, x.logp_ref),
        is_weights=None if is_weights is None else where_valid(mask, is_weights), stats=stats,
        kl_normaliser=kl_normaliser, weighted_kl=third_policy.kl_weights_on("preset", p))
    vm = mask if value_mask is None else value_mask
    v, v_old, R = (where_valid(vm, a) for a in (x.values, x.old_values, returns))
    value_out, value = value_step(step, value_normaliser, v, v_old, R, vm, p["value_clip"],
                                  p["value_clip_form"])
    # (a loss of -0.0 is 0.0, as policy_loss with a KL term)
    out["step/losses"] = out["step/losses"] + 0.0
    return {**out, **value_out}, passes, value


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
        return grpo_advantages(scores, groups, scale=scale, std_eps=eps, ddof=ddof,
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


def kl_form(name: str, p: dict, own: str) -> str:
    """The KL term's gradient form (``PolicyLossOptions.kl_gradient``): ``own``, the form the
    framework's options give (TRL ``use_bias_correction_kl``, verl a ``kl_loss_type`` ending in
    "+", OpenRLHF ``kl_unbiased_gradient``), unless the convention ``kl_gradient`` names
    another (``None``: the framework's). A form no option of the framework gives is there for
    the diagnosis: it names a candidate that differentiates the KL term as another framework
    does (``docs/conventions.md`` section 18)."""
    form = p.get("kl_gradient")
    return own if form is None else check_form(form, f"{name}: kl_gradient")


def _flag(p: dict, key: str, name: str) -> bool:
    if not isinstance(p[key], (bool, np.bool_)):
        raise TypeError(f"{name}: {key}: expected True or False, got {p[key]!r}")
    return bool(p[key])
