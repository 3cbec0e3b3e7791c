"""``make conformance``: every preset against its framework's released code, written to
``docs/conformance.md``.

    python -m tests.conformance.run [--random N] [--report docs/conformance.md]
    python -m tests.conformance.run --preset trl-0.11 --json FILE   # one preset (subprocess)

Runs in ``.venv-conformance`` (``make conformance`` builds it from
``requirements-conformance.txt``). The legacy TRL preset runs in a subprocess whose
``sys.path`` starts with ``.venv-conformance/trl-0.11.4`` (two TRL versions cannot share one
environment). Exit 0 when every preset that has a released package matched it; 1 with one
line ``conformance: FAILED: <preset>: <outputs>`` per failing preset, or ``conformance: FAILED:
<package>: <error>`` for a framework that could not be imported or run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

from . import stubs

ROOT = Path(__file__).resolve().parents[2]
LEGACY_TRL_DIR = ROOT / ".venv-conformance" / "trl-0.11.4"

#: outputs whose comparison decides a tie at a clip bound: in the ``-ties`` cases a
#: mismatch there is counted apart (torch splits the gradient of min/max at a tie, and which
#: side of the bound a tied token falls on is a rounding the probes cannot bracket)
def tie_sensitive(output: str) -> bool:
    return output in ("dlogp", "dvalues") or "clip" in output


NAN_PADDING = ("garbage-in-padding: NaN and +-inf at padding; the framework multiplies padding "
               "by the mask (NaN * 0 = NaN), and its own tensors hold finite numbers there, "
               "which the random cases put at padding instead")


NAN_ROLLOUT = ("rollout-nan-padding: NaN, +-inf and +-1e30 in logp_rollout at padding; verl "
               "0.9.1 carries it into the loss with the seq-means and token-level weights or "
               "the bypass mode (exp(clamp(log_ratio)) * response_mask, then loss_mat * "
               "loss_mask: NaN * 0 = NaN; token-mean's masked_sum, a torch.where, drops it), "
               "which the options of the random grid mix: the case is run apart, cell by cell "
               "against docs/conventions.md's table (the section on NaN at logp_rollout's "
               "padding below); OpenRLHF 0.11.2 (PolicyLoss: a kept response's coefficient is "
               "its token ratio at padding too, NaN or exp(1e30) = inf, times a loss of 0) "
               "carries it into the loss; TRL 1.16.0 zeroes it (nan_to_num) and is compared; "
               "the preset's outputs equal those on clean padding "
               "(tests/test_presets_rollout.py)")

#: verl rejection criteria tried, each with a threshold that cuts in the cases (verl_rs_threshold)
VERL_RS = ("token_k1", "seq_sum_k1", "seq_mean_k1", "token_k2", "seq_sum_k2", "seq_mean_k2",
           "seq_max_k2", "token_k3", "seq_sum_k3", "seq_mean_k3", "seq_max_k3",
           "token_k1,seq_max_k3")
_RS_THRESHOLD = {"k1": "0.5_1.8", "k2": 0.1, "k3": 0.1}


def verl_rs_threshold(case: dict) -> dict:
    """The case's params with rollout_rs_threshold for its rollout_rs (one per criterion),
    and the correction off on a case without logp_rollout (verl skips it there; the preset
    would refuse it)."""
    params = dict(case.get("params", {}))
    if case["inputs"].get("logp_rollout") is None:
        return {**params, "rollout_is": None, "rollout_rs": None, "bypass_mode": False}
    rs = params.get("rollout_rs")
    if rs is None:
        return params
    spec = ",".join(str(_RS_THRESHOLD[c.strip()[-2:]]) for c in rs.split(","))
    return {**params, "rollout_rs_threshold": spec}


#: --algo.advantage.is_correction_* (on the cases with logp_rollout)
OPENRLHF_IS_OPTIONS = {"is_correction_level": ["off", "token", "seq"],
                       "is_correction_mode": ["mask", "clip"],
                       "is_correction_gating": ["ratio", "binary_kl", "tv"],
                       "is_correction_threshold": [(0.5, 5.0), (0.8, 1.25), (0.0, 0.02)]}


def openrlhf_is_params(case: dict) -> dict:
    """The combinations OpenRLHF accepts: clip only at the token level with ratio gating, a
    divergence gate with a low of 0 (its upper bound only); off without logp_rollout."""
    p = dict(case.get("params", {}))
    if case["inputs"].get("logp_rollout") is None:
        p["is_correction_level"] = "off"
    if p.get("is_correction_mode") == "clip" and (p.get("is_correction_level") == "seq"
                                                  or p.get("is_correction_gating") != "ratio"):
        p["is_correction_mode"] = "mask"
    threshold = p.get("is_correction_threshold", (0.5, 5.0))
    if p.get("is_correction_gating", "ratio") != "ratio" and isinstance(threshold, tuple):
        # (a scalar, as the case rollout-gate sets, is the upper bound alone already)
        p["is_correction_threshold"] = (0.0, min(threshold[1], 0.05))
    return p


def f32(*names):
    """A case transform: the inputs ``names`` rounded to float32 values (stored exactly in
    float64), for a framework that stores them in float32."""
    def transform(case):
        inputs = dict(case["inputs"])
        for n in names:
            if n in inputs:
                inputs[n] = np.asarray(inputs[n], np.float32).astype(np.float64)
        return {**case, "inputs": inputs}
    transform.names = names
    return transform


def _candidate(name, log: set | None = None):
    """The framework's code for preset ``name`` as a function case -> outputs; ``log``
    collects the configuration fields the framework's code reads."""
    if name in ("verl", "verl-grpo"):
        from . import verl_runner as r
        fn = r.verl_ppo if name == "verl" else r.verl_grpo
        return lambda case: fn(case, log)
    if name in ("openrlhf", "openrlhf-grpo"):
        from . import openrlhf_runner as r
        fn = r.openrlhf_ppo if name == "openrlhf" else r.openrlhf_grpo
        return lambda case: fn(case, log)
    if name == "trl-grpo":
        from ppo_numpy.oracle.presets import get_preset

        from . import trl_runner as r
        preset = get_preset("trl-grpo")

        def trl_grpo(case):
            # the preset's advantages (B,): TRL computes its own inline (see SPECS)
            A, m = preset(case)["advantages"], case["inputs"]["mask"] == 1
            return r.trl_grpo(case, A[np.arange(len(A)), np.argmax(m, axis=-1)], log)
        return trl_grpo
    if name == "trl-0.11":
        from . import trl_runner as r
        return r.trl_legacy_ppo
    raise KeyError(name)


SPECS = {
    "verl": {
        "framework": "verl", "package": "verl==0.9.1",
        "functions": ["ray_trainer.apply_kl_penalty", "ray_trainer.compute_advantage",
                      "core_algos.compute_gae_advantage_return (via compute_advantage)",
                      "workers.utils.losses.ppo_loss (core_algos.get_policy_loss_fn("
                      "'vanilla' / 'bypass_mode'), kl_penalty, agg_loss)",
                      "workers.utils.losses.value_loss (core_algos.compute_value_loss)",
                      "core_algos.FixedKLController", "workers.config.ActorConfig"],
        "options": {"use_kl_in_reward": [False, True], "kl_estimator": ["k1", "k2", "abs", "k3"],
                    "beta": [0.001, 0.05], "epsilon": [0.2, 0.1], "epsilon_high": [0.2, 0.28],
                    "dual_clip": [3.0, 2.0], "value_clip": [0.5, 0.2],
                    "loss_agg_mode": ["token-mean", "seq-mean-token-sum",
                                      "seq-mean-token-mean", "seq-mean-token-sum-norm"],
                    "use_kl_loss": [False, True],
                    # (the "+" names: the estimate's value, k2's gradient; kl_penalty)
                    "kl_loss_type": ["low_var_kl", "low_var_kl+", "k3+", "kl", "k1+", "mse",
                                     "k2+", "abs", "abs+"],
                    "rollout_is": [None, "token", "sequence"],
                    "rollout_is_threshold": [2.0, "0.5_2.0", 5.0],
                    "rollout_is_batch_normalize": [False, True],
                    "rollout_rs": [None, *VERL_RS], "bypass_mode": [False, True],
                    "rollout_loss_type": ["ppo_clip", "reinforce"]},
        "inputs": f32("scores"),
        "exclude": {"garbage-in-padding": NAN_PADDING},
        "params": verl_rs_threshold,
        "not_compared": [
            "the statistics of metric_utils.compute_data_metrics (critic/score/mean, "
            "critic/rewards/mean, critic/advantages/mean, critic/returns/mean, "
            "critic/values/mean, critic/vf_explained_var): they are computed from a whole "
            "DataProto (prompts, responses, attention masks)",
            "the bypass mode's actor/rollout_corr/ metrics (compute_policy_loss_bypass_mode "
            "merges them into the policy loss's)",
            "workers/utils/losses.py ppo_loss and value_loss run on a dict stand-in for their "
            "TensorDict (a stub here), with no_padding_2_padding the identity: the suite's "
            "log-probs and values are already in the padded (B, T) response layout",
            "the reward manager (naive.py): needs a tokenizer; the suite writes the float32 "
            "token_level_scores at the last response token, its index rule for right padding",
            "log_ratio_clamp other than 20 and the diagnosis's convention switches: verl has "
            "no setting for them"],
    },
    "verl-grpo": {
        "framework": "verl", "package": "verl==0.9.1",
        "functions": ["ray_trainer.apply_kl_penalty", "ray_trainer.compute_advantage",
                      "core_algos.compute_grpo_outcome_advantage",
                      "core_algos.compute_rloo_outcome_advantage",
                      "core_algos.compute_reinforce_plus_plus_outcome_advantage",
                      "core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage",
                      "core_algos.compute_remax_outcome_advantage",
                      "core_algos.compute_opo_outcome_advantage",
                      "core_algos.compute_gpg_outcome_advantage",
                      "core_algos.compute_grpo_passk_outcome_advantage",
                      "core_algos.compute_gdpo_outcome_advantage",
                      "workers.utils.losses.ppo_loss (core_algos.get_policy_loss_fn: vanilla, "
                      "gspo, cispo, sapo, geo_mean, gpg, clip_cov, kl_cov, dppo_tv, dppo_kl, "
                      "dro, bypass_mode; kl_penalty, agg_loss)",
                      "workers.config.ActorConfig, PolicyLossConfig"],
        "options": {"adv_estimator": ["grpo", "rloo", "reinforce_plus_plus",
                                      "reinforce_plus_plus_baseline", "remax", "opo", "gpg",
                                      "grpo_passk", "gdpo"],
                    "gdpo_reward_weights": [None, [0.5, 2.0, 1.0]],
                    "norm_adv_by_std_in_grpo": [True, False], "gamma": [1.0, 0.9],
                    "loss_mode": ["vanilla", "gspo", "cispo", "sapo", "geo_mean", "gpg",
                                  "clip_cov", "kl_cov", "dppo_tv", "dppo_kl", "dro"],
                    "loss_agg_mode": ["token-mean", "seq-mean-token-sum",
                                      "seq-mean-token-mean", "seq-mean-token-sum-norm"],
                    "clip_ratio_low": [0.2, 0.1], "clip_ratio_high": [0.2, 0.28],
                    "clip_ratio_c": [3.0, 2.0], "use_kl_loss": [False, True],
                    "kl_loss_coef": [0.001, 0.1],
                    "kl_loss_type": ["low_var_kl", "kl", "mse", "abs", "k3", "k1", "k2",
                                     "low_var_kl+", "k3+", "kl+", "k1+", "mse+", "k2+",
                                     "abs+"],
                    "use_kl_in_reward": [False, True], "kl_coef": [0.001, 0.1],
                    "kl_penalty": ["kl", "abs", "mse", "low_var_kl", "k1", "k2", "k3",
                                   "k3+", "kl+"],
                    "tau_pos": [1.0, 2.0], "tau_neg": [1.05, 0.5],
                    "clip_cov_ratio": [0.0002, 0.3], "clip_cov_lb": [1.0, 0.0],
                    "clip_cov_ub": [5.0, 2.0], "kl_cov_ratio": [0.0002, 0.3],
                    "ppo_kl_coef": [0.1, 1.0], "dro_beta": [0.1, 1.0],
                    # algorithm.rollout_correction (on the cases with logp_rollout)
                    "rollout_is": [None, "token", "sequence"],
                    "rollout_is_threshold": [2.0, "0.5_2.0", 5.0],
                    "rollout_is_batch_normalize": [False, True],
                    "rollout_rs": [None, *VERL_RS],
                    "bypass_mode": [False, True],
                    "rollout_loss_type": ["ppo_clip", "reinforce"]},
        "inputs": f32("scores", "baseline_scores", "reward_components"),
        "exclude": {"rollout-nan-padding": NAN_ROLLOUT},
        "params": verl_rs_threshold,
        "not_compared": [
            "the statistics of metric_utils.compute_data_metrics (critic/score/mean, "
            "critic/rewards/mean, critic/advantages/mean): computed from a whole DataProto",
            "CLIP_COV_DRAW", "KL_COV_TIES"],
        "partial_outputs": {o: "KL_COV_TIES" for o in ("policy_loss", "dlogp",
                                                         "stat/actor/pg_loss")},
    },
    "openrlhf": {
        "framework": "OpenRLHF", "package": "openrlhf==0.11.2",
        "functions": ["models.utils.compute_approx_kl", "models.utils.compute_reward",
                      "RemoteExperienceMaker.compute_advantages_and_returns",
                      "RemoteExperienceMaker.get_advantages_and_returns",
                      "models.PolicyLoss", "models.ValueLoss", "models.utils.masked_mean",
                      "trainer.ppo_utils.experience.Experience"],
        "options": {"kl_estimator": ["k1", "k2", "k3"], "beta": [0.01, 0.1],
                    "epsilon": [0.2, 0.1], "epsilon_high": [None, 0.28],
                    "dual_clip": [None, 3.0], "value_clip": [0.5, 0.2],
                    "loss_agg_mode": ["token-mean", "seq-mean-token-mean"],
                    "reward_clip_range": [(-10.0, 10.0), (-1.0, 1.0)],
                    "use_kl_loss": [False, True], "kl_unbiased_gradient": [False, True],
                    **OPENRLHF_IS_OPTIONS},
        "inputs": f32("logp", "logp_old", "logp_ref", "logp_rollout", "scores"),
        "params": openrlhf_is_params,
        "exclude": {
            "garbage-in-padding": NAN_PADDING,
            "one-valid-token": "one valid token: OpenRLHF 0.11.2 takes the normalisation's mean "
                               "of .float() advantages, so a float64 advantage A becomes "
                               "(A - fl32(A)) / sqrt(1e-8), about 1e-4, where the preset (and "
                               "OpenRLHF in float32) give 0",
            "tiny-advantage-variance": "a variance of the order of the floor 1e-8: the float32 "
                                       "mean's rounding is multiplied by up to 1e4"},
        "not_compared": [
            "the diagnosis's convention switches and log_ratio_clamp other than 20: OpenRLHF "
            "has no setting for them"],
    },
    "openrlhf-grpo": {
        "framework": "OpenRLHF", "package": "openrlhf==0.11.2",
        "functions": ["models.utils.compute_approx_kl", "models.utils.compute_reward",
                      "RemoteExperienceMaker.compute_advantages_and_returns",
                      "RemoteExperienceMaker.get_cumulative_returns", "models.PolicyLoss",
                      "models.aggregate_loss", "trainer.ppo_utils.experience.Experience"],
        "options": {"advantage_estimator": ["group_norm", "rloo", "reinforce",
                                            "reinforce_baseline", "dr_grpo"],
                    "gamma": [1.0, 0.9], "init_kl_coef": [0.01, 0.0, 0.1],
                    "kl_estimator": ["k1", "k2", "k3"], "use_kl_loss": [False, True],
                    # (kl_unbiased_gradient: on the cases that carry it, kl-gradient-form and
                    # rollout-kl-gradient-form. An option more here redraws every combination
                    # of this grid, and the redrawn grid holds large-log-ratios with reinforce,
                    # gspo and k2 in the reward (init_kl_coef 0.1), with no KL loss at all,
                    # where OpenRLHF's policy loss is 6.4e-6 (relative) from the preset's:
                    # beyond this preset's float64 tolerance, within the float32 one. Measured
                    # for issue 38: a row's advantage of -0.003 carries OpenRLHF's float32
                    # rounding, 2e-8 (within atol), and GSPO's uncapped sequence ratio there,
                    # 2.1e5 (A < 0: the unclipped term), multiplies it into the loss; the
                    # preset's tolerance does not scale with the ratio)
                    "reward_clip_range": [(-10.0, 10.0), (-2.0, 2.0)],
                    "epsilon": [0.2, 0.1], "epsilon_high": [None, 0.28],
                    "dual_clip": [None, 3.0], "policy_loss_type": ["ppo", "gspo"],
                    **OPENRLHF_IS_OPTIONS},
        "inputs": f32("logp", "logp_old", "logp_ref", "logp_rollout", "scores"),
        "equal_sizes": True,
        "exclude": {"rollout-nan-padding": NAN_ROLLOUT},
        "params": openrlhf_is_params,
        "not_compared": [
            "rewards: compute_reward's result is local to compute_advantages_and_returns (the "
            "returns and advantages built on it are compared)",
            "group_reward_std where the groups are of unequal sizes (reinforce only): no "
            "OpenRLHF layout; there each response is its own prompt and nothing is logged"],
        "partial_outputs": {"stat/group_reward_std": "groups of unequal sizes: no OpenRLHF "
                                                     "layout (above)"},
    },
    "trl-grpo": {
        "framework": "TRL", "package": "trl==1.16.0",
        "functions": ["GRPOTrainer._compute_loss (on a stand-in trainer)",
                      "GRPOTrainer.get_gamma_weights (vespo)",
                      "trl.trainer.utils.nanmin, nanmax (its metrics)"],
        "options": {"loss_type": ["dapo", "grpo", "bnpo", "dr_grpo", "cispo", "luspo",
                                  "vespo", "sapo"],
                    "vespo_k_pos": [2.0, 1.0], "vespo_lambda_pos": [3.0, 0.5],
                    "vespo_k_neg": [3.0, 1.5], "vespo_lambda_neg": [2.0, 4.0],
                    "importance_sampling_level": ["token", "sequence"],
                    "epsilon": [0.2, 0.1], "epsilon_high": [None, 0.28],
                    "delta": [None, 1.5, 3.0],
                    "beta": [0.0, 0.04], "use_bias_correction_kl": [True, False],
                    "max_completion_length": [512, 16],
                    "num_items_in_batch": [None, 37],
                    "scale_rewards": ["group", "batch", "none"],
                    "sapo_temperature_pos": [1.0, 2.0], "sapo_temperature_neg": [1.05, 0.5],
                    # the vLLM correction and the off-policy mask (cases with logp_rollout)
                    "vllm_importance_sampling_correction": [True, False],
                    "vllm_importance_sampling_mode": ["sequence_mask", "token_truncate",
                                                      "token_mask", "sequence_truncate"],
                    "vllm_importance_sampling_clip_min": [None, 0.5],
                    "vllm_importance_sampling_clip_max": [3.0, 1.5, None],
                    "off_policy_mask_threshold": [None, 0.05, 0.5]},
        # (TRL's rewards are float32: the reward functions' values in a float32 tensor)
        "inputs": f32("scores"),
        "exclude": {},
        "not_compared": [
            "advantages and frac_reward_zero_std (so scale_rewards only through the "
            "advantages the loss is given): TRL computes them inline in "
            "GRPOTrainer._generate_and_score_completions, with generation and the reward "
            "functions, which cannot be called alone; the loss is fed the preset's "
            "advantages; reward, TRL's float32 nanmean of the scores: where their mean nearly "
            "cancels its rounding, u_32 sum|s| / n, exceeds any relative tolerance. "
            "reward_std is compared: TRL's nanstd of the float32 scores (line 2829)",
            "entropy: needs logits"],
    },
    "trl-0.11": {
        "framework": "TRL (legacy PPOTrainer)", "package": "trl==0.11.4", "subprocess": True,
        "functions": ["PPOTrainer.compute_rewards", "PPOTrainer._kl_penalty",
                      "PPOTrainer.compute_advantages", "PPOTrainer.loss",
                      "PPOTrainer.record_step_stats", "trl.core.stack_dicts"],
        "options": {"kl_estimator": ["k1", "k2", "abs"], "beta": [0.2, 0.05],
                    "epsilon": [0.2, 0.1], "value_clip": [0.2, 0.5], "vf_coef": [0.1, 1.0],
                    "ratio_threshold": [10.0, 1.05]},
        "inputs": None,
        "exclude": {"garbage-in-padding": NAN_PADDING},
        "not_compared": [
            "score_clip other than None: PPOTrainer.step clips the scores inline (a "
            "full step needs models); whiten_rewards=True: the preset refuses it",
            "ppo/val/var_explained (1 - error / var) and ppo/loss/total (policy + vf_coef "
            "value): their parts are compared; the float32 rounding of TRL's Bessel factor in "
            "one part, relative to the result, grows by the cancellation (by |1 - v| / |v| for "
            "var_explained)", "ppo/policy/entropy: needs logits"],
    },
}

#: presets without a released package to run, and why (their rows in the report)
NOT_RUN = {
    "seed": "ppo_numpy's own convention (docs/objective.md): no framework",
    "trl": "TRL's PPOTrainer of 0.20.0: TRL 1.16.0 (the release pinned) ships no PPO trainer, "
           "and 0.20.0's PPOTrainer.train computes rewards, GAE, whitening and the losses "
           "inline in its training loop, with no function to call alone; source-read "
           "(trl 0.20.0 wheel, docs/frameworks.md)",
    "deepspeed-chat": "not an installable package; source-read at microsoft/DeepSpeedExamples "
                      "3b458596 (applications/DeepSpeed-Chat/dschat/rlhf/ppo_trainer.py)",
    "lm-human-preferences": "not an installable package; source-read at "
                            "openai/lm-human-preferences 1ab856db (train_policy.py) and "
                            "f774e89b (utils/core.py)",
}


def partial_outputs(unchecked: dict, compared, allowed: dict) -> dict:
    """{output: number of cases} of the outputs the framework's code returned on some cases
    (``compared``) and not on others (``unchecked``: {output: [cases]} of the comparison),
    but those ``allowed`` ({output: why}): each fails the suite (issue 34, defect 3: the
    preset logged clip fractions where verl's REINFORCE loss logs none)."""
    return {o: len(cases) for o, cases in sorted(unchecked.items())
            if o in compared and o not in allowed}


def run_one(name: str, n_random: int, seed: int = 0) -> dict:
    from . import coverage, harness
    from .framework_config import DEFINING, default_pairs

    spec = SPECS[name]
    log = set()
    candidate = _candidate(name, log)
    transform = spec["inputs"]
    exclude = spec["exclude"]

    from ppo_numpy.oracle.presets import get_preset
    p = get_preset(name).parameters
    eps = p.get("epsilon", p.get("clip_ratio_low", 0.2))
    if "groups" in get_preset(name).input_names:
        def random_cases(rng, n):
            return harness.random_group_cases(rng, n, eps=eps,
                                              equal_sizes=spec.get("equal_sizes", False))
    else:
        def random_cases(rng, n):
            return harness.random_ppo_cases(rng, n, eps=eps, value_clip=p.get("value_clip"))

    rng = np.random.default_rng([seed, sum(map(ord, name))])
    oracle = [c for c in harness.oracle_cases(name, spec["options"], rng, seed)
              if c["name"].split("[", 1)[0] not in exclude]
    rand = random_cases(rng, n_random)
    # (b) nothing set on either side but the preset's defining options: the framework's
    # defaults against the preset's, on the oracle's own cases
    defining = {k: get_preset(name).parameters[k] for k in DEFINING.get(name, {})}
    base = [c for c in harness.oracle_cases(name, {}, rng, seed)
            if c["name"].split("[", 1)[0] not in exclude]
    defaults_run = [{**c, "name": c["name"] + "[defaults]", "params": {
        **c.get("params", {}), **defining}} for c in base]
    cases = defaults_run + oracle + harness.with_options(rand, harness.option_combinations(
        spec["options"], rng, len(rand)))
    if spec.get("params") is not None:
        cases = [{**c, "params": spec["params"](c)} for c in cases]
    if transform is not None:
        cases = [transform(c) for c in cases]
    from ppo_numpy.oracle.compare import compare
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = compare(candidate, name, cases, "float64")
    summary = harness.summarise(name, report, len(oracle), len(rand))
    # a mismatch in a ties case on a tie-sensitive output is counted apart, not failed
    tie_rows = [r for r in report.failures if "-ties" in r.case and tie_sensitive(r.output)]
    real = [r for r in report.failures if r not in tie_rows]
    summary["tie_mismatches"] = len(tie_rows)
    summary["tie_comparisons"] = sum(1 for r in report.rows if "-ties" in r.case
                                     and tie_sensitive(r.output))
    summary["passed"] = not real
    # an output the framework's code returns on some cases and not on others, which the
    # preset produces on all: the preset requires on that path what the framework does not
    # log there (a candidate following the framework would be told it left it out)
    summary["partial_outputs"] = partial_outputs(report.unchecked, summary["outputs"],
                                                 spec.get("partial_outputs", {}))
    if summary["partial_outputs"]:
        summary["passed"] = False
    summary["failed_outputs"] = sorted({r.output for r in real})
    summary["failures"] = [r.describe() for r in sorted(real, key=harness._ratio,
                                                        reverse=True)[:3]]
    for o, row in summary["outputs"].items():
        row["failed"] = sum(1 for r in real if r.output == o)
        row["tie_mismatches"] = sum(1 for r in tie_rows if r.output == o)
    # (a) every preset default against the framework's, read from the release now
    pairs = default_pairs(name)
    summary["default_pairs"] = [[o, repr(mine), where, repr(theirs), same]
                                for o, mine, where, theirs, same in pairs]
    summary["defaults_differ"] = [o for o, *_, same in pairs if not same]
    summary["defaults_run"] = {
        "cases": len(defaults_run),
        "failed": sorted({r.case for r in real if r.case.endswith("[defaults]")})}
    # the configuration fields the framework's code read, against the coverage table
    summary["fields_read"] = sorted(log)
    summary["unlisted_fields"] = coverage.unlisted(name, log)
    if summary["defaults_differ"] or summary["unlisted_fields"]:
        summary["passed"] = False
    summary["excluded"] = exclude
    summary["input_rounding"] = list(transform.names) if transform else []
    summary["version"] = version_of(spec["package"].split("==")[0])
    return summary


def version_of(package: str) -> str:
    """The installed version of ``package`` (its metadata: OpenRLHF has no __version__)."""
    if package == "trl":
        import trl  # the legacy one in its subprocess: importlib.metadata sees only 1.16
        return trl.__version__
    from importlib.metadata import version
    return version(package)


class Subprocess:
    """One preset in a fresh interpreter whose sys.path starts with the legacy TRL directory,
    started at once (it runs beside the others: two cores) and collected by :meth:`result`."""

    def __init__(self, name: str, n_random: int):
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "summary.json"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(LEGACY_TRL_DIR), str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.conformance.run", "--preset", name, "--random",
             str(n_random), "--json", str(self.out)], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self) -> dict:
        stdout, stderr = self.proc.communicate()
        try:
            if self.proc.returncode != 0 or not self.out.exists():
                tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
                raise RuntimeError(f"subprocess failed: {tail[0]}")
            return json.loads(self.out.read_text())
        finally:
            self.tmp.cleanup()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.run")
    parser.add_argument("--random", type=int, default=1000, help="random cases per preset")
    parser.add_argument("--preset", action="append", help="only these presets")
    parser.add_argument("--json", help="write the summaries as JSON (with one --preset)")
    parser.add_argument("--report", default=str(ROOT / "docs" / "conformance.md"))
    parser.add_argument("--step", action="store_true",
                        help="run the distributed step (alone, or with --preset's presets; "
                             "the whole run includes it); no report is written")
    from .step_distributed import plants
    parser.add_argument("--plant-step", choices=plants(), default=None,
                        help="the step run alone (as --step) with one convention or preset "
                             "planted wrong (step_distributed.plants(): shows the failure)")
    args = parser.parse_args(argv)
    args.step = args.step or args.plant_step is not None
    # the whole run (every preset and the step, the report written): no --preset, no --step
    whole = args.preset is None and not args.step
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # the frameworks' import-time notices (optional engines, no GPU) are not results
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    stubs.install()
    import torch
    torch.set_num_threads(1)
    names = args.preset or list(SPECS)
    if args.step and not args.preset:
        names = []
    if args.json:
        (name,) = names
        summary = run_one(name, args.random)
        Path(args.json).write_text(json.dumps(summary))
        return 0
    t0 = time.time()
    summaries, errors = {}, {}
    started = {n: (Subprocess(n, args.random), time.time()) for n in names
               if SPECS[n].get("subprocess")}
    # (the subprocesses first, so that their results come last, as the report lists them)
    for name in [n for n in names if n not in started] + list(started):
        spec = SPECS[name]
        t = started[name][1] if name in started else time.time()
        try:
            if name in started:
                summaries[name] = started[name][0].result()
            else:
                summaries[name] = run_one(name, args.random)
        except Exception as err:  # a framework that cannot be imported or run: a failure
            errors[name] = f"{spec['package']}: {type(err).__name__}: {err}"
            traceback.print_exc(file=sys.stderr)
            continue
        s = summaries[name]
        s["seconds"] = round(time.time() - t, 1)
        print(f"conformance: {name}: {'ok' if s['passed'] else 'FAILED'} "
              f"({s['cases']} cases, {s['comparisons']} comparisons, {s['seconds']} s)",
              flush=True)
        for o, mine, where, theirs, same in s.get("default_pairs", []):
            print(f"    default {o} = {mine} | {where} = {theirs}"
                  f"{'' if same else '   DIFFERS'}")
        if s.get("default_pairs"):
            run = s["defaults_run"]
            print(f"    nothing set on either side: {run['cases']} cases, "
                  f"{len(run['failed'])} failed")
    nan = None
    if "verl-grpo" in summaries:
        # the docs' table of verl's loss with NaN at logp_rollout's padding, run on verl
        from . import nan_padding
        nan = nan_padding.run()
        print(f"conformance: NaN at logp_rollout's padding (docs/conventions.md's table, "
              f"verl 0.9.1): {len(nan['rows'])} cells, {len(nan['failures'])} contradicted",
              flush=True)
    step = None
    if whole or args.step:
        # one optimizer step in a real torch.distributed run: 2 gloo processes on loopback,
        # started and joined here (step_distributed.run_ranks), the frameworks' released
        # normalisation against ppo_numpy.policy_step and the presets' step outputs
        from .step_distributed import WORLD, run_step_conformance
        try:
            step = run_step_conformance(plant=args.plant_step)
        except Exception as err:  # the run itself failed: a failure, named
            errors["step"] = f"torch.distributed: {type(err).__name__}: {err}"
            traceback.print_exc(file=sys.stderr)
        else:
            print(f"conformance: one step on {WORLD} gloo ranks: {len(step['rows'])} "
                  f"normaliser cases, {len(step['preset_rows'])} preset steps, "
                  f"{len(step['failures'])} differences ({step['seconds']:.1f} s)", flush=True)
    elapsed = time.time() - t0
    if whole:
        from .report import write_report
        write_report(Path(args.report), summaries, errors, SPECS, NOT_RUN, elapsed,
                     stubbed=stubs.stubbed(), python=platform.python_version(),
                     torch_version=torch.__version__, n_random=args.random, nan_padding=nan,
                     step=step)
        print(f"conformance: wrote {Path(args.report).relative_to(ROOT)}")
    failed = False
    for name, err in errors.items():
        print(f"conformance: FAILED: {name}: {err}")
        failed = True
    if whole:
        from .coverage import table_lines
        print("conformance: config coverage (fields the loss / advantage / statistics path "
              "read):")
        for line in table_lines(summaries):
            print("    " + line)
    for line in (nan or {}).get("failures", []):
        print(f"conformance: FAILED: verl-grpo: NaN at logp_rollout's padding: {line}")
        failed = True
    for line in (step or {}).get("failures", []):
        print(f"conformance: FAILED: step: {line}")
        failed = True
    for name, s in summaries.items():
        for o in s.get("defaults_differ", []):
            pair = next(p for p in s["default_pairs"] if p[0] == o)
            print(f"conformance: FAILED: {name}: default {o}: preset {pair[1]}, "
                  f"{pair[2]} {pair[3]} in the installed release")
            failed = True
        for f in s.get("unlisted_fields", []):
            print(f"conformance: FAILED: {name}: {f} is read by the framework's code and "
                  "neither mapped to a preset option nor pinned (tests/conformance/"
                  "coverage.py)")
            failed = True
        for o, n in s.get("partial_outputs", {}).items():
            print(f"conformance: FAILED: {name}: {o} is produced by the preset on {n} cases "
                  "where the framework's code does not return it (the preset requires what "
                  "the framework does not log on that path; or list it in the spec's "
                  "partial_outputs with why)")
            failed = True
        if not s["passed"] and s["failed_outputs"]:
            print(f"conformance: FAILED: {name}: {', '.join(s['failed_outputs'])}")
            for line in s["failures"][:1]:
                print("    " + line.replace("\n", "\n    "))
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
