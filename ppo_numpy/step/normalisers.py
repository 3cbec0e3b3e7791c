"""How each micro-batch's loss is normalised in one optimizer step (notebook 16).

Every convention here gives micro-batch k of rank r the loss

    L_{r,k} = sum_{i in (r,k)} sum_t m_{i,t} l_{i,t} / (d_i D_{r,k})

with d_i a divisor of row i (1 for most) and D_{r,k} one of the micro-batch. Each rank's
backward passes add the gradients of its micro-batches, and the ranks' sums are averaged
(DDP and FSDP average gradients over the data-parallel ranks):

    g = (1/P) sum_r sum_k d L_{r,k} / d theta,

so token (i, t) weighs m_{i,t} / (P d_i D_{r,k}) in the gradient the optimizer applies. The
step keeps the full-batch gradient when that is the weight the same convention gives on one
rank with one micro-batch.

Counts: P ranks, K_r micro-batches on rank r (K when every rank has as many); the step's
B rows, B' of them with a token, N tokens; the micro-batch's B_{r,k} rows and N_{r,k} tokens;
n_i tokens in row i; T the padded length.

======================  ==============  ========================================
convention (mode)       d_i             D_{r,k}
======================  ==============  ========================================
global (any agg)        the agg's d_i   the agg's D over the whole step, / P
micro-batch-mean        the agg's d_i   the agg's D over the micro-batch, x K_r
local                   the agg's d_i   the agg's D over the micro-batch
trl grpo, sapo          max(n_i, 1)     B_{r,k} K
trl bnpo                1               max(N_{r,k}, 1) K
trl dr_grpo             1               B_{r,k} L K   (L: ``norm``, default T)
trl luspo               1               B_{r,k} K
trl dapo, cispo, vespo  1               max(N_gen, 1) / P x K / S
verl token-mean         1               N / P
verl token-sum          1               1 / P
verl seq-mean-...-sum   1               GBS / P     (-norm: x loss_scale_factor)
verl seq-mean-...-mean  n_i + 1e-8      GBS / P
openrlhf token-mean     1               N / P
openrlhf seq-mean-...   n_i + 1e-8      B' / P
======================  ==============  ========================================

Sources (the released files; the facts, not the code):

* ``global``: the one-batch aggregation (:mod:`ppo_numpy.ppo.aggregation`) with the step's counts,
  every micro-batch's share multiplied by P so that the ranks' average is the whole. It
  keeps the full-batch gradient for every aggregation mode.
* ``micro-batch-mean``: the aggregation of each micro-batch alone, divided by the number of
  micro-batches: the form of the transformers ``Trainer`` before 4.46 (the 2024
  gradient-accumulation bug: the mean loss of each micro-batch divided by
  ``gradient_accumulation_steps``).
* ``local``: the aggregation of each micro-batch alone, not divided by anything else: the
  micro-batches' gradients add. verl 0.9.1's ``compute_policy_loss_geo_mean``
  (``verl/trainer/ppo/core_algos.py``) returns ``torch.mean`` of its sequence losses over
  the micro-batch's rows and reads no global count, and verl's FSDP engine starts the
  backward from the loss it returns (``workers/utils/losses.py`` ``ppo_loss``): K
  micro-batches give K times the gradient of one.
* ``trl``: TRL 1.16.0, ``trl/trainer/grpo_trainer.py`` ``_compute_loss``: ``grpo``, ``sapo``,
  ``bnpo``, ``dr_grpo`` and ``luspo`` take the micro-batch's own mean and divide by
  ``current_gradient_accumulation_steps`` (K); ``dapo``, ``cispo`` and ``vespo`` divide the
  micro-batch's token sum by ``num_items_in_batch / num_processes *
  current_gradient_accumulation_steps / steps_per_generation``, where ``num_items_in_batch``
  (N_gen) is the token count of the generation batch gathered over the processes
  (``_generate_and_score_completions``: ``self.accelerator.gather(loss_mask.sum()).sum()``),
  clamped at 1. The generation batch is S = ``steps_per_generation`` micro-batches per rank
  (``GRPOConfig``: default ``gradient_accumulation_steps``; the trainer splits it with
  ``split_tensor_dict``). Default loss type: ``"dapo"`` (``GRPOConfig.loss_type``).
* ``verl``: verl 0.9.1, ``verl/trainer/ppo/core_algos.py`` ``agg_loss(loss_mat, loss_mask,
  loss_agg_mode, dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)``:
  ``batch_num_tokens`` N is the all-reduce (sum) of the loss mask over the data-parallel
  group before the micro-batches are cut (``verl/workers/engine/fsdp/transformer_impl.py``,
  ``forward_backward_batch``); ``global_batch_size`` GBS is ``ppo_mini_batch_size *
  rollout.n``, every row of the step, those without a token included
  (``verl/trainer/ppo/ray_trainer.py``, ``_update_actor``); ``loss_scale_factor`` defaults to
  the loss mask's width (T here; a trainer without padding to T sees the micro-batch's own
  width: set it for a constant). ``seq-mean-token-mean`` divides each row by n_i + 1e-8.
  Default mode ``"token-mean"`` (``ActorConfig.loss_agg_mode``).
* ``openrlhf``: OpenRLHF 0.11.2, ``openrlhf/models/loss.py`` ``aggregate_loss`` with
  ``openrlhf/utils/loss_utils.py`` ``iter_grad_accum_global_norm``: the step's token count
  and its count of rows with a token, summed over the micro-batches and all-reduced, divided
  by gas = K; DeepSpeed then scales each backward loss by 1 / gas (as that module's
  docstring says), which cancels it. ``token_level_loss=False`` is ``seq-mean-token-mean``,
  rows divided by n_i + 1e-8, and B' counts only rows with a token.

The 1e-8 of verl and OpenRLHF is the number as written (1/10^8 in exact arithmetic, as
``ppo_numpy._checks.scalar_for`` reads a float).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_choice, check_int, check_scalar, scalar_for
from ..ppo.aggregation import check_mode, divisors, mode_norm

__all__ = ["NORMALISERS", "OPENRLHF_MODES", "TRL_LOSS_TYPES", "VERL_MODES", "Normaliser",
           "check_normaliser", "micro_batch_divisors"]

NORMALISERS = ("global", "micro-batch-mean", "local", "trl", "verl", "openrlhf")
#: TRL 1.16.0's loss types and which of its two rules normalises each
TRL_LOSS_TYPES = {"grpo": "per-micro-batch", "sapo": "per-micro-batch",
                  "bnpo": "per-micro-batch", "dr_grpo": "per-micro-batch",
                  "luspo": "per-micro-batch",
                  "dapo": "num-items", "cispo": "num-items", "vespo": "num-items"}
#: verl 0.9.1's loss_agg_mode values (``agg_loss``)
VERL_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm",
              "seq-mean-token-mean")
#: OpenRLHF 0.11.2's two reductions: token_level_loss True and False
OPENRLHF_MODES = ("token-mean", "seq-mean-token-mean")
#: each framework's default mode (TRL GRPOConfig.loss_type, verl ActorConfig.loss_agg_mode,
#: OpenRLHF token_level_loss=True)
DEFAULT_MODES = {"global": "token-mean", "micro-batch-mean": "token-mean",
                 "local": "token-mean", "trl": "dapo",
                 "verl": "token-mean", "openrlhf": "token-mean"}
#: the divisor verl and OpenRLHF add to each row's token count in seq-mean-token-mean
SEQ_EPS = 1e-8


@dataclass(frozen=True)
class Normaliser:
    """A named convention for the losses of one optimizer step's micro-batches.

    Attributes
    ----------
    name : str
        One of ``NORMALISERS`` (the module docstring has each rule and its source).
    mode : str, optional
        The aggregation inside the convention: for ``"global"``, ``"micro-batch-mean"`` and
        ``"local"``
        an aggregation mode of :func:`ppo_numpy.aggregate` (or TRL's); for ``"trl"`` the
        ``loss_type`` (``TRL_LOSS_TYPES``); for ``"verl"`` the ``loss_agg_mode``
        (``VERL_MODES``); for ``"openrlhf"`` ``"token-mean"`` or
        ``"seq-mean-token-mean"``. ``None``: the default of the name (``DEFAULT_MODES``).
    norm : float > 0, optional
        The constant divisor of the modes that take one: the aggregation's ``norm``, TRL's
        ``max_completion_length`` (``dr_grpo``), verl's ``loss_scale_factor``
        (``seq-mean-token-sum-norm``). ``None``: the mode's default (T).
    steps_per_generation : int >= 1, optional
        TRL's S for the ``num-items`` rule: the micro-batches per rank of one generation
        batch. ``None``: K, the step's micro-batches per rank (TRL's default).
    num_items_in_batch : int >= 0, optional
        TRL's N_gen when S > K: the generation batch spans several optimizer steps, so its
        token count is not the step's. Only then (otherwise it is counted from the layout).
    global_batch_size : int >= 1, optional
        verl's GBS for its sequence modes. ``None``: the step's rows (verl's
        ``ppo_mini_batch_size * rollout.n``).

    Examples
    --------
    >>> Normaliser("trl", "grpo").rule
    'per-micro-batch'
    >>> Normaliser("trl").mode, Normaliser("trl").rule
    ('dapo', 'num-items')
    >>> Normaliser("verl", "seq-mean-token-mean", norm=4)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: norm: verl divides by loss_scale_factor only in mode ... got norm=4 with ...
    """

    name: str = "global"
    mode: str | None = None
    norm: float | None = None
    steps_per_generation: int | None = None
    num_items_in_batch: int | None = None
    global_batch_size: int | None = None

    def __post_init__(self):
        check_choice(self.name, "name", NORMALISERS, "normaliser")
        set_ = object.__setattr__
        mode = DEFAULT_MODES[self.name] if self.mode is None else self.mode
        set_(self, "mode", mode)
        if self.name in ("global", "micro-batch-mean", "local"):
            check_mode(mode)
            set_(self, "norm", mode_norm(mode, self.norm))
        elif self.name == "trl":
            check_choice(mode, "mode", tuple(TRL_LOSS_TYPES), "TRL loss_type")
            self._only("norm", mode == "dr_grpo", "TRL divides by max_completion_length only "
                       "in loss_type 'dr_grpo'")
        elif self.name == "verl":
            check_choice(mode, "mode", VERL_MODES, "verl loss_agg_mode")
            self._only("norm", mode == "seq-mean-token-sum-norm",
                       "verl divides by loss_scale_factor only in mode "
                       "'seq-mean-token-sum-norm'")
        else:
            check_choice(mode, "mode", OPENRLHF_MODES, "OpenRLHF reduction")
            self._only("norm", False, "OpenRLHF has no constant divisor")
        if self.norm is not None:
            set_(self, "norm", check_scalar(self.norm, "norm", low=0, low_open=True))
        num_items = self.name == "trl" and TRL_LOSS_TYPES[mode] == "num-items"
        self._only("steps_per_generation", num_items, "only TRL's num-items rule (loss_type "
                   "dapo, cispo, vespo) has steps_per_generation")
        self._only("num_items_in_batch", num_items, "only TRL's num-items rule (loss_type "
                   "dapo, cispo, vespo) divides by num_items_in_batch")
        sequences = self.name == "verl" and mode.startswith("seq-")
        self._only("global_batch_size", sequences, "only verl's sequence modes divide by "
                   "global_batch_size")
        if self.steps_per_generation is not None:
            check_int(self.steps_per_generation, "steps_per_generation")
        if self.num_items_in_batch is not None:
            check_int(self.num_items_in_batch, "num_items_in_batch", low=0)
        if self.global_batch_size is not None:
            check_int(self.global_batch_size, "global_batch_size")

    def _only(self, field: str, allowed: bool, why: str) -> None:
        value = getattr(self, field)
        if value is not None and not allowed:
            raise ValueError(f"{field}: {why}, got {field}={value!r} with mode {self.mode!r}")

    @property
    def rule(self) -> str:
        """TRL's rule for the loss type (``"per-micro-batch"`` or ``"num-items"``); for the
        other names the name itself."""
        return TRL_LOSS_TYPES[self.mode] if self.name == "trl" else self.name

    def alone(self) -> Normaliser:
        """The convention on one rank with one micro-batch, the step's rows its whole batch:
        the full-batch form the step is compared with (TRL's generation batch is then the
        step: ``steps_per_generation`` and ``num_items_in_batch`` unset)."""
        if self.name in ("micro-batch-mean", "local"):
            return Normaliser("global", self.mode, self.norm)
        if self.name == "trl":
            return Normaliser("trl", self.mode, self.norm)
        return self


def check_normaliser(normaliser) -> Normaliser:
    """A :class:`Normaliser`, or a name of ``NORMALISERS`` (its defaults), as a Normaliser."""
    if isinstance(normaliser, Normaliser):
        return normaliser
    if isinstance(normaliser, str):
        return Normaliser(normaliser)
    raise TypeError(f"normaliser: expected a Normaliser or one of {', '.join(NORMALISERS)}, "
                    f"got {type(normaliser).__name__}")


def micro_batch_divisors(normaliser: Normaliser, m: np.ndarray, layout: list, like) -> list:
    """The ``(d, D)`` of every micro-batch of a checked ``layout`` (unchecked kernel).

    ``m`` the step's bool (B, T) mask; ``layout`` from ``check_layout``; ``like`` an array
    whose arithmetic the divisors take (float64, or exact: Fractions). Returns a list over
    ranks of lists of ``(d, D)``: ``d`` None or the (b,) divisors of the micro-batch's rows,
    ``D`` the micro-batch's, so that its loss is sum_i sum_t m l / (d_i D) (the module
    docstring's table).
    """
    n_tokens = m.sum(axis=-1)  # (B,)
    P = len(layout)
    name, mode = normaliser.name, normaliser.mode

    def num(x):  # a count in the arithmetic of like
        return scalar_for(x, like)

    if name == "global":
        d, D = divisors(m, mode, normaliser.norm, like=like, n_tokens=n_tokens)
        return [[(None if d is None else d[rows], D / num(P)) for rows in rank]
                for rank in layout]
    if name in ("micro-batch-mean", "local"):
        # micro-batch-mean: x K_r (its rank's micro-batches); local: x 1
        return [[_scaled(_divisors(m[rows], mode, normaliser.norm, like, n_tokens[rows],
                                   f"layout[{r}][{k}]"),
                         num(len(rank) if name == "micro-batch-mean" else 1))
                 for k, rows in enumerate(rank)] for r, rank in enumerate(layout)]
    if name == "trl":
        return _trl_divisors(normaliser, m, n_tokens, layout, num)
    # verl, openrlhf: the step's counts, all-reduced
    N, B = int(n_tokens.sum()), m.shape[0]
    if mode == "token-mean" and N == 0:
        raise ValueError("mask: no response token in the step (the token mean is 0/0)")
    if name == "verl":
        GBS = B if normaliser.global_batch_size is None else normaliser.global_batch_size
        D = {"token-mean": num(N), "token-sum": num(1),
             "seq-mean-token-sum": num(GBS), "seq-mean-token-mean": num(GBS),
             "seq-mean-token-sum-norm": None}[mode]
        if mode == "seq-mean-token-sum-norm":
            lsf = m.shape[-1] if normaliser.norm is None else normaliser.norm
            D = num(GBS) * num(lsf)
    else:
        if mode == "seq-mean-token-mean" and np.count_nonzero(n_tokens) == 0:
            raise ValueError("mask: no row with a response token in the step (the sequence "
                             "mean is 0/0)")
        D = num(N) if mode == "token-mean" else num(int(np.count_nonzero(n_tokens)))
    D = D / num(P)
    if mode != "seq-mean-token-mean":
        return [[(None, D) for _ in rank] for rank in layout]
    # n_i + 1e-8 (the rows without a token have m = 0: their weight is 0 whatever d)
    eps = num(SEQ_EPS)
    return [[(_plus(n_tokens[rows], eps, like), D) for rows in rank] for rank in layout]


def _divisors(m, mode, norm, like, n_tokens, where):
    """:func:`ppo_numpy.ppo.aggregation.divisors` of one micro-batch, its error naming it."""
    try:
        return divisors(m, mode, norm, like=like, n_tokens=n_tokens)
    except ValueError as err:
        raise ValueError(f"{where}: a micro-batch without a response token: its {mode} "
                         f"alone is 0/0 ({err})") from None


def _scaled(divs, factor):
    d, D = divs
    return d, D * factor


def _plus(n, eps, like):
    if like.dtype == object:
        return np.array([int(v) + eps for v in n], dtype=object)
    return n + eps


def _trl_divisors(normaliser, m, n_tokens, layout, num):
    """TRL 1.16.0's two rules (``_compute_loss``); K = current_gradient_accumulation_steps."""
    counts = {len(rank) for rank in layout}
    if len(counts) != 1:
        raise ValueError(f"layout: TRL runs the same number of micro-batches on every rank "
                         f"(current_gradient_accumulation_steps), got "
                         f"{', '.join(str(len(rank)) for rank in layout)}")
    K, P = counts.pop(), len(layout)
    mode = normaliser.mode
    if TRL_LOSS_TYPES[mode] == "per-micro-batch":
        out = []
        for rank in layout:
            row = []
            for rows in rank:
                b = num(len(rows))
                if mode in ("grpo", "sapo"):
                    # ((sum_t m l) / clamp(n_i, 1)).mean() / K
                    row.append((np.maximum(n_tokens[rows], 1), b * num(K)))
                elif mode == "bnpo":
                    # sum m l / clamp(sum m, 1) / K
                    row.append((None, num(max(int(n_tokens[rows].sum()), 1)) * num(K)))
                elif mode == "dr_grpo":
                    # sum m l / (b * max_completion_length) / K
                    L = m.shape[-1] if normaliser.norm is None else normaliser.norm
                    row.append((None, b * num(L) * num(K)))
                else:
                    # luspo: (sum_t m l).sum(-1).mean() / K
                    row.append((None, b * num(K)))
            out.append(row)
        return out
    S = K if normaliser.steps_per_generation is None else normaliser.steps_per_generation
    given = normaliser.num_items_in_batch
    if S > K:
        if S % K:
            raise ValueError(f"steps_per_generation: {S} is not a multiple of the step's {K} "
                             "micro-batches per rank (an optimizer step would straddle two "
                             "generation batches)")
        if given is None:
            raise ValueError(f"num_items_in_batch: with steps_per_generation={S} > {K} "
                             "micro-batches per rank the generation batch spans "
                             f"{S // K} optimizer steps; give its token count over all ranks")
    else:
        if K % S:
            raise ValueError(f"steps_per_generation: {S} does not divide the step's {K} "
                             "micro-batches per rank (a generation batch would straddle two "
                             "optimizer steps)")
        if given is not None:
            raise ValueError(f"num_items_in_batch: with steps_per_generation={S} <= {K} "
                             "micro-batches per rank the generation batches are in the step; "
                             "their token counts come from the layout")
    out = [[] for _ in layout]
    for k in range(K):
        if given is not None:
            N_gen = given
        else:
            # the generation batch of micro-batch k: micro-batches g S ... g S + S - 1 of
            # every rank, g = k // S
            g = k // S
            N_gen = int(sum(n_tokens[rank[j]].sum() for rank in layout
                            for j in range(g * S, g * S + S)))
        # normalizer = clamp(N_gen, 1) / num_processes * K / S
        D = num(max(N_gen, 1)) / num(P) * num(K) / num(S)
        for r in range(P):
            out[r].append((None, D))
    return out
