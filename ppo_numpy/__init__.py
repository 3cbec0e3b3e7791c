"""ppo_numpy: the PPO objective for language models, written out in NumPy.

Each quantity of the objective (docs/objective.md) has one pure function in a module named for it:

=====================  ==========================  ===========================
quantity               function                    module
=====================  ==========================  ===========================
rho_t                  probability_ratio           ppo_numpy.ppo.ratio
min(rho A, clip A)     clipped_surrogate           ppo_numpy.ppo.clipping
KL_t estimators        kl_estimate                 ppo_numpy.ppo.kl
r~_t                   kl_shaped_rewards           ppo_numpy.ppo.kl
KL term's gradient     kl_term_and_grad            ppo_numpy.ppo.kl_gradient
  forms, exactly       kl_gradient_table           ppo_numpy.grads.kl_exact
delta_t                td_errors                   ppo_numpy.ppo.td
A_hat_t, R_t           gae                         ppo_numpy.ppo.gae
whitening              whiten                      ppo_numpy.ppo.whitening
value loss             value_loss                  ppo_numpy.ppo.value_loss
token/sequence means   aggregate                   ppo_numpy.ppo.aggregation
L_PPO                  ppo_objective               ppo_numpy.policy_loss.objective
policy loss + stats    ppo_policy_loss             ppo_numpy.policy_loss.objective
H_t                    entropy_from_logits         ppo_numpy.ppo.entropy
beta schedule          Adaptive/FixedKLController  ppo_numpy.training.kl_controllers
d loss / d inputs      policy_loss_grad, ...       ppo_numpy.grads.loss_grads
finite differences     gradcheck, cmp              ppo_numpy.grads.gradcheck
toy policies           MLPPolicy, BigramPolicy,    ppo_numpy.models
                       TransformerPolicy
loss + grads (params)  ppo_loss_and_grads          ppo_numpy.models.loss
group baselines        grpo_advantages, ...        ppo_numpy.family.advantages
rollout batch          Rollout                     ppo_numpy.batch
sampler-trainer gap    rollout_importance_weights  ppo_numpy.mismatch.correction
                       rollout_rejection_mask
loss options           PolicyLossOptions           ppo_numpy.policy_loss.options
one optimizer step     step_layout, Normaliser,    ppo_numpy.step
                       step_weights, policy_step
=====================  ==========================  ===========================
"""

from .batch import Rollout
from .family.advantages import (
    gdpo_advantages,
    gpg_advantages,
    grpo_advantages,
    grpo_passk_advantages,
    opo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    remax_advantages,
    returns_to_go,
    rloo_advantages,
)
from .grads.gradcheck import cmp, gradcheck, numerical_grad
from .grads.kl_exact import kl_gradient_table
from .grads.loss_grads import (
    aggregate_grad,
    entropy_grad,
    kl_estimate_grad,
    policy_loss_and_grad,
    policy_loss_grad,
    value_loss_grad,
)
from .mismatch.correction import rollout_importance_weights, rollout_rejection_mask
from .models import (
    SGD,
    Adam,
    BigramPolicy,
    MLPPolicy,
    TransformerPolicy,
    clip_grad_norm,
    load_checkpoint,
    ppo_loss_and_grads,
    save_checkpoint,
)
from .policy_loss.objective import PolicyLossOptions, ppo_objective, ppo_policy_loss
from .ppo.aggregation import MODES as AGGREGATION_MODES
from .ppo.aggregation import aggregate
from .ppo.clipping import clipped_surrogate
from .ppo.entropy import entropy_from_logits, log_softmax
from .ppo.gae import gae
from .ppo.kl import ESTIMATORS as KL_ESTIMATORS
from .ppo.kl import kl_estimate, kl_shaped_rewards
from .ppo.kl_gradient import FORMS as KL_GRADIENT_FORMS
from .ppo.kl_gradient import kl_term_and_grad
from .ppo.ratio import probability_ratio
from .ppo.td import td_errors
from .ppo.value_loss import value_loss
from .ppo.whitening import masked_mean, whiten
from .step import Normaliser, policy_step, step_layout, step_weights
from .training.kl_controllers import AdaptiveKLController, FixedKLController

__version__ = "0.1.0"

__all__ = [
    "AGGREGATION_MODES",
    "Adam",
    "AdaptiveKLController",
    "BigramPolicy",
    "FixedKLController",
    "KL_ESTIMATORS",
    "KL_GRADIENT_FORMS",
    "MLPPolicy",
    "Normaliser",
    "PolicyLossOptions",
    "Rollout",
    "SGD",
    "TransformerPolicy",
    "aggregate",
    "aggregate_grad",
    "clip_grad_norm",
    "clipped_surrogate",
    "cmp",
    "entropy_from_logits",
    "entropy_grad",
    "gae",
    "gdpo_advantages",
    "gpg_advantages",
    "gradcheck",
    "grpo_advantages",
    "grpo_passk_advantages",
    "kl_estimate",
    "kl_estimate_grad",
    "kl_gradient_table",
    "kl_shaped_rewards",
    "kl_term_and_grad",
    "load_checkpoint",
    "log_softmax",
    "masked_mean",
    "numerical_grad",
    "opo_advantages",
    "policy_loss_and_grad",
    "policy_loss_grad",
    "policy_step",
    "ppo_loss_and_grads",
    "ppo_objective",
    "ppo_policy_loss",
    "probability_ratio",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "remax_advantages",
    "returns_to_go",
    "rloo_advantages",
    "rollout_importance_weights",
    "rollout_rejection_mask",
    "save_checkpoint",
    "step_layout",
    "step_weights",
    "td_errors",
    "value_loss",
    "value_loss_grad",
    "whiten",
]
