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


def grpo_trainer(p: dict, logp):
    """A stand-in GRPOTrainer with the attributes ``_compute_loss`` reads (GRPOConfig's
    defaults where the preset has no parameter)."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    class Trainer:
        _compute_loss = GRPOTrainer._compute_loss
        get_gamma_weights = GRPOTrainer.__dict__["get_gamma_weights"]  # (a staticmethod)
        get_off_policy_mask = staticmethod(GRPOTrainer.get_off_policy_mask)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            return logp, torch.zeros_like(logp), None

    t = Trainer()
    eps_high = p["epsilon"] if p["epsilon_high"] is None else p["epsilon_high"]
    t.args = SimpleNamespace(use_bias_correction_kl=False, delta=p["delta"],
                             steps_per_generation=1,
                             **{k: p[k] for k in ("vespo_k_pos", "vespo_lambda_pos",
                                                  "vespo_k_neg", "vespo_lambda_neg")},
                             sapo_temperature_pos=p["sapo_temperature_pos"],
                             sapo_temperature_neg=p["sapo_temperature_neg"])
    t.loss_type, t.beta = p["loss_type"], p["beta"]
    t.epsilon_low, t.epsilon_high = p["epsilon"], eps_high
    t.importance_sampling_level = p["importance_sampling_level"]
    t.max_completion_length = p["max_completion_length"]
    t.top_entropy_quantile = 1.0
    t.off_policy_mask_threshold = p["off_policy_mask_threshold"]
    t.use_vllm = bool(p["use_vllm"])
    t.vllm_importance_sampling_correction = p["vllm_importance_sampling_correction"]
    t.vllm_importance_sampling_mode = p["vllm_importance_sampling_mode"]
    t.vllm_importance_sampling_clip_min = p["vllm_importance_sampling_clip_min"]
    t.vllm_importance_sampling_clip_max = p["vllm_importance_sampling_clip_max"]
    t.aux_loss_enabled, t._entropy_bonus_enabled = False, False
    t.current_gradient_accumulation_steps = 1
    t.model = SimpleNamespace(training=True)
    t.accelerator = _Accelerator()
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return t


def trl_grpo(case: dict, advantages) -> dict:
    """Preset ``trl-grpo``'s loss, given the advantages (B,) (see ``run.py``: TRL computes them
    inline in ``_generate_and_score_completions``, which is not callable alone)."""
    p = params_of("trl-grpo", case)
    x = case["inputs"]
    if p["use_vllm"] is None:  # the preset's reading: vLLM sampled iff the case has its log-probs
        p["use_vllm"] = x.get("logp_rollout") is not None
    logp = tensor(x["logp"], grad=True)
    trainer = grpo_trainer(p, logp)
    mask = tensor(x["mask"], dtype=torch.int64)
    B = mask.shape[0]
    n_items = mask.sum() if p["num_items_in_batch"] is None else tensor(p["num_items_in_batch"])
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
