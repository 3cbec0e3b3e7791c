"""The config-coverage table: every field of the frameworks' configuration objects that the
loss / advantage / statistics path reads, each mapped to a preset option, set as the
framework's trainer sets it (:data:`COMPOSED`), or pinned with the framework's default and
why. The reads are recorded at run time (``framework_config.
Recorder`` around the objects the framework's code is given); a field read that is neither
mapped nor pinned here fails ``make conformance`` (:func:`unlisted`).
"""

from __future__ import annotations

from .framework_config import (
    EPS_HIGH_FLAG,
    OPENRLHF,
    OPENRLHF_GRPO,
    TRL_GRPO,
    VERL,
    VERL_GRPO,
)

#: where each preset's fields are read (the code path, by reading it)
READ_IN = {
    "trl-grpo": "trl 1.16.0 trl/trainer/grpo_trainer.py: GRPOTrainer.__init__ (the attributes "
                "_compute_loss reads, lines 782-983), _compute_loss, the vLLM ratio of "
                "_generate_and_score_completions",
    "verl": "verl 0.9.1 verl/trainer/ppo/ray_trainer.py (apply_kl_penalty, compute_advantage), "
            "verl/trainer/ppo/core_algos.py (the policy loss of loss_mode, agg_loss), "
            "verl/workers/utils/losses.py ppo_loss and value_loss",
    "verl-grpo": "verl 0.9.1 verl/trainer/ppo/ray_trainer.py (compute_advantage), "
                 "verl/trainer/ppo/core_algos.py (the estimators, the policy losses, agg_loss), "
                 "verl/workers/utils/losses.py ppo_loss",
    "openrlhf": "OpenRLHF 0.11.2 openrlhf/trainer/ray/ppo_actor.py (PolicyLoss, lines 76-86; "
                "the KL loss), ppo_critic.py (ValueLoss), trainer/ppo_utils/experience_maker.py",
    "openrlhf-grpo": "OpenRLHF 0.11.2 openrlhf/trainer/ray/ppo_actor.py (PolicyLoss, lines "
                     "76-86; the KL loss), trainer/ppo_utils/experience_maker.py",
}

_ENTROPY = "the entropy bonus and mask need the model's logits, which the suite has not"
#: preset -> {field read: (the framework's default, why it is pinned there)}
PINNED = {
    "trl-grpo": {
        "GRPOConfig.top_entropy_quantile": (1.0, _ENTROPY),
        "GRPOConfig.entropy_coef": (0.0, _ENTROPY),
        "GRPOConfig.use_adaptive_entropy": (False, _ENTROPY),
        "GRPOConfig.steps_per_generation": (
            None, "the composition: GRPOConfig.__post_init__ sets it to "
                  "gradient_accumulation_steps, 1 for one micro-batch per optimizer step"),
        "GRPOConfig.use_vllm": (False, "the preset's use_vllm None reads the case: vLLM "
                                       "sampled iff it carries logp_rollout"),
    },
    "verl": {},
    "verl-grpo": {},
    "openrlhf": {
        "args.actor.policy_loss_type": ("ppo", "preset openrlhf is PPO's clipped loss; "
                                               "gspo is an option of openrlhf-grpo"),
        "args.algo.advantage.estimator": ("gae", "preset openrlhf is GAE with a critic; the "
                                                 "critic-free estimators are openrlhf-grpo's"),
    },
    "openrlhf-grpo": {
        "args.actor.loss_agg_mode": ("token-mean", "preset openrlhf-grpo aggregates by token "
                                                   "mean, OpenRLHF's default"),
    },
}
_OPENRLHF_SHARED = {
    "args.algo.advantage.no_std_norm": (
        False, "the batch normalisation of the advantages (gae, reinforce, "
               "reinforce_baseline) divides by the std; no preset option drops it"),
    "args.reward.overlong_buffer_len": (
        None, "DAPO's overlong penalty (experience_maker.py apply_length_penalties) needs "
              "the responses' lengths against max_new_tokens, which no case carries: off"),
    "args.reward.stop_properly_penalty_coef": (
        None, "ProRL's stop-properly penalty needs vLLM's finish_reason (truncated), which "
              "no case carries: off"),
}
PINNED["openrlhf"].update(_OPENRLHF_SHARED)
PINNED["openrlhf-grpo"].update(_OPENRLHF_SHARED)
_SCALE = ("seq-mean-token-sum-norm divides by T, the padded response length (agg_loss's "
          "horizon, loss_mask.shape[-1]); no preset option sets another factor")
_VERL_SHARED = {
    "ActorConfig.loss_scale_factor": (None, _SCALE),
    "ActorConfig.policy_loss.rollout_correction": (
        None, "set by apply_bypass_mode to the algorithm's rollout_correction (the rollout_* "
              "options) in bypass mode"),
    "AlgoConfig.use_pf_ppo": (False, "PF-PPO reweights the batch by reward before the "
                                     "advantages; no preset has it"),
    "AlgoConfig.pf_ppo": ({"reweight_method": "pow", "weight_pow": 2.0},
                          "PF-PPO's settings, read with use_pf_ppo False: no preset has it"),
    "AlgoConfig.gdpo_reward_keys": (None, "gdpo's reward keys are the reward function's "
                                          "(the case's reward_components columns)"),
}
PINNED["verl"].update(_VERL_SHARED)
PINNED["verl-grpo"]["AlgoConfig.lam"] = (1.0, "compute_advantage passes it to GAE only; the "
                                              "critic-free estimators do not read it")
PINNED["verl-grpo"].update(_VERL_SHARED)
PINNED["verl"]["CriticConfig.loss_scale_factor"] = (
    None, "the file's ${oc.select:actor_rollout_ref.actor.loss_scale_factor,null}: " + _SCALE)
PINNED["verl"].update({
    "ActorConfig.policy_loss.loss_mode": ("vanilla", "preset verl is PPO's clipped loss; "
                                                     "the other modes are verl-grpo's"),
})


#: preset -> {field: what the trainer sets it to}: fields the framework's trainer fills from
#: the batch for the loss, set by the runner as the trainer sets them (file and line in the
#: runner) and followed by the preset
COMPOSED = {
    "verl": {"ActorConfig.global_batch_info": (
        "set by workers/utils/losses.py ppo_loss (lines 65-68) from what the trainer passes "
        "for one micro-batch on one rank (verl_runner.trainer_counts): dp_size 1, "
        "batch_num_tokens = the batch's response-mask sum (transformer_impl.py 730-735), "
        "global_batch_size = ppo_mini_batch_size * rollout.n = B rows (ray_trainer.py "
        "1352-1362), loss_scale_factor; the preset follows (_verl.verl_trainer_agg)")},
}
COMPOSED["verl-grpo"] = COMPOSED["verl"]
COMPOSED["openrlhf"] = {"args.rollout.n_samples_per_prompt": (
    "1, the parser's default: preset openrlhf has no groups (each response its own prompt)")}
COMPOSED["openrlhf-grpo"] = {"args.rollout.n_samples_per_prompt": (
    "the case's group size (openrlhf_runner.openrlhf_grpo: equal groups of G rows, prompt-"
    "major by Experience.index; 1 for groups of unequal sizes, no OpenRLHF layout)")}


def mapped(preset_name: str) -> dict:
    """{field: the preset option it is mapped to} (fields named as the Recorder logs them)."""
    if preset_name == "trl-grpo":
        return {f"GRPOConfig.{f}": o for o, f in TRL_GRPO.items()}
    if preset_name in ("verl", "verl-grpo"):
        mapping = VERL if preset_name == "verl" else VERL_GRPO
        out = {}
        for option, paths in mapping.items():
            for path in paths:
                if path.startswith("actor_rollout_ref.actor."):
                    out["ActorConfig." + path.removeprefix("actor_rollout_ref.actor.")] = option
                elif path.startswith("critic."):
                    out["CriticConfig." + path.removeprefix("critic.")] = option
                elif path.startswith("algorithm."):
                    out["AlgoConfig." + path.removeprefix("algorithm.")] = option
                if path.startswith("algorithm.rollout_correction."):
                    # (bypass mode: apply_bypass_mode gives the actor's policy loss the
                    # algorithm's rollout_correction)
                    out["ActorConfig.policy_loss.rollout_correction." + path.removeprefix(
                        "algorithm.rollout_correction.")] = option
        return out
    if preset_name in ("openrlhf", "openrlhf-grpo"):
        mapping = OPENRLHF if preset_name == "openrlhf" else OPENRLHF_GRPO
        out = {"args." + flag.lstrip("-"): option for option, (flag, _, _) in mapping.items()}
        out["args." + EPS_HIGH_FLAG.lstrip("-")] = "epsilon, epsilon_high"
        return out
    return {}


def unlisted(preset_name: str, log) -> list:
    """The fields read that are neither mapped nor pinned: each fails the suite."""
    known = (set(mapped(preset_name)) | set(PINNED.get(preset_name, {}))
             | set(COMPOSED.get(preset_name, {})))
    return sorted(f for f in log if f not in known)


def table_lines(summaries: dict) -> list:
    """The coverage table (markdown rows): preset, field read, mapped option or pinned value
    and why."""
    rows = ["| preset | field read | preset option, the trainer's composition, or pinned "
            "(the framework's default: why) |", "|---|---|---|"]
    for name, s in summaries.items():
        reads = s.get("fields_read")
        if not reads:
            continue
        m, pinned, composed = mapped(name), PINNED.get(name, {}), COMPOSED.get(name, {})
        for f in reads:
            if f in m:
                what = f"`{m[f]}`"
            elif f in composed:
                what = f"the trainer's composition: {composed[f]}"
            elif f in pinned:
                value, why = pinned[f]
                what = f"pinned, `{value!r}`: {why}"
            else:
                what = "**not listed: fails**"
            rows.append(f"| `{name}` | `{f}` | {what} |")
    return rows
