"""verl 0.9.1's own functions on the presets' cases: presets ``verl`` and ``verl-grpo``.

Called: ``verl.trainer.ppo.ray_trainer.apply_kl_penalty`` and ``compute_advantage`` (on a
stand-in for the DataProto batch: a dict of tensors), the advantage estimators of
``verl.trainer.ppo.core_algos`` behind them, and the trainer's own loss functions
``verl.workers.utils.losses.ppo_loss`` (the policy loss of ``loss_mode``: vanilla, gspo,
cispo, sapo, geo_mean, gpg, clip_cov, kl_cov, dppo_tv, dppo_kl, dro, bypass_mode; the KL loss;
``agg_loss``) and ``value_loss`` (``compute_value_loss``), with a real ``ActorConfig`` and
``PolicyLossConfig``, given what the trainer gives them for one optimizer step of one
micro-batch on one rank (:func:`trainer_counts`). Gradients: autograd of those losses.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import torch
from verl.trainer.config.algorithm import RolloutCorrectionConfig
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
from verl.trainer.ppo.rollout_corr_helper import (
    compute_offpolicy_metrics,
    compute_rollout_correction_weights,
    compute_rollout_rejection_mask,
)
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict
from verl.workers.config import ActorConfig
from verl.workers.utils import losses as verl_losses

from .harness import grad_of, item, numpy, params_of, tensor

VERSION = "0.9.1"

CLIP_COV_DRAW = (
    "clip_cov's random draw: verl 0.9.1 draws the dropped tokens with torch.randperm (torch's "
    "global generator), the preset with numpy's default_rng(clip_cov_seed).permutation; the "
    "runner replaces torch.randperm by that numpy permutation during verl's call, so the "
    "rule (candidates in torch.nonzero order, the first max(int(ratio n), 1) of a uniform "
    "permutation) is verl's and the permutation the same")
KL_COV_TIES = (
    "kl_cov's loss and gradient where the k-th and (k+1)-th largest covariances are equal: "
    "torch.topk leaves the order of ties unspecified (CPU: a partition, not the lower index), "
    "the preset takes the lower row-major index; the outputs are not compared on such cases "
    "(degenerate batches: every advantage equal to the mean)")

#: the preset's kl_estimator -> verl's kl_penalty name
KL_NAMES = {"k1": "kl", "k2": "mse", "abs": "abs", "k3": "low_var_kl"}


class Batch(dict):
    """The stand-in for a DataProto's ``batch`` (a TensorDict): a dict with ``batch_size``."""

    def __init__(self, B, **tensors):
        super().__init__(**tensors)
        self.batch_size = [B]


class Data:
    """The stand-in for a DataProto: ``batch`` and ``non_tensor_batch``."""

    def __init__(self, batch: Batch, non_tensor_batch=None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch or {}


def scores_at_last_token(scores, mask):
    """token_level_scores as verl's reward manager makes them (verl/workers/reward_manager/
    naive.py): a float32 tensor, each score at index (number of attended response tokens) - 1,
    its row's last response token for the presets' right-padded rows. (The reward manager
    itself needs a tokenizer and a DataProto and is not called; the suite's cases hold scores
    that float32 stores exactly, see ``run.py``.)"""
    m = np.asarray(mask) == 1
    out = np.zeros(m.shape)
    last = m.shape[1] - 1 - np.argmax(m[:, ::-1], axis=1)
    out[np.arange(m.shape[0]), last] = scores
    return tensor(out, dtype=torch.float32)


def response_mask(mask):
    """The response mask as verl has it: an int64 tensor (a slice of the attention mask).
    With it ``masked_var`` divides two integer sums in float32 and ``masked_mean``'s
    ``n + 1e-8`` is a float32 n: the roundings the ``verl`` preset's tolerance carries."""
    return tensor(mask, dtype=torch.int64)


#: the verl-grpo parameters that are PolicyLossConfig fields (the others of its losses:
#: ActorConfig's tau_pos, tau_neg)
POLICY_LOSS_FIELDS = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                      "ppo_kl_coef", "dro_beta")


def verl_configs(preset_name: str, case: dict):
    """(ActorConfig, AlgoConfig, RolloutCorrectionConfig, the critic's settings) of verl's own
    trainer configuration file with its defaults and only the options the case sets
    (``framework_config.VERL`` / ``VERL_GRPO``; the critic-free estimator of verl-grpo
    always)."""
    from .framework_config import DEFINING, VERL, VERL_GRPO, verl_objects_with, verl_overrides

    mapping = VERL if preset_name == "verl" else VERL_GRPO
    params = dict(case.get("params", {}))
    for option in DEFINING.get(preset_name, {}):
        params.setdefault(option, params_of(preset_name, case)[option])
    return verl_objects_with(verl_overrides(mapping, params))


def numpy_randperm(seed):
    """torch.randperm(n) as numpy's default_rng(seed).permutation(n) (see CLIP_COV_DRAW)."""
    def randperm(n, *args, **kwargs):
        return torch.from_numpy(np.random.default_rng(seed).permutation(int(n)))
    return randperm


def kl_cov_boundary_tied(x: dict, advantages, ratio, mask_t) -> bool:
    """The k-th and (k+1)-th largest of verl's kl_cov covariances are equal (KL_COV_TIES),
    over the tokens kl_cov reads: ``mask_t``, the response mask after a rejection."""
    m = numpy(mask_t) == 1
    a, lp = numpy(advantages)[m], np.asarray(x["logp"])[m]
    cov = np.sort((a - a.mean()) * (lp - lp.mean()))[::-1]
    k = max(1, int(len(cov) * ratio))
    return k < len(cov) and cov[k - 1] == cov[k]


def rollout_correction(cfg: RolloutCorrectionConfig, x: dict, mask_t):
    """Decoupled mode, as ``ray_trainer.compute_rollout_correction_and_add_to_batch`` runs it
    before ``compute_advantage``: (IS weights or None, the response mask after rejection,
    the metrics). ``compute_rollout_correction_and_rejection_mask`` wraps the weights in a
    DataProto (a TensorDict, stubbed here), so its three steps are called as it calls them:
    ``compute_rollout_correction_weights``, ``compute_rollout_rejection_mask``,
    ``compute_offpolicy_metrics`` on log_ratio = old_log_prob - rollout_log_prob."""
    old, rollout = tensor(x["logp_old"]), tensor(x["logp_rollout"])
    log_ratio = old - rollout
    w, new_mask = None, mask_t.clone()
    if cfg.rollout_is is not None and cfg.rollout_is_threshold is not None:
        w, _ = compute_rollout_correction_weights(
            log_ratio=log_ratio, response_mask=mask_t, rollout_is=cfg.rollout_is,
            rollout_is_threshold=cfg.rollout_is_threshold,
            rollout_is_batch_normalize=cfg.rollout_is_batch_normalize)
    if cfg.rollout_rs is not None:
        new_mask, _ = compute_rollout_rejection_mask(
            log_ratio=log_ratio, response_mask=mask_t, rollout_rs=cfg.rollout_rs,
            rollout_rs_threshold=cfg.rollout_rs_threshold)
    metrics = {f"rollout_corr/{k}": v for k, v in compute_offpolicy_metrics(
        old_log_prob=old, rollout_log_prob=rollout, response_mask=mask_t).items()}
    return w, new_mask, metrics


def trainer_counts(mask_t) -> dict:
    """What verl 0.9.1's trainer puts beside the batch for ``ppo_loss`` and ``value_loss``, one
    optimizer step of one micro-batch on one rank: the mini-batch is the case's B rows
    (``actor.ppo_mini_batch_size`` = B prompts, ``rollout.n`` = 1), one micro-batch of them.
    ``mask_t``: the batch's response mask (after a decoupled rejection, which replaces it;
    a bypass-mode rejection is inside the policy loss and leaves it)."""
    ppo_mini_batch_size, rollout_n = mask_t.shape[0], 1
    return {
        # verl/workers/engine/fsdp/transformer_impl.py line 735 (forward_backward_batch):
        # dp_size = self.get_data_parallel_size(), one rank
        "dp_size": 1,
        # transformer_impl.py lines 730-734: batch_num_tokens = data["loss_mask"].sum(),
        # all-reduced over the (one) data-parallel rank; loss_mask is the response mask
        # (verl/workers/utils/padding.py line 71, left_right_2_no_padding)
        "batch_num_tokens": int(mask_t.sum().item()),
        # verl/trainer/ppo/ray_trainer.py lines 1352-1353 and 1362 (_update_actor; the
        # critic's 1382-1383, 1389): global_batch_size = ppo_mini_batch_size * rollout.n
        "global_batch_size": ppo_mini_batch_size * rollout_n,
    }


class TensorDictStandIn(dict):
    """The stand-in for the TensorDict ``ppo_loss`` and ``value_loss`` are given (tensordict is
    a stub here): the batch's tensors and the trainer's counts by name; ``select`` and
    ``to_padded_tensor`` as for a batch already in the padded (B, T) layout."""

    def select(self, *keys):
        return TensorDictStandIn({k: self[k] for k in keys})

    def to_padded_tensor(self):
        return self


def _padded(tensor, data):
    """``no_padding_2_padding`` for a model output already in the padded (B, T) response
    layout (the suite's log-probs and values are): the tensor as it is."""
    return tensor


class _Proto:
    """The stand-in for DataProto.from_dict (its TensorDict is stubbed here): a ``.batch``
    dict. Only the wrapping of compute_rollout_correction_and_rejection_mask's weights uses
    it; verl's arithmetic runs as it is."""

    def __init__(self, tensors):
        self.batch = dict(tensors)

    @classmethod
    def from_dict(cls, tensors, **_):
        return cls(tensors)


def policy_loss(cfg: ActorConfig, x: dict, advantages, mask_t, *, rollout_is_weights=None,
                logp_old=None):
    """verl 0.9.1's ``workers/utils/losses.py`` ``ppo_loss`` itself: the policy loss of
    ``loss_mode``, plus ``kl_loss_coef`` times the aggregated ``kl_penalty`` with the KL
    loss, every ``agg_loss`` given the trainer's counts (:func:`trainer_counts`, which
    ``ppo_loss`` writes into ``config.global_batch_info``). Returns (the loss, its metrics
    as ``ray_trainer._update_actor`` names them, "actor/..." (the bypass mode's
    ``rollout_corr/`` ones left out), the logp tensor)."""
    logp = tensor(x["logp"], grad=True)
    data = TensorDictStandIn(
        response_mask=mask_t, advantages=advantages, ref_log_prob=tensor(x["logp_ref"]),
        old_log_probs=tensor(x["logp_old"] if logp_old is None else logp_old),
        **trainer_counts(mask_t))
    if rollout_is_weights is not None:
        data["rollout_is_weights"] = rollout_is_weights
    import verl.trainer.ppo.rollout_corr_helper as helper
    saved, helper.DataProto = helper.DataProto, _Proto
    try:
        with mock.patch.object(verl_losses, "no_padding_2_padding", _padded):
            total, metrics = verl_losses.ppo_loss(cfg, {"log_probs": logp}, data)
    finally:
        helper.DataProto = saved
    # ray_trainer.py _update_actor: the reduced metrics renamed with the prefix "actor/"
    metrics = rename_dict(reduce_metrics(metrics), "actor/")
    metrics = {k: float(v) for k, v in metrics.items() if "rollout_corr/" not in k}
    return total, metrics, logp


def value_loss(critic, x: dict, returns, mask_t):
    """verl 0.9.1's ``workers/utils/losses.py`` ``value_loss`` itself (``compute_value_loss``
    with the trainer's counts). Returns (the loss, its metrics "critic/...", the values
    tensor)."""
    values = tensor(x["values"], grad=True)
    data = TensorDictStandIn(values=tensor(x["old_values"]), returns=returns,
                             response_mask=mask_t, **trainer_counts(mask_t))
    with mock.patch.object(verl_losses, "no_padding_2_padding", _padded):
        vf_loss, metrics = verl_losses.value_loss(critic, {"values": values}, data)
    return vf_loss, {k: float(v) for k, v in reduce_metrics(metrics).items()}, values


def bypass_configs(preset_name, case, B, log, x):
    """verl_configs, and in bypass mode (a case with logp_rollout and
    rollout_correction.bypass_mode) what ``rollout_corr_helper.apply_bypass_mode`` does to
    the actor's policy-loss configuration: loss_mode "bypass_mode", its rollout_correction
    the algorithm's. The ActorConfig and AlgoConfig are read through Recorders into ``log``."""
    import dataclasses

    actor, algo, rc, critic = verl_configs(preset_name, case)
    bypass = x.get("logp_rollout") is not None and rc.bypass_mode
    if bypass:
        actor = dataclasses.replace(actor, policy_loss=dataclasses.replace(
            actor.policy_loss, loss_mode="bypass_mode", rollout_correction=rc))
    # (each trainer's own global_batch_info, which ppo_loss fills: not the dict the default
    # objects share)
    actor = dataclasses.replace(actor, global_batch_info={})
    if log is not None:
        from .framework_config import Recorder, recording
        actor = recording(actor, log, "ActorConfig.")
        algo = recording(algo, log, "AlgoConfig.")
        critic = Recorder(critic, log, "CriticConfig.")
    return actor, algo, rc, critic, bypass


def verl_ppo(case: dict, log: set | None = None) -> dict:
    """Preset ``verl``: the PPO pipeline with GAE and a critic, from verl's own configuration
    (its file's defaults, the case's options)."""
    x = case["inputs"]
    B = x["mask"].shape[0]
    actor, algo, rc, critic, bypass = bypass_configs("verl", case, B, log, x)
    mask_t = response_mask(x["mask"])
    scores = scores_at_last_token(x["scores"], x["mask"])
    data = Data(Batch(B, response_mask=mask_t, token_level_scores=scores,
                      old_log_probs=tensor(x["logp_old"]), ref_log_prob=tensor(x["logp_ref"]),
                      values=tensor(x["old_values"])))
    out, stats = {}, {}
    if algo.use_kl_in_reward:
        data, kl_metrics = apply_kl_penalty(data, core_algos.FixedKLController(
            algo.kl_ctrl.kl_coef), kl_penalty=algo.kl_penalty)
        stats.update(kl_metrics)
    else:
        data.batch["token_level_rewards"] = scores
    w, logp_old = None, None
    if bypass:
        logp_old = x["logp_rollout"]
    elif x.get("logp_rollout") is not None:
        # the rejection replaces the response mask before compute_advantage (and the critic's)
        w, mask_t, rc_metrics = rollout_correction(rc, x, mask_t)
        data.batch["response_mask"] = mask_t
        stats["rollout_corr/kl"] = rc_metrics["rollout_corr/kl"]
    data = compute_advantage(data, core_algos.AdvantageEstimator.GAE, gamma=algo.gamma,
                             lam=algo.lam, config=algo)
    advantages, returns = data.batch["advantages"], data.batch["returns"]
    total, metrics, logp = policy_loss(actor, x, advantages, mask_t, rollout_is_weights=w,
                                       logp_old=logp_old)
    vf_loss, vf_metrics, values = value_loss(critic, x, returns, mask_t)
    stats.update(metrics)
    stats.update(vf_metrics)
    out.update(rewards=numpy(data.batch["token_level_rewards"]),
               advantages=numpy(advantages * mask_t), returns=numpy(returns * mask_t),
               policy_loss=item(total), value_loss=item(vf_loss),
               dlogp=grad_of(total, logp), dvalues=grad_of(vf_loss, values))
    out.update({f"stat/{k}": float(v) for k, v in stats.items()})
    return out


def gdpo_inputs(data: Data, x: dict, p: dict) -> dict:
    """What verl's gdpo reads besides the rewards: one ``non_tensor_batch`` entry per reward
    component (the reward function's dict; the case's ``reward_components`` columns, or its
    score as the one component ``"score"``), ``prompts`` and ``attention_mask`` (a prompt of
    one token, then the response mask: verl puts each component at index (number of
    attended response tokens) - 1). Returns the AlgoConfig's gdpo_reward_keys and
    gdpo_reward_weights."""
    comps = x.get("reward_components")
    if comps is None:
        cols = {"score": np.asarray(x["scores"])}
    else:
        cols = {f"reward_{k}": np.asarray(comps)[:, k] for k in range(np.shape(comps)[1])}
    data.non_tensor_batch.update(cols)
    B = x["mask"].shape[0]
    data.batch["prompts"] = torch.zeros((B, 1), dtype=torch.int64)
    data.batch["attention_mask"] = torch.cat([torch.ones((B, 1), dtype=torch.int64),
                                              response_mask(x["mask"])], dim=1)
    return {"gdpo_reward_keys": list(cols), "gdpo_reward_weights": p["gdpo_reward_weights"]}


def verl_grpo(case: dict, log: set | None = None) -> dict:
    """Preset ``verl-grpo``: the critic-free estimators and losses, from verl's own
    configuration (its file's defaults, the case's options, the preset's estimator)."""
    p = params_of("verl-grpo", case)
    x = case["inputs"]
    B = x["mask"].shape[0]
    actor, algo, rc, _, bypass = bypass_configs("verl-grpo", case, B, log, x)
    mask_t = response_mask(x["mask"])
    scores = scores_at_last_token(x["scores"], x["mask"])
    data = Data(Batch(B, response_mask=mask_t, token_level_scores=scores,
                      old_log_probs=tensor(x["logp_old"]), ref_log_prob=tensor(x["logp_ref"]),
                      reward_baselines=tensor(x["baseline_scores"])),
                {"uid": np.asarray(x["groups"]).astype(np.int64).astype(object)})
    stats = {}
    if algo.use_kl_in_reward:
        data, _ = apply_kl_penalty(data, core_algos.FixedKLController(algo.kl_ctrl.kl_coef),
                                   kl_penalty=algo.kl_penalty)
    else:
        data.batch["token_level_rewards"] = scores
    w, logp_old = None, None
    has_rollout = x.get("logp_rollout") is not None
    if bypass:
        # apply_bypass_mode: old_log_probs = rollout_log_probs, loss_mode "bypass_mode" (the
        # correction inside the loss, from the current log-probs)
        logp_old = x["logp_rollout"]
    elif has_rollout:
        # the rejection replaces the response mask before the advantages
        w, mask_t, rc_metrics = rollout_correction(rc, x, mask_t)
        data.batch["response_mask"] = mask_t
        stats["rollout_corr/kl"] = rc_metrics["rollout_corr/kl"]
    gdpo = {}
    if algo.adv_estimator == "gdpo":
        gdpo = gdpo_inputs(data, x, p)
    if gdpo:
        # (the reward keys are the trainer's reward function's; the weights the option's)
        import dataclasses
        algo = dataclasses.replace(algo, gdpo_reward_keys=gdpo["gdpo_reward_keys"])
        if log is not None:
            from .framework_config import recording
            algo = recording(algo, log, "AlgoConfig.")
    if algo.adv_estimator != "remax":
        del data.batch["reward_baselines"]  # compute_advantage passes it when present
    data = compute_advantage(data, algo.adv_estimator, gamma=algo.gamma,
                             norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo, config=algo)
    advantages = data.batch["advantages"]
    with mock.patch.object(torch, "randperm", numpy_randperm(p["clip_cov_seed"])):
        total, metrics, logp = policy_loss(actor, x, advantages, mask_t, rollout_is_weights=w,
                                           logp_old=logp_old)
    stats.update(metrics)
    # (the advantages where the loss reads them: after a rejection, the kept tokens; remax
    # leaves its returns-to-go at rejected ones, which no loss reads)
    out = {"rewards": numpy(data.batch["token_level_rewards"]),
           "advantages": numpy(advantages * mask_t), "policy_loss": item(total),
           "dlogp": grad_of(total, logp)}
    out.update({f"stat/{k}": float(v) for k, v in stats.items()})
    if actor.policy_loss.loss_mode == "kl_cov" and kl_cov_boundary_tied(
            x, advantages, actor.policy_loss.kl_cov_ratio, mask_t):
        for k in ("policy_loss", "dlogp", "stat/actor/pg_loss"):
            out.pop(k, None)  # not compared: see KL_COV_TIES
    return out
