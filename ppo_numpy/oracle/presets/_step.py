"""A preset's optimizer step over the ranks and micro-batches of a case's layout (notebook 16;
:mod:`ppo_numpy.step`; ``docs/conventions.md`` section 17).

A case may carry ``"layout"`` (:func:`ppo_numpy.step_layout`: a list over data-parallel ranks
of lists of micro-batches of row indices, every row exactly once) and, for ``trl-grpo``,
``"steps_per_generation"`` (TRL's S: the micro-batches per rank of one generation batch). A
preset that has a policy loss then adds to its outputs what its framework's trainer computes
in that step, each micro-batch normalised by the framework's convention (the preset's
``normaliser`` switch, :data:`ppo_numpy.step.NORMALISERS`):

* ``step/losses`` (M,): the scalar each micro-batch's backward starts from, rank-major then
  micro-batch order, the KL term in the loss included;
* ``step/dlogp`` (B, T): the gradient the optimizer applies, as a function of the
  log-probabilities: each rank's sum over its micro-batches, averaged over the ranks;
* for the presets with a value head, ``step/value_losses`` (M,) and ``step/dvalues`` (B, T)
  the same for the value loss (before any ``vf_coef``, as ``value_loss``);
* ``step/stat/<name>``: a statistic as the framework aggregates it across the step's
  micro-batches and ranks, where it logs one per micro-batch.

Without a layout nothing here runs and a preset's outputs are those of one rank with one
micro-batch. The advantages, returns and rollout weights are the batch's, computed before the
step is cut (every framework computes them before its update); the losses and their
statistics are computed on each micro-batch's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._checks import check_int
from ...ppo.value_loss import clipped_wins, value_loss_grad_kernel, value_loss_kernel
from ...step.layout import check_layout
from ...step.normalisers import NORMALISERS, Normaliser
from ...step.outputs import micro_batch_passes, step_of, step_outputs_kernel

#: the entries of a case that describe its step (not inputs, not parameters)
STEP_KEYS = ("layout", "steps_per_generation")

#: a mode of :func:`ppo_numpy.aggregate` -> (verl's ``loss_agg_mode``, TRL's ``loss_type``,
#: OpenRLHF's reduction or None): the same aggregation under each framework's name, for a
#: normaliser switch that names another framework
_FRAMEWORK_MODES = {
    "token-mean": ("token-mean", "dapo", "token-mean"),
    "dapo": ("token-mean", "dapo", "token-mean"),
    "bnpo": ("token-mean", "bnpo", "token-mean"),
    "seq-mean-token-mean": ("seq-mean-token-mean", "grpo", "seq-mean-token-mean"),
    "grpo": ("seq-mean-token-mean", "grpo", "seq-mean-token-mean"),
    "seq-mean-token-sum": ("seq-mean-token-sum", "luspo", None),
    "luspo": ("seq-mean-token-sum", "luspo", None),
    "seq-mean-token-sum-norm": ("seq-mean-token-sum-norm", "dr_grpo", None),
    "dr_grpo": ("seq-mean-token-sum-norm", "dr_grpo", None),
}


@dataclass(frozen=True)
class Step:
    """A case's step, checked: ``layout`` a list over ranks of lists of (n,) int arrays;
    ``steps_per_generation`` TRL's S or None."""

    layout: list
    steps_per_generation: int | None = None

    @property
    def ranks(self) -> int:
        return len(self.layout)

    def same_micro_batches(self) -> int | None:
        """K, when every rank runs as many micro-batches; else None."""
        counts = {len(rank) for rank in self.layout}
        return counts.pop() if len(counts) == 1 else None


def read_step(case: dict, n_rows: int, preset: str, takes_layout: bool) -> Step | None:
    """The case's :class:`Step`, or None when it carries no layout. ValueError or TypeError
    naming the entry: a layout that misses or repeats a row or holds an empty micro-batch
    (:func:`ppo_numpy.step.check_layout`), a layout on a preset without a policy loss,
    ``steps_per_generation`` without a layout or on a preset other than ``trl-grpo``."""
    layout = case.get("layout")
    S = case.get("steps_per_generation")
    if layout is None:
        if S is not None:
            raise ValueError("steps_per_generation: a step needs a layout (the case has "
                             "none)")
        return None
    if not takes_layout:
        raise ValueError(f"layout: preset {preset!r} has no policy loss to split over ranks "
                         "and micro-batches (a layout needs a preset whose pipeline computes "
                         "the step: Preset.takes_layout)")
    lay = check_layout(layout, n_rows)
    if S is not None:
        if preset != "trl-grpo":
            raise ValueError(f"steps_per_generation: TRL's GRPOConfig option; preset "
                             f"{preset!r} has none")
        S = check_int(S, "steps_per_generation")
    return Step(lay, S)


def normaliser_for(name: str, mode: str, norm=None, *, step: Step, n_rows: int,
                   trl_loss_type: str | None = None, num_items_in_batch=None) -> Normaliser:
    """The :class:`~ppo_numpy.Normaliser` called ``name`` (a value of a preset's
    ``normaliser`` switch) for a loss the preset aggregates by ``mode`` (an aggregation mode
    of :func:`ppo_numpy.aggregate`, the framework's, with its ``norm``).

    ``"global"``, ``"micro-batch-mean"``, ``"local"``: that rule of ``mode``. ``"verl"``: its
    ``loss_agg_mode`` of the same aggregation, ``global_batch_size`` the step's rows (verl
    0.9.1 ``ppo_mini_batch_size * rollout.n``). ``"trl"``: its loss type of the same
    aggregation (``trl_loss_type`` when the preset names it), with the step's
    ``steps_per_generation`` and ``num_items_in_batch`` for the num-items rule.
    ``"openrlhf"``: its token or sequence reduction (ValueError for another)."""
    if name not in NORMALISERS:
        raise ValueError(f"normaliser: expected one of {', '.join(NORMALISERS)}, got {name!r}")
    if name in ("global", "micro-batch-mean", "local"):
        return Normaliser(name, mode, norm)
    verl_mode, trl_type, openrlhf_mode = _FRAMEWORK_MODES[mode]
    if name == "verl":
        return Normaliser("verl", verl_mode,
                          norm=norm if verl_mode == "seq-mean-token-sum-norm" else None,
                          global_batch_size=n_rows if verl_mode.startswith("seq-") else None)
    if name == "trl":
        trl_type = trl_loss_type or trl_type
        num_items = trl_type in ("dapo", "cispo", "vespo")
        S = step.steps_per_generation if num_items else None
        K = step.same_micro_batches()
        given = num_items_in_batch if num_items and S is not None and K and S > K else None
        return Normaliser("trl", trl_type, norm=norm if trl_type == "dr_grpo" else None,
                          steps_per_generation=S, num_items_in_batch=given)
    if openrlhf_mode is None:
        raise ValueError(f"normaliser: OpenRLHF reduces by its token mean or its sequence "
                         f"mean of token means; it has no {mode!r}")
    return Normaliser("openrlhf", openrlhf_mode)


def policy_step(step: Step, logp, logp_old, A, m, opts, norm: Normaliser, logp_ref=None, *,
                is_weights=None, kl_normaliser=None, stats=False, weighted_kl=False) -> tuple:
    """``(outputs, passes)``: ``step/losses`` and ``step/dlogp`` of the policy loss ``opts``
    on (B, T) arrays 0 at padding, each micro-batch by its own forward and backward
    (:func:`ppo_numpy.step.outputs.micro_batch_passes`); ``passes`` for the statistics.
    ``weighted_kl``: the preset's convention ``is_weights_on_kl``; the KL term weighted by
    rollout weights is not split over micro-batches (ValueError naming the layout)."""
    if weighted_kl and is_weights is not None and opts.kl_coef > 0:
        raise ValueError("layout: the KL term weighted by the rollout weights "
                         "(is_weights_on_kl=True) is not reproduced over micro-batches; give "
                         "no layout, or is_weights_on_kl=False")
    passes = micro_batch_passes(logp, logp_old, A, m, step.layout, norm, opts, logp_ref,
                                is_weights=is_weights, kl_normaliser=kl_normaliser,
                                stats=stats)
    return step_of(passes, logp, step.ranks), passes


def value_step(step: Step, norm: Normaliser, v, v_old, R, vm, c, form) -> tuple:
    """``(outputs, per micro-batch)``: ``step/value_losses`` and ``step/dvalues`` of the value
    loss 1/2 max((V - R)^2, (V_clip - R)^2) (``c``, ``form``: the preset's clip) over the
    value mask ``vm``, inputs 0 outside it; and, one per micro-batch (rank-major), its value
    clip fraction (``"clipfrac"``: the token mean over its rows of "the clipped error is
    strictly larger") and its own token mean of the loss (``"mean"``)."""
    terms = value_loss_kernel(v, v_old, R, c, form)
    dterms = value_loss_grad_kernel(v, v_old, R, c, form)
    losses, dvalues = step_outputs_kernel(terms, dterms, vm, step.layout, norm)
    wins = clipped_wins(v, v_old, R, c, form) & vm
    groups = [rows for rank in step.layout for rows in rank]
    count = [max(np.count_nonzero(vm[rows]), 1) for rows in groups]
    return ({"step/value_losses": losses, "step/dvalues": dvalues + 0.0},
            {"clipfrac": np.array([np.count_nonzero(wins[rows]) / n
                                   for rows, n in zip(groups, count)]),
             "mean": np.array([terms[rows].sum() / n for rows, n in zip(groups, count)])})


def own_token_means(passes: list, m, x=None) -> np.ndarray:
    """Per pass (rank-major), the token mean over its own rows of ``x`` ((B, T), 0 at
    padding), or of its policy term's loss -term (``x`` None): the loss a trainer that takes
    each micro-batch's own mean logs."""
    out = []
    for mb in passes:
        n = max(np.count_nonzero(m[mb.rows]), 1)
        out.append((-mb.forward.term.sum() if x is None else x[mb.rows].sum()) / n)
    return np.array(out)


def rank_mean(step: Step, values) -> float:
    """The mean over the ranks of each rank's mean over its micro-batches, of one value per
    micro-batch (rank-major): what a trainer logs that averages its micro-batches' values and
    then the processes' (TRL's ``gather_stats``, ``gather(...).mean()``)."""
    values = list(values)
    out, at = [], 0
    for rank in step.layout:
        out.append(np.mean(values[at:at + len(rank)]))
        at += len(rank)
    return float(np.mean(out))


def by_rank(step: Step, values) -> np.ndarray | None:
    """One value per micro-batch (rank-major) as a (P, K) array; None when the ranks run
    different numbers of micro-batches (a framework that logs one value per micro-batch
    index needs as many on every rank)."""
    K = step.same_micro_batches()
    return None if K is None else np.asarray(values, dtype=np.float64).reshape(step.ranks, K)


def micro_batch_groups(step: Step) -> list | None:
    """The rows of micro-batch index k on every rank together, for k = 0 .. K-1 (what a
    framework gathers over the ranks for one accumulation step); None for unequal K."""
    K = step.same_micro_batches()
    if K is None:
        return None
    return [np.concatenate([rank[k] for rank in step.layout]) for k in range(K)]


def verl_metric(step: Step, values, aggregation: str):
    """verl 0.9.1's metric of one value per micro-batch (``verl/utils/metric/utils.py``
    ``Metric.aggregate_dp``, called by ``workers/engine_workers.py``): the mean over the dp
    ranks, then the sum (``"sum"``: the losses normalised by the global counts) or the mean
    (``"mean"``: the policy loss's own metrics) over the micro-batches; None for unequal
    K (``aggregate_dp`` refuses ranks with different numbers of values)."""
    grid = by_rank(step, values)
    if grid is None:
        return None
    over_ranks = grid.mean(axis=0)
    return float(over_ranks.sum() if aggregation == "sum" else over_ranks.mean())
