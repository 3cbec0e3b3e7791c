"""OpenRLHF 0.11.2's own functions on the presets' cases: presets ``openrlhf`` and
``openrlhf-grpo``.

Called: ``openrlhf.models.utils.compute_approx_kl`` (the rollout KL, as ``make_experience``
calls it, and the KL loss as ``ppo_actor.py`` does, ``unbiased_gradient`` included),
``RemoteExperienceMaker.compute_advantages_and_returns`` on a stand-in experience maker (its
``strategy.args``, ``kl_ctl`` and ``advantage_estimator``; the real
``get_advantages_and_returns`` and ``get_cumulative_returns`` bound to it) and real
``Experience`` objects, which runs ``compute_reward``, GAE or the returns-to-go and the batch
normalisation; ``openrlhf.models.PolicyLoss``, ``ValueLoss`` and ``aggregate_loss``.
Gradients: autograd.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from openrlhf.models import PolicyLoss, ValueLoss, aggregate_loss
from openrlhf.models.utils import compute_approx_kl, compute_reward, masked_mean
from openrlhf.trainer.ppo_utils.experience import Experience
from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

from .harness import grad_of, item, numpy, params_of, tensor

VERSION = "0.11.2"


class ExperienceMaker:
    """The stand-in for ``RemoteExperienceMaker``: the attributes its
    ``compute_advantages_and_returns`` reads, set as its ``__init__`` sets them from the
    parsed arguments (``strategy.args``; ``advantage_estimator`` from
    ``args.algo.advantage.estimator``, experience_maker.py line 35; ``kl_ctl`` the fixed
    controller of ``--algo.kl.init_coef``), and its own methods. Every argument it reads
    (``no_std_norm``, the length penalties' ``overlong_buffer_len`` and
    ``stop_properly_penalty_coef``, ...) comes from ``args``, so the config-coverage check
    sees it."""

    compute_advantages_and_returns = RemoteExperienceMaker.compute_advantages_and_returns
    get_advantages_and_returns = RemoteExperienceMaker.get_advantages_and_returns
    get_cumulative_returns = RemoteExperienceMaker.get_cumulative_returns

    def __init__(self, args):
        self.strategy = SimpleNamespace(args=args)
        self.kl_ctl = SimpleNamespace(value=args.algo.kl.init_coef)
        self.advantage_estimator = args.algo.advantage.estimator


def experience(x: dict, kl, *, index, values=None) -> Experience:
    mask = tensor(x["mask"], dtype=torch.bool)
    return Experience(action_mask=mask, rewards=tensor(x["scores"]), kl=kl,
                      values=None if values is None else tensor(values), index=list(index))


def rollout_kl(x: dict, estimator: str):
    """The KL of ``make_experience``: compute_approx_kl(rollout log-probs, reference's)."""
    return compute_approx_kl(tensor(x["logp_old"]), tensor(x["logp_ref"]),
                             kl_estimator=estimator)


def parsed_args(preset_name: str, case: dict, log: set | None, **composition):
    """OpenRLHF's parsed ``args`` (its parser's defaults, the case's options, the file's
    post-processing: ``framework_config.openrlhf_args``), read through a Recorder into
    ``log``; epsilon_high is the second value of ``--actor.eps_clip_low_high``."""
    from .framework_config import (
        DEFINING,
        EPS_HIGH_FLAG,
        OPENRLHF,
        OPENRLHF_GRPO,
        Recorder,
        openrlhf_args,
        openrlhf_parser_defaults,
    )

    mapping = OPENRLHF if preset_name == "openrlhf" else OPENRLHF_GRPO
    params = dict(case.get("params", {}))
    for option in DEFINING.get(preset_name, {}):
        params.setdefault(option, params_of(preset_name, case)[option])
    if params.get("epsilon_high") is not None:
        eps = params.get("epsilon", openrlhf_parser_defaults()["--actor.eps_clip"])
        composition[EPS_HIGH_FLAG] = (eps, params["epsilon_high"])
    if case["inputs"].get("logp_rollout") is None:
        # (no rollout log-probs: the correction is off, as the runner always had it)
        composition["--algo.advantage.is_correction_level"] = "off"
    args = openrlhf_args(params, mapping, **composition)
    return args if log is None else Recorder(args, log, "args.")


def openrlhf_ppo(case: dict, log: set | None = None) -> dict:
    """Preset ``openrlhf``: PPO with GAE and a critic, from OpenRLHF's parsed arguments."""
    x = case["inputs"]
    B = x["mask"].shape[0]
    args = parsed_args("openrlhf", case, log)
    # (make_experience: with --algo.kl.use_loss the experience's KL is zeros, the KL is in the
    # actor's loss)
    use_kl_loss = args.algo.kl.use_loss
    kl = (torch.zeros_like(tensor(x["logp_old"])) if use_kl_loss
          else rollout_kl(x, args.algo.kl.estimator))
    exp = experience(x, kl, index=range(B), values=x["old_values"])
    clip_range = tuple(args.reward.clip_range)
    coef = args.algo.kl.init_coef
    maker = ExperienceMaker(args)
    # (the rewards compute_reward makes there are local to its loop: the same call again)
    rewards = compute_reward(tensor(x["scores"]), coef, kl, action_mask=exp.action_mask,
                             reward_clip_range=clip_range)
    info_kl = masked_mean(kl, exp.action_mask, dim=-1)
    (exp,) = maker.compute_advantages_and_returns([exp])
    rollout = x.get("logp_rollout")
    loss_fn = policy_loss_of(args)
    logp = tensor(x["logp"], grad=True)
    pl, clip_ratio, ppo_kl, vllm_kl, filtered = loss_fn(
        logp, tensor(x["logp_old"]), exp.advantages, action_mask=exp.action_mask,
        rollout_log_probs=None if rollout is None else tensor(rollout))
    values = tensor(x["values"], grad=True)
    # (ppo_critic.py line 60: ValueLoss(args.critic.value_clip))
    vl = ValueLoss(args.critic.value_clip)(values, tensor(x["old_values"]), exp.returns,
                                           action_mask=exp.action_mask)
    m = exp.action_mask
    total, stat_kl = pl, item(info_kl.mean())
    if use_kl_loss:
        kl_loss = actor_kl_loss(args, logp, tensor(x["logp_ref"]), tensor(x["logp_old"]), m)
        total = pl + kl_loss * coef
        stat_kl = item(kl_loss)
    out = {"rewards": numpy(rewards * m), "advantages": numpy(exp.advantages),
           "returns": numpy(exp.returns), "policy_loss": item(total), "value_loss": item(vl),
           "dlogp": grad_of(total, logp), "dvalues": grad_of(vl, values),
           "stat/policy_loss": item(pl), "stat/ppo_clip_ratio": item(clip_ratio),
           "stat/ppo_kl": item(ppo_kl), "stat/critic_loss": item(vl),
           "stat/values": item(masked_mean(values, m)),
           "stat/kl": stat_kl, "stat/reward": item(tensor(x["scores"]).mean())}
    if vllm_kl is not None:
        out.update({"stat/vllm_kl": item(vllm_kl), "stat/is_filter_ratio": item(filtered)})
    return out


def actor_kl_loss(args, logp, logp_ref, logp_old, m, **loss_batch_info):
    """The KL loss of ``trainer/ray/ppo_actor.py`` ``training_step`` (lines 318-331), before
    its coefficient: ``compute_approx_kl`` of the current log-probs against the reference's
    (tensors), with the experience's ``action_log_probs`` (logp_old) as ``log_probs_old`` and
    ``--algo.kl.unbiased_gradient``; zeros for ``--algo.kl.init_coef`` 0; aggregated by
    ``aggregate_loss`` over the action mask (its token mean; by the step's counts, given
    ``loss_batch_info``)."""
    if args.algo.kl.init_coef > 0:
        kl = compute_approx_kl(logp, logp_ref, log_probs_old=logp_old,
                               kl_estimator=args.algo.kl.estimator,
                               unbiased_gradient=args.algo.kl.unbiased_gradient)
    else:
        kl = torch.zeros_like(logp)
    return aggregate_loss(kl, m, **loss_batch_info)


def policy_loss_of(args) -> PolicyLoss:
    """``PolicyLoss`` as ``trainer/ray/ppo_actor.py`` (lines 76-86) builds it from args."""
    return PolicyLoss(
        clip_eps_low=args.actor.eps_clip_low_high[0],
        clip_eps_high=args.actor.eps_clip_low_high[1],
        dual_clip=args.actor.dual_clip,
        token_level_loss=args.actor.loss_agg_mode == "token-mean",
        policy_loss_type=args.actor.policy_loss_type,
        is_correction_level=args.algo.advantage.is_correction_level,
        is_correction_mode=args.algo.advantage.is_correction_mode,
        is_correction_gating=args.algo.advantage.is_correction_gating,
        is_correction_threshold=args.algo.advantage.is_correction_threshold)


def is_correction(p: dict, rollout) -> dict:
    """PolicyLoss's is_correction_* keywords of the preset's parameters (off without
    logp_rollout; one threshold value is [0, high], as train_ppo_ray.py makes it)."""
    threshold = p["is_correction_threshold"]
    threshold = [0.0, float(threshold)] if np.ndim(threshold) == 0 else list(threshold)
    if len(threshold) == 1:
        threshold.insert(0, 0.0)
    return {"is_correction_level": p["is_correction_level"] if rollout is not None else "off",
            "is_correction_mode": p["is_correction_mode"],
            "is_correction_gating": p["is_correction_gating"],
            "is_correction_threshold": threshold}


def grouped_index(groups) -> list:
    """Experience.index: each row's position in the prompt-major order OpenRLHF reshapes to
    (``rewards[indices] = raw_rewards`` then ``reshape(-1, n_samples_per_prompt)``)."""
    order = np.argsort(np.asarray(groups), kind="stable")
    index = np.empty(len(order), dtype=np.int64)
    index[order] = np.arange(len(order))
    return index.tolist()


def openrlhf_grpo(case: dict, log: set | None = None) -> dict:
    """Preset ``openrlhf-grpo``: the critic-free estimators, ``PolicyLoss`` ppo or gspo, from
    OpenRLHF's parsed arguments."""
    x = case["inputs"]
    groups = np.asarray(x["groups"])
    _, counts = np.unique(groups, return_counts=True)
    # groups of unequal sizes (the preset takes them for reinforce, which ignores groups) are
    # not an OpenRLHF layout: there every response is its own prompt (n_samples_per_prompt 1)
    n_samples = int(counts[0]) if np.all(counts == counts[0]) else 1
    args = parsed_args("openrlhf-grpo", case, log,
                       **{"--rollout.n_samples_per_prompt": n_samples})
    use_kl_loss = args.algo.kl.use_loss
    coef = args.algo.kl.init_coef
    kl = (torch.zeros_like(tensor(x["logp"])) if use_kl_loss
          else rollout_kl(x, args.algo.kl.estimator))
    index = grouped_index(groups) if n_samples > 1 else range(len(groups))
    exp = experience(x, kl, index=index)
    # (--algo.advantage.gamma applies to reinforce only: compute_advantages_and_returns sets
    # it to 1 for the others, with a warning)
    maker = ExperienceMaker(args)
    info_kl = masked_mean(kl, exp.action_mask, dim=-1)
    (exp,) = maker.compute_advantages_and_returns([exp])
    rollout = x.get("logp_rollout")
    loss_fn = policy_loss_of(args)
    logp = tensor(x["logp"], grad=True)
    m = exp.action_mask
    pl, clip_ratio, ppo_kl, vllm_kl, filtered = loss_fn(
        logp, tensor(x["logp_old"]), exp.advantages, action_mask=m,
        rollout_log_probs=None if rollout is None else tensor(rollout))
    total = pl
    stats = {"policy_loss": item(pl), "ppo_clip_ratio": item(clip_ratio),
             "ppo_kl": item(ppo_kl), "reward": item(tensor(x["scores"]).mean()),
             "return": item(exp.info["return"].mean())}
    if vllm_kl is not None:
        stats.update({"vllm_kl": item(vllm_kl), "is_filter_ratio": item(filtered)})
    if "group_reward_std" in exp.info:
        stats["group_reward_std"] = item(exp.info["group_reward_std"].mean())
    if use_kl_loss:
        # ppo_actor.py: the KL loss of the current policy against the reference (zeros for
        # init_coef 0), aggregated as the policy loss (a token mean)
        kl_loss = actor_kl_loss(args, logp, tensor(x["logp_ref"]), tensor(x["logp_old"]), m)
        total = pl + kl_loss * coef
        stats["kl"] = item(kl_loss)
    else:
        stats["kl"] = item(info_kl.mean())
    out = {"advantages": numpy(exp.advantages), "policy_loss": item(total),
           "dlogp": grad_of(total, logp)}
    out.update({f"stat/{k}": v for k, v in stats.items()})
    return out
