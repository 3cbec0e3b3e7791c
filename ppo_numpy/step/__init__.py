"""One optimizer step across data-parallel ranks and micro-batches (notebook 16).

=====================  ================================================
module                 what it holds
=====================  ================================================
``layout``             which rows each rank's micro-batches hold: ``step_layout``,
                       ``check_layout``
``normalisers``        how each micro-batch's loss is normalised: ``Normaliser`` (global
                       token / sequence means, the micro-batch mean of the 2024
                       gradient-accumulation bug, TRL 1.16's two rules, verl 0.9.1's
                       ``agg_loss``, OpenRLHF 0.11.2), each with its source
``outputs``            the step's ``step/losses`` and ``step/dlogp``, and whether it keeps
                       the full-batch gradient: ``policy_step``, ``step_outputs``,
                       ``step_weights``
=====================  ================================================
"""

from .layout import DEALS, check_layout, step_layout
from .normalisers import NORMALISERS, Normaliser
from .outputs import policy_step, step_outputs, step_weights

__all__ = ["DEALS", "NORMALISERS", "Normaliser", "check_layout", "policy_step", "step_layout",
           "step_outputs", "step_weights"]
