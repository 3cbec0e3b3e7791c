"""The PPO training loop for toy language-model tasks (``docs/training.md``).

One iteration, each step named as docs/objective.md names it:

1. rollout: B / G prompts, each repeated G times in consecutive rows (``groups``
   holds the prompt id of each row; G = 1 for PPO); sample a response for each
   of the B rows from pi_theta_old (the current policy); record logp_old, the
   values V(s_t) and the response mask. A sampler that is not the trainer
   (``rollout_precision``, ``rollout_temperature``) draws from its own pi_rollout and
   records ``logp_rollout``; the correction (``rollout_correction``) then weighs each
   token's policy loss by w_t = pi_old / pi_rollout, bounded, computed once per batch
   (``ppo_numpy.rollout_importance_weights``);
2. score each response (the task's rule, or ``RunState.score_fn`` when set:
   e.g. a learned reward model, ``ppo_numpy.reward.overoptimisation``), compute
   logp_ref under the frozen reference, and the KL-shaped rewards r~_t = -beta KL_t + [t = T] score;
3. TD errors and GAE: advantages A_hat_t and returns R_t = A_hat_t + V(s_t);
   whiten A_hat over the batch (switchable). Critic-free algos (``algo`` grpo,
   rloo, reinforce_plus_plus; notebook 13) take their advantages from
   ``ppo_numpy.family.advantages`` instead: GRPO and RLOO of each response's
   KL-shaped return sum_t r~_t (the score when beta = 0), broadcast over its
   tokens; REINFORCE++ the whitened returns-to-go of r~_t. No value is used;
4. K epochs over the batch in minibatches: policy loss + c_V value loss - c_H
   entropy (+ beta_loss KL in the loss), its manual gradients, gradient-norm
   clipping, Adam; c_V = 0 for the critic-free algos (the value head gets no
   gradient and stays as initialised). On the
   first minibatch of each iteration pi_theta = pi_theta_old, so rho is
   exactly 1 there; the run stops with :class:`RatioNotOneError` otherwise.
   With ``micro_batches`` K > 1 each minibatch's gradient is the sum of K micro-batches'
   backward passes, each normalised by ``normaliser``
   (``ppo_numpy.training.accumulation``);
5. update beta with the KL controller (fixed or adaptive).

Before the first iteration the policy is warmed up on the task's prior and
copied as the frozen reference (``ppo_numpy.training.warmup``). Everything
random comes from one ``np.random.Generator`` seeded by ``config.seed``, so
a run is a deterministic function of its configuration, and a checkpoint
(params, Adam state, reference, beta, generator state) resumes it exactly.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from .._checks import where_valid
from ..family.advantages import reinforce_plus_plus_advantages
from ..fast.gae_blocked import use_blocked
from ..fast.group_layouts import grpo_advantages, rloo_advantages
from ..mismatch.correction import rollout_importance_weights
from ..models import BigramPolicy, MLPPolicy, TransformerPolicy
from ..models.loss import loss_and_grads_kernel
from ..models.optim import Adam, global_norm, scale_to_norm
from ..models.sampling import evaluate_kernel, sample
from ..policy_loss.options import PolicyLossOptions
from ..ppo.gae import gae_kernel
from ..ppo.kl import check_scores, kl_estimate_kernel, kl_shaped_rewards_kernel
from ..ppo.whitening import whiten_kernel
from .accumulation import accumulated_loss_and_grads
from .config import CRITIC_FREE, PPOConfig, responses_per_prompt, rollout_is_options
from .kl_controllers import AdaptiveKLController, FixedKLController
from .metrics import COLUMNS, explained_variance, return_variance
from .tasks import Task, make_task, response_lengths
from .warmup import warm_up, warm_up_value


class RatioNotOneError(RuntimeError):
    """rho != 1 on the first minibatch: logp_old is not the current policy's log-probability."""


@dataclass
class RunState:
    """Everything a run needs to continue: saved whole in a checkpoint."""

    config: PPOConfig
    task: Task
    rng: np.random.Generator
    policy: object
    reference: object
    optimizer: Adam
    kl_controller: object
    iteration: int = 0
    warmup_losses: list = field(default_factory=list)
    #: replaces ``task.score`` in step 2 when set: callable(prompts, responses, mask) -> (B,)
    #: float64. Not saved in checkpoints (a resumed run scores with the task's rule).
    score_fn: object = None
    #: called with each iteration's Rollout right after sampling (``prompts``, ``responses``,
    #: ``mask``, ``logp_old``, ``logp_rollout``): an observer, e.g. the mismatch
    #: statistics of ``python -m ppo_numpy mismatch``; it must not modify the rollout.
    on_rollout: object = None


def make_policy(config: PPOConfig, task: Task, rng: np.random.Generator):
    """A fresh policy of the configured architecture, initialised from ``rng``."""
    # the critic-free algos use no value head: no critic layer for them
    value_hidden = 0 if config.algo in CRITIC_FREE else config.value_hidden
    if config.model == "mlp":
        return MLPPolicy(task.vocab_size, config.context, config.d_embed, config.d_hidden, rng,
                         value_hidden=value_hidden)
    if config.model == "transformer":
        return TransformerPolicy(task.vocab_size, rng, d_model=config.d_model,
                                 n_heads=config.n_heads, n_layers=config.n_layers,
                                 max_len=task.prompt_length + task.max_new_tokens - 1,
                                 value_hidden=value_hidden)
    return BigramPolicy(task.vocab_size, rng)


def make_kl_controller(config: PPOConfig, beta=None):
    beta = config.beta if beta is None else beta
    if config.kl_controller == "fixed":
        return FixedKLController(beta)
    return AdaptiveKLController(beta, config.kl_target, config.kl_horizon)


def new_run(config: PPOConfig) -> RunState:
    """Initialise the policy, warm it up on the prior, freeze the reference (iteration 0)."""
    task = make_task(config.task)
    rng = np.random.default_rng(config.seed)
    policy = make_policy(config, task, rng)
    losses = warm_up(policy, task, rng, config.warmup_steps, config.warmup_lr,
                     config.warmup_batch)
    reference = copy.deepcopy(policy)
    if config.value_warmup_steps and config.algo not in CRITIC_FREE:
        # V fitted to pi_ref's returns; the policy's parameters are untouched (= pi_ref)
        warm_up_value(policy, task, rng, config.value_warmup_steps, config.warmup_lr,
                      config.warmup_batch, config.gamma)
    optimizer = Adam(policy.params, lr=config.lr)
    return RunState(config, task, rng, policy, reference, optimizer,
                    make_kl_controller(config), 0, losses)


def fork_run(start: RunState, config: PPOConfig) -> RunState:
    """A copy of ``start`` (its policy, reference, optimiser and generator state) that goes on
    with ``config`` and a fresh KL controller: the runs of a sweep share one warm-up."""
    state = copy.deepcopy(start)
    state.config = config
    state.kl_controller = make_kl_controller(config)
    return state


def ppo_iteration(state: RunState) -> dict:
    """Run one PPO iteration on ``state`` (in place) and return its row of metrics."""
    c, task, rng = state.config, state.task, state.rng
    B, G = c.batch_size, responses_per_prompt(c)
    critic_free = c.algo in CRITIC_FREE

    # 1. rollout: B / G prompts, G consecutive copies of each (prompt id = group);
    #    y ~ pi_theta_old(. | x); record logp_old, V(s_t), the mask
    prompts = np.repeat(task.sample_prompts(rng, B // G), G, axis=0)  # (B, P)
    groups = np.repeat(np.arange(B // G), G)  # (B,)
    rollout = sample(state.policy, prompts, rng, task.max_new_tokens, **sampler_options(c))
    responses, mask = rollout.responses, rollout.mask
    logp_old, old_values = rollout.logp_old, rollout.old_values
    if state.on_rollout is not None:
        state.on_rollout(rollout)

    # 2. reference log-probs, scores, KL-shaped rewards r~_t = -beta KL_t + [t = T] score
    logp_ref = evaluate_kernel(state.reference, prompts, responses, mask, 1.0,
                               values=False).logp
    score_fn = task.score if state.score_fn is None else state.score_fn
    # why: score_fn may be the user's: its output is the one input checked here
    scores = check_scores(np.asarray(score_fn(prompts, responses, mask), dtype=np.float64),
                          logp_old)
    beta = state.kl_controller.value
    kl = kl_estimate_kernel(logp_old, logp_ref, c.kl_estimator)
    rewards = kl_shaped_rewards_kernel(scores, kl, mask, float(beta))
    # KL to the reference: sum over tokens of k1 (0 at padding), mean over sequences
    k1 = kl if c.kl_estimator == "k1" else kl_estimate_kernel(logp_old, logp_ref, "k1")
    kl_ref = float(k1.sum(axis=1).mean())

    # 3. TD errors, GAE, returns R_t = A_hat_t + V(s_t); whitening
    if critic_free:
        advantages = critic_free_advantages(c, rewards, groups, mask)
        # no value target: R = V(s_t), so the value loss is 0 (and c_V = 0 below)
        returns = old_values
    else:
        # (GAE's fast form on large batches: the size rule of ppo_numpy.fast.gae_blocked)
        method = "blocked" if use_blocked(old_values) else "loop"
        advantages, returns = gae_kernel(rewards, old_values.copy(), float(c.gamma),
                                         float(c.lam), mask, method)
        if c.whiten_advantages:
            advantages = whiten_kernel(advantages, mask)
    batch = rollout.replace_trusted(logp_ref=logp_ref, scores=scores, advantages=advantages,
                                    returns=returns, groups=groups)
    # 3'. the rollout correction: w_t = pi_old / pi_rollout, bounded, over the whole batch
    #     (batch_normalize divides by the batch's mean), then cut with the minibatches
    correction = rollout_is_options(c)
    is_weights = (None if correction is None else
                  rollout_importance_weights(logp_old, rollout.logp_rollout, mask, **correction))

    # 4. K epochs x minibatches: policy loss + c_V value loss - c_H entropy
    #    (+ beta_loss KL_t in the loss), clip, Adam
    opts = PolicyLossOptions(epsilon=c.epsilon, agg=c.agg, importance_level=c.importance_level,
                             kl_coef=c.kl_loss_coef, kl_estimator=c.kl_loss_estimator,
                             kl_gradient=c.kl_loss_gradient, kl_is_bound=c.kl_loss_is_bound)
    c_v = 0.0 if critic_free else c.c_v
    sums = dict.fromkeys(("clipfrac", "approx_kl_k1", "approx_kl_k3", "entropy",
                          "policy_loss", "value_loss", "grad_norm"), 0.0)
    first = None
    for _ in range(c.epochs):
        # the B rows in a random order, cut into c.minibatches equal minibatches (it divides B)
        for rows in rng.permutation(B).reshape(c.minibatches, -1):
            minibatch = batch.rows(rows)
            mb_weights = None if is_weights is None else is_weights[rows]
            if c.micro_batches == 1:
                loss, grads, stats = loss_and_grads_kernel(
                    state.policy, minibatch, opts, c_v=c_v, c_H=c.c_H,
                    value_clip=c.value_clip, is_weights=mb_weights)
            else:
                # 4'. gradient accumulation: the micro-batches' gradients added
                loss, grads, stats = accumulated_loss_and_grads(
                    state.policy, minibatch, opts, micro_batches=c.micro_batches,
                    normaliser=c.normaliser, is_weights=mb_weights, c_v=c_v, c_H=c.c_H,
                    value_clip=c.value_clip)
            if first is None:
                first = stats
                _check_ratio_is_one(stats, state.iteration + 1)
            grad_norm = global_norm(grads)
            if c.max_grad_norm is not None:
                grads = scale_to_norm(grads, c.max_grad_norm, grad_norm)
            state.optimizer.step(grads, check=False)
            stats.update(clipfrac=stats["clipfrac_active"], grad_norm=float(grad_norm))
            for name in sums:
                sums[name] += stats[name]

    # 5. KL controller update
    state.kl_controller.update(kl_ref, B)
    state.iteration += 1

    n_updates = c.epochs * c.minibatches
    row = {name: total / n_updates for name, total in sums.items()}
    score = float(scores.mean())
    row.update(
        iteration=state.iteration,
        score=score,
        score_frac=score / task.optimum,
        kl_ref=kl_ref,
        beta=float(beta),
        # critic-free: no value head in use, nothing to explain (NaN, as for constant R)
        explained_variance=(math.nan if critic_free
                            else explained_variance(old_values, returns, mask)),
        return_variance=math.nan if critic_free else return_variance(returns, mask),
        response_length=float(mask.sum(axis=1).mean()),
        eos_frac=float(np.mean(response_lengths(responses, mask)[1])),
        ratio_first_min=first["ratio_min"],
        ratio_first_max=first["ratio_max"],
        ratio_first_mean=first["ratio_mean"],
        # greedy, after this iteration's update (no randomness used)
        heldout_accuracy=task.heldout_accuracy(state.policy),
    )
    if critic_free:
        row["value_loss"] = math.nan
    return {name: row[name] for name in COLUMNS}


def sampler_options(c: PPOConfig) -> dict:
    """The keywords of a sampler that is not the trainer for :func:`sample` (none when the
    sampler is the trainer: float64 logits at temperature 1, the call of every run before)."""
    options = {}
    if c.rollout_precision != "float64":
        options["rollout_precision"] = c.rollout_precision
    if c.rollout_temperature != 1.0:
        options["rollout_temperature"] = float(c.rollout_temperature)
    return options


def critic_free_advantages(c: PPOConfig, rewards, groups, mask):
    """The critic-free advantages (B, T) of one iteration, 0 at padding.

    grpo and rloo: sequence-level A_i of each response's return sum_t r~_t (the score
    itself when beta = 0; verl's ``token_level_rewards.sum(-1)``), the same A_i on every
    token of the response. reinforce_plus_plus: token-level, the returns-to-go of r~_t
    whitened over the batch's tokens (verl's defaults: ddof 1, eps 1e-8). GRPO and RLOO by
    their fast form for regular layouts (``ppo_numpy.fast.group_layouts``: the reference's
    bits; the loop's groups are blocks of G rows by construction), REINFORCE++ by the public
    function of ``ppo_numpy.family.advantages``; their checks of arrays the loop made cost
    microseconds per iteration.
    """
    if c.algo == "reinforce_plus_plus":
        return reinforce_plus_plus_advantages(rewards, mask, float(c.gamma))
    returns = rewards.sum(axis=1)  # (B,)
    if c.algo == "grpo":
        A = grpo_advantages(returns, groups, scale=c.grpo_scale, std_eps=float(c.grpo_std_eps))
    else:
        A = rloo_advantages(returns, groups)
    return where_valid(mask, A[:, None])  # (B, T): A_i on each response token


def _check_ratio_is_one(stats, iteration):
    lo, hi, mean = stats["ratio_min"], stats["ratio_max"], stats["ratio_mean"]
    if not (lo == 1.0 and hi == 1.0 and mean == 1.0):
        raise RatioNotOneError(
            f"iteration {iteration}: on the first minibatch rho must be exactly 1 "
            f"(pi_theta = pi_theta_old before any update), got min {lo!r}, max {hi!r}, "
            f"mean {mean!r}: the recomputed logp differs from the logp_old recorded at "
            "rollout (stale logp_old, or sampling and evaluation disagree)")
