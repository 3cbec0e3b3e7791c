"""The configuration of a PPO run: one dataclass, each field named for its symbol.

Every field has a ``symbol`` (the notation of docs/objective.md where it has one) and a
``help`` text in its metadata; ``python -m ppo_numpy train --help`` is
generated from them, so the two never disagree. The defaults train the
default task (``length``) to 90% of its optimum in a few seconds.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field

from .._checks import check_choice
from .._renames import renamed_fields, warn_renamed
from ..family.advantages import SCALES
from ..models.precision import PRECISIONS
from ..ppo.aggregation import MODES, TRL_MODES
from ..ppo.kl import ESTIMATORS
from ..ppo.kl_gradient import FORMS
from .accumulation import NORMALISERS as ACCUMULATION_NORMALISERS
from .tasks import TASKS

MODELS = ("mlp", "bigram", "transformer")
KL_CONTROLLERS = ("fixed", "adaptive")
#: "ppo": PPO with GAE and a value head; the others are critic-free (notebook 13)
ALGOS = ("ppo", "grpo", "rloo", "reinforce_plus_plus")
CRITIC_FREE = ("grpo", "rloo", "reinforce_plus_plus")
#: responses per prompt when ``group_size`` is None
DEFAULT_GROUP_SIZE = {"ppo": 1, "grpo": 8, "rloo": 8, "reinforce_plus_plus": 8}
IMPORTANCE_LEVELS = ("token", "sequence")
#: the rollout corrections of a mismatched sampler, by TRL 1.16's names
#: (``vllm_importance_sampling_mode``), and OpenRLHF 0.11.2's sequence gate: the
#: ``level`` and ``mode`` of ``ppo_numpy.rollout_importance_weights`` (docs/training.md)
ROLLOUT_CORRECTIONS = {
    "none": None,
    "token_truncate": ("token", "truncate"),        # TIS; verl rollout_is=token
    "token_mask": ("token", "mask"),                # MIS, IcePop
    "sequence_truncate": ("sequence", "truncate"),  # verl rollout_is=sequence
    "sequence_mask": ("sequence", "mask"),          # TRL's default
    "geometric_mask": ("geometric", "mask"),        # OpenRLHF is_correction_level=seq
}

#: fields that may change between an interrupted run and its resumption
RUN_LENGTH_FIELDS = ("iterations",)


def _f(default, symbol, help_, **extra):
    return field(default=default, metadata={"symbol": symbol, "help": help_, **extra})


@dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of :func:`ppo_numpy.training.train`, grouped by loop step."""

    # the run
    algo: str = _f("ppo", "", "ppo: PPO with GAE and a value head; grpo, rloo, "
                              "reinforce_plus_plus: critic-free, G responses per prompt, "
                              "no value head (docs/training.md)", choices=ALGOS)
    task: str = _f("length", "", "toy task", choices=tuple(TASKS))
    seed: int = _f(0, "", "seed of the one np.random.Generator of the run")
    iterations: int = _f(80, "", "PPO iterations (rollout + update) after the warm-up")
    # the policy and its warm-up (which becomes the frozen reference pi_ref)
    model: str = _f("mlp", "pi_theta", "policy architecture", choices=MODELS)
    context: int = _f(8, "", "tokens the MLP sees (the last `context` of prompt + response)")
    d_embed: int = _f(16, "", "MLP embedding width")
    d_hidden: int = _f(64, "", "MLP hidden width")
    value_hidden: int = _f(64, "H_v", "ppo: width of the critic's own tanh layer (mlp: on "
                                      "the window x; transformer: on its last h); 0: a "
                                      "linear value head on the policy's features, as "
                                      "before issue 25 (docs/training.md)")
    d_model: int = _f(32, "", "transformer width (residual stream)")
    n_heads: int = _f(4, "", "transformer attention heads (must divide d_model)")
    n_layers: int = _f(2, "", "transformer blocks")
    warmup_steps: int = _f(150, "", "supervised steps on the task's prior before PPO "
                                    "(the result is frozen as pi_ref)")
    warmup_lr: float = _f(1e-2, "", "Adam learning rate of the warm-up")
    warmup_batch: int = _f(64, "", "prior responses per warm-up step")
    value_warmup_steps: int = _f(0, "", "ppo: Adam steps (lr warmup_lr) fitting the value "
                                        "head alone to the scores of pi_ref's own rollouts "
                                        "(warmup_batch each) before the first iteration")
    # 1. rollout
    batch_size: int = _f(64, "B", "sampled responses per iteration (B / G prompts, each "
                                  "answered G times)")
    group_size: int | None = _f(None, "G", "responses per prompt, consecutive rows (must "
                                           "divide B; none: 1 for ppo, 8 for the "
                                           "critic-free algos)")
    # 1'. a sampling engine that differs from the trainer (docs/training.md, "A sampler
    #     that is not the trainer")
    rollout_precision: str = _f("float64", "pi_rollout", "the sampler draws from the "
                                "policy's logits rounded to this format (float64: the "
                                "trainer's, no mismatch)", choices=PRECISIONS)
    rollout_temperature: float = _f(1.0, "", "the sampler's temperature (the trainer's is 1)")
    rollout_correction: str = _f("none", "w_t", "importance weights pi_old / pi_rollout on "
                                 "each token's policy loss (TRL's mode names; "
                                 "geometric_mask: OpenRLHF's sequence gate)",
                                 choices=tuple(ROLLOUT_CORRECTIONS))
    rollout_clip_max: float | None = _f(2.0, "", "upper bound of the weights (verl's "
                                        "rollout_is_threshold 2; TRL's clip_max 3; none: "
                                        "no bound)")
    rollout_clip_min: float | None = _f(None, "", "lower bound of the weights (none: no "
                                        "bound; OpenRLHF's 0.5)")
    rollout_log_ratio_bound: float | None = _f(None, "", "clamp the log-ratio to [-b, b] "
                                               "before exp (verl: 20; none: no clamp)")
    rollout_batch_normalize: bool = _f(False, "", "divide the weights by their batch mean "
                                       "(verl's rollout_is_batch_normalize)")
    # 2. KL-shaped rewards r~_t = -beta KL_t + [t = T] score
    beta: float = _f(0.05, "beta", "KL penalty coefficient (initial value if adaptive)")
    kl_estimator: str = _f("k1", "KL_t", "per-token KL estimator in the rewards",
                           choices=ESTIMATORS)
    kl_controller: str = _f("fixed", "", "how beta moves", choices=KL_CONTROLLERS)
    kl_target: float = _f(2.0, "KL_target", "adaptive controller: target KL per sequence (nats)")
    kl_horizon: float = _f(10000.0, "horizon", "adaptive controller: horizon in sequences")
    kl_loss_coef: float = _f(0.0, "beta_loss", "coefficient of a KL-to-reference term in the "
                                              "loss, beta_loss * agg(KL_t) (GRPO's; 0: off)")
    kl_loss_estimator: str = _f("k3", "", "per-token estimator of KL(pi_theta || pi_ref) in "
                                          "the loss term", choices=ESTIMATORS)
    kl_loss_gradient: str = _f("plain", "", "how the loss's KL term is differentiated "
                               "(ppo_numpy.ppo.kl_gradient): plain (verl's low_var_kl), ratio "
                               "(KL_t times the differentiable pi_theta / pi_old: TRL 1.16's "
                               "default), straight_through (k2's gradient: verl's k3+), "
                               "importance (OpenRLHF's unbiased_gradient)", choices=FORMS)
    kl_loss_is_bound: float | None = _f(10.0, "", "importance form: upper bound on pi_theta / "
                                        "pi_old, >= 1 (OpenRLHF's 10; none: no bound)")
    # 3. TD errors, GAE, returns, whitening
    gamma: float = _f(1.0, "gamma", "discount factor")
    lam: float = _f(0.95, "lambda", "GAE parameter")
    whiten_advantages: bool = _f(True, "", "ppo: whiten A_hat over the batch before the "
                                           "update (reinforce_plus_plus always whitens)")
    # 3'. critic-free: the group baseline (ppo_numpy.family.advantages)
    grpo_scale: str = _f("group", "", "grpo: divide s_i - mean_g by the group's std, the "
                                      "batch's, or nothing (none: Dr. GRPO)", choices=SCALES)
    grpo_std_eps: float = _f(1e-6, "std_eps", "grpo: added to the standard deviation (the "
                                              "old name grpo_eps is deprecated)")
    # 4. K epochs x minibatches of updates
    epochs: int = _f(4, "K", "passes over each batch")
    minibatches: int = _f(4, "", "minibatches per epoch (must divide B)")
    micro_batches: int = _f(1, "", "gradient accumulation: each minibatch's gradient as "
                                   "the sum of this many micro-batches' backward passes "
                                   "(must divide the minibatch's rows; 1: one pass)")
    normaliser: str = _f("global", "", "how each micro-batch's loss is normalised: global "
                                       "(the minibatch's counts: the one-pass gradient) or "
                                       "micro-batch-mean (agg of each micro-batch / K: the "
                                       "2024 gradient-accumulation bug; notebook 16)",
                         choices=ACCUMULATION_NORMALISERS)
    epsilon: float = _f(0.2, "epsilon", "clip width of the ratio rho: [1 - epsilon, 1 + "
                                        "epsilon] (the old name eps is deprecated)")
    agg: str = _f("token-mean", "", "loss aggregation (ppo_numpy.aggregate modes, or TRL's)",
                  choices=MODES + TRL_MODES)
    importance_level: str = _f("token", "rho", "token ratios, or GSPO's sequence ratio",
                               choices=IMPORTANCE_LEVELS)
    c_v: float = _f(0.5, "c_V", "value loss coefficient (ppo; the critic-free algos have no "
                                "value loss: 0)")
    value_clip: float | None = _f(None, "c", "value clip range (none: no clipping)")
    c_H: float = _f(0.0, "c_H", "entropy bonus coefficient")
    lr: float = _f(3e-3, "alpha", "Adam learning rate of the PPO updates")
    max_grad_norm: float | None = _f(1.0, "", "clip the global gradient norm (none: no clip)")

    def __post_init__(self):
        check_config(self)

    # the old names of two fields (ppo_numpy._renames): read with a DeprecationWarning
    @property
    def eps(self) -> float:
        """Deprecated: :attr:`epsilon`, the clip width."""
        warn_renamed("PPOConfig", "eps", "epsilon")
        return self.epsilon

    @property
    def grpo_eps(self) -> float:
        """Deprecated: :attr:`grpo_std_eps`."""
        warn_renamed("PPOConfig", "grpo_eps", "grpo_std_eps")
        return self.grpo_std_eps

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PPOConfig:
        # a file written before the renames names eps and grpo_eps (ppo_numpy._renames)
        data = renamed_fields("config file", json.loads(text))
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"config: unknown fields {sorted(unknown)}")
        return cls(**data)

    def replace(self, **changes) -> PPOConfig:
        return dataclasses.replace(self, **renamed_fields("PPOConfig.replace", changes))

    def differences(self, other: PPOConfig, ignore=RUN_LENGTH_FIELDS) -> dict:
        """``{name: (self's value, other's value)}`` for every field that differs."""
        return {f.name: (getattr(self, f.name), getattr(other, f.name))
                for f in dataclasses.fields(self)
                if f.name not in ignore and getattr(self, f.name) != getattr(other, f.name)}


def _taking_old_names(init):
    @functools.wraps(init)
    def __init__(self, *args, **fields):
        init(self, *args, **renamed_fields("PPOConfig", fields))
    return __init__


# PPOConfig(eps=...) and PPOConfig(grpo_eps=...), the old names, with a DeprecationWarning
PPOConfig.__init__ = _taking_old_names(PPOConfig.__init__)

FIELD_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def field_kind(f) -> tuple[type, bool]:
    """(base type, optional?) of a config field, from its annotation."""
    return FIELD_TYPES[f.type.removesuffix(" | None")], f.type.endswith(" | None")


#: defaults that differ by task; the command line applies them under the options given
TASK_DEFAULTS = {
    # docs/training.md, "The add task": 3 seeds, each under 2 minutes on 2 cores
    "add": {"model": "transformer", "iterations": 150, "warmup_steps": 1500,
            "warmup_lr": 3e-3, "lr": 3e-4,
            # docs/training.md, "What the critic buys": without it the randomly initialised
            # value head loses to a constant over the first 10 iterations (1.26x Var(R)/2)
            "value_warmup_steps": 50},
}


#: defaults that differ by task and algo, applied over TASK_DEFAULTS (and under the options)
TASK_ALGO_DEFAULTS = {
    # docs/training.md, "The add task": GRPO with 16 prompts x G = 4 rises further than
    # with 8 x 8 in the same 150 iterations
    ("add", "grpo"): {"group_size": 4},
}


def config_for_task(**fields) -> PPOConfig:
    """``PPOConfig(**fields)`` with the defaults of its task (:data:`TASK_DEFAULTS`) and of its
    task and algo (:data:`TASK_ALGO_DEFAULTS`) under ``fields``.

    >>> config_for_task(task="add", lr=1e-3).model, config_for_task(task="add", lr=1e-3).lr
    ('transformer', 0.001)
    >>> config_for_task(task="add", algo="grpo").group_size, config_for_task(task="add").group_size
    (4, None)
    """
    # a dataclass keeps each field's default as the class attribute
    task = fields.get("task", PPOConfig.task)
    algo = fields.get("algo", PPOConfig.algo)
    return PPOConfig(**{**TASK_DEFAULTS.get(task, {}),
                        **TASK_ALGO_DEFAULTS.get((task, algo), {}), **fields})


def check_config(c: PPOConfig) -> None:
    """Raise ValueError/TypeError naming the first bad field of ``c``."""
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        kind, optional = field_kind(f)
        if value is None and optional:
            continue
        # an int is a valid float; a bool (an int to isinstance) is only a valid bool
        accepted = (int, float) if kind is float else kind
        if not isinstance(value, accepted) or (isinstance(value, bool) and kind is not bool):
            raise TypeError(f"{f.name}: expected {f.type}, got {type(value).__name__} {value!r}")
        if kind is float and not math.isfinite(value):
            raise ValueError(f"{f.name}: must be finite, got {value}")
        choices = f.metadata.get("choices")
        if choices:
            check_choice(value, f.name, choices)
    for name in ("context", "d_embed", "d_hidden", "d_model", "n_heads", "n_layers",
                 "warmup_batch", "batch_size", "epochs", "minibatches", "micro_batches",
                 "warmup_lr", "lr",
                 "kl_target", "kl_horizon"):
        if getattr(c, name) <= 0:
            raise ValueError(f"{name}: must be > 0, got {getattr(c, name)}")
    for name in ("seed", "iterations", "warmup_steps", "value_hidden", "value_warmup_steps",
                 "beta", "c_v", "c_H", "epsilon",
                 "kl_loss_coef", "grpo_std_eps"):
        if getattr(c, name) < 0:
            raise ValueError(f"{name}: must be >= 0, got {getattr(c, name)}")
    for name in ("gamma", "lam"):
        if not 0 <= getattr(c, name) <= 1:
            raise ValueError(f"{name}: must be in [0, 1], got {getattr(c, name)}")
    for name in ("value_clip", "max_grad_norm", "group_size", "rollout_log_ratio_bound"):
        if getattr(c, name) is not None and getattr(c, name) <= 0:
            raise ValueError(f"{name}: must be > 0 or None, got {getattr(c, name)}")
    if c.kl_loss_is_bound is not None and c.kl_loss_is_bound < 1:
        raise ValueError(f"kl_loss_is_bound: must be >= 1 or None (an upper bound on pi_theta / "
                         f"pi_old; on-policy the weight is 1), got {c.kl_loss_is_bound}")
    if c.kl_loss_gradient != "plain" and c.importance_level != "token":
        raise ValueError(f"kl_loss_gradient: {c.kl_loss_gradient!r} is written for "
                         "importance_level='token'; use 'plain' with the sequence level")
    if c.rollout_temperature <= 0:
        raise ValueError(f"rollout_temperature: must be > 0, got {c.rollout_temperature}")
    _check_rollout_bounds(c)
    if c.d_model % c.n_heads:
        raise ValueError(f"n_heads: must divide d_model={c.d_model}, got {c.n_heads}")
    if c.batch_size % c.minibatches:
        raise ValueError(f"minibatches: must divide batch_size={c.batch_size}, "
                         f"got {c.minibatches}")
    rows = c.batch_size // c.minibatches
    if rows % c.micro_batches:
        raise ValueError(f"micro_batches: must divide the minibatch's {rows} rows (batch_size "
                         f"{c.batch_size} / minibatches {c.minibatches}), got "
                         f"{c.micro_batches}")
    if c.whiten_advantages and c.batch_size < 2:
        raise ValueError("batch_size: whitening the advantages needs at least 2 responses")
    G = responses_per_prompt(c)
    if c.batch_size % G:
        raise ValueError(f"group_size: must divide batch_size={c.batch_size} (B = prompts x "
                         f"G), got {G}")
    if c.algo in ("grpo", "rloo") and G < 2:
        raise ValueError(f"group_size: {c.algo} needs at least 2 responses per prompt (its "
                         f"baseline is the other responses of the group), got {G}")
    # so grpo has B >= G >= 2: grpo_scale='batch' (a std over the batch) has 2 responses or more
    if c.algo == "reinforce_plus_plus" and c.batch_size < 2:
        raise ValueError("batch_size: reinforce_plus_plus whitens its returns over the batch, "
                         "needs at least 2 responses")


def _check_rollout_bounds(c: PPOConfig) -> None:
    lo, hi = c.rollout_clip_min, c.rollout_clip_max
    if hi is not None and hi <= 0:
        raise ValueError(f"rollout_clip_max: must be > 0 or None, got {hi}")
    if lo is not None and lo < 0:
        raise ValueError(f"rollout_clip_min: must be >= 0 or None, got {lo}")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"rollout_clip_min: must be <= rollout_clip_max={hi}, got {lo}")


def rollout_is_options(c: PPOConfig) -> dict | None:
    """The keywords of :func:`ppo_numpy.rollout_importance_weights` of ``c``'s correction
    (``None``: no correction).

    >>> rollout_is_options(PPOConfig(rollout_correction="sequence_mask", rollout_clip_max=3.0))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'level': 'sequence', 'mode': 'mask', 'clip_max': 3.0, 'clip_min': None,
     'batch_normalize': False, 'log_ratio_bound': None}
    >>> rollout_is_options(PPOConfig()) is None
    True
    """
    level_mode = ROLLOUT_CORRECTIONS[c.rollout_correction]
    if level_mode is None:
        return None
    level, mode = level_mode
    return dict(level=level, mode=mode, clip_max=c.rollout_clip_max, clip_min=c.rollout_clip_min,
                batch_normalize=c.rollout_batch_normalize,
                log_ratio_bound=c.rollout_log_ratio_bound)


def responses_per_prompt(c: PPOConfig) -> int:
    """G, the responses per prompt of a run: ``c.group_size``, or the algo's default."""
    return DEFAULT_GROUP_SIZE[c.algo] if c.group_size is None else c.group_size
