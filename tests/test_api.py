"""The public names of issue #2 are listed in ppo_numpy.__all__ and importable.

Checked as a subset: other parts of the project add names of their own.
"""

import importlib
import inspect

import pytest

import ppo_numpy

CORE = {
    "probability_ratio": "ppo_numpy.ppo.ratio",
    "clipped_surrogate": "ppo_numpy.ppo.clipping",
    "kl_estimate": "ppo_numpy.ppo.kl",
    "kl_shaped_rewards": "ppo_numpy.ppo.kl",
    "KL_ESTIMATORS": "ppo_numpy.ppo.kl",
    "td_errors": "ppo_numpy.ppo.td",
    "gae": "ppo_numpy.ppo.gae",
    "whiten": "ppo_numpy.ppo.whitening",
    "masked_mean": "ppo_numpy.ppo.whitening",
    "value_loss": "ppo_numpy.ppo.value_loss",
    "aggregate": "ppo_numpy.ppo.aggregation",
    "AGGREGATION_MODES": "ppo_numpy.ppo.aggregation",
    "ppo_objective": "ppo_numpy.policy_loss.objective",
    "ppo_policy_loss": "ppo_numpy.policy_loss.objective",
    "entropy_from_logits": "ppo_numpy.ppo.entropy",
    "log_softmax": "ppo_numpy.ppo.entropy",
    "AdaptiveKLController": "ppo_numpy.training.kl_controllers",
    "FixedKLController": "ppo_numpy.training.kl_controllers",
    "Rollout": "ppo_numpy.batch",
    "grpo_advantages": "ppo_numpy.family.advantages",
    "rloo_advantages": "ppo_numpy.family.advantages",
    "reinforce_plus_plus_advantages": "ppo_numpy.family.advantages",
    "reinforce_plus_plus_baseline_advantages": "ppo_numpy.family.advantages",
    "remax_advantages": "ppo_numpy.family.advantages",
    "PolicyLossOptions": "ppo_numpy.policy_loss.objective",
    "rollout_importance_weights": "ppo_numpy.mismatch.correction",
    "rollout_rejection_mask": "ppo_numpy.mismatch.correction",
    # issue 38: the KL term's gradient forms, and their exact expectations
    "KL_GRADIENT_FORMS": "ppo_numpy.ppo.kl_gradient",
    "kl_term_and_grad": "ppo_numpy.ppo.kl_gradient",
    "kl_gradient_table": "ppo_numpy.grads.kl_exact",
}


#: issue 37: one optimizer step across ranks and micro-batches
STEP = {
    "Normaliser": "ppo_numpy.step.normalisers",
    "step_layout": "ppo_numpy.step.layout",
    "step_weights": "ppo_numpy.step.outputs",
    "policy_step": "ppo_numpy.step.outputs",
}


def test_step_names_are_in_all_and_from_their_modules():
    assert set(STEP) <= set(ppo_numpy.__all__)
    for name, module in STEP.items():
        assert getattr(ppo_numpy, name) is getattr(importlib.import_module(module), name)
    sig = {n: list(inspect.signature(getattr(ppo_numpy, n)).parameters) for n in STEP}
    assert sig["step_layout"] == ["n_rows", "ranks", "micro_batches", "deal"]
    assert sig["step_weights"] == ["mask", "layout", "normaliser", "exact"]
    assert sig["policy_step"][:6] == ["logp", "logp_old", "advantages", "mask", "layout",
                                      "normaliser"]
    assert sig["Normaliser"][:2] == ["name", "mode"]


def test_core_names_are_in_all():
    missing = set(CORE) - set(ppo_numpy.__all__)
    assert not missing, f"missing from ppo_numpy.__all__: {sorted(missing)}"


def test_all_has_no_duplicates_and_every_name_exists():
    assert len(ppo_numpy.__all__) == len(set(ppo_numpy.__all__))
    absent = [n for n in ppo_numpy.__all__ if not hasattr(ppo_numpy, n)]
    assert not absent, f"listed in __all__ but not defined: {absent}"


def test_star_import_gives_the_core_names():
    namespace = {}
    exec("from ppo_numpy import *", namespace)
    missing = set(CORE) - set(namespace)
    assert not missing, sorted(missing)


def test_each_name_is_the_one_from_its_module():
    # the two tuples are exported under longer names than in their modules
    local = {"KL_ESTIMATORS": "ESTIMATORS", "AGGREGATION_MODES": "MODES",
             "KL_GRADIENT_FORMS": "FORMS"}
    for name, module in CORE.items():
        mod = importlib.import_module(module)
        assert getattr(ppo_numpy, name) is getattr(mod, local.get(name, name)), (name, module)


def test_public_functions_have_docstrings_with_examples():
    for name in CORE:
        obj = getattr(ppo_numpy, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            doc = inspect.getdoc(obj) or ""
            assert ">>>" in doc, f"{name}: docstring has no doctest example"


def test_signatures_match_the_documented_api():
    sig = {n: list(inspect.signature(getattr(ppo_numpy, n)).parameters) for n in CORE
           if callable(getattr(ppo_numpy, n)) and inspect.isfunction(getattr(ppo_numpy, n))}
    assert sig["probability_ratio"][:3] == ["logp", "logp_old", "mask"]
    assert sig["clipped_surrogate"][:3] == ["rho", "advantages", "epsilon"]
    assert sig["kl_estimate"][:4] == ["logp", "logp_ref", "estimator", "mask"]
    assert sig["kl_term_and_grad"][:5] == ["logp", "logp_ref", "estimator", "form", "mask"]
    assert sig["kl_gradient_table"][:3] == ["pi", "pi_ref", "pi_old"]
    assert sig["kl_shaped_rewards"][:6] == ["scores", "logp", "logp_ref", "beta", "mask",
                                            "estimator"]
    assert sig["td_errors"] == ["rewards", "values", "gamma", "mask"]
    assert sig["gae"][:5] == ["rewards", "values", "gamma", "lam", "mask"]
    assert sig["whiten"][:3] == ["x", "mask", "shift_mean"]
    assert sig["value_loss"][:5] == ["values", "old_values", "returns", "mask", "clip_range"]
    assert sig["aggregate"][:3] == ["per_token", "mask", "mode"]
    assert sig["ppo_objective"][:5] == ["logp", "logp_old", "advantages", "mask", "epsilon"]
    assert sig["ppo_policy_loss"][:6] == ["logp", "logp_old", "advantages", "mask", "epsilon",
                                          "agg"]


def test_version_is_a_string():
    assert isinstance(ppo_numpy.__version__, str) and ppo_numpy.__version__


def test_every_public_callable_has_a_doctest():
    missing = [name for name in ppo_numpy.__all__
               if callable(getattr(ppo_numpy, name))
               and ">>>" not in (inspect.getdoc(getattr(ppo_numpy, name)) or "")]
    assert not missing, f"public callables without a doctest example: {missing}"


CORE_MODULES = ("ppo.aggregation", "ppo.clipping", "ppo.entropy", "ppo.gae", "grads.gradcheck",
                "family.advantages", "ppo.kl", "grads.kl_exact", "ppo.kl_gradient",
                "grads.loss_grads", "policy_loss.objective", "ppo.ratio", "batch", "ppo.td",
                "ppo.value_loss", "ppo.whitening")


@pytest.mark.parametrize("name", CORE_MODULES)
def test_every_core_module_lists_its_public_names(name):
    module = importlib.import_module(f"ppo_numpy.{name}")
    assert isinstance(getattr(module, "__all__", None), list), f"ppo_numpy.{name}: no __all__"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, f"ppo_numpy.{name}.__all__ names what it lacks: {missing}"
    assert all(not n.startswith("_") for n in module.__all__)


def test_no_public_function_takes_more_than_ten_parameters():
    """One way to pass each thing: the loss options are keywords (``**options``), so no
    signature lists them one by one."""
    too_many = {}
    for name in ppo_numpy.__all__:
        obj = getattr(ppo_numpy, name)
        if inspect.isfunction(obj):
            n = len(inspect.signature(obj).parameters)
            if n > 10:
                too_many[name] = n
    assert not too_many, f"public functions with more than 10 parameters: {too_many}"


def test_module_paths_of_the_unreleased_layout_are_gone():
    """0.1.0 was never released: its module paths are not kept (no redirects)."""
    for old in ("ppo_numpy.demo", "ppo_numpy.kl_controllers", "ppo_numpy.loss_options"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
