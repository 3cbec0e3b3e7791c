"""A learned reward model: preference pairs, the Bradley-Terry loss, a tiny network
trained by hand-written gradients (notebook ``12_reward_model_overoptimisation``,
``docs/overoptimisation.md``).

==========================  =====================================================  =============
what                        names                                                  module
==========================  =====================================================  =============
p(y_w > y_l), L_BT, dL/dr   bradley_terry_loss, bradley_terry_grad,                bradley_terry
                            preference_probability, preference_accuracy
labelled pairs              make_preference_pairs, PreferencePairs                 preferences
r(x, y)                     RewardModel                                            model
fitting, held-out checks    fit_reward_model, reward_loss_and_grads,               fit
                            evaluate_reward_model
==========================  =====================================================  =============
"""

from .bradley_terry import (
    bradley_terry_grad,
    bradley_terry_loss,
    preference_accuracy,
    preference_probability,
)
from .fit import evaluate_reward_model, fit_reward_model, reward_loss_and_grads
from .model import RewardModel
from .preferences import PreferencePairs, make_preference_pairs

__all__ = [
    "PreferencePairs",
    "RewardModel",
    "bradley_terry_grad",
    "bradley_terry_loss",
    "evaluate_reward_model",
    "fit_reward_model",
    "make_preference_pairs",
    "preference_accuracy",
    "preference_probability",
    "reward_loss_and_grads",
]
