"""The frameworks' own configuration, read from the installed releases at run time: each
preset option maps to a framework field, the runners build the framework's configuration
objects with the framework's defaults and set only the options a case sets, and
:func:`default_pairs` compares every preset default with the framework's own, option by
option (issue 34; STYLE.md habit 18).

* TRL 1.16.0: ``trl.GRPOConfig()`` (``trl/trainer/grpo_config.py``). Its base class,
  transformers' ``TrainingArguments``, is a stub here (transformers is not installed): the
  fields ``GRPOConfig.__post_init__`` reads from it are set to one process and one micro-batch
  per optimizer step (:data:`TRAINING_ARGUMENTS`), the composition the suite compares.
* verl 0.9.1: the trainer's own configuration file ``verl/trainer/config/
  _generated_ppo_trainer.yaml`` (what ``main_ppo`` starts from), turned into ``ActorConfig``
  (with ``PolicyLossConfig``), ``AlgoConfig`` and ``RolloutCorrectionConfig`` by
  ``verl.utils.config.omega_conf_to_dataclass`` (hydra), as verl does.
* OpenRLHF 0.11.2: the defaults of the command-line parser of ``openrlhf/cli/
  train_ppo_ray.py``, read from the installed file's ``parser.add_argument`` calls (the
  parser is built under ``if __name__ == "__main__"``, so it is read, not run), and the
  file's own post-processing of one threshold value (``[0, h]``) and of ``eps_clip_low_high``.

:class:`Recorder` wraps a configuration object and records every field the framework's code
reads: the config-coverage check (``run.py``) fails on a field that is read and neither mapped
to a preset option nor pinned (:data:`PINNED`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
from types import SimpleNamespace

# ---------------------------------------------------------------------------------------
# Reading what the framework's code reads


class Recorder:
    """A view of a configuration object that records the dotted name of every field read
    through it (nested configuration objects and namespaces are wrapped too); a field set
    through it is set on the object (OpenRLHF's experience maker sets
    ``args.algo.advantage.gamma = 1.0`` for the critic-free estimators)."""

    def __init__(self, target, log: set, prefix: str = ""):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_prefix", prefix)

    def __setattr__(self, name, value):
        setattr(self._target, name, value)

    def __getattr__(self, name):
        value = getattr(self._target, name)
        path = self._prefix + name
        if _is_config(value):
            return Recorder(value, self._log, path + ".")
        if not callable(value):
            self._log.add(path)
        return value

    def get(self, name, default=None):
        self._log.add(self._prefix + name)
        return getattr(self._target, name, default)


_RECORDING = {}


def recording(obj, log: set, prefix: str):
    """``obj`` (a dataclass configuration object) as an instance of a subclass of its own
    class that records every field read into ``log``: the framework's ``isinstance`` checks
    still hold (verl asserts ``isinstance(config, ActorConfig)``)."""
    import copy

    cls = type(obj)
    sub = _RECORDING.get(cls)
    if sub is None:
        def __getattribute__(self, name):
            value = object.__getattribute__(self, name)
            if name.startswith("_") or callable(value):
                return value
            log_, prefix_ = object.__getattribute__(self, "_recording_")
            if _is_config(value) and not isinstance(value, SimpleNamespace):
                return recording(value, log_, prefix_ + name + ".")
            log_.add(prefix_ + name)
            return value

        sub = _RECORDING[cls] = type(cls.__name__, (cls,), {
            "__getattribute__": __getattribute__, "__module__": cls.__module__})
    new = copy.copy(obj)
    object.__setattr__(new, "__class__", sub)
    object.__setattr__(new, "_recording_", (log, prefix))
    return new


def _is_config(value) -> bool:
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)) or \
        isinstance(value, SimpleNamespace)


def recorded(log: set, prefix: str) -> set:
    """The fields of ``log`` under ``prefix`` (``"actor."``), the prefix removed."""
    return {n[len(prefix):] for n in log if n.startswith(prefix)}


# ---------------------------------------------------------------------------------------
# TRL 1.16.0: GRPOConfig

#: transformers' TrainingArguments fields that GRPOConfig.__post_init__ reads (transformers
#: is a stub here): one process, one micro-batch per optimizer step, training mode
TRAINING_ARGUMENTS = {"world_size": 1, "gradient_accumulation_steps": 1, "do_eval": False,
                      "eval_strategy": "no", "parallelism_config": None,
                      "auto_find_batch_size": False, "fp16": False,
                      "per_device_eval_batch_size": 8}


def grpo_config(**fields):
    """``trl.GRPOConfig(**fields)`` with its own defaults and ``__post_init__`` (the
    TrainingArguments stand-in of :data:`TRAINING_ARGUMENTS` beneath it; its
    ``per_device_train_batch_size`` is GRPOConfig's ``num_generations``: one prompt group
    per micro-batch, the smallest batch GRPOConfig accepts)."""
    import trl
    from trl import GRPOConfig

    base = GRPOConfig.__mro__[2]  # transformers.TrainingArguments (a stub)
    num_generations = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}[
        "num_generations"]

    def post_init(self):
        for k, v in {**TRAINING_ARGUMENTS,
                     "per_device_train_batch_size": num_generations}.items():
            if not hasattr(type(self), k) or k not in self.__dict__:
                object.__setattr__(self, k, v)

    assert "TrainingArguments" in base.__name__, (trl.__version__, base)
    saved = base.__dict__.get("__post_init__")
    base.__post_init__ = post_init
    try:
        return GRPOConfig(**fields)
    finally:
        if saved is None:
            del base.__post_init__
        else:
            base.__post_init__ = saved


#: preset trl-grpo option -> GRPOConfig field (the same name: TRL's own)
TRL_GRPO = {k: k for k in (
    "loss_type", "scale_rewards", "importance_sampling_level", "epsilon", "epsilon_high",
    "delta", "beta", "use_bias_correction_kl", "max_completion_length", "vespo_k_pos",
    "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "sapo_temperature_pos",
    "sapo_temperature_neg", "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_clip_max", "off_policy_mask_threshold")}

# ---------------------------------------------------------------------------------------
# verl 0.9.1: the trainer's configuration file through hydra

VERL_YAML = "trainer/config/_generated_ppo_trainer.yaml"


def verl_trainer_config(overrides: dict, composition: dict):
    """The trainer's configuration (OmegaConf) from verl's generated file, with ``overrides``
    and ``composition`` ({dotted path: value}) set."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(_verl_file())  # (a fresh copy of the file's tree)
    for path, value in {**composition, **overrides}.items():
        OmegaConf.update(cfg, path, value, merge=False)
    return cfg


#: one optimizer step of one micro-batch on one rank (rollout.n 1: the rows are the
#: mini-batch); these only satisfy ActorConfig's checks, the loss path does not read them
#: (the trainer's global_batch_size, ppo_mini_batch_size * rollout.n, is the case's B rows:
#: verl_runner.trainer_counts)
VERL_COMPOSITION = {"actor_rollout_ref.rollout.n": 1,
                    "actor_rollout_ref.actor.ppo_mini_batch_size": 1,
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1}


@functools.lru_cache(maxsize=1)
def verl_default_objects():
    """(ActorConfig, AlgoConfig, RolloutCorrectionConfig, the configuration) of verl's file
    with nothing set, built once by hydra as verl builds them."""
    cfg = verl_trainer_config({}, VERL_COMPOSITION)
    return (*verl_objects(cfg), cfg)


def verl_objects_with(overrides: dict):
    """The default objects with ``overrides`` ({trainer-file path: value}) applied by
    ``dataclasses.replace`` (each object's own checks run again), and the critic's fields
    that ``workers/utils/losses.py`` ``value_loss`` reads (cliprange_value, loss_agg_mode,
    loss_scale_factor; the file's critic section, whose CriticConfig needs a model to build).
    Much faster than hydra per case, the same objects."""
    actor, algo, rc, cfg = verl_default_objects()
    parts = {"actor": {}, "policy_loss": {}, "algo": {}, "kl_ctrl": {}, "rc": {}}
    critic = {"cliprange_value": cfg.critic.cliprange_value,
              "loss_agg_mode": cfg.critic.loss_agg_mode,
              "loss_scale_factor": cfg.critic.loss_scale_factor}
    for path, value in overrides.items():
        for prefix, part in (("actor_rollout_ref.actor.policy_loss.", "policy_loss"),
                             ("actor_rollout_ref.actor.", "actor"),
                             ("algorithm.rollout_correction.", "rc"),
                             ("algorithm.kl_ctrl.", "kl_ctrl"), ("algorithm.", "algo")):
            if path.startswith(prefix):
                parts[part][path.removeprefix(prefix)] = value
                break
        else:
            if path.startswith("critic."):
                critic[path.removeprefix("critic.")] = value
            else:
                raise KeyError(path)
    rc = dataclasses.replace(rc, **parts["rc"])
    policy_loss = dataclasses.replace(actor.policy_loss, **parts["policy_loss"])
    actor = dataclasses.replace(actor, policy_loss=policy_loss, **parts["actor"])
    algo = dataclasses.replace(algo, kl_ctrl=dataclasses.replace(algo.kl_ctrl,
                                                                 **parts["kl_ctrl"]),
                               rollout_correction=rc, **parts["algo"])
    return actor, algo, rc, SimpleNamespace(**critic)


@functools.lru_cache(maxsize=1)
def _verl_file():
    """verl's trainer configuration file, as a plain container (read once per process)."""
    import verl
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(
        os.path.join(os.path.dirname(verl.__file__), VERL_YAML)))


def verl_objects(cfg):
    """(ActorConfig, AlgoConfig, RolloutCorrectionConfig) of a trainer configuration, by
    verl's own ``omega_conf_to_dataclass``."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    rc = algo.rollout_correction
    if not isinstance(rc, RolloutCorrectionConfig):
        # (AlgoConfig keeps the file's dict; ray_trainer builds the dataclass from it)
        rc = RolloutCorrectionConfig(**dict(rc))
    return actor, algo, rc


#: verl's kl_penalty / kl_loss_type names of the verl preset's kl_estimator
KL_NAMES = {"k1": "kl", "k2": "mse", "abs": "abs", "k3": "low_var_kl"}
_KL_BACK = {v: k for k, v in KL_NAMES.items()}
_RC = "algorithm.rollout_correction."
_ROLLOUT = {"rollout_is": _RC + "rollout_is", "rollout_is_threshold": _RC + "rollout_is_threshold",
            "rollout_is_batch_normalize": _RC + "rollout_is_batch_normalize",
            "rollout_rs": _RC + "rollout_rs", "rollout_rs_threshold": _RC + "rollout_rs_threshold",
            "bypass_mode": _RC + "bypass_mode", "rollout_loss_type": _RC + "loss_type"}
_A = "actor_rollout_ref.actor."
#: preset verl option -> the trainer configuration's paths (every path gets the value)
VERL = {"gamma": ["algorithm.gamma"], "lam": ["algorithm.lam"],
        "beta": ["algorithm.kl_ctrl.kl_coef", _A + "kl_loss_coef"],
        "use_kl_in_reward": ["algorithm.use_kl_in_reward"],
        "kl_estimator": ["algorithm.kl_penalty"],
        "epsilon": [_A + "clip_ratio", _A + "clip_ratio_low"],
        "epsilon_high": [_A + "clip_ratio_high"], "dual_clip": [_A + "clip_ratio_c"],
        "value_clip": ["critic.cliprange_value"],
        # (the file's critic.loss_agg_mode is ${oc.select:actor_rollout_ref.actor.
        # loss_agg_mode,token-mean}: the actor's)
        "loss_agg_mode": [_A + "loss_agg_mode", "critic.loss_agg_mode"],
        "use_kl_loss": [_A + "use_kl_loss"], "kl_loss_type": [_A + "kl_loss_type"],
        **{k: [v] for k, v in _ROLLOUT.items()}}
#: preset verl-grpo option -> the trainer configuration's paths
VERL_GRPO = {"adv_estimator": ["algorithm.adv_estimator"],
             "norm_adv_by_std_in_grpo": ["algorithm.norm_adv_by_std_in_grpo"],
             "gamma": ["algorithm.gamma"], "loss_agg_mode": [_A + "loss_agg_mode"],
             "loss_mode": [_A + "policy_loss.loss_mode"],
             "clip_ratio_low": [_A + "clip_ratio", _A + "clip_ratio_low"],
             "clip_ratio_high": [_A + "clip_ratio_high"], "clip_ratio_c": [_A + "clip_ratio_c"],
             "use_kl_loss": [_A + "use_kl_loss"], "kl_loss_coef": [_A + "kl_loss_coef"],
             "kl_loss_type": [_A + "kl_loss_type"],
             "use_kl_in_reward": ["algorithm.use_kl_in_reward"],
             "kl_penalty": ["algorithm.kl_penalty"], "kl_coef": ["algorithm.kl_ctrl.kl_coef"],
             "gdpo_reward_weights": ["algorithm.gdpo_reward_weights"],
             "tau_pos": [_A + "tau_pos"], "tau_neg": [_A + "tau_neg"],
             **{k: [_A + "policy_loss." + k] for k in (
                 "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio",
                 "ppo_kl_coef", "dro_beta")},
             **{k: [v] for k, v in _ROLLOUT.items()}}
#: the verl preset's values that are spelled otherwise in verl's file (to verl, back)
VERL_VALUES = {"kl_estimator": (KL_NAMES.get, _KL_BACK.get)}


def verl_overrides(mapping: dict, params: dict) -> dict:
    """{path: value} of the options a case sets (``params``), in verl's spelling."""
    out = {}
    for option, value in params.items():
        if option not in mapping:
            continue
        to, _ = VERL_VALUES.get(option, (None, None))
        for path in mapping[option]:
            out[path] = to(value) if to else value
    return out


def verl_file_defaults(mapping: dict) -> dict:
    """{option: (path, the trainer configuration's value, in the preset's spelling)}."""
    from omegaconf import OmegaConf

    cfg = verl_trainer_config({}, {})
    out = {}
    for option, paths in mapping.items():
        value = OmegaConf.select(cfg, paths[0])
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        _, back = VERL_VALUES.get(option, (None, None))
        out[option] = (paths[0], back(value) if back else value)
    return out


# ---------------------------------------------------------------------------------------
# OpenRLHF 0.11.2: the command-line parser's defaults


@functools.lru_cache(maxsize=1)
def openrlhf_parser_defaults() -> dict:
    """{"--option": default} of every ``parser.add_argument`` in the installed
    ``openrlhf/cli/train_ppo_ray.py`` (a default that is not a literal is left out; an
    argument without ``default=`` has None, argparse's)."""
    import openrlhf

    path = os.path.join(os.path.dirname(openrlhf.__file__), "cli", "train_ppo_ray.py")
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args
                and isinstance(node.args[0], ast.Constant)):
            name = node.args[0].value
            kw = {k.arg: k.value for k in node.keywords}
            if "default" not in kw:
                out[name] = False if _is_store_true(kw) else None
                continue
            try:
                out[name] = ast.literal_eval(kw["default"])
            except ValueError:
                continue
    return out


def _is_store_true(kw) -> bool:
    action = kw.get("action")
    return isinstance(action, ast.Constant) and action.value == "store_true"


def openrlhf_args(params: dict, mapping: dict, **composition):
    """The parsed ``args`` as train_ppo_ray.py's trainer sees them (nested namespaces by the
    dots of the option names): the parser's defaults, the options a case sets (``params``,
    through ``mapping``), ``composition`` ({"--option": value}), and the file's own
    post-processing: ``eps_clip_low_high`` from ``eps_clip`` when unset, one
    ``is_correction_threshold`` value h as [0, h]."""
    values = dict(openrlhf_parser_defaults())
    for option, value in params.items():
        if option in mapping:
            flag, to, _ = mapping[option]
            values[flag] = to(value) if to else value
    values.update(composition)
    root = SimpleNamespace()
    for flag, value in values.items():
        *parents, leaf = flag.lstrip("-").split(".")
        node = root
        for part in parents:
            if not hasattr(node, part):
                setattr(node, part, SimpleNamespace())
            node = getattr(node, part)
        setattr(node, leaf.replace("-", "_"), value)
    # train_ppo_ray.py, after parse_args: eps_clip_low_high defaults to (eps_clip, eps_clip)
    if root.actor.eps_clip_low_high is None:
        root.actor.eps_clip_low_high = (root.actor.eps_clip, root.actor.eps_clip)
    threshold = list(root.algo.advantage.is_correction_threshold)
    if len(threshold) == 1:
        threshold = [0.0, threshold[0]]
    root.algo.advantage.is_correction_threshold = threshold
    return root


def _eps_high_to(value):
    return value


def _threshold_to(value):
    """``is_correction_threshold`` as OpenRLHF's ``nargs="+"`` list: [LOW, HIGH], or [HIGH]
    for one number (its upper bound alone; ``openrlhf_args`` inserts the low 0)."""
    return list(value) if isinstance(value, (tuple, list)) else [float(value)]


#: preset openrlhf / openrlhf-grpo option -> (parser option, to OpenRLHF, back to the
#: preset's spelling)
OPENRLHF_COMMON = {
    "gamma": ("--algo.advantage.gamma", float, float),
    "kl_estimator": ("--algo.kl.estimator", None, None),
    "reward_clip_range": ("--reward.clip_range", list, tuple),
    "epsilon": ("--actor.eps_clip", None, None),
    "dual_clip": ("--actor.dual_clip", None, None),
    "is_correction_level": ("--algo.advantage.is_correction_level", None, None),
    "is_correction_mode": ("--algo.advantage.is_correction_mode", None, None),
    "is_correction_gating": ("--algo.advantage.is_correction_gating", None, None),
    "is_correction_threshold": ("--algo.advantage.is_correction_threshold", _threshold_to,
                                tuple),
    "kl_unbiased_gradient": ("--algo.kl.unbiased_gradient", None, None),
}
OPENRLHF = {**OPENRLHF_COMMON,
            "lam": ("--algo.advantage.lambd", float, float),
            "beta": ("--algo.kl.init_coef", None, None),
            "value_clip": ("--critic.value_clip", None, None),
            "loss_agg_mode": ("--actor.loss_agg_mode", None, None),
            "use_kl_loss": ("--algo.kl.use_loss", None, None)}
OPENRLHF_GRPO = {**OPENRLHF_COMMON,
                 "advantage_estimator": ("--algo.advantage.estimator", None, None),
                 "init_kl_coef": ("--algo.kl.init_coef", None, None),
                 "use_kl_loss": ("--algo.kl.use_loss", None, None),
                 "policy_loss_type": ("--actor.policy_loss_type", None, None)}
#: epsilon_high: --actor.eps_clip_low_high's second value (None: eps_clip, as the file sets)
EPS_HIGH_FLAG = "--actor.eps_clip_low_high"


# ---------------------------------------------------------------------------------------
# Every preset default against the framework's, option by option


def framework_defaults(preset_name: str) -> dict:
    """{preset option: (framework field, the framework's default in the preset's spelling)}
    read from the installed release now."""
    if preset_name == "trl-grpo":
        cfg = grpo_config()
        return {k: (f"GRPOConfig.{f}", getattr(cfg, f)) for k, f in TRL_GRPO.items()}
    if preset_name in ("verl", "verl-grpo"):
        mapping = VERL if preset_name == "verl" else VERL_GRPO
        return verl_file_defaults(mapping)
    if preset_name in ("openrlhf", "openrlhf-grpo"):
        mapping = OPENRLHF if preset_name == "openrlhf" else OPENRLHF_GRPO
        defaults = openrlhf_parser_defaults()
        out = {}
        for option, (flag, _, back) in mapping.items():
            value = defaults[flag]
            out[option] = (flag, back(value) if back and value is not None else value)
        low_high = defaults[EPS_HIGH_FLAG]
        out["epsilon_high"] = (EPS_HIGH_FLAG + "[1]", None if low_high is None else
                               low_high[1])
        return out
    return {}


#: options whose preset default differs from the framework's by the preset's definition:
#: always set by the runner (the "nothing set" run sets these and nothing else)
DEFINING = {
    "verl-grpo": {"adv_estimator": "the critic-free family: verl's default estimator, gae, "
                                   "is preset verl's"},
    "openrlhf-grpo": {"advantage_estimator": "the critic-free family: OpenRLHF's default "
                                             "estimator, gae, is preset openrlhf's"},
}


def default_pairs(preset_name: str) -> list:
    """[(option, the preset's default, framework field, the framework's default, equal)]:
    every mapped option of the preset, the framework's value read at run time."""
    from ppo_numpy.oracle.presets import get_preset

    defaults = get_preset(preset_name).parameters
    pairs = []
    for option, (where, value) in framework_defaults(preset_name).items():
        mine = defaults[option]
        same = _same(mine, value) or option in DEFINING.get(preset_name, {})
        pairs.append((option, mine, where, value, same))
    return pairs


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b
