"""TRL's own code on the presets' cases: ``GRPOTrainer`` of TRL 1.16.0 (preset ``trl-grpo``)
and the legacy ``PPOTrainer`` of TRL 0.11.4 (preset ``trl-0.11``).

Two TRL versions cannot share one environment: 1.16.0 is installed in
``.venv-conformance``, 0.11.4 in its own directory ``.venv-conformance/trl-0.11.4``
(``pip install --no-deps --target``), and ``run.py`` runs the legacy part in a subprocess
with that directory first on ``sys.path``. :func:`trl_legacy_ppo` imports ``trl`` when it
is first called, so this module imports in either process.

Called, TRL 1.16: ``GRPOTrainer._compute_loss`` on a stand-in trainer (the attributes it
reads; ``_get_per_token_logps_and_entropies`` returns the case's log-probs, as the model
would), so the ratio, clipping, ``delta``, the k3 KL term, the normalisation of every
``loss_type`` and the clip statistics are TRL's. Legacy TRL: ``PPOTrainer.compute_rewards``
(with ``_kl_penalty``), ``compute_advantages``, ``loss`` and ``record_step_stats`` on a
stand-in (``config``, ``kl_ctl``), with ``trl.core.stack_dicts`` between them as ``step`` does.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch

from .harness import grad_of, item, numpy, params_of, tensor

VERSION_GRPO = "1.16.0"
VERSION_LEGACY = "0.11.4"


# ---------------------------------------------------------------------------------------
# TRL 1.16 GRPOTrainer


class _Accelerator:
    num_processes = 1
    process_index = 0
    sync_gradients = True

    def gather(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def _is_ratio_source():
    """The lines of TRL 1.16.0's ``_generate_and_score_completions`` that compute the vLLM
    importance-sampling ratio (from ``if self.use_vllm and
    self.vllm_importance_sampling_correction:`` to the reference model's log-probs), as
    source to run on the case's tensors: TRL's own code, not a copy (that function also
    generates, which cannot run here)."""
    import inspect
    import textwrap

    from trl.trainer.grpo_trainer import GRPOTrainer

    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    start = src.index("            if self.use_vllm and self.vllm_importance_sampling_correction:\n"
                      "                mask = completion_mask")
    end = src.index("# Compute the per-token log probabilities for the reference model", start)
    return textwrap.dedent(src[start:end])


def trl_is_ratio(trainer, old, sampling, completion_mask):
    """``importance_sampling_ratio`` by TRL's own lines (:func:`_is_ratio_source`)."""
    import math

    scope = {"self": trainer, "old_per_token_logps": old,
             "sampling_per_token_logps": sampling, "completion_mask": completion_mask,
             "tool_mask": None, "torch": torch, "math": math}
    exec(_is_ratio_source(), scope)  # noqa: S102 (TRL's source, read from the installed wheel)
    return scope["vllm_importance_sampling_ratio"]


#: the options the trl-grpo preset takes that are not GRPOConfig fields: use_vllm (the
#: preset's None: "the case carries logp_rollout", TRL's own default False) and
#: num_items_in_batch (what the trainer computes, below; a number replaces it)
NOT_CONFIG = ("use_vllm", "num_items_in_batch")


def grpo_args(case: dict):
    """GRPOConfig of the installed TRL with its defaults and the options the case sets (the
    preset's names are GRPOConfig's), and use_vllm as the case says."""
    from .framework_config import TRL_GRPO, grpo_config

    params = case.get("params", {})
    fields = {TRL_GRPO[k]: v for k, v in params.items() if k in TRL_GRPO}
    use_vllm = params.get("use_vllm")
    # the preset's reading of use_vllm None: vLLM sampled iff the case has its log-probs
    fields["use_vllm"] = (case["inputs"].get("logp_rollout") is not None if use_vllm is None
                          else use_vllm)
    return grpo_config(**fields)


def grpo_trainer(args, logp, log: set):
    """A stand-in GRPOTrainer: ``args`` (read through a Recorder into ``log``) and the
    attributes ``__init__`` sets from it, as trl 1.16.0 grpo_trainer.py sets them (lines
    782-983: max_completion_length 782, use_vllm 811, the vLLM correction 815-818, loss_type
    819, importance_sampling_level 834, off_policy_mask_threshold 835, top_entropy_quantile
    845, entropy_coef / use_adaptive_entropy / _entropy_bonus_enabled 846-850, epsilon_low /
    epsilon_high 945-946, beta 983); aux_loss_enabled (832) False: no router logits."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    from .framework_config import Recorder

    class Trainer:
        _compute_loss = GRPOTrainer._compute_loss
        get_gamma_weights = GRPOTrainer.__dict__["get_gamma_weights"]  # (a staticmethod)
        get_off_policy_mask = staticmethod(GRPOTrainer.get_off_policy_mask)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            return logp, torch.zeros_like(logp), None

    t = Trainer()
    a = t.args = Recorder(args, log, "GRPOConfig.")
    t.max_completion_length = a.max_completion_length
    t.use_vllm = a.use_vllm
    t.vllm_importance_sampling_correction = a.vllm_importance_sampling_correction
    t.vllm_importance_sampling_mode = a.vllm_importance_sampling_mode
    t.vllm_importance_sampling_clip_max = a.vllm_importance_sampling_clip_max
    t.vllm_importance_sampling_clip_min = a.vllm_importance_sampling_clip_min
    t.loss_type = a.loss_type
    t.aux_loss_enabled = False
    t.importance_sampling_level = a.importance_sampling_level
    t.off_policy_mask_threshold = a.off_policy_mask_threshold
    t.top_entropy_quantile = a.top_entropy_quantile
    t.entropy_coef = a.entropy_coef
    t.use_adaptive_entropy = a.use_adaptive_entropy
    t._entropy_bonus_enabled = t.entropy_coef != 0.0 or t.use_adaptive_entropy
    t.epsilon_low = a.epsilon
    t.epsilon_high = a.epsilon_high if a.epsilon_high is not None else a.epsilon
    t.beta = a.beta
    # transformers' Trainer sets it from TrainingArguments.gradient_accumulation_steps: one
    # micro-batch per optimizer step
    t.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    t.model = SimpleNamespace(training=True)
    t.accelerator = _Accelerator()
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return t


def trl_grpo(case: dict, advantages, log: set | None = None) -> dict:
    """Preset ``trl-grpo``'s loss, given the advantages (B,) (see ``run.py``: TRL computes them
    inline in ``_generate_and_score_completions``, which is not callable alone), one
    micro-batch on one rank; ``log`` collects the GRPOConfig fields read."""
    from trl.trainer.utils import nanstd

    log = set() if log is None else log
    x = case["inputs"]
    args = grpo_args(case)
    logp = tensor(x["logp"], grad=True)
    trainer = grpo_trainer(args, logp, log)
    mask = tensor(x["mask"], dtype=torch.int64)
    B = mask.shape[0]
    n_set = case.get("params", {}).get("num_items_in_batch")
    # trl 1.16.0 grpo_trainer.py line 2498: num_items_in_batch =
    # accelerator.gather(loss_mask.sum()).sum(), the loss mask's token count over the
    # generation batch (one process: this batch's)
    n_items = mask.sum() if n_set is None else tensor(n_set)
    inputs = {"prompt_ids": torch.zeros((B, 1), dtype=torch.int64),
              "prompt_mask": torch.ones((B, 1), dtype=torch.int64),
              "completion_ids": torch.zeros_like(mask), "completion_mask": mask,
              "advantages": tensor(advantages), "old_per_token_logps": tensor(x["logp_old"]),
              "ref_per_token_logps": tensor(x["logp_ref"]),
              "num_items_in_batch": n_items.to(torch.float64)}
    if trainer.use_vllm:
        sampling = tensor(x["logp_rollout"])
        inputs["sampling_per_token_logps"] = sampling
        if trainer.vllm_importance_sampling_correction:
            inputs["importance_sampling_ratio"] = trl_is_ratio(
                trainer, inputs["old_per_token_logps"], sampling, mask)
    loss = trainer._compute_loss(None, inputs)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if k != "entropy"}
    out = {"policy_loss": item(loss), "dlogp": grad_of(loss, logp)}
    out.update({f"stat/{k}": float(v) for k, v in metrics.items()})
    # the reward statistic of _generate_and_score_completions (line 2829): nanstd of the
    # float32 rewards over the whole batch (its reward, a float32 nanmean whose rounding
    # u_32 sum|s| / n is beyond a relative tolerance where the mean nearly cancels, is not)
    rewards = tensor(x["scores"], dtype=torch.float32)
    out["stat/reward_std"] = float(nanstd(rewards).item())
    return out


# ---------------------------------------------------------------------------------------
# TRL 0.11.4, the legacy PPOTrainer

#: the preset's kl_estimator -> TRL 0.11's kl_penalty
KL_PENALTY = {"k1": "kl", "k2": "mse", "abs": "abs"}


def legacy_trainer(p: dict):
    from trl.trainer.ppo_trainer import PPOTrainer

    class Trainer:
        compute_rewards = PPOTrainer.compute_rewards
        _kl_penalty = PPOTrainer._kl_penalty
        compute_advantages = PPOTrainer.compute_advantages
        loss = PPOTrainer.loss
        record_step_stats = PPOTrainer.record_step_stats

    t = Trainer()
    t.config = SimpleNamespace(kl_penalty=KL_PENALTY[p["kl_estimator"]], gamma=p["gamma"],
                               lam=p["lam"], whiten_rewards=p["whiten_rewards"],
                               cliprange=p["epsilon"], cliprange_value=p["value_clip"],
                               vf_coef=p["vf_coef"], ratio_threshold=p["ratio_threshold"])
    t.kl_ctl = SimpleNamespace(value=p["beta"])
    return t


def trl_legacy_ppo(case: dict) -> dict:
    """Preset ``trl-0.11``: one ``step`` on the whole batch, one epoch, one minibatch."""
    import warnings

    from trl.core import stack_dicts

    p = params_of("trl-0.11", case)
    x = case["inputs"]
    t = legacy_trainer(p)
    mask = tensor(x["mask"], dtype=torch.int64)  # as TRL builds it (batched_forward_pass)
    scores = tensor(x["scores"])
    old, ref = tensor(x["logp_old"]), tensor(x["logp_ref"])
    rewards, non_score, kls = t.compute_rewards(scores, old, ref, mask)
    values, advantages, returns = t.compute_advantages(tensor(x["old_values"]), rewards, mask)
    logp = tensor(x["logp"], grad=True)
    vpreds = tensor(x["values"], grad=True)
    # (logits only feed the logged policy entropy, which the preset does not produce)
    logits = torch.zeros(mask.shape + (2,), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Skipping batch" above ratio_threshold
        pg_loss, vf_loss_scaled, train_stats = t.loss(old, values, logits, vpreds, logp, mask,
                                                      advantages, returns)
        stats = t.record_step_stats(
            kl_coef=p["beta"], scores=scores, logprobs=old, ref_logprobs=ref,
            non_score_reward=non_score, train_stats=stack_dicts([train_stats]), masks=mask,
            kls=kls, queries=[[0]] * mask.shape[0], responses=[[0]] * mask.shape[0])
    vf_loss = train_stats["loss/value"]
    names = ("ppo/policy/approxkl", "ppo/policy/policykl", "ppo/policy/clipfrac",
             "ppo/policy/advantages_mean", "ppo/loss/policy", "ppo/loss/value",
             "ppo/returns/mean", "ppo/returns/var", "ppo/val/vpred",
             "ppo/val/error", "ppo/val/clipfrac", "ppo/val/mean", "ppo/val/var",
             "objective/kl", "objective/kl_coef", "objective/entropy",
             "ppo/mean_non_score_reward", "ppo/mean_scores", "ppo/std_scores")
    m = mask.to(torch.float64)
    # the value loss the preset returns is before vf_coef; its gradient by autograd of the
    # loss TRL minimises, pg_loss + vf_coef * vf_loss, divided by vf_coef
    dvalues = (grad_of(vf_loss_scaled, vpreds) / p["vf_coef"] if p["vf_coef"] > 0
               else np.full(tuple(mask.shape), np.nan))
    out = {"rewards": numpy(rewards * m), "advantages": numpy(advantages),
           "returns": numpy(returns), "policy_loss": item(pg_loss), "value_loss": item(vf_loss),
           "dlogp": grad_of(pg_loss, logp), "dvalues": dvalues}
    out.update({f"stat/{k}": item(stats[k]) for k in names})
    return out
